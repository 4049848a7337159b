/* Black-box tests of asyncrt/io.h's readiness over pipes, eventfds and
 * socket pairs: a reader on an empty pipe woken by a foreign thread's write,
 * readable only once data arrives and writable again only once drained, one
 * socket waited on in both directions by two tasks, an eventfd read waiting
 * for a foreign write, a read polled by hand waking a user waker, and a read
 * returning 0 once the write end is closed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_io.h"

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

TestSuite(io, .timeout = 110, .fini = fail_on_leaks);

/* ---- a reader woken by a foreign thread ---------------------------------- */

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
    struct one_read st = {.io = r, .len = sizeof buf, .buf = buf};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, one_read_poll, NULL, &st, &task), 0);
    cr_assert(event_wait_for(&reader_pending, 1), "the reader never waited");

    struct foreign_write f = {fds[1], "hello", 5, 0, 0};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, foreign_write_main, &f), 0);
    pthread_join(thread, NULL);
    cr_assert_eq(f.rc, 5, "write: %s", strerror(f.err));

    void *value = NULL;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &value), 0, "the reader was never woken");
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
    rt_io_ready op;
};

/* Finishes with the number of polls the wait took (0 when it failed). */
static rt_poll readiness_poll(void *state, rt_context *cx, void **out)
{
    struct readiness *s = state;
    RT_CORO_BEGIN(&s->co);
    if (s->want_write)
        rt_io_writable_init(&s->op, s->io);
    else
        rt_io_readable_init(&s->op, s->io);
    RT_AWAIT_POLL(&s->co, (s->polls++, note_pending(RT_POLL_OP(&s->op, cx), &readiness_pending)));
    event_signal(&readiness_pending);
    RT_RETURN(&s->co, out, (uintptr_t)(s->op.result == 0 ? s->polls : 0));
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
    cr_assert_eq(RT_SPAWN_STATE(rt, readiness_poll, NULL, st, task), 0);
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
    struct readiness rs = {.io = r, .want_write = false};
    rt_task *task = NULL;
    void *value = NULL;
    bool waited = readiness_waits(rt, &rs, &task);
    if (!waited) {
        (void)task_wait_status(task, WAIT_DEADLINE_NS, NULL);
        cr_assert_eq(rt_io_close(r), 0);
        cr_assert_eq(rt_io_close(w), 0);
        finish_runtime(rt, 0);
        cr_assert_fail("rt_io_readable was RT_READY on an empty pipe with its writer open");
    }
    cr_assert_eq(write(fds[1], "x", 1), 1);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &value), 0, "readable never woke");
    cr_assert_geq((uintptr_t)value, 2, "readable failed or did not wait");

    /* A pipe with data is readable at once. */
    rs.co.line = 0;
    rs.polls = 0;
    cr_assert_eq(block_on_status(rt, readiness_poll, NULL, &rs, sizeof rs, &value), 0);
    /* Ready at the first poll, or at the second after one wake (an
     * implementation may wait for the registration's first edge). */
    cr_assert_leq((uintptr_t)value, 2, "readable took %lu polls with a byte waiting",
                  (unsigned long)(uintptr_t)value);
    cr_assert_geq((uintptr_t)value, 1, "readable failed");
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
    struct readiness ws = {.io = w, .want_write = true};
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, readiness_poll, NULL, &ws, sizeof ws, &value), 0);
    cr_assert_leq((uintptr_t)value, 2, "writable took %lu polls on an empty pipe",
                  (unsigned long)(uintptr_t)value);
    cr_assert_geq((uintptr_t)value, 1, "writable failed");
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
        (void)task_wait_status(task, WAIT_DEADLINE_NS, NULL);
        cr_assert_eq(rt_io_close(r), 0);
        cr_assert_eq(rt_io_close(w), 0);
        finish_runtime(rt, 0);
        cr_assert_fail("rt_io_writable was RT_READY on a full pipe");
    }
    cr_assert_gt(drain_nonblocking(fds[0]), 0);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &value), 0, "writable never woke");
    cr_assert_geq((uintptr_t)value, 2, "writable failed or did not wait");

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
    rt_io_write wr;
    rt_io_read rd;
};

static rt_poll duplex_side_poll(void *state, rt_context *cx, void **out)
{
    struct duplex_side *s = state;
    RT_CORO_BEGIN(&s->co);
    if (s->writer) {
        rt_io_write_init(&s->wr, s->io, "W", 1);
        RT_AWAIT_POLL(&s->co, note_pending(RT_POLL_OP(&s->wr, cx), &duplex_pending));
        s->result = (ssize_t)s->wr.result;
    } else {
        rt_io_read_init(&s->rd, s->io, s->buf, sizeof s->buf);
        RT_AWAIT_POLL(&s->co, note_pending(RT_POLL_OP(&s->rd, cx), &duplex_pending));
        s->result = (ssize_t)s->rd.result;
    }
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
    struct duplex_side reader = {.io = io, .writer = false};
    struct duplex_side writer = {.io = io, .writer = true};
    rt_task *rtask = NULL, *wtask = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, duplex_side_poll, NULL, &reader, &rtask), 0);
    cr_assert_eq(RT_SPAWN_STATE(rt, duplex_side_poll, NULL, &writer, &wtask), 0);
    cr_assert(event_wait_for(&duplex_pending, 2), "both sides should wait");

    /* The peer sends: only the reader can finish. */
    cr_assert_eq(write(sv[1], "R", 1), 1);
    void *value = NULL;
    cr_assert_eq(task_wait_status(rtask, WAIT_DEADLINE_NS, &value), 0, "the reader was not woken");
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
    cr_assert_eq(task_wait_status(wtask, WAIT_DEADLINE_NS, &value), 0, "the writer was not woken");
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
    uint64_t value;
    uint64_t first, second;
    ssize_t results[3];
    rt_io_read rd;
    rt_io_write wr;
};

static rt_poll eventfd_user_poll(void *state, rt_context *cx, void **out)
{
    struct eventfd_user *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_io_read_init(&s->rd, s->io, &s->value, sizeof s->value);
    RT_AWAIT_POLL(&s->co, note_pending(RT_POLL_OP(&s->rd, cx), &eventfd_pending));
    s->results[0] = (ssize_t)s->rd.result;
    s->first = s->value;
    s->value = 5;
    rt_io_write_init(&s->wr, s->io, &s->value, sizeof s->value);
    RT_AWAIT(&s->co, cx, &s->wr);
    s->results[1] = (ssize_t)s->wr.result;
    s->value = 0;
    rt_io_read_init(&s->rd, s->io, &s->value, sizeof s->value);
    RT_AWAIT(&s->co, cx, &s->rd);
    s->results[2] = (ssize_t)s->rd.result;
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
    cr_assert_eq(RT_SPAWN_STATE(rt, eventfd_outer_poll, NULL, &s, &task), 0);
    cr_assert(event_wait_for(&eventfd_pending, 1), "the eventfd read did not wait");
    uint64_t seven = 7;
    cr_assert_eq(write(efd, &seven, sizeof seven), (ssize_t)sizeof seven);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), 0,
                 "the eventfd reader never woke");
    cr_assert_eq(eventfd_result.results[0], 8);
    cr_assert_eq(eventfd_result.first, 7);
    cr_assert_eq(eventfd_result.results[1], 8);
    cr_assert_eq(eventfd_result.results[2], 8);
    cr_assert_eq(eventfd_result.second, 5);
    cr_assert_eq(rt_io_close(io), 0);
    finish_runtime(rt, 0);
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
    rt_io_read rd;
    cr_assert_eq(rt_io_read_init(&rd, r, buf, sizeof buf), 0);
    cr_assert_eq(RT_POLL_OP(&rd, &cx), RT_PENDING);
    cr_assert_eq(write(fds[1], "ab", 2), 2);
    cr_assert(event_wait_for(&cw.woken, 1), "the reactor never woke the user waker");
    rt_poll p = RT_PENDING;
    for (int round = 0; round < 100 && p == RT_PENDING; round++) {
        unsigned long seen = event_count(&cw.woken);
        p = RT_POLL_OP(&rd, &cx);
        if (p == RT_PENDING)
            cr_assert(event_wait_for(&cw.woken, seen + 1));
    }
    cr_assert_eq(p, RT_READY);
    cr_assert_eq(rd.result, 2);
    cr_assert_eq(memcmp(buf, "ab", 2), 0);
    /* Finished: a later poll reads nothing more and reports the same. */
    cr_assert_eq(RT_POLL_OP(&rd, &cx), RT_READY);
    cr_assert_eq(rd.result, 2);
    cr_assert_eq(rt_io_close(r), 0);
    cr_assert_eq(rt_io_close(w), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&cw), 0, "%ld waker references never given back",
                 counting_outstanding(&cw));
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
    rt_io_read rd;
};

static rt_poll eos_reader_poll(void *state, rt_context *cx, void **out)
{
    struct eos_reader *s = state;
    RT_CORO_BEGIN(&s->co);
    for (;;) {
        rt_io_read_init(&s->rd, s->io, s->buf + s->got, sizeof s->buf - s->got);
        RT_AWAIT_POLL(&s->co, note_pending(RT_POLL_OP(&s->rd, cx), &eos_pending));
        s->result = (ssize_t)s->rd.result;
        if (s->result <= 0)
            break;
        s->got += (size_t)s->result;
    }
    if (s->result < 0)
        RT_RETURN(&s->co, out, (intptr_t)s->result);
    /* End of stream stays end of stream. */
    rt_io_read_init(&s->rd, s->io, s->buf, 1);
    RT_AWAIT(&s->co, cx, &s->rd);
    s->result = (ssize_t)s->rd.result;
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
    cr_assert_eq(RT_SPAWN_STATE(rt, eos_reader_poll, NULL, &s, &task), 0);
    cr_assert(event_wait_for(&eos_pending, 1));
    cr_assert_eq(write(fds[1], "abc", 3), 3);
    /* Closed from this (foreign) thread while the reader may be waiting. */
    cr_assert_eq(rt_io_close(w), 0);
    void *value = NULL;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &value), 0,
                 "the reader never saw the end");
    cr_assert_eq((intptr_t)value, 2, "reader result %ld", (long)(intptr_t)value);
    cr_assert_eq(rt_io_close(r), 0);
    finish_runtime(rt, 0);
}
