/* Unix domain sockets on the reactor: names (paths and abstract names),
 * listeners, accepts and connects, socketpairs, datagrams, peer credentials
 * and descriptors passed with SCM_RIGHTS. Every socket is created
 * non-blocking and close-on-exec and registered as an rt_io (not TCP: no
 * short-transfer shortcut); every descriptor received is close-on-exec. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <asyncrt/diag.h>
#include <asyncrt/unix.h>

#include "fault.h"
#include "io_internal.h"
#include "operation.h"
#include "runtime_services.h"

/* Where sun_path begins: an address this long (sizeof(sa_family_t)) is an
 * unnamed socket's. */
#define SUN_OFFSET ((socklen_t)offsetof(struct sockaddr_un, sun_path))

#define KNOWN_FLAGS RT_UNIX_UNLINK_STALE

/* The longest pause of a connect that finds the listener's backlog full. */
#define CONNECT_BACKOFF_MAX RT_MS(64)

/* Room for the most descriptors one message carries here. */
#define FDS_CONTROL_SPACE CMSG_SPACE(sizeof(int) * RT_UNIX_FDS_MAX)

/* ---- Names ------------------------------------------------------------------- */

RT_EXPORT int rt_unix_addr(const char *name, struct sockaddr_un *addr, socklen_t *len)
{
    if (name == NULL || addr == NULL || len == NULL)
        return -EINVAL;
    bool abstract = name[0] == '@';
    const char *bytes = abstract ? name + 1 : name;
    /* Bounded: one byte past the limit is enough to know it is too long. */
    size_t n = strnlen(bytes, RT_UNIX_NAME_MAX + 1);
    if (n == 0)
        return -EINVAL;
    if (n > RT_UNIX_NAME_MAX)
        return -ENAMETOOLONG;
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    if (abstract) {
        /* sun_path[0] stays 0; the length, not a NUL, ends the name. */
        memcpy(addr->sun_path + 1, bytes, n);
        *len = SUN_OFFSET + 1 + (socklen_t)n;
    } else {
        memcpy(addr->sun_path, bytes, n); /* the NUL after it is the memset's */
        *len = SUN_OFFSET + (socklen_t)n + 1;
    }
    return 0;
}

RT_EXPORT int rt_unix_addr_name(const struct sockaddr_un *addr, socklen_t len, char *buf,
                                size_t size)
{
    if (addr == NULL || buf == NULL || len > (socklen_t)sizeof(*addr) ||
        (len > 0 && (len < (socklen_t)sizeof(sa_family_t) || addr->sun_family != AF_UNIX)))
        return -EINVAL;
    size_t path_room = len > SUN_OFFSET ? (size_t)(len - SUN_OFFSET) : 0;
    bool abstract = path_room > 0 && addr->sun_path[0] == '\0';
    /* An abstract name is every byte of the address after the leading NUL;
     * a path ends at its NUL (the kernel may count it in len or not). */
    size_t n = abstract ? path_room - 1 : strnlen(addr->sun_path, path_room);
    size_t total = abstract ? n + 1 : n;
    if (total + 1 > size) {
        if (size > 0)
            buf[0] = '\0';
        return -ENOSPC;
    }
    if (abstract) {
        buf[0] = '@';
        memcpy(buf + 1, addr->sun_path + 1, n);
    } else {
        memcpy(buf, addr->sun_path, n);
    }
    buf[total] = '\0';
    return (int)total;
}

/* ---- Sockets and names ----------------------------------------------------------- */

static int unix_socket(int type)
{
    int fd = rt__socket(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    return fd < 0 ? -errno : fd;
}

static bool is_path(const struct sockaddr_un *addr, socklen_t len)
{
    return len > SUN_OFFSET && addr->sun_path[0] != '\0';
}

/* Whether the socket file at a path is stale (RT_UNIX_UNLINK_STALE): a
 * socket file that refuses a connection. 1: stale; 0: not a socket file, or
 * something answers; a negative errno when the probe could not be made. */
static int stale_socket_file(const struct sockaddr_un *addr, socklen_t len, int type)
{
    struct stat st;
    if (lstat(addr->sun_path, &st) < 0 || !S_ISSOCK(st.st_mode))
        return 0;
    int fd = unix_socket(type);
    if (fd < 0)
        return fd;
    int rc;
    do
        rc = connect(fd, (const struct sockaddr *)addr, len);
    while (rc < 0 && errno == EINTR);
    bool refused = rc < 0 && errno == ECONNREFUSED;
    close(fd);
    return refused ? 1 : 0;
}

static int bind_to(int fd, const struct sockaddr_un *addr, socklen_t len)
{
    return bind(fd, (const struct sockaddr *)addr, len) < 0 ? -errno : 0;
}

/* A socket of `type` bound to `name` (NULL: an address the kernel picks),
 * listening when it is a stream, registered with rt. */
static int bound_socket(rt_runtime *rt, const char *name, int type, int backlog, unsigned flags,
                        rt_io **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if ((flags & ~KNOWN_FLAGS) != 0 || (name == NULL && type == SOCK_STREAM))
        return -EINVAL;
    if (rt == NULL)
        rt = rt_current_runtime();
    if (rt == NULL)
        return -EINVAL;
    struct sockaddr_un addr;
    socklen_t len;
    if (name != NULL) {
        int err = rt_unix_addr(name, &addr, &len);
        if (err < 0)
            return err;
    } else {
        memset(&addr, 0, sizeof addr);
        addr.sun_family = AF_UNIX;
        len = (socklen_t)sizeof(sa_family_t); /* autobind: an abstract name */
    }
    int fd = unix_socket(type);
    if (fd < 0)
        return fd;
    bool path = is_path(&addr, len);
    int err = bind_to(fd, &addr, len);
    if (err == -EADDRINUSE && path && (flags & RT_UNIX_UNLINK_STALE)) {
        int stale = stale_socket_file(&addr, len, type);
        if (stale < 0)
            err = stale;
        else if (stale == 1 && unlink(addr.sun_path) < 0 && errno != ENOENT)
            err = -errno;
        else if (stale == 1)
            err = bind_to(fd, &addr, len);
    }
    /* From here the file at the path is ours: removed again on failure. */
    bool made_file = err == 0 && path;
    if (err == 0 && type == SOCK_STREAM && listen(fd, backlog) < 0)
        err = -errno;
    if (err == 0)
        err = rt__io_adopt(rt, fd, true, false, out);
    if (err < 0) {
        close(fd);
        if (made_file)
            unlink(addr.sun_path);
        return err;
    }
    return 0;
}

RT_EXPORT int rt_unix_listen(rt_runtime *rt, const char *name, int backlog, unsigned flags,
                             rt_io **out)
{
    return bound_socket(rt, name, SOCK_STREAM, backlog, flags, out); /* name NULL: -EINVAL */
}

RT_EXPORT int rt_unix_dgram_bind(rt_runtime *rt, const char *name, unsigned flags, rt_io **out)
{
    return bound_socket(rt, name, SOCK_DGRAM, 0, flags, out);
}

RT_EXPORT int rt_unix_dgram_connect(rt_io *io, const char *name)
{
    if (io == NULL)
        return -EINVAL;
    struct sockaddr_un addr;
    socklen_t len;
    int err = rt_unix_addr(name, &addr, &len);
    if (err < 0)
        return err;
    return connect(io->fd, (const struct sockaddr *)&addr, len) < 0 ? -errno : 0;
}

RT_EXPORT int rt_unix_pair(rt_runtime *rt, int type, rt_io **a, rt_io **b)
{
    if (a != NULL)
        *a = NULL;
    if (b != NULL)
        *b = NULL;
    if (a == NULL || b == NULL ||
        (type != SOCK_STREAM && type != SOCK_DGRAM && type != SOCK_SEQPACKET))
        return -EINVAL;
    if (rt == NULL)
        rt = rt_current_runtime();
    if (rt == NULL)
        return -EINVAL;
    int fds[2];
    if (rt__socketpair(AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) < 0)
        return -errno;
    int err = rt__io_adopt(rt, fds[0], true, false, a);
    if (err < 0) {
        close(fds[0]);
        close(fds[1]);
        return err;
    }
    err = rt__io_adopt(rt, fds[1], true, false, b);
    if (err < 0) {
        rt_io_close(*a);
        *a = NULL;
        close(fds[1]);
        return err;
    }
    return 0;
}

RT_EXPORT int rt_unix_shutdown(rt_io *io, int how)
{
    if (io == NULL)
        return -EINVAL;
    return shutdown(io->fd, how) < 0 ? -errno : 0;
}

RT_EXPORT int rt_unix_peer_cred(rt_io *io, rt_unix_cred *cred)
{
    if (io == NULL || cred == NULL)
        return -EINVAL;
    struct ucred uc;
    socklen_t len = sizeof uc;
    if (getsockopt(io->fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
        return -errno;
    /* Credentials never recorded read as uid and gid -1 (an unmapped id
     * reads as the overflow id instead, 65534). */
    if (uc.uid == (uid_t)-1 && uc.gid == (gid_t)-1)
        return -ENOTCONN;
    cred->pid = uc.pid;
    cred->uid = uc.uid;
    cred->gid = uc.gid;
    return 0;
}

RT_EXPORT int rt_unix_local_addr(rt_io *io, struct sockaddr_un *addr, socklen_t *len)
{
    if (io == NULL || addr == NULL || len == NULL)
        return -EINVAL;
    *len = sizeof(*addr);
    return getsockname(io->fd, (struct sockaddr *)addr, len) < 0 ? -errno : 0;
}

RT_EXPORT int rt_unix_peer_addr(rt_io *io, struct sockaddr_un *addr, socklen_t *len)
{
    if (io == NULL || addr == NULL || len == NULL)
        return -EINVAL;
    *len = sizeof(*addr);
    return getpeername(io->fd, (struct sockaddr *)addr, len) < 0 ? -errno : 0;
}

/* ---- Accept ------------------------------------------------------------------------ */

static rt_poll accept_vpoll(rt_future *f, rt_context *cx)
{
    rt_unix_accept *op = (rt_unix_accept *)f;
    struct sockaddr_storage peer;
    socklen_t peer_len = 0;
    int err;
    if (rt__io_accept(op->listener, cx, &op->conn, &peer, &peer_len, &err) == RT_PENDING)
        return RT_PENDING;
    if (err == 0) {
        op->peer_len = peer_len < sizeof op->peer ? peer_len : sizeof op->peer;
        memcpy(&op->peer, &peer, op->peer_len);
    }
    return rt__future_finish(f, err);
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

static void accept_vdescribe(const rt_future *f, rt_wait_info *info)
{
    io_describe(info, RT_WAIT_ACCEPT, ((const rt_unix_accept *)f)->listener, "accept");
}

/* Nothing is held while waiting but the listener's stored waker. */
static const rt_future_vtable accept_vtable = {accept_vpoll, NULL, accept_vdescribe};

RT_EXPORT int rt_unix_accept_init(rt_unix_accept *op, rt_io *listener)
{
    if (op == NULL)
        return -EINVAL;
    op->listener = listener;
    op->conn = NULL;
    op->peer_len = 0;
    return rt__io_op_init(&op->future, &accept_vtable, listener != NULL);
}

/* ---- Connect ----------------------------------------------------------------------- */

/* Finishes with an error, closing the socket. */
static rt_poll connect_fail(rt_unix_connect *op, int err)
{
    if (op->fd >= 0)
        close(op->fd);
    op->fd = -1;
    return rt__future_finish(&op->future, err);
}

static rt_poll connect_vpoll(rt_future *f, rt_context *cx)
{
    rt_unix_connect *op = (rt_unix_connect *)f;
    if (op->fd < 0) {
        int fd = unix_socket(SOCK_STREAM);
        if (fd < 0)
            return rt__future_finish(f, fd);
        op->fd = fd;
    }
    for (;;) {
        if (op->pausing) {
            if (RT_POLL_OP(&op->pause, cx) == RT_PENDING)
                return RT_PENDING;
            op->pausing = false;
            if (op->pause.result < 0) /* -ESHUTDOWN, -ENOMEM */
                return connect_fail(op, (int)op->pause.result);
        }
        /* A Unix stream connect never waits in the kernel when the socket
         * is non-blocking: it connects, fails, or says EAGAIN (the
         * listener's backlog is full), after which nothing wakes a waiter,
         * so the next try comes after a pause. */
        if (connect(op->fd, (const struct sockaddr *)&op->addr, op->addr_len) == 0 ||
            errno == EISCONN) {
            int err = rt__io_adopt(op->rt, op->fd, true, false, &op->conn);
            if (err < 0)
                return connect_fail(op, err);
            op->fd = -1;
            return rt__future_finish(f, 0);
        }
        int e = errno;
        if (e == EINTR)
            continue;
        if (e != EAGAIN && e != EINPROGRESS && e != EALREADY)
            return connect_fail(op, -e);
        rt_sleep_init(&op->pause, op->rt, op->backoff_ns);
        op->pausing = true;
        op->backoff_ns =
            op->backoff_ns * 2 < CONNECT_BACKOFF_MAX ? op->backoff_ns * 2 : CONNECT_BACKOFF_MAX;
    }
}

/* A dropped connect cancels its pause and closes its socket. */
static void connect_vdrop(rt_future *f)
{
    rt_unix_connect *op = (rt_unix_connect *)f;
    RT_DROP(&op->pause); /* zeroed or finished: nothing happens */
    op->pausing = false;
    if (op->fd >= 0)
        close(op->fd);
    op->fd = -1;
}

/* Every field read is the operation's own: the name copied at init, the
 * socket it made and the pause it waits in. */
static void connect_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_unix_connect *op = (const rt_unix_connect *)f;
    char name[sizeof op->addr.sun_path + 2];
    if (rt_unix_addr_name(&op->addr, op->addr_len, name, sizeof name) < 0)
        strcpy(name, "?");
    info->kind = RT_WAIT_CONNECT;
    info->fd = op->fd;
    rt__wait_printf(info, "connect to unix socket %s", name);
    if (op->fd >= 0)
        rt__wait_printf(info, " on fd %d", op->fd);
    if (op->pausing) {
        /* The listener's backlog was full: the next try comes after the
         * pause. */
        info->deadline_ns = op->pause.deadline_ns;
        rt__wait_printf(info, ", backlog full, next try at ");
        rt__wait_from_now(info, op->pause.deadline_ns);
    }
}

static const rt_future_vtable connect_vtable = {connect_vpoll, connect_vdrop, connect_vdescribe};

RT_EXPORT int rt_unix_connect_init(rt_unix_connect *op, rt_runtime *rt, const char *name)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &connect_vtable;
    op->fd = -1;
    op->backoff_ns = RT_MS(1);
    op->rt = rt != NULL ? rt : rt_current_runtime();
    int err = op->rt == NULL ? -EINVAL : rt_unix_addr(name, &op->addr, &op->addr_len);
    if (err < 0) {
        rt__future_finish(&op->future, err);
        return err;
    }
    return 0;
}

/* ---- Datagrams ----------------------------------------------------------------------- */

static rt_poll send_to_vpoll(rt_future *f, rt_context *cx)
{
    rt_unix_send_to *op = (rt_unix_send_to *)f;
    const struct sockaddr *addr = op->addr_len > 0 ? (const struct sockaddr *)&op->addr : NULL;
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(op->io, RT__IO_WRITE, true, cx, &tick) == RT_PENDING)
            return RT_PENDING;
        ssize_t n = sendto(op->io->fd, op->buf, op->len, MSG_NOSIGNAL, addr, op->addr_len);
        if (n < 0 && rt__io_retry_after_error(op->io, RT__IO_WRITE, tick, &n))
            continue;
        return rt__future_finish(f, n);
    }
}

static void send_to_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_unix_send_to *op = (const rt_unix_send_to *)f;
    io_describe(info, RT_WAIT_WRITE, op->io, "send of a datagram");
    char name[sizeof op->addr.sun_path + 2];
    if (op->addr_len > 0 && rt_unix_addr_name(&op->addr, op->addr_len, name, sizeof name) >= 0)
        rt__wait_printf(info, " to %s", name);
}

static const rt_future_vtable send_to_vtable = {send_to_vpoll, NULL, send_to_vdescribe};

RT_EXPORT int rt_unix_send_to_init(rt_unix_send_to *op, rt_io *io, const void *buf, size_t len,
                                   const struct sockaddr_un *addr, socklen_t addr_len)
{
    if (op == NULL)
        return -EINVAL;
    op->io = io;
    op->buf = buf;
    op->len = len;
    op->addr_len = 0;
    bool valid = io != NULL && (buf != NULL || len == 0) &&
                 (addr == NULL || (addr_len > SUN_OFFSET && addr_len <= sizeof op->addr));
    if (valid && addr != NULL) {
        memcpy(&op->addr, addr, addr_len);
        op->addr_len = addr_len;
    }
    return rt__io_op_init(&op->future, &send_to_vtable, valid);
}

static rt_poll recv_from_vpoll(rt_future *f, rt_context *cx)
{
    rt_unix_recv_from *op = (rt_unix_recv_from *)f;
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(op->io, RT__IO_READ, true, cx, &tick) == RT_PENDING)
            return RT_PENDING;
        struct iovec iov = {op->buf, op->len};
        struct msghdr msg = {.msg_name = &op->from,
                             .msg_namelen = sizeof op->from,
                             .msg_iov = &iov,
                             .msg_iovlen = 1};
        /* No control buffer: descriptors sent along are closed by the
         * kernel, none is created here. */
        ssize_t n = recvmsg(op->io->fd, &msg, 0);
        if (n >= 0) {
            op->from_len = msg.msg_namelen;
            op->truncated = (msg.msg_flags & MSG_TRUNC) != 0;
        } else if (rt__io_retry_after_error(op->io, RT__IO_READ, tick, &n)) {
            continue;
        }
        return rt__future_finish(f, n);
    }
}

static void recv_from_vdescribe(const rt_future *f, rt_wait_info *info)
{
    io_describe(info, RT_WAIT_READ, ((const rt_unix_recv_from *)f)->io, "receive of a datagram");
}

static const rt_future_vtable recv_from_vtable = {recv_from_vpoll, NULL, recv_from_vdescribe};

RT_EXPORT int rt_unix_recv_from_init(rt_unix_recv_from *op, rt_io *io, void *buf, size_t len)
{
    if (op == NULL)
        return -EINVAL;
    op->io = io;
    op->buf = buf;
    op->len = len;
    op->truncated = false;
    op->from_len = 0;
    return rt__io_op_init(&op->future, &recv_from_vtable, io != NULL && (buf != NULL || len == 0));
}

/* ---- Passing descriptors ------------------------------------------------------------- */

/* A control buffer aligned for its header. */
union fds_control {
    struct cmsghdr header;
    char bytes[FDS_CONTROL_SPACE];
};

static rt_poll send_fds_vpoll(rt_future *f, rt_context *cx)
{
    rt_unix_send_fds *op = (rt_unix_send_fds *)f;
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(op->io, RT__IO_WRITE, true, cx, &tick) == RT_PENDING)
            return RT_PENDING;
        union fds_control control;
        memset(&control, 0, sizeof control);
        struct iovec iov = {(void *)op->buf, op->len};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.bytes,
                             .msg_controllen = CMSG_SPACE(sizeof(int) * op->nfds)};
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * op->nfds);
        memcpy(CMSG_DATA(c), op->fds, sizeof(int) * op->nfds);
        ssize_t n = sendmsg(op->io->fd, &msg, MSG_NOSIGNAL);
        if (n < 0 && rt__io_retry_after_error(op->io, RT__IO_WRITE, tick, &n))
            continue;
        return rt__future_finish(f, n);
    }
}

static void send_fds_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_unix_send_fds *op = (const rt_unix_send_fds *)f;
    info->kind = RT_WAIT_WRITE;
    info->fd = rt_io_fd(op->io);
    rt__wait_printf(info, "send of %zu descriptors on fd %d", op->nfds, info->fd);
}

static const rt_future_vtable send_fds_vtable = {send_fds_vpoll, NULL, send_fds_vdescribe};

RT_EXPORT int rt_unix_send_fds_init(rt_unix_send_fds *op, rt_io *io, const void *buf, size_t len,
                                    const int *fds, size_t nfds)
{
    if (op == NULL)
        return -EINVAL;
    op->io = io;
    op->buf = buf;
    op->len = len;
    op->nfds = 0;
    bool valid =
        io != NULL && buf != NULL && len > 0 && fds != NULL && nfds > 0 && nfds <= RT_UNIX_FDS_MAX;
    for (size_t i = 0; valid && i < nfds; i++)
        valid = fds[i] >= 0;
    if (valid) {
        memcpy(op->fds, fds, sizeof(int) * nfds);
        op->nfds = nfds;
    }
    return rt__io_op_init(&op->future, &send_fds_vtable, valid);
}

/* Takes the descriptors of a message received: up to max_fds into op->fds,
 * the others closed. */
static void take_fds(rt_unix_recv_fds *op, struct msghdr *msg)
{
    if (msg->msg_flags & MSG_CTRUNC)
        op->fds_truncated = true; /* the kernel discarded some */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c != NULL; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const unsigned char *data = CMSG_DATA(c);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, data + i * sizeof(int), sizeof fd);
            if (op->nfds < op->max_fds) {
                op->fds[op->nfds++] = fd;
            } else {
                close(fd);
                op->fds_truncated = true;
            }
        }
    }
}

static rt_poll recv_fds_vpoll(rt_future *f, rt_context *cx)
{
    rt_unix_recv_fds *op = (rt_unix_recv_fds *)f;
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(op->io, RT__IO_READ, true, cx, &tick) == RT_PENDING)
            return RT_PENDING;
        union fds_control control;
        struct iovec iov = {op->buf, op->len};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = control.bytes,
                             .msg_controllen = sizeof control.bytes};
        ssize_t n = rt__recvmsg_fds(op->io->fd, &msg, MSG_CMSG_CLOEXEC);
        if (n >= 0)
            take_fds(op, &msg);
        else if (rt__io_retry_after_error(op->io, RT__IO_READ, tick, &n))
            continue;
        return rt__future_finish(f, n);
    }
}

static void recv_fds_vdescribe(const rt_future *f, rt_wait_info *info)
{
    io_describe(info, RT_WAIT_READ, ((const rt_unix_recv_fds *)f)->io, "receive of descriptors");
}

static const rt_future_vtable recv_fds_vtable = {recv_fds_vpoll, NULL, recv_fds_vdescribe};

RT_EXPORT int rt_unix_recv_fds_init(rt_unix_recv_fds *op, rt_io *io, void *buf, size_t len,
                                    size_t max_fds)
{
    if (op == NULL)
        return -EINVAL;
    op->io = io;
    op->buf = buf;
    op->len = len;
    op->max_fds = max_fds;
    op->nfds = 0;
    op->fds_truncated = false;
    return rt__io_op_init(&op->future, &recv_fds_vtable,
                          io != NULL && buf != NULL && len > 0 && max_fds > 0 &&
                              max_fds <= RT_UNIX_FDS_MAX);
}
