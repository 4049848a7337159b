/* Asynchronous descriptors: registration with the reactor, the readiness
 * protocol (readiness.h has its argument), and read/write/close. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asyncrt/diag.h>

#include "operation.h"
#include "fault.h"
#include "atomic.h"
#include "budget.h"
#include "io_internal.h"
#include "reactor.h"
#include "runtime_services.h"
#include "waker.h"

/* ---- Readiness ---------------------------------------------------------- */

static rt_waker *slot_of(rt_io *io, unsigned dir)
{
    return dir == RT__IO_READ ? &io->reader : &io->writer;
}

rt_poll rt__io_poll_ready(rt_io *io, unsigned dir, bool try_unknown, rt_context *cx, uint32_t *tick)
{
    /* Every operation that may complete without waiting spends budget: a
     * connection that always has data must not hold its worker. */
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    uint64_t mask = try_unknown ? dir | (dir << RT__IO_UNKNOWN_SHIFT) : dir;
    uint64_t s = rt__load_acquire_u64(&io->readiness);
    if (s & mask) {
        *tick = (uint32_t)(s >> RT__IO_TICK_SHIFT);
        return RT_READY;
    }
    const rt_waker *w = rt_context_waker(cx);
    rt_waker old = rt_waker_noop();
    RT__DEBUG_YIELD(); /* widens the window before the registration */
    rt__spin_lock(&io->lock);
    if (io->closed) {
        rt__spin_unlock(&io->lock);
        *tick = 0;
        return RT_READY; /* the operation reports -EBADF */
    }
    rt_waker *slot = slot_of(io, dir);
    old = rt__waker_store(slot, w);
    rt__spin_unlock(&io->lock);
    rt_waker_drop(&old);
    /* An event between the first read and the registration set the bit
     * before the reactor took the lock: see it now (readiness.h). */
    s = rt__load_acquire_u64(&io->readiness);
    if (s & mask) {
        *tick = (uint32_t)(s >> RT__IO_TICK_SHIFT);
        return RT_READY;
    }
    rt__coop_refund(); /* only completed operations spend budget */
    return RT_PENDING;
}

/* Clears `dir` unless the tick moved or (keep_if_sticky) dir is sticky. The
 * tick and the sticky bit are checked on the value the CAS replaces: an event
 * the reactor records after the CAS sets the direction again, and one it
 * recorded before changed the word (tick, sticky bit), so the CAS either sees
 * it or fails and looks again. */
static void clear_ready(rt_io *io, unsigned dir, uint32_t tick, bool keep_if_sticky)
{
    uint64_t s = rt__load_acquire_u64(&io->readiness);
    for (;;) {
        if ((uint32_t)(s >> RT__IO_TICK_SHIFT) != tick)
            return; /* an edge came since: keep it */
        if (keep_if_sticky && (s & ((uint64_t)dir << RT__IO_STICKY_SHIFT)))
            return; /* maybe not empty: the next call tries its system call */
        uint64_t bits = dir | (dir << RT__IO_UNKNOWN_SHIFT);
        if (rt__cas_u64(&io->readiness, &s, s & ~bits))
            return;
    }
}

void rt__io_clear_ready(rt_io *io, unsigned dir, uint32_t tick)
{
    clear_ready(io, dir, tick, false);
}

void rt__io_clear_after_short(rt_io *io, unsigned dir, uint32_t tick)
{
    clear_ready(io, dir, tick, true);
}

/* ---- Registration ------------------------------------------------------- */

rt_io *rt__io_alloc(void)
{
    return rt__calloc(1, sizeof(rt_io));
}

int rt__io_register(rt_runtime *rt, rt_io *io, int fd, bool is_socket, bool is_tcp)
{
    io->fd = fd;
    io->is_socket = is_socket;
    io->is_tcp = is_tcp;
    io->rt = rt;
    /* Not known to block: the first operation tries its call. */
    io->readiness = (RT__IO_READ | RT__IO_WRITE) << RT__IO_UNKNOWN_SHIFT;
    io->reader = io->writer = rt_waker_noop();

    /* Registered once, both directions, edge-triggered; HUP and ERR are
     * always reported and wake both directions (reactor.c). */
    /* TCP also reports urgent data (EPOLLPRI): see "Short transfers". */
    uint32_t events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET | (is_tcp ? EPOLLPRI : 0u);
    /* The reactor gets io through epoll, which TSan cannot see. */
    rt__tsan_release(io);
    int err = rt__runtime_io_track(rt, io, fd, events);
    if (err < 0) {
        free(io);
        return err;
    }
    return 0;
}

int rt__io_adopt(rt_runtime *rt, int fd, bool is_socket, bool is_tcp, rt_io **out)
{
    rt_io *io = rt__io_alloc();
    if (io == NULL)
        return -ENOMEM;
    int err = rt__io_register(rt, io, fd, is_socket, is_tcp);
    if (err == 0)
        *out = io;
    return err;
}

RT_EXPORT int rt_io_open(rt_runtime *rt, int fd, rt_io **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (rt == NULL)
        rt = rt_current_runtime();
    if (rt == NULL)
        return -EINVAL;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno; /* -EBADF for a closed or invalid descriptor */
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl < 0)
        return -errno;
    /* The memory first, so that a failure leaves the descriptor as it was:
     * after the flags change only the registration can fail, and then the
     * flags are put back. */
    rt_io *io = rt__io_alloc();
    if (io == NULL)
        return -ENOMEM;
    if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int err = -errno;
        free(io);
        return err;
    }
    if (!(fdfl & FD_CLOEXEC))
        fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC);
    struct stat st;
    bool known = fstat(fd, &st) == 0;
    bool is_socket = known && S_ISSOCK(st.st_mode);
    bool is_tcp = false;
    if (is_socket) {
        int type = 0, protocol = 0;
        socklen_t len = sizeof type, plen = sizeof protocol;
        is_tcp = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_STREAM &&
                 getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &plen) == 0 &&
                 protocol == IPPROTO_TCP;
    }
    int err = rt__io_register(rt, io, fd, is_socket, is_tcp);
    if (err < 0) {
        fcntl(fd, F_SETFL, fl);
        fcntl(fd, F_SETFD, fdfl);
        return err;
    }
    *out = io;
    return 0;
}

RT_EXPORT int rt_io_fd(const rt_io *io)
{
    if (io == NULL)
        return -EBADF;
    /* A task dump may call it while another thread closes io. */
    return (int)rt__load_relaxed_u32((const uint32_t *)&io->fd);
}

/* Unlinks from the runtime's list, removes from epoll before close(2), wakes
 * whoever waits, and hands the memory to the reactor. Caller holds no lock. */
static int io_close(rt_io *io, bool unlink)
{
    rt_runtime *rt = io->rt;
    if (unlink)
        rt__runtime_io_untrack(rt, io);
    rt__reactor_unwatch(rt__runtime_reactor(rt), io->fd);
    int rc = close(io->fd) < 0 ? -errno : 0;
    rt__spin_lock(&io->lock);
    io->closed = true;
    /* Relaxed atomic: a task dump may read it (rt_io_fd) meanwhile. */
    rt__store_relaxed_u32((uint32_t *)&io->fd, (uint32_t)-1);
    rt_waker reader = io->reader, writer = io->writer;
    io->reader = io->writer = rt_waker_noop();
    rt__spin_unlock(&io->lock);
    rt_waker_wake(&reader);
    rt_waker_wake(&writer);
    /* The reactor may hold an event naming io from an epoll_wait that began
     * before the DEL: it frees io at the top of its next turn. */
    rt__reactor_release_io(rt__runtime_reactor(rt), io);
    return rc;
}

RT_EXPORT int rt_io_close(rt_io *io)
{
    return io == NULL ? 0 : io_close(io, true);
}

void rt__io_close_all(rt_runtime *rt)
{
    rt_io *io = rt__runtime_io_take_all(rt);
    while (io != NULL) {
        rt_io *next = io->next;
        io_close(io, false);
        io = next;
    }
}

/* ---- Operations ------------------------------------------------------------ */

/* Readiness as promised by the readiness waits (rt_io_readable_init): exact. The bit says an
 * edge came, but the user may have drained or filled the descriptor since
 * with calls of its own, so a set bit is confirmed with a zero-timeout
 * poll(2), and forgotten (tick-checked, as after EAGAIN) when stale. */
static rt_poll io_ready_exact(rt_io *io, unsigned dir, rt_context *cx)
{
    short want = dir == RT__IO_READ ? POLLIN : POLLOUT;
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(io, dir, false, cx, &tick) == RT_PENDING)
            return RT_PENDING;
        struct pollfd p = {.fd = io->fd, .events = want};
        if (poll(&p, 1, 0) != 0) /* ready, hung up, in error, or poll failed */
            return RT_READY;
        rt__io_clear_ready(io, dir, tick);
    }
}

static rt_poll io_ready_vpoll(rt_future *f, rt_context *cx)
{
    rt_io_ready *op = (rt_io_ready *)f;
    if (io_ready_exact(op->io, op->writable ? RT__IO_WRITE : RT__IO_READ, cx) == RT_PENDING)
        return RT_PENDING;
    return rt__future_finish(f, 0);
}

/* What an operation on io waits for. The descriptor is read through
 * rt_io_fd: a task dump may describe the operation while another thread
 * closes io (the reactor keeps its memory until the dump ends). */
static void io_describe(rt_wait_info *info, rt_wait_kind kind, const rt_io *io, const char *what)
{
    info->kind = kind;
    info->fd = rt_io_fd(io);
    rt__wait_printf(info, "%s on fd %d", what, info->fd);
}

static void io_ready_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_io_ready *op = (const rt_io_ready *)f;
    io_describe(info, RT_WAIT_READY, op->io, op->writable ? "writable" : "readable");
}

/* The I/O operations hold nothing while they wait but the waker stored in
 * the rt_io, which the next poller replaces: they need no drop. */
static const rt_future_vtable io_ready_vtable = {io_ready_vpoll, NULL, io_ready_vdescribe};

static int io_ready_init(rt_io_ready *op, rt_io *io, int writable)
{
    if (op == NULL)
        return -EINVAL;
    op->io = io;
    op->writable = writable;
    return rt__io_op_init(&op->future, &io_ready_vtable, io != NULL);
}

RT_EXPORT int rt_io_readable_init(rt_io_ready *op, rt_io *io)
{
    return io_ready_init(op, io, 0);
}

RT_EXPORT int rt_io_writable_init(rt_io_ready *op, rt_io *io)
{
    return io_ready_init(op, io, 1);
}

/* recv() on a socket skips read()'s file-position lock and VFS layers
 * (fdget_pos, vfs_read, sock_read_iter); recv's own entry costs most of that
 * back, but a little is saved on every read of a busy socket, as Tokio's
 * recv() does. */
static ssize_t io_read_once(rt_io *io, void *buf, size_t len)
{
    return io->is_socket ? recv(io->fd, buf, len, 0) : read(io->fd, buf, len);
}

static rt_poll io_read(rt_io *io, rt_context *cx, void *buf, size_t len, ssize_t *result)
{
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(io, RT__IO_READ, true, cx, &tick) == RT_PENDING)
            return RT_PENDING;
        ssize_t n = io_read_once(io, buf, len);
        if (n >= 0) {
            /* A short read of TCP emptied the queue, unless the direction
             * is sticky (readiness.h, "Short transfers"); 0 is the end of
             * the stream, which stays. */
            if (n > 0 && (size_t)n < len && io->is_tcp) {
                RT__DEBUG_YIELD(); /* widens the window before the clear */
                rt__io_clear_after_short(io, RT__IO_READ, tick);
            }
            *result = n;
            return RT_READY;
        }
        if (!rt__io_retry_after_error(io, RT__IO_READ, tick, result))
            return RT_READY;
    }
}

static ssize_t io_write_once(rt_io *io, const void *buf, size_t len)
{
    return io->is_socket ? send(io->fd, buf, len, MSG_NOSIGNAL) : write(io->fd, buf, len);
}

static rt_poll io_write(rt_io *io, rt_context *cx, const void *buf, size_t len, ssize_t *result)
{
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(io, RT__IO_WRITE, true, cx, &tick) == RT_PENDING)
            return RT_PENDING;
        ssize_t n = io_write_once(io, buf, len);
        if (n >= 0) {
            /* A short write to TCP filled its buffer (readiness.h). */
            if ((size_t)n < len && io->is_tcp) {
                RT__DEBUG_YIELD();
                rt__io_clear_after_short(io, RT__IO_WRITE, tick);
            }
            *result = n;
            return RT_READY;
        }
        if (!rt__io_retry_after_error(io, RT__IO_WRITE, tick, result))
            return RT_READY;
    }
}

static rt_poll io_read_vpoll(rt_future *f, rt_context *cx)
{
    rt_io_read *op = (rt_io_read *)f;
    ssize_t n;
    if (io_read(op->io, cx, op->buf, op->len, &n) == RT_PENDING)
        return RT_PENDING;
    return rt__future_finish(f, n);
}

static void io_read_vdescribe(const rt_future *f, rt_wait_info *info)
{
    io_describe(info, RT_WAIT_READ, ((const rt_io_read *)f)->io, "read");
}

static const rt_future_vtable io_read_vtable = {io_read_vpoll, NULL, io_read_vdescribe};

RT_EXPORT int rt_io_read_init(rt_io_read *op, rt_io *io, void *buf, size_t len)
{
    if (op == NULL)
        return -EINVAL;
    op->io = io;
    op->buf = buf;
    op->len = len;
    return rt__io_op_init(&op->future, &io_read_vtable, io != NULL && (buf != NULL || len == 0));
}

static rt_poll io_write_vpoll(rt_future *f, rt_context *cx)
{
    rt_io_write *op = (rt_io_write *)f;
    ssize_t n;
    if (io_write(op->io, cx, op->buf, op->len, &n) == RT_PENDING)
        return RT_PENDING;
    return rt__future_finish(f, n);
}

static void io_write_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_io_write *op = (const rt_io_write *)f;
    io_describe(info, RT_WAIT_WRITE, op->io, "write");
    rt__wait_printf(info, " (%zu bytes)", op->len);
}

static const rt_future_vtable io_write_vtable = {io_write_vpoll, NULL, io_write_vdescribe};

RT_EXPORT int rt_io_write_init(rt_io_write *op, rt_io *io, const void *buf, size_t len)
{
    if (op == NULL)
        return -EINVAL;
    op->io = io;
    op->buf = buf;
    op->len = len;
    return rt__io_op_init(&op->future, &io_write_vtable, io != NULL && (buf != NULL || len == 0));
}

static rt_poll io_write_all_vpoll(rt_future *f, rt_context *cx)
{
    rt_io_write_all *op = (rt_io_write_all *)f;
    while (op->progress < op->len) {
        ssize_t n;
        if (io_write(op->io, cx, (const char *)op->buf + op->progress, op->len - op->progress,
                     &n) == RT_PENDING)
            return RT_PENDING;
        if (n < 0)
            return rt__future_finish(f, n);
        op->progress += (size_t)n;
    }
    return rt__future_finish(f, (int64_t)op->len);
}

static void io_write_all_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_io_write_all *op = (const rt_io_write_all *)f;
    io_describe(info, RT_WAIT_WRITE, op->io, "write");
    rt__wait_printf(info, " (%zu of %zu bytes done)", op->progress, op->len);
}

static const rt_future_vtable io_write_all_vtable = {io_write_all_vpoll, NULL,
                                                     io_write_all_vdescribe};

RT_EXPORT int rt_io_write_all_init(rt_io_write_all *op, rt_io *io, const void *buf, size_t len)
{
    if (op == NULL)
        return -EINVAL;
    op->io = io;
    op->buf = buf;
    op->len = len;
    op->progress = 0;
    return rt__io_op_init(&op->future, &io_write_all_vtable,
                          io != NULL && (buf != NULL || len == 0));
}

static rt_poll io_copy_vpoll(rt_future *f, rt_context *cx)
{
    rt_io_copy *op = (rt_io_copy *)f;
    for (;;) {
        ssize_t n;
        if (op->written < op->filled) {
            if (io_write(op->to, cx, op->buf + op->written, op->filled - op->written, &n) ==
                RT_PENDING)
                return RT_PENDING;
            if (n < 0) {
                op->write_failed = true;
                return rt__future_finish(f, n);
            }
            op->written += (size_t)n;
            op->copied += (uint64_t)n;
            continue;
        }
        op->filled = op->written = 0;
        if (io_read(op->from, cx, op->buf, op->cap, &n) == RT_PENDING)
            return RT_PENDING;
        if (n <= 0)
            return rt__future_finish(f, n < 0 ? n : (int64_t)op->copied);
        op->filled = (size_t)n;
    }
}

/* Waiting to write while bytes are left to write, else to read. */
static void io_copy_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_io_copy *op = (const rt_io_copy *)f;
    bool writing = op->written < op->filled;
    info->kind = writing ? RT_WAIT_WRITE : RT_WAIT_READ;
    info->fd = rt_io_fd(writing ? op->to : op->from);
    rt__wait_printf(info, "copy from fd %d to fd %d, %s (%llu bytes copied)", rt_io_fd(op->from),
                    rt_io_fd(op->to), writing ? "writing" : "reading",
                    (unsigned long long)op->copied);
}

static const rt_future_vtable io_copy_vtable = {io_copy_vpoll, NULL, io_copy_vdescribe};

RT_EXPORT int rt_io_copy_init(rt_io_copy *op, rt_io *from, rt_io *to, void *buf, size_t len)
{
    if (op == NULL)
        return -EINVAL;
    op->from = from;
    op->to = to;
    op->buf = buf;
    op->cap = len;
    op->filled = op->written = 0;
    op->copied = 0;
    op->write_failed = false;
    return rt__io_op_init(&op->future, &io_copy_vtable,
                          from != NULL && to != NULL && buf != NULL && len > 0);
}
