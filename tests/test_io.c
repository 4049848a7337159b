/* Black-box tests of asyncrt/io.h over pipes, eventfds and socket pairs:
 * readiness in both directions, wake-ups from foreign threads, partial writes
 * and rt_io_write_all, end of stream, rt_io_open's errors, lost edge-triggered
 * wake-ups (single-byte hand-offs with a foreign thread, many thousand
 * times), abort safety, rt_io_close waking waiters, and shutdown closing every
 * descriptor the runtime holds (its own and the rt_io objects still open). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#define TEST_WANT_COUNTING_WAKER /* the shared counting user waker */
#define TEST_WANT_DRAIN_READER   /* the shared one-byte reader task */
#include "support.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MS (1000000LL)
#define SEC (1000000000LL)

/* Seconds any wait for an event may take before the test reports a hang. */
#define EVENT_DEADLINE_S 30
/* The same bound, for rt_task_wait calls that must not hang the suite. */
#define WAIT_DEADLINE_NS (30LL * SEC)

TestSuite(io, .timeout = 110, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* Open descriptors of this process (the directory's own one included, the
 * same in every count). */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d, "opendir /proc/self/fd: %s", strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static bool fd_is_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

/* Passes a poll result through, signalling `e` when it is RT_PENDING: the
 * waker has been stored by then, so a test that acts on the signal always
 * wakes the task. */
static rt_poll note_pending(rt_poll p, struct event *e)
{
    if (p == RT_PENDING)
        event_signal(e);
    return p;
}

static void make_pipe(int fds[2])
{
    cr_assert_eq(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0, "pipe2: %s", strerror(errno));
}

/* A pipe whose two ends are rt_io objects of rt. */
static void open_pipe(rt_runtime *rt, rt_io **r, rt_io **w, int fds[2])
{
    make_pipe(fds);
    int rc = rt_io_open(rt, fds[0], r);
    cr_assert_eq(rc, 0, "rt_io_open(read end): %s", rt_strerror(rc));
    rc = rt_io_open(rt, fds[1], w);
    cr_assert_eq(rc, 0, "rt_io_open(write end): %s", rt_strerror(rc));
    cr_assert_eq(rt_io_fd(*r), fds[0]);
    cr_assert_eq(rt_io_fd(*w), fds[1]);
}

/* The byte at offset i of every stream these tests send. */
static unsigned char pattern(size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u;
    return (unsigned char)((x >> 24) ^ (x >> 11));
}

/* ---- a reader woken by a foreign thread ---------------------------------- */

static struct event reader_pending = EVENT_INIT;

struct one_read {
    rt_coro co;
    rt_io *io;
    size_t len;
    ssize_t result;
    unsigned char *buf; /* owned by the test */
};

/* Reads once (announcing every pending poll); the result is the byte count
 * or -errno. */
static rt_poll one_read_poll(void *state, rt_context *cx, void **out)
{
    struct one_read *r = state;
    RT_CORO_BEGIN(&r->co);
    RT_AWAIT(&r->co,
             note_pending(rt_io_read(r->io, cx, r->buf, r->len, &r->result), &reader_pending));
    RT_RETURN(&r->co, out, (intptr_t)r->result);
    RT_CORO_END(&r->co, out);
}

struct foreign_write {
    int fd;
    const void *data;
    size_t len;
    ssize_t rc;
    int err;
};

static void *foreign_write_main(void *arg)
{
    struct foreign_write *f = arg;
    f->rc = write(f->fd, f->data, f->len);
    f->err = errno;
    return NULL;
}

Test(io, pipe_reader_waiting_on_an_empty_pipe_is_woken_by_a_foreign_thread_write)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    rt_io *r, *w;
    open_pipe(rt, &r, &w, fds);

    unsigned char buf[16] = {0};
    struct one_read st = {{0}, r, sizeof buf, 0, buf};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, one_read_poll, NULL, &st, &task), 0);
    cr_assert(event_wait_for(&reader_pending, 1), "the reader never waited");

    struct foreign_write f = {fds[1], "hello", 5, 0, 0};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, foreign_write_main, &f), 0);
    pthread_join(thread, NULL);
    cr_assert_eq(f.rc, 5, "write: %s", strerror(f.err));

    void *value = NULL;
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, &value), 0, "the reader was never woken");
    cr_assert_eq((intptr_t)value, 5, "read returned %ld", (long)(intptr_t)value);
    cr_assert_eq(memcmp(buf, "hello", 5), 0);
    cr_assert_eq(rt_io_close(r), 0);
    cr_assert_eq(rt_io_close(w), 0);
    cr_assert(!fd_is_open(fds[0]) && !fd_is_open(fds[1]), "rt_io_close left the fd open");
    finish_runtime(rt, 0);
}

/* ---- readiness in both directions ----------------------------------------- */

static struct event readiness_pending = EVENT_INIT;

struct readiness {
    rt_coro co;
    rt_io *io;
    bool want_write;
    unsigned polls;
};

static rt_poll readiness_poll(void *state, rt_context *cx, void **out)
{
    struct readiness *s = state;
    RT_CORO_BEGIN(&s->co);
    if (s->want_write)
        RT_AWAIT(&s->co, (s->polls++, note_pending(rt_io_writable(s->io, cx), &readiness_pending)));
    else
        RT_AWAIT(&s->co, (s->polls++, note_pending(rt_io_readable(s->io, cx), &readiness_pending)));
    event_signal(&readiness_pending);
    RT_RETURN(&s->co, out, (uintptr_t)s->polls);
    RT_CORO_END(&s->co, out);
}

static size_t fill_nonblocking(int fd)
{
    static unsigned char junk[4096];
    size_t total = 0;
    for (;;) {
        ssize_t n = write(fd, junk, sizeof junk);
        if (n > 0) {
            total += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        cr_assert(n < 0 && errno == EAGAIN, "filling: %s", strerror(errno));
        /* A pipe may still take a partial page; take single bytes too. */
        n = write(fd, junk, 1);
        if (n == 1) {
            total++;
            continue;
        }
        return total;
    }
}

static size_t drain_nonblocking(int fd)
{
    static unsigned char sink[65536];
    size_t total = 0;
    for (;;) {
        ssize_t n = read(fd, sink, sizeof sink);
        if (n > 0) {
            total += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        cr_assert(n < 0 && errno == EAGAIN, "draining: %s", strerror(errno));
        return total;
    }
}

/* Spawns a readiness task and waits until it either pends (true) or
 * finishes without waiting (false). */
static bool readiness_waits(rt_runtime *rt, struct readiness *st, rt_task **task)
{
    unsigned long seen = event_count(&readiness_pending);
    cr_assert_eq(RT_SPAWN(rt, readiness_poll, NULL, st, task), 0);
    /* readiness_poll signals on its pending poll and when it finishes. */
    cr_assert(event_wait_for(&readiness_pending, seen + 1),
              "the readiness task neither waited nor finished");
    return !rt_task_is_finished(*task);
}

Test(io, pipe_read_end_is_readable_only_once_data_arrives)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    rt_io *r, *w;
    open_pipe(rt, &r, &w, fds);

    /* Readable: pending on an empty pipe until a byte arrives. */
    struct readiness rs = {{0}, r, false, 0};
    rt_task *task = NULL;
    void *value = NULL;
    bool waited = readiness_waits(rt, &rs, &task);
    if (!waited) {
        (void)rt_task_wait(task, WAIT_DEADLINE_NS, NULL);
        cr_assert_eq(rt_io_close(r), 0);
        cr_assert_eq(rt_io_close(w), 0);
        finish_runtime(rt, 0);
        cr_assert_fail("rt_io_readable was RT_READY on an empty pipe with its writer open");
    }
    cr_assert_eq(write(fds[1], "x", 1), 1);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, &value), 0, "readable never woke");
    cr_assert_geq((uintptr_t)value, 2);

    /* A pipe with data is readable at once. */
    rs.co.line = 0;
    rs.polls = 0;
    cr_assert_eq(rt_block_on(rt, readiness_poll, NULL, &rs, sizeof rs, &value), 0);
    /* Ready at the first poll, or at the second after one wake (an
     * implementation may wait for the registration's first edge). */
    cr_assert_leq((uintptr_t)value, 2, "readable took %lu polls with a byte waiting",
                  (unsigned long)(uintptr_t)value);
    cr_assert_eq(rt_io_close(r), 0);
    cr_assert_eq(rt_io_close(w), 0);
    finish_runtime(rt, 0);
}

Test(io, pipe_write_end_is_writable_when_empty_and_only_again_once_drained)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    rt_io *r, *w;
    open_pipe(rt, &r, &w, fds);

    /* An empty pipe's write end is writable at once. */
    struct readiness ws = {{0}, w, true, 0};
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, readiness_poll, NULL, &ws, sizeof ws, &value), 0);
    cr_assert_leq((uintptr_t)value, 2, "writable took %lu polls on an empty pipe",
                  (unsigned long)(uintptr_t)value);
    if ((uintptr_t)value == 2)
        cr_log_info("writable on an empty pipe took one wake (waited for the first edge)");

    /* Full: pending, woken when a foreign reader drains it. */
    (void)fcntl(fds[1], F_SETPIPE_SZ, 4096);
    cr_assert_gt(fill_nonblocking(fds[1]), 0);
    ws.co.line = 0;
    ws.polls = 0;
    rt_task *task = NULL;
    bool waited = readiness_waits(rt, &ws, &task);
    if (!waited) {
        (void)rt_task_wait(task, WAIT_DEADLINE_NS, NULL);
        cr_assert_eq(rt_io_close(r), 0);
        cr_assert_eq(rt_io_close(w), 0);
        finish_runtime(rt, 0);
        cr_assert_fail("rt_io_writable was RT_READY on a full pipe");
    }
    cr_assert_gt(drain_nonblocking(fds[0]), 0);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, &value), 0, "writable never woke");
    cr_assert_geq((uintptr_t)value, 2);

    cr_assert_eq(rt_io_close(r), 0);
    cr_assert_eq(rt_io_close(w), 0);
    finish_runtime(rt, 0);
}

/* One descriptor, both directions waited on at once by two tasks. */
static struct event duplex_pending = EVENT_INIT;

struct duplex_side {
    rt_coro co;
    rt_io *io;
    bool writer;
    ssize_t result;
    unsigned char buf[8];
};

static rt_poll duplex_side_poll(void *state, rt_context *cx, void **out)
{
    struct duplex_side *s = state;
    RT_CORO_BEGIN(&s->co);
    if (s->writer)
        RT_AWAIT(&s->co, note_pending(rt_io_write(s->io, cx, "W", 1, &s->result), &duplex_pending));
    else
        RT_AWAIT(&s->co, note_pending(rt_io_read(s->io, cx, s->buf, sizeof s->buf, &s->result),
                                      &duplex_pending));
    RT_RETURN(&s->co, out, (intptr_t)s->result);
    RT_CORO_END(&s->co, out);
}

Test(io, one_socket_waited_on_for_reading_and_writing_by_two_tasks_wakes_each_direction)
{
    rt_runtime *rt = new_runtime(2);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    int small = 4096;
    (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
    (void)setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    size_t filled = fill_nonblocking(sv[0]);
    cr_assert_gt(filled, 0);

    rt_io *io = NULL;
    cr_assert_eq(rt_io_open(rt, sv[0], &io), 0);
    struct duplex_side reader = {{0}, io, false, 0, {0}};
    struct duplex_side writer = {{0}, io, true, 0, {0}};
    rt_task *rtask = NULL, *wtask = NULL;
    cr_assert_eq(RT_SPAWN(rt, duplex_side_poll, NULL, &reader, &rtask), 0);
    cr_assert_eq(RT_SPAWN(rt, duplex_side_poll, NULL, &writer, &wtask), 0);
    cr_assert(event_wait_for(&duplex_pending, 2), "both sides should wait");

    /* The peer sends: only the reader can finish. */
    cr_assert_eq(write(sv[1], "R", 1), 1);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(rtask, WAIT_DEADLINE_NS, &value), 0, "the reader was not woken");
    cr_assert_eq((intptr_t)value, 1);
    cr_assert(!rt_task_is_finished(wtask), "the writer finished with a full send buffer");

    /* The peer drains: the writer finishes. */
    size_t drained = 0;
    int64_t give_up = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    give_up = (int64_t)ts.tv_sec + EVENT_DEADLINE_S;
    while (drained < filled) {
        size_t n = drain_nonblocking(sv[1]);
        drained += n;
        if (n == 0) {
            struct pollfd p = {sv[1], POLLIN, 0};
            (void)poll(&p, 1, 100);
            clock_gettime(CLOCK_MONOTONIC, &ts);
            cr_assert_lt((int64_t)ts.tv_sec, give_up, "the peer could not drain the socket");
        }
    }
    cr_assert_eq(rt_task_wait(wtask, WAIT_DEADLINE_NS, &value), 0, "the writer was not woken");
    cr_assert_eq((intptr_t)value, 1);
    cr_assert_eq(rt_io_close(io), 0);
    close(sv[1]);
    finish_runtime(rt, 0);
}

/* ---- eventfd ------------------------------------------------------------------- */

static struct event eventfd_pending = EVENT_INIT;

struct eventfd_user {
    rt_coro co;
    rt_io *io;
    ssize_t result;
    uint64_t value;
    uint64_t first, second;
    ssize_t results[3];
};

static rt_poll eventfd_user_poll(void *state, rt_context *cx, void **out)
{
    struct eventfd_user *s = state;
    RT_CORO_BEGIN(&s->co);
    RT_AWAIT(&s->co, note_pending(rt_io_read(s->io, cx, &s->value, sizeof s->value, &s->result),
                                  &eventfd_pending));
    s->results[0] = s->result;
    s->first = s->value;
    s->value = 5;
    RT_AWAIT(&s->co, rt_io_write(s->io, cx, &s->value, sizeof s->value, &s->result));
    s->results[1] = s->result;
    s->value = 0;
    RT_AWAIT(&s->co, rt_io_read(s->io, cx, &s->value, sizeof s->value, &s->result));
    s->results[2] = s->result;
    s->second = s->value;
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

static struct eventfd_user eventfd_result;

static rt_poll eventfd_outer_poll(void *state, rt_context *cx, void **out)
{
    if (eventfd_user_poll(state, cx, out) != RT_READY)
        return RT_PENDING;
    eventfd_result = *(struct eventfd_user *)state;
    return RT_READY;
}

Test(io, eventfd_read_waits_for_a_foreign_write_and_round_trips_values)
{
    rt_runtime *rt = new_runtime(2);
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    cr_assert_geq(efd, 0);
    rt_io *io = NULL;
    cr_assert_eq(rt_io_open(rt, efd, &io), 0);
    struct eventfd_user s;
    memset(&s, 0, sizeof s);
    s.io = io;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, eventfd_outer_poll, NULL, &s, &task), 0);
    cr_assert(event_wait_for(&eventfd_pending, 1), "the eventfd read did not wait");
    uint64_t seven = 7;
    cr_assert_eq(write(efd, &seven, sizeof seven), (ssize_t)sizeof seven);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), 0, "the eventfd reader never woke");
    cr_assert_eq(eventfd_result.results[0], 8);
    cr_assert_eq(eventfd_result.first, 7);
    cr_assert_eq(eventfd_result.results[1], 8);
    cr_assert_eq(eventfd_result.results[2], 8);
    cr_assert_eq(eventfd_result.second, 5);
    cr_assert_eq(rt_io_close(io), 0);
    finish_runtime(rt, 0);
}

/* ---- short reads of messages ----------------------------------------------- */

/* A datagram socket, a SOCK_SEQPACKET socket or a packet-mode pipe returns
 * one message per read, so a short read there says nothing about what is
 * queued behind it; only TCP gets the short-transfer shortcut (io_internal.h,
 * "Short transfers"). The task first waits for the reactor's report of
 * readability (so no edge is still to come), then reads twice with a larger
 * buffer: a runtime that forgot the readiness after the first short read
 * would wait for an edge that never comes. */
struct two_messages_result {
    ssize_t len[2];
    char buf[2][64];
};

struct two_messages {
    rt_coro co;
    rt_io *io;
    int i;
    struct two_messages_result *r; /* the test's */
};

static rt_poll two_messages_poll(void *state, rt_context *cx, void **out)
{
    struct two_messages *s = state;
    RT_CORO_BEGIN(&s->co);
    RT_AWAIT(&s->co, rt_io_readable(s->io, cx));
    for (s->i = 0; s->i < 2; s->i++) {
        RT_AWAIT(&s->co,
                 rt_io_read(s->io, cx, s->r->buf[s->i], sizeof s->r->buf[s->i], &s->r->len[s->i]));
    }
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

/* Opens read_fd in a fresh runtime, and has a task wait for readability
 * and then read twice with a 64-byte buffer; *r gets both results. Fails the
 * test when the second read never returns. */
static void read_twice(int read_fd, const char *what, struct two_messages_result *r)
{
    rt_runtime *rt = new_runtime(2);
    rt_io *io = NULL;
    int rc = rt_io_open(rt, read_fd, &io);
    cr_assert_eq(rc, 0, "%s: rt_io_open: %s", what, rt_strerror(rc));
    memset(r, 0, sizeof *r);
    struct two_messages s = {.io = io, .r = r};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, two_messages_poll, NULL, &s, &task), 0);
    rc = rt_task_wait(task, WAIT_DEADLINE_NS, NULL);
    if (rc == -ETIMEDOUT) {
        rt_task_abort(task);
        rt_task_wait(task, -1, NULL);
    }
    cr_assert_eq(rc, 0, "%s: the second read never returned (%s); the first read %zd bytes", what,
                 rt_strerror(rc), r->len[0]);
    cr_assert_eq(rt_io_close(io), 0);
    finish_runtime(rt, 0);
}

static void read_two_queued_messages(int read_fd, int write_fd, const char *what)
{
    cr_assert_eq(write(write_fd, "first", 5), 5, "%s: %s", what, strerror(errno));
    cr_assert_eq(write(write_fd, "second!", 7), 7, "%s: %s", what, strerror(errno));
    static struct two_messages_result r;
    read_twice(read_fd, what, &r);
    cr_assert_eq(r.len[0], 5, "%s: first read %zd", what, r.len[0]);
    cr_assert_eq(memcmp(r.buf[0], "first", 5), 0, "%s", what);
    cr_assert_eq(r.len[1], 7, "%s: second read %zd", what, r.len[1]);
    cr_assert_eq(memcmp(r.buf[1], "second!", 7), 0, "%s", what);
    close(write_fd);
}

Test(io, short_reads_of_datagrams_seqpackets_and_packet_pipes_keep_the_next_message_readable)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    read_two_queued_messages(sv[0], sv[1], "SOCK_DGRAM");
    cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    read_two_queued_messages(sv[0], sv[1], "SOCK_SEQPACKET");
    cr_assert_eq(pipe2(sv, O_DIRECT | O_NONBLOCK | O_CLOEXEC), 0, "pipe2: %s", strerror(errno));
    read_two_queued_messages(sv[0], sv[1], "packet-mode pipe");
}

/* An AF_UNIX stream read stops after the bytes that carried a file
 * descriptor, with more queued behind them: AF_UNIX streams are not treated
 * as TCP is (io_internal.h, "Short transfers"). */
Test(io, a_unix_stream_read_cut_short_by_a_passed_descriptor_keeps_the_rest_readable)
{
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    int passed = eventfd(0, EFD_CLOEXEC);
    cr_assert_geq(passed, 0);
    struct iovec iov = {.iov_base = "first", .iov_len = 5};
    union {
        char bytes[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = control.bytes,
                       .msg_controllen = sizeof control.bytes};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &passed, sizeof passed);
    cr_assert_eq(sendmsg(sv[1], &m, 0), 5, "sendmsg: %s", strerror(errno));
    close(passed); /* the kernel holds it in flight; read(2) discards it */
    cr_assert_eq(write(sv[1], "second!", 7), 7);
    static struct two_messages_result r;
    read_twice(sv[0], "AF_UNIX stream, SCM_RIGHTS then data", &r);
    cr_assert_eq(r.len[0], 5, "first read %zd", r.len[0]);
    cr_assert_eq(r.len[1], 7, "second read %zd", r.len[1]);
    close(sv[1]);
}

/* A connected TCP pair on 127.0.0.1, both ends non-blocking and close-on-exec
 * with TCP_NODELAY: fds[0] is the accepted end, fds[1] the connecting one.
 * On loopback a send is queued at the peer before it returns. */
static void tcp_pair(int fds[2])
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(l, 0, "socket: %s", strerror(errno));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    cr_assert_eq(bind(l, (struct sockaddr *)&sa, sl), 0, "bind: %s", strerror(errno));
    cr_assert_eq(listen(l, 1), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
    fds[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fds[1], 0);
    cr_assert_eq(connect(fds[1], (struct sockaddr *)&sa, sl), 0, "connect: %s", strerror(errno));
    fds[0] = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    cr_assert_geq(fds[0], 0, "accept4: %s", strerror(errno));
    close(l);
    int one = 1;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), 0);
    cr_assert_eq(fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK), 0);
}

/* Where a short TCP read proves nothing: a peer that wrote and then hung up
 * (the hang-up's edge is spent by the time the task reads), and urgent data,
 * at whose mark a TCP read stops with more queued behind it. The task waits
 * until the reactor has reported the descriptor readable, then reads the
 * first bytes, a short read, and reads again: that read must return at once,
 * with no edge to come. */
static void read_to_the_end_after_a_hang_up(int how, const char *what)
{
    int sv[2];
    tcp_pair(sv);
    cr_assert_eq(write(sv[1], "first", 5), 5);
    if (how < 0)
        close(sv[1]);
    else
        cr_assert_eq(shutdown(sv[1], how), 0);
    static struct two_messages_result r;
    read_twice(sv[0], what, &r);
    cr_assert_eq(r.len[0], 5, "%s: first read %zd", what, r.len[0]);
    cr_assert_eq(r.len[1], 0, "%s: second read %zd, not the end of the stream", what, r.len[1]);
    if (how >= 0)
        close(sv[1]);
}

Test(io, short_read_of_tcp_whose_peer_hung_up_is_followed_by_the_end_of_the_stream)
{
    read_to_the_end_after_a_hang_up(-1, "peer closed");
    read_to_the_end_after_a_hang_up(SHUT_WR, "peer shut down writing");
}

static void read_around_urgent_data(bool inline_urgent, const char *what)
{
    int sv[2];
    tcp_pair(sv);
    int one = 1;
    if (inline_urgent)
        cr_assert_eq(setsockopt(sv[0], SOL_SOCKET, SO_OOBINLINE, &one, sizeof one), 0);
    cr_assert_eq(write(sv[1], "first", 5), 5);
    cr_assert_eq(send(sv[1], "!", 1, MSG_OOB), 1, "MSG_OOB: %s", strerror(errno));
    cr_assert_eq(write(sv[1], "second", 6), 6);
    static struct two_messages_result r;
    read_twice(sv[0], what, &r);
    cr_assert_eq(r.len[0], 5, "%s: first read %zd", what, r.len[0]);
    cr_assert_eq(memcmp(r.buf[0], "first", 5), 0, "%s", what);
    /* Out of line the urgent byte is skipped; inline it leads the rest. */
    const char *rest = inline_urgent ? "!second" : "second";
    cr_assert_eq(r.len[1], (ssize_t)strlen(rest), "%s: second read %zd", what, r.len[1]);
    cr_assert_eq(memcmp(r.buf[1], rest, strlen(rest)), 0, "%s", what);
    close(sv[1]);
}

Test(io, a_tcp_read_cut_short_at_urgent_data_keeps_the_rest_readable)
{
    read_around_urgent_data(false, "urgent byte out of line");
    read_around_urgent_data(true, "urgent byte inline (SO_OOBINLINE)");
}

/* ---- hand-polled operations with a user waker ---------------------------------- */

Test(io, read_polled_by_hand_from_a_foreign_thread_wakes_a_user_waker)
{
    rt_runtime *rt = new_runtime(1);
    int fds[2];
    rt_io *r, *w;
    open_pipe(rt, &r, &w, fds);
    struct counting_waker cw;
    counting_waker_init(&cw);
    rt_context cx = counting_context(&cw);

    unsigned char buf[4];
    ssize_t result = 12345;
    cr_assert_eq(rt_io_read(r, &cx, buf, sizeof buf, &result), RT_PENDING);
    cr_assert_eq(write(fds[1], "ab", 2), 2);
    cr_assert(event_wait_for(&cw.woken, 1), "the reactor never woke the user waker");
    rt_poll p = RT_PENDING;
    for (int round = 0; round < 100 && p == RT_PENDING; round++) {
        unsigned long seen = event_count(&cw.woken);
        p = rt_io_read(r, &cx, buf, sizeof buf, &result);
        if (p == RT_PENDING)
            cr_assert(event_wait_for(&cw.woken, seen + 1));
    }
    cr_assert_eq(p, RT_READY);
    cr_assert_eq(result, 2);
    cr_assert_eq(memcmp(buf, "ab", 2), 0);
    cr_assert_eq(rt_io_close(r), 0);
    cr_assert_eq(rt_io_close(w), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&cw), 0, "%ld waker references never given back",
                 counting_outstanding(&cw));
}

/* ---- partial writes, then a reader drains ----------------------------------------- */

#define PARTIAL_TOTAL (256u * 1024u)

static struct event writer_blocked = EVENT_INIT;

struct partial_writer {
    rt_io *io;
    const unsigned char *data;
    size_t off;
    unsigned partial;  /* writes that took fewer bytes than asked */
    unsigned pendings; /* polls that found the pipe unable to take any */
    unsigned too_many; /* writes that claimed more than asked */
    ssize_t error;
};

static rt_poll partial_writer_poll(void *state, rt_context *cx, void **out)
{
    struct partial_writer *s = state;
    while (s->off < PARTIAL_TOTAL) {
        size_t ask = PARTIAL_TOTAL - s->off;
        ssize_t result = 0;
        if (rt_io_write(s->io, cx, s->data + s->off, ask, &result) == RT_PENDING) {
            if (s->pendings++ == 0)
                event_signal(&writer_blocked);
            return RT_PENDING;
        }
        if (result <= 0) {
            s->error = result == 0 ? -EIO : result;
            break;
        }
        if ((size_t)result > ask)
            s->too_many++;
        else if ((size_t)result < ask)
            s->partial++;
        s->off += (size_t)result;
    }
    *out = s;
    return RT_READY;
}

static struct partial_writer partial_result;

static rt_poll partial_writer_outer_poll(void *state, rt_context *cx, void **out)
{
    if (partial_writer_poll(state, cx, out) != RT_READY)
        return RT_PENDING;
    partial_result = *(struct partial_writer *)state;
    *out = NULL;
    return RT_READY;
}

struct checking_reader {
    rt_coro co;
    rt_io *io;
    size_t expected; /* stop after this many bytes; SIZE_MAX: read to end of stream */
    size_t chunk;    /* bytes asked per read */
    size_t off;
    size_t mismatch; /* first bad offset + 1, or 0 */
    ssize_t result;
    unsigned char buf[4096];
};

/* Reads and checks every byte against pattern() until `expected` bytes or
 * end of stream; the result is the byte count, or -errno, or -EILSEQ on a
 * wrong byte. */
static rt_poll checking_reader_poll(void *state, rt_context *cx, void **out)
{
    struct checking_reader *s = state;
    RT_CORO_BEGIN(&s->co);
    while (s->off < s->expected) {
        RT_AWAIT(&s->co, rt_io_read(s->io, cx, s->buf, s->chunk, &s->result));
        if (s->result < 0)
            RT_RETURN(&s->co, out, (intptr_t)s->result);
        if (s->result == 0)
            break;
        if ((size_t)s->result > s->chunk)
            RT_RETURN(&s->co, out, (intptr_t)-E2BIG);
        for (ssize_t i = 0; i < s->result; i++) {
            if (s->buf[i] != pattern(s->off + (size_t)i)) {
                s->mismatch = s->off + (size_t)i + 1;
                RT_RETURN(&s->co, out, (intptr_t)-EILSEQ);
            }
        }
        s->off += (size_t)s->result;
    }
    RT_RETURN(&s->co, out, (intptr_t)s->off);
    RT_CORO_END(&s->co, out);
}

static unsigned char *pattern_buffer(size_t len)
{
    unsigned char *data = malloc(len);
    cr_assert_not_null(data);
    for (size_t i = 0; i < len; i++)
        data[i] = pattern(i);
    return data;
}

Test(io, writer_filling_a_pipe_gets_partial_writes_then_pends_until_a_reader_drains_it)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    rt_io *r, *w;
    open_pipe(rt, &r, &w, fds);
    (void)fcntl(fds[1], F_SETPIPE_SZ, 4096);
    unsigned char *data = pattern_buffer(PARTIAL_TOTAL);

    struct partial_writer pw = {w, data, 0, 0, 0, 0, 0};
    rt_task *writer = NULL;
    cr_assert_eq(RT_SPAWN(rt, partial_writer_outer_poll, NULL, &pw, &writer), 0);
    cr_assert(event_wait_for(&writer_blocked, 1), "the writer never blocked on a full pipe");
    cr_assert(!rt_task_is_finished(writer));

    struct checking_reader cr;
    memset(&cr, 0, sizeof cr);
    cr.io = r;
    cr.expected = PARTIAL_TOTAL;
    cr.chunk = 777;
    rt_task *reader = NULL;
    cr_assert_eq(RT_SPAWN(rt, checking_reader_poll, NULL, &cr, &reader), 0);

    void *value = NULL;
    cr_assert_eq(rt_task_wait(writer, WAIT_DEADLINE_NS, NULL), 0, "the writer never finished");
    cr_assert_eq(rt_task_wait(reader, WAIT_DEADLINE_NS, &value), 0, "the reader never finished");
    cr_assert_eq((intptr_t)value, (intptr_t)PARTIAL_TOTAL, "reader: %ld", (long)(intptr_t)value);
    cr_assert_eq(partial_result.error, 0, "write error %s", rt_strerror((int)partial_result.error));
    cr_assert_eq(partial_result.off, PARTIAL_TOTAL);
    cr_assert_eq(partial_result.too_many, 0, "a write reported more bytes than asked");
    cr_assert_geq(partial_result.partial, 1, "no write was partial on a 4 KiB pipe");
    cr_assert_geq(partial_result.pendings, 1);
    free(data);
    cr_assert_eq(rt_io_close(r), 0);
    cr_assert_eq(rt_io_close(w), 0);
    finish_runtime(rt, 0);
}

/* ---- write_all: 4 MiB through a pipe ------------------------------------------------ */

#define BIG_TOTAL (4u * 1024u * 1024u)

struct all_writer {
    rt_coro co;
    rt_io *io;
    const unsigned char *data;
    size_t len;
    size_t progress;
    ssize_t result;
    int close_rc;
};

/* Writes everything with rt_io_write_all, then closes the write end so the
 * reader sees end of stream. Result: the write_all result. */
static rt_poll all_writer_poll(void *state, rt_context *cx, void **out)
{
    struct all_writer *s = state;
    RT_CORO_BEGIN(&s->co);
    s->progress = 0;
    RT_AWAIT(&s->co, rt_io_write_all(s->io, cx, s->data, s->len, &s->progress, &s->result));
    if (s->result == (ssize_t)s->len && s->progress != s->len)
        RT_RETURN(&s->co, out, (intptr_t)-ERANGE);
    s->close_rc = rt_io_close(s->io);
    s->io = NULL;
    if (s->close_rc != 0)
        RT_RETURN(&s->co, out, (intptr_t)s->close_rc);
    RT_RETURN(&s->co, out, (intptr_t)s->result);
    RT_CORO_END(&s->co, out);
}

/* Through a pipe (buffer_size: its size, 0 for the default) or, with
 * `over_tcp`, a loopback TCP connection (buffer_size: the send buffer). */
static void run_big_transfer(rt_runtime *rt, size_t buffer_size, size_t chunk, bool over_tcp)
{
    int fds[2];
    rt_io *r, *w;
    if (over_tcp) {
        tcp_pair(fds);
        int size = (int)buffer_size;
        cr_assert_eq(setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &size, sizeof size), 0);
        cr_assert_eq(rt_io_open(rt, fds[0], &r), 0);
        cr_assert_eq(rt_io_open(rt, fds[1], &w), 0);
    } else {
        open_pipe(rt, &r, &w, fds);
        if (buffer_size != 0)
            (void)fcntl(fds[1], F_SETPIPE_SZ, (int)buffer_size);
    }
    unsigned char *data = pattern_buffer(BIG_TOTAL);

    struct checking_reader *cr = calloc(1, sizeof *cr);
    cr_assert_not_null(cr);
    cr->io = r;
    cr->expected = SIZE_MAX;
    cr->chunk = chunk;
    rt_task *reader = NULL;
    cr_assert_eq(rt_spawn(rt, checking_reader_poll, NULL, cr, sizeof *cr, &reader), 0);
    free(cr);

    struct all_writer aw = {{0}, w, data, BIG_TOTAL, 0, 0, 0};
    rt_task *writer = NULL;
    cr_assert_eq(RT_SPAWN(rt, all_writer_poll, NULL, &aw, &writer), 0);

    void *wv = NULL, *rv = NULL;
    cr_assert_eq(rt_task_wait(writer, WAIT_DEADLINE_NS, &wv), 0, "the writer never finished");
    cr_assert_eq(rt_task_wait(reader, WAIT_DEADLINE_NS, &rv), 0, "the reader never finished");
    cr_assert_eq((intptr_t)wv, (intptr_t)BIG_TOTAL, "write_all: %ld (%s)", (long)(intptr_t)wv,
                 rt_strerror((int)(intptr_t)wv));
    cr_assert_eq((intptr_t)rv, (intptr_t)BIG_TOTAL,
                 "reader got %ld (%s); -EILSEQ means a wrong byte", (long)(intptr_t)rv,
                 (intptr_t)rv < 0 ? rt_strerror((int)(intptr_t)rv) : "short");
    free(data);
    cr_assert_eq(rt_io_close(r), 0);
}

Test(io, write_all_moves_4_mib_through_a_pipe_and_the_reader_checks_every_byte)
{
    rt_runtime *rt = new_runtime(2);
    run_big_transfer(rt, 0, 4096, false);
    finish_runtime(rt, 0);
}

Test(io, write_all_through_a_one_page_pipe_with_odd_sized_reads_on_one_worker)
{
    rt_runtime *rt = new_runtime(1);
    run_big_transfer(rt, 4096, 1031, false);
    finish_runtime(rt, 0);
}

/* On TCP short reads and short writes forget the readiness without an
 * EAGAIN (io_internal.h, "Short transfers"): with a small send buffer and
 * odd-sized reads many transfers are short on both sides, and the reader
 * freeing space races the writer's forgetting of it, on two workers. The
 * writer's close after the last byte races the reader's last short read. */
Test(io, write_all_over_tcp_with_short_reads_and_writes_on_both_sides)
{
    rt_runtime *rt = new_runtime(2);
    run_big_transfer(rt, 4096, 1031, true);
    finish_runtime(rt, 0);
}

/* ---- end of stream ----------------------------------------------------------------- */

static struct event eos_pending = EVENT_INIT;

struct eos_reader {
    rt_coro co;
    rt_io *io;
    ssize_t result;
    size_t got;
    int zeros;
    unsigned char buf[64];
};

static rt_poll eos_reader_poll(void *state, rt_context *cx, void **out)
{
    struct eos_reader *s = state;
    RT_CORO_BEGIN(&s->co);
    for (;;) {
        RT_AWAIT(&s->co, note_pending(rt_io_read(s->io, cx, s->buf + s->got, sizeof s->buf - s->got,
                                                 &s->result),
                                      &eos_pending));
        if (s->result <= 0)
            break;
        s->got += (size_t)s->result;
    }
    if (s->result < 0)
        RT_RETURN(&s->co, out, (intptr_t)s->result);
    /* End of stream stays end of stream. */
    RT_AWAIT(&s->co, rt_io_read(s->io, cx, s->buf, 1, &s->result));
    s->zeros = s->result == 0 ? 2 : 1;
    if (s->got != 3 || memcmp(s->buf, "abc", 3) != 0)
        RT_RETURN(&s->co, out, (intptr_t)-EILSEQ);
    RT_RETURN(&s->co, out, (intptr_t)s->zeros);
    RT_CORO_END(&s->co, out);
}

Test(io, read_returns_0_once_the_write_end_is_closed)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    rt_io *r, *w;
    open_pipe(rt, &r, &w, fds);
    struct eos_reader s;
    memset(&s, 0, sizeof s);
    s.io = r;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, eos_reader_poll, NULL, &s, &task), 0);
    cr_assert(event_wait_for(&eos_pending, 1));
    cr_assert_eq(write(fds[1], "abc", 3), 3);
    /* Closed from this (foreign) thread while the reader may be waiting. */
    cr_assert_eq(rt_io_close(w), 0);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, &value), 0, "the reader never saw the end");
    cr_assert_eq((intptr_t)value, 2, "reader result %ld", (long)(intptr_t)value);
    cr_assert_eq(rt_io_close(r), 0);
    finish_runtime(rt, 0);
}

/* ---- the reactor's nap ends when a worker parks ----------------------------- */

/* Pipes written in one burst, so that a reactor turn collects several events. */
#define NAP_PIPES 8
/* Rounds at most before the test gives up waiting for the reactor to nap. */
#define NAP_ROUNDS_MAX 300

/* Every byte a nap reader reads. */
static struct event nap_reads = EVENT_INIT;

struct nap_holder {
    rt_runtime *rt;
    uint64_t io_events; /* the reactor's event count to wait for */
    uint64_t naps;      /* ... or its nap count */
};

/* Holds the only worker, busy, until the reactor has collected every event of
 * the burst or has napped (holding the rest back): the reactor's turns see
 * every worker busy meanwhile. Returns 0, or -ETIMEDOUT after 20 s. */
static rt_poll nap_holder_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    const struct nap_holder *h = state;
    int64_t give_up = rt_now_ns() + 20 * SEC;
    for (;;) {
        rt_metrics m;
        cr_assert_eq(rt_metrics_read(h->rt, &m, sizeof m), 0);
        if (m.reactor_io_events >= h->io_events || m.reactor_naps >= h->naps)
            break;
        if (rt_now_ns() > give_up) {
            *out = (void *)(intptr_t)-ETIMEDOUT;
            return RT_READY;
        }
    }
    *out = NULL;
    return RT_READY;
}

/* NAP_PIPES pipes, each with a nap reader on its read end. */
static void start_nap_readers(rt_runtime *rt, int fds[NAP_PIPES][2], rt_io *ends[NAP_PIPES],
                              rt_task *readers[NAP_PIPES])
{
    for (int i = 0; i < NAP_PIPES; i++) {
        make_pipe(fds[i]);
        cr_assert_eq(rt_io_open(rt, fds[i][0], &ends[i]), 0);
        struct drain_reader r = {.io = ends[i], .each_byte = &nap_reads};
        cr_assert_eq(RT_SPAWN(rt, drain_reader_poll, NULL, &r, &readers[i]), 0);
    }
}

/* A runtime with one worker and naps of `nap_ns`. */
static rt_runtime *new_napping_runtime(int64_t nap_ns)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.reactor_nap_ns = nap_ns;
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), 0);
    return rt;
}

/* With naps as long as an hour, only a parking worker's kick ends them: if
 * it is lost, the rest of a burst, or the next burst, is never collected.
 * Each round holds the worker busy while a burst of single bytes arrives on
 * NAP_PIPES pipes, then lets it run the readers and park. */
Test(io, a_worker_that_parks_ends_the_reactors_nap)
{
    rt_runtime *rt = new_napping_runtime(3600 * SEC);
    int fds[NAP_PIPES][2];
    rt_io *ends[NAP_PIPES];
    rt_task *readers[NAP_PIPES];
    start_nap_readers(rt, fds, ends, readers);
    unsigned long bytes = 0;
    uint64_t naps_verified = 0; /* naps followed by a whole round */
    for (int round = 0; round < NAP_ROUNDS_MAX && naps_verified < 3; round++) {
        rt_metrics m;
        cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
        uint64_t naps_before = m.reactor_naps;
        struct nap_holder h = {
            .rt = rt, .io_events = m.reactor_io_events + NAP_PIPES, .naps = naps_before + 1};
        rt_task *holder = NULL;
        cr_assert_eq(RT_SPAWN(rt, nap_holder_poll, NULL, &h, &holder), 0);
        for (int i = 0; i < NAP_PIPES; i++)
            cr_assert_eq(write(fds[i][1], "x", 1), 1);
        bytes += NAP_PIPES;
        void *value = NULL;
        cr_assert_eq(rt_task_wait(holder, WAIT_DEADLINE_NS, &value), 0);
        rt_metrics after;
        cr_assert_eq(rt_metrics_read(rt, &after, sizeof after), 0);
        cr_assert_null(value,
                       "round %d: the reactor neither collected the burst nor napped (events "
                       "%llu -> %llu, naps %llu -> %llu)",
                       round, (unsigned long long)m.reactor_io_events,
                       (unsigned long long)after.reactor_io_events, (unsigned long long)naps_before,
                       (unsigned long long)after.reactor_naps);
        /* After a nap, the rest of the burst is collected only once the
         * worker, out of work, ends the nap. */
        cr_assert(event_wait_for(&nap_reads, bytes), "round %d: %lu of %lu bytes read", round,
                  event_count(&nap_reads), bytes);
        /* A worker that takes the next holder without parking first is
         * busy, and the reactor rightly naps on: the round ends with the
         * worker parked, which must have ended any nap. */
        cr_assert(wait_all_workers_parked(rt), "round %d: the worker never parked", round);
        naps_verified = naps_before;
    }
    cr_assert_geq(naps_verified, 1, "the reactor never napped in %d rounds", NAP_ROUNDS_MAX);
    for (int i = 0; i < NAP_PIPES; i++) {
        cr_assert_eq(close(fds[i][1]), 0);
        void *value = (void *)1;
        cr_assert_eq(rt_task_wait(readers[i], WAIT_DEADLINE_NS, &value), 0);
        cr_assert_eq((intptr_t)value, 0, "reader %d: %ld", i, (long)(intptr_t)value);
        cr_assert_eq(rt_io_close(ends[i]), 0);
    }
    finish_runtime(rt, 0);
}

/* Keeps the only worker busy in polls of 100 us until `stop` is set: the
 * worker never parks meanwhile, so no nap is ended early. */
struct nap_spinner {
    rt_coro co;
    atomic_bool *stop;
};

static rt_poll nap_spinner_poll(void *state, rt_context *cx, void **out)
{
    struct nap_spinner *s = state;
    RT_CORO_BEGIN(&s->co);
    while (!atomic_load(s->stop)) {
        for (int64_t until = rt_now_ns() + 100000; rt_now_ns() < until;)
            ;
        RT_YIELD(&s->co, cx);
    }
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#define SHRINK_NAP_NS (100 * MS)
/* Naps before the rounds are timed, timed rounds, and rounds at most. */
#define SHRINK_NAPS 8
#define SHRINK_TIMED 20
#define SHRINK_ROUNDS_MAX 400

/* A nap that runs to its end halves the next one (reactor.c, "Naps"). Beside
 * a task that keeps the only worker busy, so that no nap ends early, naps of
 * 100 ms shrink to a few tens of microseconds within a dozen, and bursts of
 * bytes stop waiting for them. Were every nap as long as
 * rt_config.reactor_nap_ns, each round that napped would take 100 ms. The
 * check is on the median of 20 such rounds, so that a few rounds stalled by
 * a loaded machine (this suite runs beside others) do not fail it. */
Test(io, naps_that_run_to_their_end_shrink_beside_a_worker_that_never_parks)
{
    rt_runtime *rt = new_napping_runtime(SHRINK_NAP_NS);
    int fds[NAP_PIPES][2];
    rt_io *ends[NAP_PIPES];
    rt_task *readers[NAP_PIPES];
    start_nap_readers(rt, fds, ends, readers);
    static atomic_bool stop;
    atomic_store(&stop, false);
    struct nap_spinner sp = {.stop = &stop};
    rt_task *spinner = NULL;
    cr_assert_eq(RT_SPAWN(rt, nap_spinner_poll, NULL, &sp, &spinner), 0);
    rt_metrics before;
    cr_assert_eq(rt_metrics_read(rt, &before, sizeof before), 0);
    unsigned long bytes = event_count(&nap_reads);
    /* Bursts until the reactor has napped SHRINK_NAPS times (halving each
     * time a nap ran to its end: 100 ms down to under 1 ms), then until
     * SHRINK_TIMED rounds that included a nap have been timed. A round
     * without a nap proves nothing (a loaded machine may deliver a burst one
     * event per turn) and is not timed. */
    int64_t timed[SHRINK_TIMED];
    int ntimed = 0;
    for (int round = 0; round < SHRINK_ROUNDS_MAX && ntimed < SHRINK_TIMED; round++) {
        rt_metrics m;
        cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
        int64_t start = rt_now_ns();
        for (int i = 0; i < NAP_PIPES; i++)
            cr_assert_eq(write(fds[i][1], "x", 1), 1);
        bytes += NAP_PIPES;
        cr_assert(event_wait_for(&nap_reads, bytes), "round %d: %lu of %lu bytes read", round,
                  event_count(&nap_reads), bytes);
        int64_t took = rt_now_ns() - start;
        rt_metrics after;
        cr_assert_eq(rt_metrics_read(rt, &after, sizeof after), 0);
        if (m.reactor_naps - before.reactor_naps >= SHRINK_NAPS &&
            after.reactor_naps > m.reactor_naps)
            timed[ntimed++] = took;
    }
    atomic_store(&stop, true);
    cr_assert_eq(rt_task_wait(spinner, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(ntimed, SHRINK_TIMED, "only %d rounds of %d napped after the first %d naps",
                 ntimed, SHRINK_ROUNDS_MAX, SHRINK_NAPS);
    qsort(timed, SHRINK_TIMED, sizeof timed[0], compare_i64);
    int64_t median = timed[SHRINK_TIMED / 2];
    cr_assert_lt(median, SHRINK_NAP_NS / 2, "rounds with a nap took %lld us at the median",
                 (long long)(median / 1000));
    for (int i = 0; i < NAP_PIPES; i++) {
        cr_assert_eq(close(fds[i][1]), 0);
        cr_assert_eq(rt_task_wait(readers[i], WAIT_DEADLINE_NS, NULL), 0);
        cr_assert_eq(rt_io_close(ends[i]), 0);
    }
    finish_runtime(rt, 0);
}

/* With naps off, a busy worker never makes the reactor nap. */
Test(io, a_reactor_nap_of_zero_turns_naps_off)
{
    rt_runtime *rt = new_napping_runtime(0);
    int fds[NAP_PIPES][2];
    rt_io *ends[NAP_PIPES];
    for (int i = 0; i < NAP_PIPES; i++) {
        make_pipe(fds[i]);
        cr_assert_eq(rt_io_open(rt, fds[i][0], &ends[i]), 0);
    }
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    struct nap_holder h = {.rt = rt, .io_events = m.reactor_io_events + NAP_PIPES, .naps = 1};
    rt_task *holder = NULL;
    cr_assert_eq(RT_SPAWN(rt, nap_holder_poll, NULL, &h, &holder), 0);
    for (int i = 0; i < NAP_PIPES; i++)
        cr_assert_eq(write(fds[i][1], "x", 1), 1);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(holder, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_null(value, "the reactor did not collect the burst");
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.reactor_naps, 0);
    cr_assert_geq(m.reactor_io_events, NAP_PIPES);
    for (int i = 0; i < NAP_PIPES; i++) {
        cr_assert_eq(rt_io_close(ends[i]), 0);
        cr_assert_eq(close(fds[i][1]), 0);
    }
    finish_runtime(rt, 0);
}

/* ---- writing to a pipe nobody reads ------------------------------------------------- */

struct epipe_writer {
    rt_coro co;
    rt_io *io;
    ssize_t result;
};

static rt_poll epipe_writer_poll(void *state, rt_context *cx, void **out)
{
    struct epipe_writer *s = state;
    RT_CORO_BEGIN(&s->co);
    RT_AWAIT(&s->co, rt_io_write(s->io, cx, "zz", 2, &s->result));
    RT_RETURN(&s->co, out, (intptr_t)s->result);
    RT_CORO_END(&s->co, out);
}

Test(io, write_to_a_pipe_whose_reader_is_gone_is_epipe_and_raises_no_sigpipe)
{
    /* SIGPIPE keeps its default action: a raised SIGPIPE kills this test. */
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    make_pipe(fds);
    rt_io *w = NULL;
    cr_assert_eq(rt_io_open(rt, fds[1], &w), 0);
    close(fds[0]);
    struct epipe_writer s = {{0}, w, 0};
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, epipe_writer_poll, NULL, &s, sizeof s, &value), 0);
    cr_assert_eq((intptr_t)value, -EPIPE, "write returned %ld", (long)(intptr_t)value);
    cr_assert_eq(rt_io_close(w), 0);
    finish_runtime(rt, 0);
}

/* ---- rt_io_open --------------------------------------------------------------------- */

Test(io, open_of_a_closed_or_invalid_descriptor_is_ebadf_and_leaves_nothing_behind)
{
    rt_runtime *rt = new_runtime(1);
    int before = count_fds();
    rt_io *io = (rt_io *)(uintptr_t)0x1;
    cr_assert_eq(rt_io_open(rt, -1, &io), -EBADF);
    int fds[2];
    make_pipe(fds);
    close(fds[0]);
    close(fds[1]);
    cr_assert_eq(rt_io_open(rt, fds[0], &io), -EBADF, "an fd just closed");
    cr_assert_eq(rt_io_open(rt, 1 << 30, &io), -EBADF, "an fd above any limit");
    cr_assert_eq(count_fds(), before, "a failed rt_io_open left a descriptor open");
    finish_runtime(rt, 0);
}

Test(io, open_of_a_regular_file_or_directory_is_eperm_and_the_caller_keeps_the_fd)
{
    rt_runtime *rt = new_runtime(1);
    char path[] = "/tmp/asyncrt-io-test-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    int before = count_fds();
    rt_io *io = NULL;
    cr_assert_eq(rt_io_open(rt, fd, &io), -EPERM);
    cr_assert(fd_is_open(fd), "rt_io_open closed a descriptor it did not take");
    cr_assert_eq(count_fds(), before);
    close(fd);

    int dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(dir, 0);
    cr_assert_eq(rt_io_open(rt, dir, &io), -EPERM, "a directory");
    cr_assert(fd_is_open(dir));
    close(dir);
    finish_runtime(rt, 0);
}

Test(io, open_rejects_null_arguments_and_a_shut_down_runtime_leaving_the_fd_to_the_caller)
{
    rt_runtime *rt = new_runtime(1);
    int fds[2];
    make_pipe(fds);
    rt_io *io = NULL;
    cr_assert_eq(rt_io_open(NULL, fds[0], &io), -EINVAL, "NULL runtime outside a task");
    cr_assert(fd_is_open(fds[0]));
    cr_assert_eq(rt_io_open(rt, fds[0], NULL), -EINVAL, "NULL out");
    cr_assert(fd_is_open(fds[0]));
    cr_assert_eq(rt_runtime_shutdown(rt), 0);
    cr_assert_eq(rt_io_open(rt, fds[0], &io), -ESHUTDOWN);
    cr_assert(fd_is_open(fds[0]));
    cr_assert_eq(rt_io_close(NULL), 0, "rt_io_close(NULL)");
    cr_assert_eq(rt_runtime_free(rt), 0);
    cr_assert(fd_is_open(fds[0]), "rt_runtime_free closed a descriptor it never owned");
    close(fds[0]);
    close(fds[1]);
}

Test(io, open_makes_a_blocking_descriptor_non_blocking_and_close_on_exec)
{
    rt_runtime *rt = new_runtime(1);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    rt_io *io = NULL;
    cr_assert_eq(rt_io_open(rt, fds[0], &io), 0);
    cr_assert_eq(rt_io_fd(io), fds[0]);
    int fl = fcntl(fds[0], F_GETFL);
    int fdfl = fcntl(fds[0], F_GETFD);
    cr_assert(fl >= 0 && (fl & O_NONBLOCK), "O_NONBLOCK not set");
    cr_assert(fdfl >= 0 && (fdfl & FD_CLOEXEC), "FD_CLOEXEC not set");
    cr_assert_eq(rt_io_close(io), 0);
    cr_assert(!fd_is_open(fds[0]));
    close(fds[1]);
    finish_runtime(rt, 0);
}

struct opens_inside {
    rt_coro co;
    int fd;
    int rc;
    rt_io *io;
    ssize_t result;
    unsigned char buf[4];
};

static rt_poll opens_inside_poll(void *state, rt_context *cx, void **out)
{
    struct opens_inside *s = state;
    RT_CORO_BEGIN(&s->co);
    s->rc = rt_io_open(NULL, s->fd, &s->io); /* NULL: rt_current() */
    if (s->rc != 0)
        RT_RETURN(&s->co, out, (intptr_t)s->rc);
    RT_AWAIT(&s->co, rt_io_read(s->io, cx, s->buf, sizeof s->buf, &s->result));
    s->rc = rt_io_close(s->io);
    if (s->rc != 0)
        RT_RETURN(&s->co, out, (intptr_t)s->rc);
    RT_RETURN(&s->co, out, (intptr_t)s->result);
    RT_CORO_END(&s->co, out);
}

Test(io, open_with_a_null_runtime_inside_a_task_uses_the_current_runtime)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    make_pipe(fds);
    cr_assert_eq(write(fds[1], "q", 1), 1);
    struct opens_inside s;
    memset(&s, 0, sizeof s);
    s.fd = fds[0];
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, opens_inside_poll, NULL, &s, sizeof s, &value), 0);
    cr_assert_eq((intptr_t)value, 1, "result %ld", (long)(intptr_t)value);
    cr_assert(!fd_is_open(fds[0]));
    close(fds[1]);
    finish_runtime(rt, 0);
}

/* ---- lost wake-ups ------------------------------------------------------------------ */

/* "An edge arriving between a read's EAGAIN and its waker registration still
 * wakes the task." Black-box, the window cannot be entered on purpose, so the
 * tests make it likely and make a lost edge fatal: a reader task takes single
 * bytes that a foreign writer sends one at a time, the writer sending the next
 * byte the moment it sees the previous one consumed (spinning, not sleeping),
 * which is exactly when the reader is between its EAGAIN and its waker
 * registration. Several such pairs run at once on more threads than there are
 * cores, so that threads are often preempted inside those windows. Nothing
 * else ever writes, so a missed edge is never rescued by a later one: the
 * pair stops, and the bounded wait turns that into a failure. */
#ifdef TEST_HAVE_TSAN
#define HANDOFFS 8000
#else
#define HANDOFFS 40000
#endif
/* How long one hand-off may take before it counts as a lost wake-up. */
#define HANDOFF_DEADLINE_NS (10LL * SEC)
#define MAX_PAIRS 8

struct handoff_pair {
    int write_fd;
    bool eventfd;
    long n;
    size_t chunk; /* bytes the reader asks for per read (at most READ_CHUNK_MAX) */
    long burst;   /* bytes the writer sends before it waits (1: strict hand-off) */
    rt_io *r;
    rt_task *task;
    pthread_t thread;
    atomic_long consumed; /* bytes the reader task has taken and checked */
    long lost_at;         /* -1, or the hand-off that was never consumed */
    bool reader_stopped;  /* the writer saw the reader task finish early */
    int error;
};

#define READ_CHUNK_MAX 16

struct byte_reader {
    rt_coro co;
    struct handoff_pair *pair;
    long i;
    ssize_t result;
    uint64_t value;
    size_t want; /* this read's length (kept across its polls) */
    unsigned char bytes[READ_CHUNK_MAX];
};

/* Reads n bytes, `chunk` at most per read (or n eventfd counts of 1),
 * checking each, and publishes the count after each read. */
static rt_poll byte_reader_poll(void *state, rt_context *cx, void **out)
{
    struct byte_reader *s = state;
    RT_CORO_BEGIN(&s->co);
    for (s->i = 0; s->i < s->pair->n;) {
        if (s->pair->eventfd) {
            RT_AWAIT(&s->co, rt_io_read(s->pair->r, cx, &s->value, sizeof s->value, &s->result));
            if (s->result != 8 || s->value != 1)
                RT_RETURN(&s->co, out, (intptr_t)(s->result < 0 ? s->result : -EILSEQ));
            s->i++;
        } else {
            s->want = s->pair->chunk;
            if ((long)s->want > s->pair->n - s->i)
                s->want = (size_t)(s->pair->n - s->i);
            RT_AWAIT(&s->co, rt_io_read(s->pair->r, cx, s->bytes, s->want, &s->result));
            if (s->result <= 0)
                RT_RETURN(&s->co, out, (intptr_t)(s->result < 0 ? s->result : -EILSEQ));
            for (ssize_t k = 0; k < s->result; k++)
                if (s->bytes[k] != pattern((size_t)(s->i + k)))
                    RT_RETURN(&s->co, out, (intptr_t)-EILSEQ);
            s->i += s->result;
        }
        atomic_store_explicit(&s->pair->consumed, s->i, memory_order_release);
    }
    RT_RETURN(&s->co, out, (intptr_t)s->pair->n);
    RT_CORO_END(&s->co, out);
}

static int64_t now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

/* Writes one byte, waits (spinning, yielding the CPU) until the reader task
 * consumed it, writes the next. With bursts of b bytes, writes b bytes with a
 * yield between them and only then waits until all are consumed: a later
 * byte of the burst may land while the reader is between its read of an
 * earlier one and what it does after, and nothing would rescue its edge. */
static void *handoff_writer_main(void *arg)
{
    struct handoff_pair *h = arg;
    for (long i = 0; i < h->n; i++) {
        ssize_t rc;
        if (h->eventfd) {
            uint64_t one = 1;
            rc = write(h->write_fd, &one, sizeof one);
        } else {
            unsigned char b = pattern((size_t)i);
            rc = write(h->write_fd, &b, 1);
        }
        if (rc <= 0) {
            h->error = errno;
            h->lost_at = i;
            return NULL;
        }
        int64_t give_up = 0;
        if ((i + 1) % h->burst != 0 && i + 1 < h->n) {
            sched_yield();
            continue;
        }
        for (unsigned spins = 0; atomic_load_explicit(&h->consumed, memory_order_acquire) < i + 1;
             spins++) {
            if (spins % 256 == 255) {
                int64_t now = now_mono();
                if (give_up == 0) {
                    give_up = now + HANDOFF_DEADLINE_NS;
                } else if (now > give_up) {
                    h->lost_at = i;
                    return NULL;
                }
                if (rt_task_is_finished(h->task)) { /* the reader gave up */
                    h->reader_stopped = true;
                    h->lost_at = i;
                    return NULL;
                }
            }
            sched_yield();
        }
    }
    return NULL;
}

/* What carries a pair's bytes. */
enum handoff_via { VIA_PIPE, VIA_EVENTFD, VIA_TCP };

static void run_handoffs(unsigned workers, enum handoff_via via, int npairs, long per_pair,
                         size_t chunk, long burst)
{
    bool use_eventfd = via == VIA_EVENTFD;
    rt_runtime *rt = new_runtime(workers);
    static struct handoff_pair pairs[MAX_PAIRS];
    int read_fds[MAX_PAIRS];
    cr_assert_leq(npairs, MAX_PAIRS);
    for (int p = 0; p < npairs; p++) {
        struct handoff_pair *h = &pairs[p];
        memset(h, 0, sizeof *h);
        h->eventfd = use_eventfd;
        h->n = per_pair;
        cr_assert(chunk >= 1 && chunk <= READ_CHUNK_MAX && burst >= 1);
        h->chunk = chunk;
        h->burst = burst;
        h->lost_at = -1;
        atomic_init(&h->consumed, 0);
        if (use_eventfd) {
            int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
            cr_assert_geq(efd, 0);
            read_fds[p] = efd;
            h->write_fd = efd;
        } else {
            int fds[2];
            if (via == VIA_PIPE)
                make_pipe(fds);
            else
                tcp_pair(fds);
            read_fds[p] = fds[0];
            h->write_fd = fds[1];
        }
        cr_assert_eq(rt_io_open(rt, read_fds[p], &h->r), 0);
        struct byte_reader s;
        memset(&s, 0, sizeof s);
        s.pair = h;
        cr_assert_eq(RT_SPAWN(rt, byte_reader_poll, NULL, &s, &h->task), 0);
    }
    for (int p = 0; p < npairs; p++)
        cr_assert_eq(pthread_create(&pairs[p].thread, NULL, handoff_writer_main, &pairs[p]), 0);
    for (int p = 0; p < npairs; p++)
        pthread_join(pairs[p].thread, NULL);

    long lost_pair = -1;
    for (int p = 0; p < npairs; p++)
        if (pairs[p].lost_at >= 0 && lost_pair < 0)
            lost_pair = p;
    for (int p = 0; p < npairs; p++) {
        struct handoff_pair *h = &pairs[p];
        if (h->lost_at >= 0)
            rt_task_abort(h->task);
        void *value = NULL;
        int rc = rt_task_wait(h->task, WAIT_DEADLINE_NS, &value);
        if (lost_pair < 0) {
            cr_assert_eq(rc, 0);
            cr_assert_eq((intptr_t)value, per_pair, "pair %d: reader result %ld (%s)", p,
                         (long)(intptr_t)value,
                         (intptr_t)value < 0 ? rt_strerror((int)(intptr_t)value) : "short");
        }
        cr_assert_eq(rt_io_close(h->r), 0);
        if (!use_eventfd)
            close(h->write_fd);
    }
    finish_runtime(rt, 0);
    if (lost_pair >= 0) {
        struct handoff_pair *h = &pairs[lost_pair];
        cr_assert_fail("pair %ld: hand-off %ld of %ld was not consumed within %lld s (%s)",
                       lost_pair, h->lost_at, per_pair, HANDOFF_DEADLINE_NS / SEC,
                       h->error            ? strerror(h->error)
                       : h->reader_stopped ? "the reader task stopped early"
                                           : "a lost wake-up: the reader was never woken");
    }
}

Test(io, single_byte_handoffs_from_a_foreign_writer_never_lose_a_wakeup)
{
    run_handoffs(2, VIA_PIPE, 1, HANDOFFS / 2, 1, 1);
}

Test(io, single_byte_handoffs_on_one_worker_never_lose_a_wakeup)
{
    run_handoffs(1, VIA_PIPE, 1, HANDOFFS / 4, 1, 1);
}

Test(io, four_concurrent_handoff_pairs_on_four_workers_never_lose_a_wakeup)
{
    run_handoffs(4, VIA_PIPE, 4, HANDOFFS / 4, 1, 1);
}

Test(io, eventfd_handoffs_from_foreign_writers_never_lose_a_wakeup)
{
    run_handoffs(3, VIA_EVENTFD, 3, HANDOFFS / 8, 1, 1);
}

/* Short reads: on TCP the reader asks for 8 bytes and gets the one or two
 * in flight, which empties the socket, so rt_io_read forgets the
 * readiness without waiting for EAGAIN (io_internal.h, "Short transfers").
 * The writer sends bytes in pairs, so the second of a pair often lands
 * between the reader's read(2) of the first and that forgetting: only the
 * tick check keeps its edge, and the writer waits for both. */
Test(io, short_reads_of_tcp_racing_a_foreign_writer_never_lose_a_wakeup)
{
    run_handoffs(2, VIA_TCP, 2, HANDOFFS / 4, 8, 2);
}

/* A foreign writer in a tight loop of tiny writes; the reader must see all. */
#ifdef TEST_HAVE_TSAN
#define TIGHT_TOTAL 50000u
#else
#define TIGHT_TOTAL 200000u
#endif

struct tight_writer {
    int fd;
    int error;
};

static void *tight_writer_main(void *arg)
{
    struct tight_writer *t = arg;
    size_t off = 0;
    unsigned char buf[3];
    while (off < TIGHT_TOTAL) {
        size_t n = 1 + off % 3; /* 1, 2 or 3 bytes */
        if (n > TIGHT_TOTAL - off)
            n = TIGHT_TOTAL - off;
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern(off + i);
        ssize_t rc = write(t->fd, buf, n);
        if (rc > 0) {
            off += (size_t)rc;
        } else if (rc < 0 && errno == EAGAIN) {
            struct pollfd p = {t->fd, POLLOUT, 0};
            if (poll(&p, 1, 10000) == 0) {
                t->error = ETIMEDOUT; /* the reader stopped reading */
                break;
            }
        } else if (!(rc < 0 && errno == EINTR)) {
            t->error = errno;
            break;
        }
    }
    close(t->fd); /* end of stream */
    return NULL;
}

Test(io, tight_loop_of_tiny_foreign_writes_reaches_the_reader_whole)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    make_pipe(fds);
    rt_io *r = NULL;
    cr_assert_eq(rt_io_open(rt, fds[0], &r), 0);
    struct checking_reader *cr = calloc(1, sizeof *cr);
    cr_assert_not_null(cr);
    cr->io = r;
    cr->expected = SIZE_MAX;
    cr->chunk = 5;
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, checking_reader_poll, NULL, cr, sizeof *cr, &task), 0);
    free(cr);
    struct tight_writer t = {fds[1], 0};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, tight_writer_main, &t), 0);
    pthread_join(thread, NULL);
    cr_assert_eq(t.error, 0, "writer: %s", strerror(t.error));
    void *value = NULL;
    int rc = rt_task_wait(task, WAIT_DEADLINE_NS, &value);
    if (rc == -ETIMEDOUT) {
        rt_task_abort(task);
        (void)rt_task_wait(task, WAIT_DEADLINE_NS, NULL);
        finish_runtime(rt, -1);
        cr_assert_fail("the reader never reached the end of stream: a lost wake-up");
    }
    cr_assert_eq(rc, 0);
    cr_assert_eq((intptr_t)value, (intptr_t)TIGHT_TOTAL, "reader result %ld",
                 (long)(intptr_t)value);
    cr_assert_eq(rt_io_close(r), 0);
    finish_runtime(rt, 0);
}

/* Many pipes, one reader task each, one foreign writer in scrambled order. */
#define MANY_PIPES 200

Test(io, two_hundred_pipes_each_wake_their_own_reader)
{
    rt_runtime *rt = new_runtime(2);
    int before = count_fds();
    static int fds[MANY_PIPES][2];
    static rt_io *readers[MANY_PIPES];
    static rt_task *tasks[MANY_PIPES];
    static unsigned char bufs[MANY_PIPES][8];
    unsigned long seen = event_count(&reader_pending);
    for (int i = 0; i < MANY_PIPES; i++) {
        make_pipe(fds[i]);
        cr_assert_eq(rt_io_open(rt, fds[i][0], &readers[i]), 0);
        struct one_read st = {{0}, readers[i], sizeof bufs[i], 0, bufs[i]};
        cr_assert_eq(RT_SPAWN(rt, one_read_poll, NULL, &st, &tasks[i]), 0);
    }
    cr_assert(event_wait_for(&reader_pending, seen + MANY_PIPES), "not every reader waited");
    for (int k = 0; k < MANY_PIPES; k++) {
        int i = (k * 7) % MANY_PIPES;
        unsigned char b = (unsigned char)i;
        cr_assert_eq(write(fds[i][1], &b, 1), 1);
    }
    for (int i = 0; i < MANY_PIPES; i++) {
        void *value = NULL;
        cr_assert_eq(rt_task_wait(tasks[i], WAIT_DEADLINE_NS, &value), 0, "reader %d", i);
        cr_assert_eq((intptr_t)value, 1);
        cr_assert_eq(bufs[i][0], (unsigned char)i);
        cr_assert_eq(rt_io_close(readers[i]), 0);
        close(fds[i][1]);
    }
    cr_assert_eq(count_fds(), before);
    finish_runtime(rt, 0);
}

/* ---- abort safety ---------------------------------------------------------------------- */

Test(io, aborting_a_waiting_reader_loses_no_bytes_and_the_next_reader_is_woken)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    rt_io *r, *w;
    open_pipe(rt, &r, &w, fds);
    unsigned char first_buf[8] = {0};
    struct one_read first = {{0}, r, sizeof first_buf, 0, first_buf};
    rt_task *t1 = NULL;
    cr_assert_eq(RT_SPAWN(rt, one_read_poll, NULL, &first, &t1), 0);
    cr_assert(event_wait_for(&reader_pending, 1));
    rt_task_abort(t1);
    cr_assert_eq(rt_task_wait(t1, WAIT_DEADLINE_NS, NULL), -ECANCELED);

    unsigned char second_buf[8] = {0};
    struct one_read second = {{0}, r, sizeof second_buf, 0, second_buf};
    rt_task *t2 = NULL;
    cr_assert_eq(RT_SPAWN(rt, one_read_poll, NULL, &second, &t2), 0);
    cr_assert(event_wait_for(&reader_pending, 2));
    cr_assert_eq(write(fds[1], "xyz", 3), 3);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(t2, WAIT_DEADLINE_NS, &value), 0, "the second reader never woke");
    cr_assert_eq((intptr_t)value, 3, "the second reader got %ld bytes", (long)(intptr_t)value);
    cr_assert_eq(memcmp(second_buf, "xyz", 3), 0);
    cr_assert_eq(first_buf[0], 0, "the aborted reader consumed bytes");
    cr_assert_eq(rt_io_close(r), 0);
    cr_assert_eq(rt_io_close(w), 0);
    finish_runtime(rt, 0);
}

/* rt_io_close wakes the tasks waiting on it. The task and the test share a
 * mutex so that the task never touches the rt_io after the test closed it. */
static pthread_mutex_t close_mu = PTHREAD_MUTEX_INITIALIZER;
static bool close_done;
static struct event close_waiter_pending = EVENT_INIT;

struct close_waiter {
    rt_io *io;
    unsigned polls;
};

static rt_poll close_waiter_poll(void *state, rt_context *cx, void **out)
{
    struct close_waiter *s = state;
    pthread_mutex_lock(&close_mu);
    s->polls++;
    if (close_done) {
        pthread_mutex_unlock(&close_mu);
        *out = (void *)(uintptr_t)s->polls;
        return RT_READY;
    }
    unsigned char byte;
    ssize_t result = 0;
    rt_poll p = rt_io_read(s->io, cx, &byte, 1, &result);
    pthread_mutex_unlock(&close_mu);
    if (p == RT_PENDING) {
        event_signal(&close_waiter_pending);
        return RT_PENDING;
    }
    *out = (void *)(uintptr_t)0xBAD; /* nothing was written: the read must wait */
    return RT_READY;
}

Test(io, close_wakes_a_task_waiting_on_the_descriptor)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    make_pipe(fds);
    rt_io *r = NULL;
    cr_assert_eq(rt_io_open(rt, fds[0], &r), 0);
    struct close_waiter s = {r, 0};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, close_waiter_poll, NULL, &s, &task), 0);
    cr_assert(event_wait_for(&close_waiter_pending, 1));
    pthread_mutex_lock(&close_mu);
    close_done = true;
    cr_assert_eq(rt_io_close(r), 0);
    pthread_mutex_unlock(&close_mu);
    void *value = NULL;
    int rc = rt_task_wait(task, 5 * SEC, &value);
    if (rc == -ETIMEDOUT) {
        rt_task_abort(task);
        (void)rt_task_wait(task, WAIT_DEADLINE_NS, NULL);
        close(fds[1]);
        finish_runtime(rt, -1);
        cr_assert_fail("rt_io_close did not wake the task waiting on it");
    }
    cr_assert_eq(rc, 0);
    cr_assert_neq((uintptr_t)value, 0xBAD, "the read on an empty pipe did not wait");
    close(fds[1]);
    finish_runtime(rt, 0);
}

/* ---- shutdown with descriptors still open ---------------------------------------------- */

static struct event stuck_pending = EVENT_INIT;
static atomic_int stuck_drops;

struct stuck_reader {
    rt_coro co;
    rt_io *io;
    ssize_t result;
    unsigned char buf[8];
};

static rt_poll stuck_reader_poll(void *state, rt_context *cx, void **out)
{
    struct stuck_reader *s = state;
    RT_CORO_BEGIN(&s->co);
    RT_AWAIT(&s->co, note_pending(rt_io_read(s->io, cx, s->buf, sizeof s->buf, &s->result),
                                  &stuck_pending));
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

static void stuck_reader_drop(void *state)
{
    (void)state; /* the rt_io stays open: the runtime closes it */
    atomic_fetch_add(&stuck_drops, 1);
}

Test(io, runtime_free_closes_its_own_descriptors_and_every_rt_io_still_open)
{
    int before = count_fds();
    rt_runtime *rt = new_runtime(2);
    int fds[3][2];
    rt_io *ios[8];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        make_pipe(fds[i]);
        cr_assert_eq(rt_io_open(rt, fds[i][0], &ios[n++]), 0);
        cr_assert_eq(rt_io_open(rt, fds[i][1], &ios[n++]), 0);
    }
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    cr_assert_geq(efd, 0);
    cr_assert_eq(rt_io_open(rt, efd, &ios[n++]), 0);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(rt_io_open(rt, sv[0], &ios[n++]), 0);
    close(sv[1]);
    /* Two tasks wait on descriptors the test never closes. */
    struct stuck_reader a = {{0}, ios[0], 0, {0}};
    struct stuck_reader b = {{0}, ios[6], 0, {0}};
    cr_assert_eq(RT_SPAWN(rt, stuck_reader_poll, stuck_reader_drop, &a, NULL), 0);
    cr_assert_eq(RT_SPAWN(rt, stuck_reader_poll, stuck_reader_drop, &b, NULL), 0);
    cr_assert(event_wait_for(&stuck_pending, 2));
    cr_assert_gt(count_fds(), before + 8);
    finish_runtime(rt, 2);
    cr_assert_eq(atomic_load(&stuck_drops), 2);
    for (int i = 0; i < 3; i++)
        cr_assert(!fd_is_open(fds[i][0]) && !fd_is_open(fds[i][1]),
                  "pipe %d was left open by rt_runtime_free", i);
    int after = count_fds();
    cr_assert_eq(after, before, "%d descriptors before the runtime, %d after rt_runtime_free",
                 before, after);
}

struct uses_pipe {
    rt_coro co;
    rt_io *r, *w;
    ssize_t result;
    unsigned char buf[4];
};

static rt_poll uses_pipe_poll(void *state, rt_context *cx, void **out)
{
    struct uses_pipe *s = state;
    RT_CORO_BEGIN(&s->co);
    RT_AWAIT(&s->co, rt_io_write(s->w, cx, "ok", 2, &s->result));
    RT_AWAIT(&s->co, rt_io_read(s->r, cx, s->buf, sizeof s->buf, &s->result));
    RT_RETURN(&s->co, out, (intptr_t)s->result);
    RT_CORO_END(&s->co, out);
}

Test(io, runtimes_that_did_io_or_none_leave_no_descriptor_behind)
{
    int before = count_fds();
    for (int round = 0; round < 3; round++) {
        rt_runtime *rt = new_runtime(2);
        finish_runtime(rt, 0);
        cr_assert_eq(count_fds(), before, "an idle runtime left %d descriptors open",
                     count_fds() - before);

        rt = new_runtime(2);
        int fds[2];
        rt_io *r, *w;
        open_pipe(rt, &r, &w, fds);
        struct uses_pipe s = {{0}, r, w, 0, {0}};
        void *value = NULL;
        cr_assert_eq(rt_block_on(rt, uses_pipe_poll, NULL, &s, sizeof s, &value), 0);
        cr_assert_eq((intptr_t)value, 2);
        if (round == 0) {
            cr_assert_eq(rt_io_close(r), 0);
            cr_assert_eq(rt_io_close(w), 0);
        } /* later rounds leave both to rt_runtime_free */
        finish_runtime(rt, 0);
        cr_assert_eq(count_fds(), before, "round %d: %d descriptors left open", round,
                     count_fds() - before);
    }
}
