/* Black-box tests of the ways to start a fiber besides rt_fiber_spawn
 * (asyncrt/fiber.h): into a group, whose next, join and cancel treat it as
 * any child; from a plain thread with rt_fiber_block_on; and with a
 * release function. Also the buffered-line helpers, which a fiber server's
 * first loop uses. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(fiber_spawn, .timeout = 120, .fini = fail_on_leaks);

/* ---- groups ---------------------------------------------------------------- */

static void *awaits_its_arg(void *arg)
{
    return (void *)(intptr_t)rt_fiber_await((rt_future *)arg);
}

/* Awaits op from the calling thread, in a fiber: its result. */
static int64_t await_from_a_thread(rt_runtime *rt, rt_future *op)
{
    void *result = NULL;
    int status = 1;
    cr_assert_eq(rt_fiber_block_on(rt, NULL, awaits_its_arg, op, &result, &status), 0);
    cr_assert_eq(status, 0);
    return (int64_t)(intptr_t)result;
}

static void *times_ten(void *arg)
{
    /* An await first, so that the child really waits once in the group. */
    cr_assert_eq(rt_fiber_yield(), 0);
    return (void *)((uintptr_t)arg * 10);
}

/* Spawns five fibers into a group and collects them with rt_group_next:
 * returns the sum of their results (every status must be 0). */
static void *collects_children(void *arg)
{
    (void)arg;
    rt_group *g;
    cr_assert_eq(rt_group_new(NULL, NULL, NULL, &g), 0);
    rt_fiber_options opts;
    rt_fiber_options_init(&opts);
    opts.group = g;
    for (uintptr_t i = 1; i <= 5; i++)
        cr_assert_eq(rt_fiber_spawn_ex(NULL, &opts, times_ten, (void *)i, NULL), 0);
    uintptr_t sum = 0;
    for (int i = 0; i < 5; i++) {
        rt_group_next next;
        cr_assert_eq(rt_group_next_init(&next, g), 0);
        cr_assert_eq(rt_fiber_await(&next.future), 0);
        cr_assert_eq(next.child.status, 0);
        cr_assert_neq(next.child.id, 0);
        sum += (uintptr_t)next.child.value;
    }
    cr_assert_eq(rt_group_len(g), 0);
    rt_group_join join;
    cr_assert_eq(rt_group_close_init(&join, g), 0);
    cr_assert_eq(rt_fiber_await(&join.future), 0);
    rt_group_free(g);
    return (void *)sum;
}

Test(fiber_spawn, fibers_in_a_group_are_collected_by_group_next)
{
    rt_runtime *rt = new_runtime(2);
    void *sum = NULL;
    int status = 1;
    cr_assert_eq(rt_fiber_block_on(rt, NULL, collects_children, NULL, &sum, &status), 0);
    cr_assert_eq(status, 0);
    cr_assert_eq((uintptr_t)sum, 150);
    finish_runtime(rt, 0);
}

struct waiter_count {
    rt_chan *never; /* nothing is ever sent on it */
    atomic_int waiting;
    atomic_int cleaned_up;
    struct event all_waiting;
};

static void *waits_until_cancelled(void *arg)
{
    struct waiter_count *c = arg;
    if (atomic_fetch_add(&c->waiting, 1) + 1 == 3)
        event_signal(&c->all_waiting);
    int first = rt_chan_recv_await(c->never, NULL);
    int later = rt_sleep_await(1);
    cr_assert_eq(first, -ECANCELED);
    cr_assert_eq(later, -ECANCELED);
    atomic_fetch_add(&c->cleaned_up, 1);
    return (void *)1; /* discarded: the group sees a cancelled child */
}

Test(fiber_spawn, a_group_cancel_ends_the_await_of_every_fiber_child)
{
    rt_runtime *rt = new_runtime(2);
    struct waiter_count c = {.all_waiting = EVENT_INIT};
    cr_assert_eq(rt_chan_new(1, &c.never), 0);
    rt_group *g;
    cr_assert_eq(rt_group_new(rt, NULL, NULL, &g), 0);
    rt_fiber_options opts;
    rt_fiber_options_init(&opts);
    opts.group = g;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(rt_fiber_spawn_ex(rt, &opts, waits_until_cancelled, &c, NULL), 0);
    cr_assert(event_wait_for_s(&c.all_waiting, 1, EVENT_DEADLINE_S));
    cr_assert_eq(rt_group_len(g), 3);
    rt_group_cancel(g);
    rt_group_join join;
    cr_assert_eq(rt_group_join_all_init(&join, g), 0);
    cr_assert_eq(await_from_a_thread(rt, &join.future), 0);
    cr_assert_eq(join.cancelled, 3);
    cr_assert_eq(join.failed, 0);
    cr_assert_eq(atomic_load(&c.cleaned_up), 3, "every fiber ran to its return");
    rt_group_free(g);
    rt_chan_sender_drop(c.never);
    rt_chan_receiver_drop(c.never, NULL, NULL);
    finish_runtime(rt, 0);
}

Test(fiber_spawn, a_group_spawn_refuses_a_handle_another_runtime_and_a_closing_group)
{
    rt_runtime *rt = new_runtime(1), *other = new_runtime(1);
    rt_group *g;
    cr_assert_eq(rt_group_new(rt, NULL, NULL, &g), 0);
    rt_fiber_options opts;
    rt_fiber_options_init(&opts);
    opts.group = g;
    rt_task *handle = (rt_task *)1;
    cr_assert_eq(rt_fiber_spawn_ex(rt, &opts, times_ten, NULL, &handle), -EINVAL);
    cr_assert_null(handle);
    cr_assert_eq(rt_fiber_spawn_ex(other, &opts, times_ten, NULL, NULL), -EINVAL);
    rt_group_join close;
    cr_assert_eq(rt_group_close_init(&close, g), 0);
    cr_assert_eq(await_from_a_thread(rt, &close.future), 0);
    cr_assert_eq(rt_fiber_spawn_ex(NULL, &opts, times_ten, NULL, NULL), -EPIPE);
    rt_group_free(g);
    finish_runtime(other, 0);
    finish_runtime(rt, 0);
}

/* ---- rt_fiber_block_on ------------------------------------------------------ */

static void *sets_a_status(void *arg)
{
    cr_assert_eq(rt_sleep_await(1000), 0);
    rt_fiber_set_status(-EPROTO);
    return arg;
}

static void *blocks_inside(void *arg)
{
    rt_runtime *rt = arg;
    /* Blocking here would hold a worker: refused, and nothing spawned. */
    return (void *)(intptr_t)rt_fiber_block_on(rt, NULL, sets_a_status, NULL, NULL, NULL);
}

Test(fiber_spawn, block_on_runs_a_fiber_from_a_thread_and_refuses_inside_one)
{
    rt_runtime *rt = new_runtime(2);
    void *value = NULL;
    int status = 1;
    cr_assert_eq(rt_fiber_block_on(rt, NULL, sets_a_status, (void *)7, &value, &status), 0);
    cr_assert_eq((uintptr_t)value, 7);
    cr_assert_eq(status, -EPROTO);

    cr_assert_eq(rt_fiber_block_on(rt, NULL, blocks_inside, rt, &value, &status), 0);
    cr_assert_eq((intptr_t)value, -EDEADLK);
    cr_assert_eq(status, 0);

    cr_assert_eq(rt_fiber_block_on(NULL, NULL, sets_a_status, NULL, NULL, NULL), -EINVAL);
    cr_assert_eq(rt_fiber_block_on(rt, NULL, NULL, NULL, NULL, NULL), -EINVAL);
    finish_runtime(rt, 0);
    rt_runtime *gone = new_runtime(1);
    cr_assert_eq(rt_runtime_shutdown(gone), 0);
    cr_assert_eq(rt_fiber_block_on(gone, NULL, sets_a_status, NULL, NULL, NULL), -ESHUTDOWN);
    cr_assert_eq(rt_runtime_free(gone), 0);
}

/* ---- the buffered-line helpers --------------------------------------------- */

/* Answers each line it reads with "got <line>\n", buffered, flushing once
 * nothing more is buffered (pipelined lines go out in one write), until the
 * peer closes. Returns the number of lines. */
static void *line_server(void *arg)
{
    rt_io *io = arg;
    rt_reader *r;
    rt_writer *w;
    cr_assert_eq(rt_reader_new(io, 0, &r), 0);
    cr_assert_eq(rt_writer_new(io, 0, &w), 0);
    uintptr_t lines = 0;
    for (;;) {
        char *text;
        size_t len;
        int64_t n = rt_read_line_await(r, &text, &len);
        if (n <= 0) {
            cr_assert_eq(n, 0, "%s", rt_strerror((int)n));
            cr_assert_null(text);
            break;
        }
        lines++;
        char reply[64];
        int k = snprintf(reply, sizeof reply, "got %.*s\n", (int)len, text);
        cr_assert_eq(rt_writer_write_await(w, reply, (size_t)k), k);
        if (rt_reader_buffered(r) == 0)
            cr_assert_geq(rt_writer_flush_await(w), k);
    }
    cr_assert_eq(rt_writer_flush_await(w), 0, "everything was flushed already");
    rt_writer_free(w);
    rt_reader_free(r);
    rt_io_close(io);
    return (void *)lines;
}

Test(fiber_spawn, a_fiber_reads_lines_and_writes_buffered_replies)
{
    rt_runtime *rt = new_runtime(2);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    rt_io *io;
    cr_assert_eq(rt_io_open(rt, sv[0], &io), 0);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, line_server, io, &t), 0);
    const char *ask = "one\r\ntwo\nthree\n";
    cr_assert_eq(write(sv[1], ask, strlen(ask)), (ssize_t)strlen(ask));
    const char *want = "got one\ngot two\ngot three\n";
    char got[64] = {0};
    size_t have = 0;
    while (have < strlen(want)) {
        ssize_t n = read(sv[1], got + have, sizeof got - 1 - have); /* a blocking read */
        cr_assert_gt(n, 0);
        have += (size_t)n;
    }
    cr_assert_str_eq(got, want);
    cr_assert_eq(shutdown(sv[1], SHUT_WR), 0);
    void *lines = NULL;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &lines), 0);
    cr_assert_eq((uintptr_t)lines, 3);
    close(sv[1]);
    finish_runtime(rt, 0);
}

Test(fiber_spawn, the_line_helpers_refuse_outside_a_fiber)
{
    char *text = (char *)1;
    size_t len = 1;
    cr_assert_eq(rt_read_line_await(NULL, &text, &len), -EPERM);
    cr_assert_null(text);
    cr_assert_eq(len, 0);
    cr_assert_eq(rt_writer_write_await(NULL, "x", 1), -EPERM);
    cr_assert_eq(rt_writer_flush_await(NULL), -EPERM);
}

/* ---- time limits ---------------------------------------------------------- */

static void *waits_with_limits(void *arg)
{
    (void)arg;
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    rt_chan_recv recv;
    /* Nothing comes: the limit ends the wait, and the receive is dropped. */
    cr_assert_eq(rt_chan_recv_init(&recv, ch), 0);
    int64_t start = rt_now_ns();
    cr_assert_eq(rt_fiber_await_timeout(&recv.future, RT_MS(5)), -ETIMEDOUT);
    cr_assert_geq(rt_now_ns() - start, RT_MS(5));
    /* A deadline already passed: at once. */
    cr_assert_eq(rt_chan_recv_init(&recv, ch), 0);
    cr_assert_eq(rt_fiber_await_until(&recv.future, rt_now_ns() - 1), -ETIMEDOUT);
    /* What finishes first is the result. */
    cr_assert_eq(rt_chan_try_send(ch, (void *)7), 0);
    cr_assert_eq(rt_chan_recv_init(&recv, ch), 0);
    cr_assert_eq(rt_fiber_await_until(&recv.future, rt_now_ns() + RT_SEC(30)), 0);
    cr_assert_eq((uintptr_t)recv.value, 7);
    cr_assert_eq(rt_fiber_await_timeout(NULL, 1), -EINVAL);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    return NULL;
}

Test(fiber_spawn, an_await_with_a_time_limit_times_out_or_returns_the_result)
{
    rt_runtime *rt = new_runtime(2);
    int status = 1;
    cr_assert_eq(rt_fiber_block_on(rt, NULL, waits_with_limits, NULL, NULL, &status), 0);
    cr_assert_eq(status, 0);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    rt_chan_recv recv;
    cr_assert_eq(rt_chan_recv_init(&recv, ch), 0);
    cr_assert_eq(rt_fiber_await_timeout(&recv.future, 1), -EPERM); /* not in a fiber */
    rt_future_drop(&recv.future);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* ---- rt_fiber_serve and rt_io_copy_await ---------------------------------- */

static atomic_int echoes_ended;

static void *echo_conn(void *conn)
{
    char buf[16];
    int64_t copied = rt_io_copy_await(conn, conn, buf, sizeof buf);
    cr_assert(copied >= 0 || copied == -ECANCELED, "%s", rt_strerror((int)copied));
    rt_io_close(conn);
    atomic_fetch_add(&echoes_ended, 1);
    return NULL;
}

static void *serves(void *listener)
{
    int err = rt_fiber_serve(listener, NULL, echo_conn);
    rt_io_close(listener);
    return (void *)(intptr_t)err;
}

static int connect_blocking(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&to, sizeof to), 0);
    return fd;
}

Test(fiber_spawn, serve_runs_a_fiber_per_connection_until_cancelled)
{
    rt_runtime *rt = new_runtime(2);
    atomic_store(&echoes_ended, 0);
    rt_io *listener;
    cr_assert_eq(rt_tcp_listen_addr(rt, "127.0.0.1:0", &listener), 0);
    int port = rt_net_local_port(listener);
    rt_task *server;
    cr_assert_eq(rt_fiber_spawn(rt, serves, listener, &server), 0);
    /* Three clients at once, each echoed through its own fiber; more bytes
     * than the copy's buffer holds. */
    int fds[3];
    for (int i = 0; i < 3; i++)
        fds[i] = connect_blocking(port);
    for (int i = 0; i < 3; i++) {
        char out[64], in[64];
        memset(out, 'a' + i, sizeof out);
        cr_assert_eq(write(fds[i], out, sizeof out), (ssize_t)sizeof out);
        size_t got = 0;
        while (got < sizeof in) {
            ssize_t n = read(fds[i], in + got, sizeof in - got);
            cr_assert_gt(n, 0);
            got += (size_t)n;
        }
        cr_assert_eq(memcmp(in, out, sizeof in), 0);
    }
    /* A client that leaves ends its fiber. */
    close(fds[0]);
    while (atomic_load(&echoes_ended) < 1)
        sched_yield();
    /* The cancel ends the accept loop with -ECANCELED; the connections'
     * fibers go on until the shutdown cancels them too. */
    rt_task_cancel(server);
    void *err = NULL;
    cr_assert_eq(task_wait_status(server, WAIT_DEADLINE_NS, &err), -ECANCELED);
    shut_down(rt, 2);
    cr_assert_eq(atomic_load(&echoes_ended), 3);
    close(fds[1]);
    close(fds[2]);
    cr_assert_eq(rt_runtime_free(rt), 0);
}

static void *serves_nothing(void *arg)
{
    (void)arg;
    cr_assert_eq(rt_fiber_serve(NULL, NULL, echo_conn), -EINVAL);
    return NULL;
}

Test(fiber_spawn, serve_and_copy_refuse_outside_a_fiber_and_without_a_listener)
{
    cr_assert_eq(rt_fiber_serve(NULL, NULL, echo_conn), -EPERM);
    char buf[1];
    cr_assert_eq(rt_io_copy_await(NULL, NULL, buf, 1), -EPERM);
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(rt_fiber_block_on(rt, NULL, serves_nothing, NULL, NULL, NULL), 0);
    finish_runtime(rt, 0);
}
