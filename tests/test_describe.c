/* What an operation waits for (rt_future_describe, diag.h): every kind of
 * library operation built for real (a runtime, pipes, sockets on 127.0.0.1
 * and Unix sockets, channels, locks, groups, files and lookups queued on the
 * blocking pool, signals, a child process), polled once by hand so that it
 * waits, described, and dropped; the combinators with their inner
 * operations in words, nested; and the operations the library does not
 * know (zeroed, finished, a user's vtable with or without describe). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support.h"

#include <asyncrt/diag.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

TestSuite(describe, .fini = fail_on_leaks);

/* ---- checks ------------------------------------------------------------------ */

/* Describes f into a struct filled with garbage first, so that a field the
 * describe forgot shows. */
static rt_wait_info describe(const rt_future *f)
{
    rt_wait_info info;
    memset(&info, 0x5a, sizeof info);
    cr_assert_eq(rt_future_describe(f, &info), 0);
    cr_assert_lt(strnlen(info.text, sizeof info.text), sizeof info.text, "text not terminated");
    return info;
}

static void expect_words(const rt_wait_info *info, const char *words)
{
    cr_assert_not_null(strstr(info->text, words), "\"%s\" does not say \"%s\"", info->text, words);
}

static void expect_no_words(const rt_wait_info *info, const char *words)
{
    cr_assert_null(strstr(info->text, words), "\"%s\" says \"%s\"", info->text, words);
}

/* The text says "fd N". */
static void expect_fd_words(const rt_wait_info *info, int fd)
{
    char words[32];
    snprintf(words, sizeof words, "fd %d", fd);
    expect_words(info, words);
}

/* The text says "%p" of object. */
static void expect_object_words(const rt_wait_info *info, const void *object)
{
    char words[32];
    snprintf(words, sizeof words, "%p", object);
    expect_words(info, words);
}

/* The fields a kind does not use are left empty. */
static void expect_fields(const rt_wait_info *info, rt_wait_kind kind, int fd, int64_t deadline_ns,
                          const void *object, int64_t number)
{
    cr_assert_eq(info->kind, kind, "kind %d, not %d (\"%s\")", (int)info->kind, (int)kind,
                 info->text);
    cr_assert_eq(info->fd, fd, "fd %d, not %d (\"%s\")", info->fd, fd, info->text);
    cr_assert_eq(info->deadline_ns, deadline_ns, "deadline %lld, not %lld (\"%s\")",
                 (long long)info->deadline_ns, (long long)deadline_ns, info->text);
    cr_assert_eq(info->object, object, "object %p, not %p (\"%s\")", info->object, object,
                 info->text);
    cr_assert_eq(info->task_id, 0);
    cr_assert_eq(info->number, number, "number %lld, not %lld (\"%s\")", (long long)info->number,
                 (long long)number, info->text);
}

/* The seconds written right after `words` ("sleep until +1.500 s"). */
static double seconds_after(const rt_wait_info *info, const char *words)
{
    const char *at = strstr(info->text, words);
    cr_assert_not_null(at, "\"%s\" does not say \"%s\"", info->text, words);
    double s;
    cr_assert_eq(sscanf(at + strlen(words), "%lf", &s), 1, "no seconds in \"%s\"", info->text);
    return s;
}

/* Polls op once by hand, expecting it to wait. */
static void poll_pending(rt_future *op, struct hand *h)
{
    cr_assert_eq(rt_future_poll(op, &h->cx), RT_PENDING, "finished with %lld",
                 (long long)op->result);
}

/* Polls op by hand until it finishes, waiting for its wake-ups. The event
 * is static: a waker stored in an object (a group's owner slot) may
 * outlive the call. */
static void poll_to_end(rt_future *op)
{
    static struct event woken = EVENT_INIT;
    rt_context cx = event_context(&woken);
    for (;;) {
        unsigned long seen = event_count(&woken);
        if (rt_future_poll(op, &cx) == RT_READY)
            return;
        cr_assert(event_wait_for(&woken, seen + 1), "the operation was never woken");
    }
}

/* ---- fixtures ------------------------------------------------------------------ */

/* A pipe whose read end is registered with rt (*reader), its write end a
 * plain descriptor of the test (*writer). */
static void pipe_to_read(rt_runtime *rt, rt_io **reader, int *writer)
{
    int fds[2];
    make_pipe(fds);
    cr_assert_eq(rt_io_open(rt, fds[0], reader), 0);
    *writer = fds[1];
}

/* A pipe whose write end, full, is registered with rt (*writer), its read
 * end a plain descriptor of the test (*reader). */
static void full_pipe_to_write(rt_runtime *rt, rt_io **writer, int *reader)
{
    int fds[2];
    make_pipe(fds);
    static char chunk[4096];
    while (write(fds[1], chunk, sizeof chunk) > 0)
        ;
    cr_assert_eq(errno, EAGAIN);
    cr_assert_eq(rt_io_open(rt, fds[1], writer), 0);
    *reader = fds[0];
}

/* Fills the send buffer of a non-blocking socket until it refuses more. */
static void fill_socket(int fd)
{
    static char chunk[4096];
    while (send(fd, chunk, sizeof chunk, MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
        ;
    cr_assert(errno == EAGAIN || errno == EWOULDBLOCK, "send: %s", strerror(errno));
}

/* A listener on 127.0.0.1 whose accept queue is full: the SYN of a new
 * connection is dropped, so a connect to it waits. */
struct full_listener {
    int fd;
    int fillers[4];
    struct sockaddr_in addr;
};

static void full_listener_open(struct full_listener *f)
{
    f->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(f->fd, 0);
    memset(&f->addr, 0, sizeof f->addr);
    f->addr.sin_family = AF_INET;
    f->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof f->addr;
    cr_assert_eq(bind(f->fd, (struct sockaddr *)&f->addr, len), 0);
    cr_assert_eq(listen(f->fd, 0), 0);
    cr_assert_eq(getsockname(f->fd, (struct sockaddr *)&f->addr, &len), 0);
    for (int i = 0; i < 4; i++) {
        f->fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        cr_assert_geq(f->fillers[i], 0);
        int rc = connect(f->fillers[i], (struct sockaddr *)&f->addr, sizeof f->addr);
        cr_assert(rc == 0 || errno == EINPROGRESS, "filler connect: %s", strerror(errno));
    }
}

static void full_listener_close(struct full_listener *f)
{
    for (int i = 0; i < 4; i++)
        close(f->fillers[i]);
    close(f->fd);
}

/* "127.0.0.1:port" of the listener. */
static void full_listener_words(const struct full_listener *f, char *out, size_t size)
{
    snprintf(out, size, "127.0.0.1:%u", (unsigned)ntohs(f->addr.sin_port));
}

/* A job that holds the blocking pool's only thread until the test lets it
 * go, so that the jobs of operations polled meanwhile stay queued. */
struct pool_gate {
    struct event entered;
    struct event open;
    rt_task *task;
};

static void *pool_gate_job(void *arg)
{
    struct pool_gate *g = arg;
    event_signal(&g->entered);
    cr_assert(event_wait_for(&g->open, 1));
    return NULL;
}

/* A runtime with one blocking-pool thread, held by gate. */
static rt_runtime *runtime_with_held_pool(struct pool_gate *g)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_threads = 1;
    rt_runtime *rt = new_runtime_config(&cfg);
    cr_assert_eq(rt_spawn_blocking(rt, pool_gate_job, g, &g->task), 0);
    cr_assert(event_wait_for(&g->entered, 1));
    return rt;
}

static void pool_gate_release(struct pool_gate *g)
{
    event_signal(&g->open);
    cr_assert_eq(rt_task_wait(g->task, WAIT_DEADLINE_NS, NULL), 0);
}

/* ---- operations the library does not know ------------------------------------------- */

/* A user's operation that never finishes and names itself in `words`. */
struct user_op {
    RT_FUTURE_HEADER;
    const char *words;
};

static rt_poll user_poll(rt_future *f, rt_context *cx)
{
    (void)f;
    (void)cx;
    return RT_PENDING;
}

static void user_describe(const rt_future *f, rt_wait_info *info)
{
    const struct user_op *op = (const struct user_op *)f;
    info->kind = RT_WAIT_OTHER;
    info->number = 42;
    snprintf(info->text, sizeof info->text, "%s", op->words);
}

static const rt_future_vtable plain_vtable = {user_poll, NULL, NULL};
static const rt_future_vtable worded_vtable = {user_poll, NULL, user_describe};

Test(describe, null_arguments_are_refused)
{
    rt_wait_info info;
    memset(&info, 0x5a, sizeof info);
    cr_assert_eq(rt_future_describe(NULL, &info), -EINVAL);
    cr_assert_eq(info.kind, RT_WAIT_NONE, "info is emptied even when f is NULL");
    cr_assert_eq(info.fd, -1);
    cr_assert_eq(info.text[0], '\0');
    struct user_op op = {.future = {&plain_vtable, 0}};
    cr_assert_eq(rt_future_describe(&op.future, NULL), -EINVAL);
    rt_wait_info_append(NULL, " | ", &op.future); /* nothing happens */
}

Test(describe, a_zeroed_operation_has_not_started)
{
    rt_sleep s;
    memset(&s, 0, sizeof s);
    rt_wait_info info = describe(&s.future);
    expect_fields(&info, RT_WAIT_NONE, -1, 0, NULL, 0);
    cr_assert_str_eq(info.text, "not started");
}

Test(describe, a_finished_operation_says_so_with_its_result)
{
    rt_chan_recv rx;
    cr_assert_eq(rt_chan_recv_init(&rx, NULL), -EINVAL); /* finished with -EINVAL */
    rt_wait_info info = describe(&rx.future);
    expect_fields(&info, RT_WAIT_NONE, -1, 0, NULL, 0);
    expect_words(&info, "finished");
    expect_words(&info, "-22");
}

Test(describe, a_user_operation_without_describe_is_named_by_its_poll_function)
{
    struct user_op op = {.future = {&plain_vtable, 0}};
    rt_wait_info info = describe(&op.future);
    expect_fields(&info, RT_WAIT_OTHER, -1, 0, NULL, 0);
    expect_words(&info, "polled by ");
}

Test(describe, a_user_describe_is_called_and_its_text_terminated)
{
    static char long_words[400];
    memset(long_words, 'x', sizeof long_words - 1);
    struct user_op op = {.future = {&worded_vtable, 0}, .words = "my own wait"};
    rt_wait_info info = describe(&op.future);
    expect_fields(&info, RT_WAIT_OTHER, -1, 0, NULL, 42);
    cr_assert_str_eq(info.text, "my own wait");
    op.words = long_words;
    info = describe(&op.future);
    cr_assert_eq(strlen(info.text), sizeof info.text - 1);
}

Test(describe, appending_to_a_full_text_cuts_it_and_keeps_it_terminated)
{
    static char long_words[120];
    memset(long_words, 'y', sizeof long_words - 1);
    static struct user_op ops[4];
    for (int i = 0; i < 4; i++)
        ops[i] = (struct user_op){.future = {&worded_vtable, 0}, .words = long_words};
    static rt_select sel;
    cr_assert_eq(rt_select_init(&sel, RT_FUTURES(&ops[0].future, &ops[1].future, &ops[2].future,
                                                 &ops[3].future)),
                 0);
    rt_wait_info info = describe(&sel.future);
    expect_fields(&info, RT_WAIT_SELECT, -1, 0, NULL, 0);
    cr_assert_eq(strlen(info.text), sizeof info.text - 1);
    cr_assert_str_eq(info.text + sizeof info.text - 4, "...", "a cut text ends in \"...\"");
    rt_wait_info_append(&info, " | ", &ops[0].future); /* full: nothing more, still terminated */
    cr_assert_eq(strlen(info.text), sizeof info.text - 1);
    RT_DROP(&sel);
}

Test(describe, a_combinator_that_contains_itself_is_described_to_a_bounded_depth)
{
    static rt_select sel;
    cr_assert_eq(rt_select_init(&sel, RT_FUTURES(&sel.future)), 0);
    rt_wait_info info = describe(&sel.future);
    expect_words(&info, "first of 1: first of 1: ");
    expect_words(&info, "...");
    rt_wait_info_append(&info, "", NULL);
    RT_DROP(&sel);
    cr_assert(rt_future_is_done(&sel.future));
}

/* ---- timers ------------------------------------------------------------------ */

Test(describe, a_sleep_says_how_long_is_left)
{
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    hand_init(&h);
    rt_sleep s;
    cr_assert_eq(rt_sleep_init(&s, rt, 100 * SEC), 0);
    poll_pending(&s.future, &h);
    rt_wait_info info = describe(&s.future);
    expect_fields(&info, RT_WAIT_SLEEP, -1, s.deadline_ns, NULL, 0);
    expect_words(&info, "sleep until +");
    double left = seconds_after(&info, "until ");
    cr_assert(left > 0 && left <= 100.0, "%f s left of 100 s", left);
    expect_no_words(&info, "due");
    RT_DROP(&s);

    /* Overdue (never polled, or a dump that comes late): negative. */
    cr_assert_eq(rt_sleep_until_init(&s, rt, rt_now_ns() - 2 * SEC), 0);
    info = describe(&s.future);
    expect_fields(&info, RT_WAIT_SLEEP, -1, s.deadline_ns, NULL, 0);
    expect_words(&info, "sleep until -");
    expect_words(&info, "(due)");
    left = seconds_after(&info, "until ");
    cr_assert(left <= -2.0, "%f s", left);
    RT_DROP(&s);
    finish_runtime(rt, 0);
}

Test(describe, an_interval_says_its_next_tick_and_period)
{
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    hand_init(&h);
    rt_interval iv;
    cr_assert_eq(rt_interval_init(&iv, rt, 250 * SEC), 0);
    poll_pending(&iv.future, &h);
    rt_wait_info info = describe(&iv.future);
    expect_fields(&info, RT_WAIT_SLEEP, -1, iv.sleep.deadline_ns, NULL, 0);
    expect_words(&info, "tick until +");
    expect_words(&info, "every 250.000 s");
    RT_DROP(&iv);
    finish_runtime(rt, 0);
}

/* ---- descriptors ------------------------------------------------------------------ */

Test(describe, reads_writes_and_readiness_name_their_descriptor)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    rt_io *in, *out;
    int in_writer, out_reader;
    pipe_to_read(rt, &in, &in_writer);
    full_pipe_to_write(rt, &out, &out_reader);
    int rfd = rt_io_fd(in), wfd = rt_io_fd(out);

    char buf[16];
    rt_io_read rd;
    rt_io_read_init(&rd, in, buf, sizeof buf);
    poll_pending(&rd.future, &h);
    rt_wait_info info = describe(&rd.future);
    expect_fields(&info, RT_WAIT_READ, rfd, 0, NULL, 0);
    expect_words(&info, "read on ");
    expect_fd_words(&info, rfd);
    RT_DROP(&rd);

    rt_io_ready ready;
    rt_io_readable_init(&ready, in);
    poll_pending(&ready.future, &h);
    info = describe(&ready.future);
    expect_fields(&info, RT_WAIT_READY, rfd, 0, NULL, 0);
    expect_words(&info, "readable");
    expect_fd_words(&info, rfd);
    RT_DROP(&ready);

    rt_io_writable_init(&ready, out);
    poll_pending(&ready.future, &h);
    info = describe(&ready.future);
    expect_fields(&info, RT_WAIT_READY, wfd, 0, NULL, 0);
    expect_words(&info, "writable");
    expect_fd_words(&info, wfd);
    RT_DROP(&ready);

    static const char bytes[100];
    rt_io_write wr;
    rt_io_write_init(&wr, out, bytes, sizeof bytes);
    poll_pending(&wr.future, &h);
    info = describe(&wr.future);
    expect_fields(&info, RT_WAIT_WRITE, wfd, 0, NULL, 0);
    expect_words(&info, "write on ");
    expect_fd_words(&info, wfd);
    RT_DROP(&wr);

    rt_io_write_all wa;
    rt_io_write_all_init(&wa, out, bytes, sizeof bytes);
    poll_pending(&wa.future, &h);
    info = describe(&wa.future);
    expect_fields(&info, RT_WAIT_WRITE, wfd, 0, NULL, 0);
    expect_words(&info, "0 of 100 bytes");
    expect_fd_words(&info, wfd);
    RT_DROP(&wa);

    cr_assert_eq(rt_io_close(in), 0);
    cr_assert_eq(rt_io_close(out), 0);
    close(in_writer);
    close(out_reader);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(describe, buffered_reads_and_writes_name_their_descriptor)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    rt_io *in, *out;
    int in_writer, out_reader;
    pipe_to_read(rt, &in, &in_writer);
    full_pipe_to_write(rt, &out, &out_reader);
    int rfd = rt_io_fd(in), wfd = rt_io_fd(out);
    rt_reader *r;
    rt_writer *w;
    cr_assert_eq(rt_reader_new(in, 64, &r), 0);
    cr_assert_eq(rt_writer_new(out, 16, &w), 0);

    rt_read_until line;
    rt_read_line_init(&line, r);
    poll_pending(&line.future, &h);
    rt_wait_info info = describe(&line.future);
    expect_fields(&info, RT_WAIT_READ, rfd, 0, NULL, 0);
    expect_words(&info, "line");
    expect_fd_words(&info, rfd);
    RT_DROP(&line);

    rt_read_until_init(&line, r, ';');
    poll_pending(&line.future, &h);
    info = describe(&line.future);
    expect_words(&info, "until ';'");
    RT_DROP(&line);

    char dst[32];
    rt_read_exact exact;
    rt_read_exact_init(&exact, r, dst, sizeof dst);
    poll_pending(&exact.future, &h);
    info = describe(&exact.future);
    expect_fields(&info, RT_WAIT_READ, rfd, 0, NULL, 0);
    expect_words(&info, "32 bytes");
    expect_fd_words(&info, rfd);
    RT_DROP(&exact);

    /* More than the buffer holds: sent straight to the full pipe. */
    static const char bytes[100];
    rt_writer_write ww;
    rt_writer_write_init(&ww, w, bytes, sizeof bytes);
    poll_pending(&ww.future, &h);
    info = describe(&ww.future);
    expect_fields(&info, RT_WAIT_WRITE, wfd, 0, NULL, 0);
    expect_words(&info, "buffered write of 100 bytes");
    expect_fd_words(&info, wfd);
    RT_DROP(&ww);

    /* A few bytes fit in the buffer; their flush waits. */
    rt_writer_write_init(&ww, w, bytes, 10);
    cr_assert_eq(rt_future_poll(&ww.future, &h.cx), RT_READY);
    cr_assert_eq(ww.result, 10);
    rt_writer_flush fl;
    rt_writer_flush_init(&fl, w);
    poll_pending(&fl.future, &h);
    info = describe(&fl.future);
    expect_fields(&info, RT_WAIT_WRITE, wfd, 0, NULL, 0);
    expect_words(&info, "flush of 10 bytes");
    expect_fd_words(&info, wfd);
    RT_DROP(&fl);

    rt_reader_free(r);
    rt_writer_free(w);
    cr_assert_eq(rt_io_close(in), 0);
    cr_assert_eq(rt_io_close(out), 0);
    close(in_writer);
    close(out_reader);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(describe, tcp_and_udp_operations_name_their_descriptor_and_address)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    struct sockaddr_in any = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    rt_io *l;
    cr_assert_eq(rt_tcp_listen(rt, (struct sockaddr *)&any, sizeof any, 16, 0, &l), 0);
    int lfd = rt_io_fd(l);

    rt_tcp_accept acc;
    rt_tcp_accept_init(&acc, l);
    poll_pending(&acc.future, &h);
    rt_wait_info info = describe(&acc.future);
    expect_fields(&info, RT_WAIT_ACCEPT, lfd, 0, NULL, 0);
    expect_words(&info, "accept on ");
    expect_fd_words(&info, lfd);
    RT_DROP(&acc);

    static struct full_listener full;
    full_listener_open(&full);
    char where[64];
    full_listener_words(&full, where, sizeof where);
    rt_tcp_connect conn;
    rt_tcp_connect_init(&conn, rt, (struct sockaddr *)&full.addr, sizeof full.addr);
    info = describe(&conn.future);
    expect_fields(&info, RT_WAIT_CONNECT, -1, 0, NULL, 0); /* no socket before the first poll */
    expect_words(&info, "connect to ");
    expect_words(&info, where);
    if (rt_future_poll(&conn.future, &h.cx) == RT_PENDING) {
        info = describe(&conn.future);
        cr_assert_geq(info.fd, 0);
        expect_fields(&info, RT_WAIT_CONNECT, info.fd, 0, NULL, 0);
        expect_words(&info, where);
        expect_fd_words(&info, info.fd);
        RT_DROP(&conn);
    } else {
        cr_log_info("the connect to a full backlog finished at once (%lld)",
                    (long long)conn.result);
        rt_io_close(conn.conn);
    }
    full_listener_close(&full);

    rt_io *u;
    cr_assert_eq(rt_udp_bind(rt, (struct sockaddr *)&any, sizeof any, 0, &u), 0);
    int ufd = rt_io_fd(u);
    char buf[16];
    rt_udp_recv_from rf;
    rt_udp_recv_from_init(&rf, u, buf, sizeof buf);
    poll_pending(&rf.future, &h);
    info = describe(&rf.future);
    expect_fields(&info, RT_WAIT_READ, ufd, 0, NULL, 0);
    expect_words(&info, "receive");
    expect_fd_words(&info, ufd);
    RT_DROP(&rf);

    /* A datagram send hardly ever waits: described before its poll. */
    struct sockaddr_in to = any;
    to.sin_port = htons(9);
    rt_udp_send_to st;
    rt_udp_send_to_init(&st, u, "hello", 5, (struct sockaddr *)&to, sizeof to);
    info = describe(&st.future);
    expect_fields(&info, RT_WAIT_WRITE, ufd, 0, NULL, 0);
    expect_words(&info, "5-byte datagram");
    expect_words(&info, "to 127.0.0.1:9");
    expect_fd_words(&info, ufd);
    RT_DROP(&st);

    cr_assert_eq(rt_io_close(u), 0);
    cr_assert_eq(rt_io_close(l), 0);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(describe, unix_socket_operations_name_their_descriptor_and_socket)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    char name[100];
    snprintf(name, sizeof name, "@asyncrt-test-%ld-describe", (long)getpid());
    rt_io *l;
    cr_assert_eq(rt_unix_listen(rt, name, 0, 0, &l), 0);
    int lfd = rt_io_fd(l);

    rt_unix_accept acc;
    rt_unix_accept_init(&acc, l);
    poll_pending(&acc.future, &h);
    rt_wait_info info = describe(&acc.future);
    expect_fields(&info, RT_WAIT_ACCEPT, lfd, 0, NULL, 0);
    expect_words(&info, "accept on ");
    expect_fd_words(&info, lfd);
    RT_DROP(&acc);

    /* A full backlog makes a connect pause before its next try. */
    struct sockaddr_un addr;
    socklen_t len;
    cr_assert_eq(rt_unix_addr(name, &addr, &len), 0);
    int queued[64];
    int nqueued = 0;
    for (;;) {
        cr_assert_lt(nqueued, 64, "the backlog never filled");
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        cr_assert_geq(s, 0);
        if (connect(s, (struct sockaddr *)&addr, len) < 0) {
            cr_assert_eq(errno, EAGAIN, "connect: %s", strerror(errno));
            close(s);
            break;
        }
        queued[nqueued++] = s;
    }
    rt_unix_connect c;
    rt_unix_connect_init(&c, rt, name);
    poll_pending(&c.future, &h);
    info = describe(&c.future);
    cr_assert_geq(info.fd, 0);
    expect_fields(&info, RT_WAIT_CONNECT, c.fd, c.pause.deadline_ns, NULL, 0);
    expect_words(&info, "connect to unix socket ");
    expect_words(&info, name);
    expect_fd_words(&info, c.fd);
    expect_words(&info, "backlog full");
    RT_DROP(&c);
    for (int i = 0; i < nqueued; i++)
        close(queued[i]);

    rt_io *a, *b;
    cr_assert_eq(rt_unix_pair(rt, SOCK_STREAM, &a, &b), 0);
    int afd = rt_io_fd(a), bfd = rt_io_fd(b);
    char buf[16];
    rt_unix_recv_fds rfds;
    rt_unix_recv_fds_init(&rfds, b, buf, sizeof buf, 2);
    poll_pending(&rfds.future, &h);
    info = describe(&rfds.future);
    expect_fields(&info, RT_WAIT_READ, bfd, 0, NULL, 0);
    expect_words(&info, "receive of descriptors");
    expect_fd_words(&info, bfd);
    RT_DROP(&rfds);

    fill_socket(afd);
    int passed[2] = {0, 1};
    rt_unix_send_fds sfds;
    rt_unix_send_fds_init(&sfds, a, "x", 1, passed, 2);
    poll_pending(&sfds.future, &h);
    info = describe(&sfds.future);
    expect_fields(&info, RT_WAIT_WRITE, afd, 0, NULL, 0);
    expect_words(&info, "send of 2 descriptors");
    expect_fd_words(&info, afd);
    RT_DROP(&sfds);

    rt_io *d;
    char dname[100];
    snprintf(dname, sizeof dname, "@asyncrt-test-%ld-describe-dgram", (long)getpid());
    cr_assert_eq(rt_unix_dgram_bind(rt, dname, 0, &d), 0);
    int dfd = rt_io_fd(d);
    rt_unix_recv_from rf;
    rt_unix_recv_from_init(&rf, d, buf, sizeof buf);
    poll_pending(&rf.future, &h);
    info = describe(&rf.future);
    expect_fields(&info, RT_WAIT_READ, dfd, 0, NULL, 0);
    expect_words(&info, "receive of a datagram");
    expect_fd_words(&info, dfd);
    RT_DROP(&rf);

    /* A datagram send hardly ever waits: described before its poll. */
    rt_unix_send_to st;
    rt_unix_send_to_init(&st, d, "x", 1, &addr, len);
    info = describe(&st.future);
    expect_fields(&info, RT_WAIT_WRITE, dfd, 0, NULL, 0);
    expect_words(&info, "send of a datagram");
    expect_words(&info, name);
    RT_DROP(&st);

    cr_assert_eq(rt_io_close(d), 0);
    cr_assert_eq(rt_io_close(a), 0);
    cr_assert_eq(rt_io_close(b), 0);
    cr_assert_eq(rt_io_close(l), 0);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

/* ---- channels, locks, groups ---------------------------------------------------------- */

Test(describe, channel_operations_name_their_channel)
{
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    hand_init(&h);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);

    rt_chan_recv rx;
    rt_chan_recv_init(&rx, ch);
    poll_pending(&rx.future, &h);
    rt_wait_info info = describe(&rx.future);
    expect_fields(&info, RT_WAIT_RECV, -1, 0, ch, 0);
    expect_words(&info, "receive on channel ");
    expect_object_words(&info, ch);
    expect_words(&info, "capacity 1");
    RT_DROP(&rx);

    static int first, second;
    cr_assert_eq(rt_chan_try_send(ch, &first), 0); /* full now */
    rt_chan_send tx;
    rt_chan_send_init(&tx, ch, &second);
    poll_pending(&tx.future, &h);
    info = describe(&tx.future);
    expect_fields(&info, RT_WAIT_SEND, -1, 0, ch, 0);
    expect_words(&info, "send on channel ");
    expect_object_words(&info, ch);
    RT_DROP(&tx);
    cr_assert_eq(tx.result, -ECANCELED);

    rt_oneshot *o;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    rt_oneshot_recv orx;
    rt_oneshot_recv_init(&orx, o);
    poll_pending(&orx.future, &h);
    info = describe(&orx.future);
    expect_fields(&info, RT_WAIT_RECV, -1, 0, o, 0);
    expect_words(&info, "oneshot");
    expect_object_words(&info, o);
    RT_DROP(&orx);

    rt_oneshot_sender_drop(o);
    rt_oneshot_receiver_drop(o, NULL);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&h.w), 0);
}

Test(describe, lock_acquire_and_notified_name_their_primitive)
{
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    hand_init(&h);

    rt_mutex m;
    cr_assert_eq(rt_mutex_init(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    rt_mutex_lock lk;
    rt_mutex_lock_init(&lk, &m);
    poll_pending(&lk.future, &h);
    rt_wait_info info = describe(&lk.future);
    expect_fields(&info, RT_WAIT_LOCK, -1, 0, &m, 0);
    expect_words(&info, "lock of mutex ");
    expect_object_words(&info, &m);
    RT_DROP(&lk);
    rt_mutex_unlock(&m);
    rt_mutex_destroy(&m);

    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 1), 0);
    rt_semaphore_acquire acq;
    rt_semaphore_acquire_init(&acq, &sem, 2);
    poll_pending(&acq.future, &h);
    info = describe(&acq.future);
    expect_fields(&info, RT_WAIT_ACQUIRE, -1, 0, &sem, 0);
    expect_words(&info, "acquire 2 permits of semaphore ");
    expect_object_words(&info, &sem);
    RT_DROP(&acq);
    rt_semaphore_destroy(&sem);

    rt_notify n;
    cr_assert_eq(rt_notify_init(&n), 0);
    rt_notified nd;
    rt_notified_init(&nd, &n);
    poll_pending(&nd.future, &h);
    info = describe(&nd.future);
    expect_fields(&info, RT_WAIT_NOTIFIED, -1, 0, &n, 0);
    expect_words(&info, "notif");
    expect_object_words(&info, &n);
    RT_DROP(&nd);
    rt_notify_destroy(&n);

    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&h.w), 0);
}

/* A child of the group that waits behind a gate. */
static struct gate child_gate = GATE_INIT;

static rt_poll gated_child_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    if (!gate_pass(&child_gate, cx))
        return RT_PENDING;
    *out = NULL;
    return RT_READY;
}

Test(describe, group_waits_name_their_group)
{
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    hand_init(&h);
    rt_group *g;
    cr_assert_eq(rt_group_new(rt, NULL, NULL, &g), 0);

    rt_group_next next;
    rt_group_next_init(&next, g);
    poll_pending(&next.future, &h);
    rt_wait_info info = describe(&next.future);
    expect_fields(&info, RT_WAIT_GROUP, -1, 0, g, 0);
    expect_words(&info, "next result of group ");
    expect_object_words(&info, g);
    RT_DROP(&next);

    cr_assert_eq(rt_group_spawn(g, NULL, gated_child_poll, NULL, NULL, 0, NULL), 0);
    rt_group_wait all;
    rt_group_join_all_init(&all, g);
    poll_pending(&all.future, &h);
    info = describe(&all.future);
    expect_fields(&info, RT_WAIT_GROUP, -1, 0, g, 0);
    expect_words(&info, "every child of group ");
    expect_object_words(&info, g);
    RT_DROP(&all);

    rt_group_close_init(&all, g);
    info = describe(&all.future);
    expect_words(&info, "close of group ");
    RT_DROP(&all);

    gate_open(&child_gate);
    rt_group_join_all_init(&all, g);
    poll_to_end(&all.future);
    cr_assert_eq(all.result, 0);
    rt_group_free(g);
    finish_runtime(rt, 0);
}

/* ---- combinators ------------------------------------------------------------------ */

Test(describe, nested_combinators_describe_every_inner_operation)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    rt_io *in;
    int writer;
    pipe_to_read(rt, &in, &writer);
    int rfd = rt_io_fd(in);

    static rt_chan_recv rx;
    static rt_io_read rd;
    static rt_select sel;
    static rt_timeout limit;
    char buf[8];
    rt_chan_recv_init(&rx, ch);
    rt_io_read_init(&rd, in, buf, sizeof buf);
    cr_assert_eq(rt_select_init(&sel, RT_FUTURES(&rx.future, &rd.future)), 0);
    cr_assert_eq(rt_timeout_init(&limit, rt, &sel.future, 500 * SEC), 0);
    poll_pending(&limit.future, &h);
    rt_wait_info info = describe(&limit.future);
    expect_fields(&info, RT_WAIT_TIMEOUT, -1, limit.sleep.deadline_ns, NULL, 0);
    expect_words(&info, "timeout in +");
    double left = seconds_after(&info, "timeout in ");
    cr_assert(left > 0 && left <= 500.0, "%f s", left);
    expect_words(&info, " around: first of 2: receive on channel ");
    expect_object_words(&info, ch);
    expect_words(&info, " | read on ");
    expect_fd_words(&info, rfd);

    info = describe(&sel.future);
    expect_fields(&info, RT_WAIT_SELECT, -1, 0, NULL, 0);
    expect_words(&info, "first of 2: receive on channel ");
    RT_DROP(&limit);
    cr_assert(rt_future_is_done(&rx.future) && rt_future_is_done(&rd.future));

    /* A join describes only the operations it still waits for. */
    static int message;
    cr_assert_eq(rt_chan_try_send(ch, &message), 0);
    static rt_join_all all;
    rt_chan_recv_init(&rx, ch);
    rt_io_read_init(&rd, in, buf, sizeof buf);
    cr_assert_eq(rt_join_all_init(&all, RT_FUTURES(&rx.future, &rd.future), 0), 0);
    poll_pending(&all.future, &h);
    cr_assert_eq(rx.result, 0);
    info = describe(&all.future);
    expect_fields(&info, RT_WAIT_JOIN_ALL, -1, 0, NULL, 0);
    expect_words(&info, "all of 2 (1 done): read on ");
    expect_fd_words(&info, rfd);
    expect_no_words(&info, "channel");
    RT_DROP(&all);

    cr_assert_eq(rt_io_close(in), 0);
    close(writer);
    cr_assert_eq(count_fds(), fds);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* A task that awaits one operation prepared by the test (in static
 * storage) and signals `pending` whenever it waits. */
struct await_one {
    rt_coro co;
    rt_future *op;
    struct event *pending;
};

static rt_poll await_one_poll(void *state, rt_context *cx, void **out)
{
    struct await_one *a = state;
    RT_CORO_BEGIN(&a->co);
    RT_AWAIT_POLL(&a->co, note_pending(rt_future_poll(a->op, cx), a->pending));
    RT_CORO_END(&a->co, out);
}

Test(describe, an_operation_a_task_waits_in_is_described_from_another_thread)
{
    /* As a task dump does: the task waits on a worker, nothing wakes it,
     * and the test thread reads its operation. */
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    rt_io *in;
    int writer;
    pipe_to_read(rt, &in, &writer);
    static rt_chan_recv rx;
    static rt_io_read rd;
    static rt_select sel;
    static rt_timeout limit;
    static char buf[8];
    rt_chan_recv_init(&rx, ch);
    rt_io_read_init(&rd, in, buf, sizeof buf);
    rt_select_init(&sel, RT_FUTURES(&rx.future, &rd.future));
    rt_timeout_init(&limit, rt, &sel.future, 600 * SEC);
    static struct event pending = EVENT_INIT;
    struct await_one a = {.op = &limit.future, .pending = &pending};
    rt_task *t;
    cr_assert_eq(RT_SPAWN(rt, await_one_poll, NULL, &a, &t), 0);
    cr_assert(event_wait_for(&pending, 1));
    rt_wait_info info = describe(&limit.future);
    expect_fields(&info, RT_WAIT_TIMEOUT, -1, limit.sleep.deadline_ns, NULL, 0);
    expect_words(&info, "receive on channel ");
    expect_fd_words(&info, rt_io_fd(in));
    static int message;
    cr_assert_eq(rt_chan_try_send(ch, &message), 0);
    cr_assert_eq(rt_task_wait(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(limit.result, 0);
    info = describe(&limit.future);
    expect_fields(&info, RT_WAIT_NONE, -1, 0, NULL, 0);
    expect_words(&info, "finished (result 0)");
    cr_assert_eq(rt_io_close(in), 0);
    close(writer);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* ---- the blocking pool: files and names ------------------------------------------- */

Test(describe, file_operations_name_their_path_or_descriptor)
{
    char dir[] = "/tmp/asyncrt-describe-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[64], renamed[64];
    snprintf(path, sizeof path, "%s/data", dir);
    snprintf(renamed, sizeof renamed, "%s/moved", dir);
    int created = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(created, 0);
    close(created);
    int fds = count_fds();

    static struct pool_gate pool = {EVENT_INIT, EVENT_INIT, NULL};
    rt_runtime *rt = runtime_with_held_pool(&pool);
    struct hand h;
    hand_init(&h);

    /* Queued behind the gate: each waits for its turn on the pool. */
    static rt_file_open op;
    rt_file_open_init(&op, rt, path, O_RDONLY, 0);
    poll_pending(&op.future, &h);
    rt_wait_info info = describe(&op.future);
    expect_fields(&info, RT_WAIT_BLOCKING, -1, 0, NULL, 0);
    expect_words(&info, "open of ");
    expect_words(&info, path);
    expect_words(&info, "on the blocking pool");
    RT_DROP(&op);

    static rt_fs_op mv;
    rt_fs_rename_init(&mv, rt, path, renamed);
    poll_pending(&mv.future, &h);
    info = describe(&mv.future);
    expect_fields(&info, RT_WAIT_BLOCKING, -1, 0, NULL, 0);
    expect_words(&info, "rename of ");
    expect_words(&info, path);
    expect_words(&info, renamed);
    RT_DROP(&mv);

    static rt_fs_read_file whole;
    rt_fs_read_file_init(&whole, rt, path, 1024);
    poll_pending(&whole.future, &h);
    info = describe(&whole.future);
    expect_fields(&info, RT_WAIT_BLOCKING, -1, 0, NULL, 0);
    expect_words(&info, path);
    RT_DROP(&whole);

    pool_gate_release(&pool);
    rt_file_open_init(&op, rt, path, O_RDONLY, 0);
    poll_to_end(&op.future);
    cr_assert_eq(op.result, 0, "open: %s", rt_strerror((int)op.result));
    rt_file *f = op.file;
    int ffd = rt_file_fd(f);

    /* The pool is free now: a read may finish before its first poll ends,
     * so it is described before that poll, and again if it waits. */
    char buf[16];
    static rt_file_read rd;
    rt_file_read_init(&rd, f, buf, sizeof buf);
    info = describe(&rd.future);
    expect_fields(&info, RT_WAIT_BLOCKING, ffd, 0, NULL, 0);
    expect_words(&info, "read of ");
    expect_fd_words(&info, ffd);
    if (rt_future_poll(&rd.future, &h.cx) == RT_PENDING) {
        info = describe(&rd.future);
        expect_fields(&info, RT_WAIT_BLOCKING, ffd, 0, NULL, 0);
    }
    RT_DROP(&rd);

    cr_assert_eq(rt_file_close(f), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(rmdir(dir), 0);
}

Test(describe, lookups_and_connects_by_name_say_what_they_wait_for)
{
    int fds = count_fds();
    static struct pool_gate pool = {EVENT_INIT, EVENT_INIT, NULL};
    rt_runtime *rt = runtime_with_held_pool(&pool);
    struct hand h;
    hand_init(&h);

    /* Dropped while queued behind the gate: the lookups never run. */
    static rt_resolve look;
    cr_assert_eq(rt_resolve_init(&look, rt, "example.org", "443", AF_UNSPEC, 0), 0);
    poll_pending(&look.future, &h);
    rt_wait_info info = describe(&look.future);
    expect_fields(&info, RT_WAIT_BLOCKING, -1, 0, NULL, 0);
    expect_words(&info, "name lookup of example.org:443");
    RT_DROP(&look);

    static rt_resolve_connect byname;
    cr_assert_eq(rt_resolve_connect_init(&byname, rt, "example.org", "443", AF_UNSPEC, 0), 0);
    poll_pending(&byname.future, &h);
    info = describe(&byname.future);
    expect_fields(&info, RT_WAIT_CONNECT, -1, 0, NULL, 0);
    expect_words(&info, "connect to example.org:443");
    expect_words(&info, "name lookup");
    RT_DROP(&byname);
    pool_gate_release(&pool);

    /* Addresses given: an attempt waits on a full backlog. */
    static struct full_listener full;
    full_listener_open(&full);
    char where[64];
    full_listener_words(&full, where, sizeof where);
    static rt_resolve_addr entry;
    memcpy(&entry.addr, &full.addr, sizeof full.addr);
    entry.len = sizeof full.addr;
    entry.family = AF_INET;
    static rt_resolve_addrs list = {1, &entry};
    static rt_resolve_connect byaddr;
    cr_assert_eq(rt_resolve_connect_addrs_init(&byaddr, rt, &list), 0);
    if (rt_future_poll(&byaddr.future, &h.cx) == RT_PENDING) {
        info = describe(&byaddr.future);
        cr_assert_geq(info.fd, 0);
        expect_fields(&info, RT_WAIT_CONNECT, info.fd, 0, NULL, 0);
        expect_words(&info, "connect to one of 1 addresses, attempt 1 of 1: connect to ");
        expect_words(&info, where);
        expect_fd_words(&info, info.fd);
        RT_DROP(&byaddr);
    } else {
        cr_log_info("the connect to a full backlog finished at once (%lld)",
                    (long long)byaddr.result);
        rt_io_close(byaddr.conn);
    }
    full_listener_close(&full);

    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
}

/* ---- signals and processes ------------------------------------------------------------ */

Test(describe, a_signal_receive_names_its_signal)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    rt_signal *s;
    cr_assert_eq(rt_signal_new(rt, SIGUSR2, &s), 0);
    rt_signal_recv rx;
    rt_signal_recv_init(&rx, s);
    poll_pending(&rx.future, &h);
    rt_wait_info info = describe(&rx.future);
    expect_fields(&info, RT_WAIT_SIGNAL, -1, 0, NULL, SIGUSR2);
    expect_words(&info, "signal SIGUSR2");
    RT_DROP(&rx);
    rt_signal_free(s);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(describe, a_process_wait_names_its_child)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    /* cat waits for the end of its input, which comes when the pipe is
     * closed. */
    static const char *const argv[] = {"cat", NULL};
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = argv;
    o.stdin_mode = RT_STDIO_PIPE;
    rt_process *p;
    cr_assert_eq(rt_process_spawn(rt, &o, &p), 0);
    pid_t pid = rt_process_pid(p);
    rt_process_wait w;
    rt_process_wait_init(&w, p);
    poll_pending(&w.future, &h);
    rt_wait_info info = describe(&w.future);
    expect_fields(&info, RT_WAIT_PROCESS, -1, 0, NULL, pid);
    char words[64];
    snprintf(words, sizeof words, "exit of process %ld", (long)pid);
    expect_words(&info, words);
    RT_DROP(&w);

    cr_assert_eq(rt_process_close_stdio(p, 0), 0);
    rt_process_wait_init(&w, p);
    poll_to_end(&w.future);
    cr_assert_eq(w.result, 0);
    cr_assert_eq(w.code, 0);
    rt_process_free(p);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}
