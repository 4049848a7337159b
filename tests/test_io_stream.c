/* Black-box tests of asyncrt/io.h moving data: short reads of datagrams,
 * seqpackets, packet pipes, Unix streams and TCP keep the rest readable (a
 * passed descriptor, a hang-up, urgent data), a writer filling a pipe gets
 * partial writes and then waits for a reader, and rt_io_write_all moves
 * 4 MiB through pipes and TCP with the reader checking every byte. */
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
    rt_io_ready ready;
    rt_io_read rd;
};

static rt_poll two_messages_poll(void *state, rt_context *cx, void **out)
{
    struct two_messages *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_io_readable_init(&s->ready, s->io);
    RT_AWAIT(&s->co, cx, &s->ready);
    for (s->i = 0; s->i < 2; s->i++) {
        rt_io_read_init(&s->rd, s->io, s->r->buf[s->i], sizeof s->r->buf[s->i]);
        RT_AWAIT(&s->co, cx, &s->rd);
        s->r->len[s->i] = (ssize_t)s->rd.result;
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
    cr_assert_eq(RT_SPAWN_STATE(rt, two_messages_poll, rt_coro_drop, &s, &task), 0);
    rc = task_wait_status(task, WAIT_DEADLINE_NS, NULL);
    if (rc == -ETIMEDOUT) {
        rt_task_cancel(task);
        task_wait_status(task, -1, NULL);
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
        /* A write holds nothing but the waker it leaves in the rt_io: a new
         * one on every poll is fine. */
        rt_io_write wr;
        rt_io_write_init(&wr, s->io, s->data + s->off, ask);
        if (RT_POLL_OP(&wr, cx) == RT_PENDING) {
            if (s->pendings++ == 0)
                event_signal(&writer_blocked);
            return RT_PENDING;
        }
        ssize_t result = (ssize_t)wr.result;
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

    struct partial_writer pw = {.io = w, .data = data};
    rt_task *writer = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, partial_writer_outer_poll, NULL, &pw, &writer), 0);
    cr_assert(event_wait_for(&writer_blocked, 1), "the writer never blocked on a full pipe");
    cr_assert(!rt_task_is_finished(writer));

    struct checking_reader cr;
    memset(&cr, 0, sizeof cr);
    cr.io = r;
    cr.expected = PARTIAL_TOTAL;
    cr.chunk = 777;
    rt_task *reader = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, checking_reader_poll, NULL, &cr, &reader), 0);

    void *value = NULL;
    cr_assert_eq(task_wait_status(writer, WAIT_DEADLINE_NS, NULL), 0, "the writer never finished");
    cr_assert_eq(task_wait_status(reader, WAIT_DEADLINE_NS, &value), 0,
                 "the reader never finished");
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
    int close_rc;
    rt_io_write_all wa; /* keeps its progress: it lives in the state */
};

/* Writes everything with rt_io_write_all, then closes the write end so the
 * reader sees end of stream. Result: the write_all result. */
static rt_poll all_writer_poll(void *state, rt_context *cx, void **out)
{
    struct all_writer *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_io_write_all_init(&s->wa, s->io, s->data, s->len);
    RT_AWAIT(&s->co, cx, &s->wa);
    if (s->wa.result == (int64_t)s->len && s->wa.progress != s->len)
        RT_RETURN(&s->co, out, (intptr_t)-ERANGE);
    s->close_rc = rt_io_close(s->io);
    s->io = NULL;
    if (s->close_rc != 0)
        RT_RETURN(&s->co, out, (intptr_t)s->close_rc);
    RT_RETURN(&s->co, out, (intptr_t)s->wa.result);
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
    cr_assert_eq(rt_spawn(rt, checking_reader_poll, rt_coro_drop, cr, sizeof *cr, &reader), 0);
    free(cr);

    struct all_writer aw = {.io = w, .data = data, .len = BIG_TOTAL};
    rt_task *writer = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, all_writer_poll, rt_coro_drop, &aw, &writer), 0);

    void *wv = NULL, *rv = NULL;
    cr_assert_eq(task_wait_status(writer, WAIT_DEADLINE_NS, &wv), 0, "the writer never finished");
    cr_assert_eq(task_wait_status(reader, WAIT_DEADLINE_NS, &rv), 0, "the reader never finished");
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
