/* Black-box tests of the NULL-argument rule (asyncrt/error.h, "NULL
 * arguments"): every public function whose header does not forbid NULL is
 * called with NULL in each pointer argument, one at a time, next to valid
 * other arguments (a real runtime, descriptor, channel...), and must give
 * exactly the documented answer: -EINVAL from a function that reports
 * errors (RT_READY with -EINVAL in the error output of a poll function,
 * which then has changed nothing), nothing done by a function that
 * releases, drops, closes, cancels, detaches, wakes or notifies, and the
 * documented value from any other. One test per header. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

TestSuite(null, .timeout = 120, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* A future that finishes at once with 42. */
static rt_poll ready_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = (void *)(intptr_t)42;
    return RT_READY;
}

/* A poll function that counts its polls (state: an int) and never ends. */
static rt_poll counting_pending_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    (void)out;
    (*(int *)state)++;
    return RT_PENDING;
}

static void *echo_job(void *arg)
{
    return arg;
}

/* Wakes for POLL_UNTIL_READY. File-scope: an operation may keep the waker
 * after it was ready, and a late wake must find the event alive. */
static struct event poll_wakes = EVENT_INIT;

/* Polls an operation by hand, with `cx` replaced by a waker that signals
 * poll_wakes, until it is ready; between polls it waits for that wake, not
 * for time to pass. Fails the test when no wake comes within 10 s. */
#define POLL_UNTIL_READY(expr)                                                                     \
    do {                                                                                           \
        rt_context outer_cx_ = cx;                                                                 \
        cx = event_context(&poll_wakes);                                                           \
        for (;;) {                                                                                 \
            unsigned long seen_ = event_count(&poll_wakes);                                        \
            if ((expr) == RT_READY)                                                                \
                break;                                                                             \
            cr_assert(event_wait_for_ms(&poll_wakes, seen_ + 1, 10000), "%s was never woken",      \
                      #expr);                                                                      \
        }                                                                                          \
        cx = outer_cx_;                                                                            \
    } while (0)

/* ---- error.h ----------------------------------------------------------- */

Test(null, error)
{
    /* rt_strerror takes no pointer; it names the -EINVAL every NULL gives. */
    cr_assert_str_eq(rt_strerror(-EINVAL), "invalid argument");
}

/* ---- future.h ---------------------------------------------------------- */

Test(null, future)
{
    cr_assert_null(rt_context_waker(NULL));

    rt_waker w = rt_waker_clone(NULL);
    cr_assert(rt_waker_is_noop(&w), "rt_waker_clone(NULL) is the no-op waker");
    rt_waker_drop(&w);

    rt_waker_wake(NULL);
    rt_waker_wake_by_ref(NULL);
    rt_waker_drop(NULL);

    rt_waker noop = rt_waker_noop();
    cr_assert_not(rt_waker_will_wake(NULL, &noop));
    cr_assert_not(rt_waker_will_wake(&noop, NULL));
    cr_assert_not(rt_waker_will_wake(NULL, NULL));
    cr_assert(rt_waker_is_noop(NULL));

    /* A NULL context's waker goes through the waker functions as nothing. */
    rt_waker c = rt_waker_clone(rt_context_waker(NULL));
    cr_assert(rt_waker_is_noop(&c));
    rt_waker_wake_by_ref(rt_context_waker(NULL));
}

/* ---- coro.h ------------------------------------------------------------ */

struct yielder {
    rt_coro co;
};

static rt_poll yielder_poll(void *state, rt_context *cx, void **out)
{
    struct yielder *y = state;
    RT_CORO_BEGIN(&y->co);
    RT_YIELD(&y->co, cx);
    RT_RETURN(&y->co, out, (intptr_t)7);
    RT_CORO_END(&y->co, out);
}

Test(null, coro)
{
    /* RT_YIELD with cx NULL wakes nothing and still suspends once. */
    struct yielder y = {{0}};
    void *out = NULL;
    cr_assert_eq(yielder_poll(&y, NULL, &out), RT_PENDING);
    cr_assert_eq(yielder_poll(&y, NULL, &out), RT_READY);
    cr_assert_eq((intptr_t)out, 7);
}

/* ---- runtime.h --------------------------------------------------------- */

Test(null, runtime)
{
    rt_config_init(NULL);
    cr_assert_eq(rt_runtime_new(NULL, NULL), -EINVAL);
    rt_config cfg;
    rt_config_init(&cfg);
    cr_assert_eq(rt_runtime_new(&cfg, NULL), -EINVAL);
    cr_assert_eq(rt_runtime_shutdown(NULL), -EINVAL);
    cr_assert_eq(rt_runtime_free(NULL), 0);
    cr_assert_eq(rt_runtime_workers(NULL), 0);
    cr_assert_null(rt_current());

    /* cfg NULL: the defaults. */
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(NULL, &rt), 0);
    cr_assert_not_null(rt);
    cr_assert_gt(rt_runtime_workers(rt), 0);

    void *value = (void *)1;
    cr_assert_eq(rt_block_on(NULL, ready_poll, NULL, NULL, 0, &value), -EINVAL);
    cr_assert_eq(rt_block_on(rt, NULL, NULL, NULL, 0, &value), -EINVAL);
    cr_assert_eq(rt_block_on(rt, ready_poll, NULL, NULL, 8, &value), -EINVAL);
    cr_assert_eq(value, (void *)1, "a refused rt_block_on wrote its value");
    /* drop, state (size 0) and value may be NULL. */
    cr_assert_eq(rt_block_on(rt, ready_poll, NULL, NULL, 0, NULL), 0);
    cr_assert_eq(rt_block_on(rt, ready_poll, NULL, NULL, 0, &value), 0);
    cr_assert_eq((intptr_t)value, 42);

    finish_runtime(rt, 0);
}

/* ---- task.h ------------------------------------------------------------ */

/* Calls rt_coop_proceed(NULL) far more often than the budget allows, then
 * once with its real context: all true when a NULL context spends nothing. */
static rt_poll coop_null_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    intptr_t trues = 0;
    for (int i = 0; i < 1000; i++)
        trues += rt_coop_proceed(NULL);
    trues += rt_coop_proceed(cx);
    *out = (void *)trues;
    return RT_READY;
}

struct typed_state {
    int x;
};

Test(null, task)
{
    rt_runtime *rt = new_runtime(2);
    rt_context cx = noop_context();
    rt_task *h = (rt_task *)1;

    /* rt NULL outside a task, poll NULL, state NULL with size > 0. */
    cr_assert_eq(rt_spawn(NULL, ready_poll, NULL, NULL, 0, &h), -EINVAL);
    cr_assert_null(h, "a refused spawn leaves *handle NULL");
    cr_assert_eq(rt_spawn(rt, NULL, NULL, NULL, 0, &h), -EINVAL);
    cr_assert_eq(rt_spawn(rt, ready_poll, NULL, NULL, 8, &h), -EINVAL);
    struct typed_state *no_state = NULL;
    cr_assert_eq(RT_SPAWN(rt, ready_poll, NULL, no_state, &h), -EINVAL);
    cr_assert_eq(rt_spawn_ex(NULL, NULL, ready_poll, NULL, NULL, 0, &h), -EINVAL);
    cr_assert_eq(rt_spawn_ex(rt, NULL, NULL, NULL, NULL, 0, &h), -EINVAL);
    cr_assert_eq(rt_spawn_ex(rt, NULL, ready_poll, NULL, NULL, 8, &h), -EINVAL);
    cr_assert_eq(rt_spawn_local(NULL, ready_poll, NULL, NULL, 0, &h), -EINVAL);
    cr_assert_eq(rt_spawn_local(rt, NULL, NULL, NULL, 0, &h), -EINVAL);
    cr_assert_eq(rt_spawn_blocking(NULL, echo_job, NULL, &h), -EINVAL);
    cr_assert_eq(rt_spawn_blocking(rt, NULL, NULL, &h), -EINVAL);
    cr_assert_null(h);

    /* Optional pointers: drop, state (size 0), handle (detached), opts. */
    cr_assert_eq(rt_spawn(rt, ready_poll, NULL, NULL, 0, NULL), 0);
    cr_assert_eq(rt_spawn_blocking(rt, echo_job, NULL, NULL), 0);
    cr_assert_eq(rt_spawn_ex(rt, NULL, ready_poll, NULL, NULL, 0, &h), 0);
    cr_assert_not_null(h);

    /* Joins that are refused report -EINVAL and keep the handle. */
    void *value = (void *)1;
    int status = 1;
    cr_assert_eq(rt_task_join(NULL, &cx, &value, &status), RT_READY);
    cr_assert_null(value);
    cr_assert_eq(status, -EINVAL);
    cr_assert_eq(rt_task_join(NULL, &cx, NULL, NULL), RT_READY);
    value = (void *)1;
    status = 1;
    cr_assert_eq(rt_task_join(h, NULL, &value, &status), RT_READY);
    cr_assert_null(value);
    cr_assert_eq(status, -EINVAL);
    cr_assert_eq(rt_task_join(h, NULL, NULL, NULL), RT_READY);
    cr_assert_eq(rt_task_wait(NULL, -1, &value), -EINVAL);
    /* The handle is still owned: value may be NULL in the wait. */
    cr_assert_eq(rt_task_wait(h, 30000 * MS, NULL), 0);

    /* And the same handle joined for real, with value and status NULL. */
    cr_assert_eq(rt_spawn(rt, ready_poll, NULL, NULL, 0, &h), 0);
    POLL_UNTIL_READY(rt_task_join(h, &cx, NULL, NULL));

    rt_task_detach(NULL);
    rt_task_abort(NULL);
    cr_assert_not(rt_task_is_finished(NULL));
    cr_assert_eq(rt_yield(NULL), RT_PENDING);
    rt_spawn_options_init(NULL);
    cr_assert_eq(rt_task_id(NULL), 0);
    cr_assert_null(rt_task_name(NULL));
    cr_assert(rt_coop_proceed(NULL));

    /* Inside a task, rt_coop_proceed(NULL) is true and spends no budget. */
    value = NULL;
    cr_assert_eq(rt_block_on(rt, coop_null_poll, NULL, NULL, 0, &value), 0);
    cr_assert_eq((intptr_t)value, 1001);

    finish_runtime(rt, 0);
}

/* ---- metrics.h --------------------------------------------------------- */

Test(null, metrics)
{
    rt_runtime *rt = new_runtime(1);
    rt_metrics m;
    rt_worker_metrics wm;
    cr_assert_eq(rt_metrics_read(NULL, &m, sizeof m), -EINVAL);
    cr_assert_eq(rt_metrics_read(rt, NULL, sizeof m), -EINVAL);
    cr_assert_eq(rt_worker_metrics_read(NULL, 0, &wm, sizeof wm), -EINVAL);
    cr_assert_eq(rt_worker_metrics_read(rt, 0, NULL, sizeof wm), -EINVAL);
    cr_assert_eq(rt_metrics_print(NULL, stderr), -EINVAL);
    cr_assert_eq(rt_metrics_print(rt, NULL), -EINVAL);
    finish_runtime(rt, 0);
}

/* ---- timer.h ----------------------------------------------------------- */

Test(null, timer)
{
    rt_runtime *rt = new_runtime(1);
    rt_context cx = noop_context();
    int err = 1;

    rt_sleep s;
    cr_assert_eq(rt_sleep_init(NULL, rt, MS), -EINVAL);
    cr_assert_eq(rt_sleep_init(&s, NULL, MS), -EINVAL); /* no runtime here */
    cr_assert_eq(rt_sleep_until_init(NULL, rt, 0), -EINVAL);
    cr_assert_eq(rt_sleep_until_init(&s, NULL, 0), -EINVAL);
    cr_assert_eq(rt_sleep_init(&s, rt, 60000 * MS), 0);
    cr_assert_eq(rt_sleep_poll(NULL, &cx, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    cr_assert_eq(rt_sleep_poll(NULL, &cx, NULL), RT_READY);
    err = 1;
    cr_assert_eq(rt_sleep_poll(&s, NULL, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    cr_assert_null(s.timer, "a refused poll armed the timer");
    cr_assert_eq(rt_sleep_poll(&s, &cx, &err), RT_PENDING); /* still a sleep */
    rt_sleep_drop(&s);
    rt_sleep_drop(NULL);

    rt_timeout t;
    int polls = 0;
    void *out = (void *)1;
    cr_assert_eq(rt_timeout_init(NULL, rt, MS), -EINVAL);
    cr_assert_eq(rt_timeout_init(&t, NULL, MS), -EINVAL);
    cr_assert_eq(rt_timeout_init(&t, rt, 60000 * MS), 0);
    err = 1;
    cr_assert_eq(rt_timeout_poll(NULL, &cx, counting_pending_poll, &polls, &out, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    err = 1;
    cr_assert_eq(rt_timeout_poll(&t, NULL, counting_pending_poll, &polls, &out, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    err = 1;
    cr_assert_eq(rt_timeout_poll(&t, &cx, NULL, &polls, &out, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    cr_assert_eq(polls, 0, "a refused timeout polled its inner future");
    cr_assert_eq(out, (void *)1, "a refused timeout wrote *out");
    cr_assert_eq(rt_timeout_poll(NULL, &cx, counting_pending_poll, &polls, NULL, NULL), RT_READY);
    /* inner_state, out and status may be NULL. */
    cr_assert_eq(rt_timeout_poll(&t, &cx, ready_poll, NULL, NULL, NULL), RT_READY);
    rt_timeout_drop(&t);
    rt_timeout_drop(NULL);

    rt_interval iv;
    cr_assert_eq(rt_interval_init(NULL, rt, MS), -EINVAL);
    cr_assert_eq(rt_interval_init(&iv, NULL, MS), -EINVAL);
    cr_assert_eq(rt_interval_init(&iv, rt, 60000 * MS), 0);
    err = 1;
    cr_assert_eq(rt_interval_poll(NULL, &cx, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    err = 1;
    cr_assert_eq(rt_interval_poll(&iv, NULL, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    cr_assert_eq(rt_interval_poll(NULL, &cx, NULL), RT_READY);
    cr_assert_eq(rt_interval_poll(&iv, &cx, NULL), RT_PENDING);
    rt_interval_drop(&iv);
    rt_interval_drop(NULL);

    finish_runtime(rt, 0);
}

/* ---- io.h -------------------------------------------------------------- */

Test(null, io)
{
    rt_runtime *rt = new_runtime(1);
    rt_context cx = noop_context();
    int fds[2];
    make_pipe(fds);

    rt_io *r = (rt_io *)1;
    cr_assert_eq(rt_io_open(rt, fds[0], NULL), -EINVAL);
    cr_assert_eq(rt_io_open(NULL, fds[0], &r), -EINVAL); /* no runtime here */
    cr_assert_null(r);
    rt_io *w = NULL;
    cr_assert_eq(rt_io_open(rt, fds[0], &r), 0);
    cr_assert_eq(rt_io_open(rt, fds[1], &w), 0);

    cr_assert_eq(rt_io_fd(NULL), -EBADF);
    cr_assert_eq(rt_io_readable(NULL, &cx), RT_READY);
    cr_assert_eq(rt_io_readable(r, NULL), RT_READY);
    cr_assert_eq(rt_io_writable(NULL, &cx), RT_READY);
    cr_assert_eq(rt_io_writable(w, NULL), RT_READY);

    char byte = 'x';
    ssize_t res = 1;
    cr_assert_eq(rt_io_write(NULL, &cx, &byte, 1, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_io_write(w, NULL, &byte, 1, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_io_write(w, &cx, NULL, 1, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    cr_assert_eq(rt_io_write(w, &cx, &byte, 1, NULL), RT_READY);
    /* Nothing was written by any of them. */
    char got = 0;
    cr_assert_eq(read(fds[0], &got, 1), -1);
    cr_assert_eq(errno, EAGAIN);

    size_t progress = 0;
    res = 1;
    cr_assert_eq(rt_io_write_all(NULL, &cx, &byte, 1, &progress, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_io_write_all(w, NULL, &byte, 1, &progress, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_io_write_all(w, &cx, NULL, 1, &progress, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_io_write_all(w, &cx, &byte, 1, NULL, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    cr_assert_eq(rt_io_write_all(w, &cx, &byte, 1, &progress, NULL), RT_READY);
    cr_assert_eq(progress, 0);
    cr_assert_eq(read(fds[0], &got, 1), -1);
    cr_assert_eq(errno, EAGAIN);

    /* One byte in the pipe; the refused reads must leave it there. */
    cr_assert_eq(rt_io_write(w, &cx, &byte, 1, &res), RT_READY);
    cr_assert_eq(res, 1);
    res = 1;
    cr_assert_eq(rt_io_read(NULL, &cx, &got, 1, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_io_read(r, NULL, &got, 1, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_io_read(r, &cx, NULL, 1, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    cr_assert_eq(rt_io_read(r, &cx, &got, 1, NULL), RT_READY);
    /* buf NULL with len 0 is a valid empty read. */
    res = 1;
    cr_assert_eq(rt_io_read(r, &cx, NULL, 0, &res), RT_READY);
    cr_assert_eq(res, 0);
    res = 0;
    cr_assert_eq(rt_io_read(r, &cx, &got, 1, &res), RT_READY);
    cr_assert_eq(res, 1);
    cr_assert_eq(got, 'x');

    cr_assert_eq(rt_io_close(NULL), 0);
    cr_assert_eq(rt_io_close(r), 0);
    cr_assert_eq(rt_io_close(w), 0);
    finish_runtime(rt, 0);
}

/* ---- net.h ------------------------------------------------------------- */

Test(null, net)
{
    rt_runtime *rt = new_runtime(1);
    rt_context cx = noop_context();
    struct sockaddr_storage ss;
    socklen_t len = 0;

    cr_assert_eq(rt_net_addr(NULL, 0, &ss, &len), -EINVAL);
    cr_assert_eq(rt_net_addr("127.0.0.1", 0, NULL, &len), -EINVAL);
    cr_assert_eq(rt_net_addr("127.0.0.1", 0, &ss, NULL), -EINVAL);
    cr_assert_eq(rt_net_addr("127.0.0.1", 0, &ss, &len), 0);
    const struct sockaddr *sa = (const struct sockaddr *)&ss;

    rt_io *listener = (rt_io *)1;
    cr_assert_eq(rt_tcp_listen(rt, NULL, len, 16, RT_NET_REUSEADDR, &listener), -EINVAL);
    cr_assert_eq(rt_tcp_listen(rt, sa, len, 16, RT_NET_REUSEADDR, NULL), -EINVAL);
    cr_assert_eq(rt_tcp_listen(NULL, sa, len, 16, RT_NET_REUSEADDR, &listener), -EINVAL);
    cr_assert_eq(rt_tcp_listen(rt, sa, len, 16, RT_NET_REUSEADDR, &listener), 0);

    struct sockaddr_storage bound;
    socklen_t blen = 0;
    cr_assert_eq(rt_net_local_addr(NULL, &bound, &blen), -EINVAL);
    cr_assert_eq(rt_net_local_addr(listener, NULL, &blen), -EINVAL);
    cr_assert_eq(rt_net_local_addr(listener, &bound, NULL), -EINVAL);
    cr_assert_eq(rt_net_local_addr(listener, &bound, &blen), 0);
    const struct sockaddr *bsa = (const struct sockaddr *)&bound;
    cr_assert_eq(rt_net_peer_addr(NULL, &bound, &blen), -EINVAL);
    cr_assert_eq(rt_net_peer_addr(listener, NULL, &blen), -EINVAL);
    cr_assert_eq(rt_net_peer_addr(listener, &bound, NULL), -EINVAL);

    /* Accept: refused polls first, then a real one with peer NULL. */
    rt_io *conn = (rt_io *)1;
    int err = 1;
    cr_assert_eq(rt_tcp_accept(NULL, &cx, &conn, NULL, NULL, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    cr_assert_null(conn);
    err = 1;
    cr_assert_eq(rt_tcp_accept(listener, NULL, &conn, NULL, NULL, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    err = 1;
    cr_assert_eq(rt_tcp_accept(listener, &cx, NULL, NULL, NULL, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(client, 0);
    cr_assert_eq(connect(client, bsa, blen), 0);
    conn = (rt_io *)1;
    cr_assert_eq(rt_tcp_accept(listener, &cx, &conn, NULL, NULL, NULL), RT_READY);
    cr_assert_null(conn, "an accept without err accepted");
    POLL_UNTIL_READY(rt_tcp_accept(listener, &cx, &conn, NULL, NULL, &err));
    cr_assert_eq(err, 0);
    cr_assert_not_null(conn);
    cr_assert_eq(rt_tcp_shutdown(NULL, SHUT_RDWR), -EINVAL);
    cr_assert_eq(rt_tcp_set_nodelay(NULL, true), -EINVAL);
    cr_assert_eq(rt_tcp_set_nodelay(conn, true), 0);
    cr_assert_eq(rt_tcp_shutdown(conn, SHUT_RDWR), 0);
    cr_assert_eq(rt_io_close(conn), 0);
    close(client);

    /* Connect: every refused poll leaves the operation unstarted. */
    rt_tcp_connect op;
    rt_io *out = (rt_io *)1;
    cr_assert_eq(rt_tcp_connect_init(NULL, rt, 0), -EINVAL);
    cr_assert_eq(rt_tcp_connect_init(&op, NULL, 0), -EINVAL);
    cr_assert_eq(rt_tcp_connect_init(&op, rt, 0), 0);
    err = 1;
    cr_assert_eq(rt_tcp_connect_poll(NULL, &cx, bsa, blen, &out, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    cr_assert_null(out);
    err = 1;
    cr_assert_eq(rt_tcp_connect_poll(&op, NULL, bsa, blen, &out, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    err = 1;
    cr_assert_eq(rt_tcp_connect_poll(&op, &cx, NULL, blen, &out, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    err = 1;
    cr_assert_eq(rt_tcp_connect_poll(&op, &cx, bsa, blen, NULL, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    cr_assert_eq(rt_tcp_connect_poll(&op, &cx, bsa, blen, &out, NULL), RT_READY);
    cr_assert_eq(op.started, 0, "a refused connect poll started the connection");
    cr_assert_null(op.io);
    rt_tcp_connect_drop(&op);
    rt_tcp_connect_drop(NULL);
    cr_assert_eq(rt_io_close(listener), 0);

    /* UDP. */
    rt_io *u = (rt_io *)1;
    cr_assert_eq(rt_udp_bind(rt, NULL, len, 0, &u), -EINVAL);
    cr_assert_eq(rt_udp_bind(rt, sa, len, 0, NULL), -EINVAL);
    cr_assert_eq(rt_udp_bind(NULL, sa, len, 0, &u), -EINVAL);
    cr_assert_eq(rt_udp_bind(rt, sa, len, 0, &u), 0);
    cr_assert_eq(rt_net_local_addr(u, &bound, &blen), 0);

    char byte = 'u';
    ssize_t res = 1;
    cr_assert_eq(rt_udp_send_to(NULL, &cx, &byte, 1, bsa, blen, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_udp_send_to(u, NULL, &byte, 1, bsa, blen, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_udp_send_to(u, &cx, NULL, 1, bsa, blen, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    cr_assert_eq(rt_udp_send_to(u, &cx, &byte, 1, bsa, blen, NULL), RT_READY);
    /* addr NULL on a socket without a peer: the kernel's answer. */
    POLL_UNTIL_READY(rt_udp_send_to(u, &cx, &byte, 1, NULL, 0, &res));
    cr_assert_eq(res, -EDESTADDRREQ);

    char got = 0;
    res = 1;
    cr_assert_eq(rt_udp_recv_from(NULL, &cx, &got, 1, NULL, NULL, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_udp_recv_from(u, NULL, &got, 1, NULL, NULL, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    res = 1;
    cr_assert_eq(rt_udp_recv_from(u, &cx, NULL, 1, NULL, NULL, &res), RT_READY);
    cr_assert_eq(res, -EINVAL);
    /* Nothing was sent by the refused sends (loopback delivers at once). */
    cr_assert_eq(rt_udp_recv_from(u, &cx, &got, 1, NULL, NULL, &res), RT_PENDING);

    cr_assert_eq(rt_udp_connect(NULL, bsa, blen), -EINVAL);
    cr_assert_eq(rt_udp_connect(u, NULL, blen), -EINVAL);
    cr_assert_eq(rt_udp_connect(u, bsa, blen), 0);
    /* addr NULL: to the connected peer (itself here). */
    POLL_UNTIL_READY(rt_udp_send_to(u, &cx, &byte, 1, NULL, 0, &res));
    cr_assert_eq(res, 1);
    /* The datagram stays queued through a recv without result. */
    POLL_UNTIL_READY(rt_io_readable(u, &cx));
    cr_assert_eq(rt_udp_recv_from(u, &cx, &got, 1, NULL, NULL, NULL), RT_READY);
    POLL_UNTIL_READY(rt_udp_recv_from(u, &cx, &got, 1, NULL, NULL, &res));
    cr_assert_eq(res, 1);
    cr_assert_eq(got, 'u');
    cr_assert_eq(rt_io_close(u), 0);

    finish_runtime(rt, 0);
}

/* ---- sync.h ------------------------------------------------------------ */

Test(null, sync)
{
    rt_context cx = noop_context();

    rt_semaphore sem;
    rt_semaphore_acquire acq;
    cr_assert_eq(rt_semaphore_init(NULL, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_init(&sem, 1), 0);
    rt_semaphore_destroy(NULL);
    cr_assert_eq(rt_semaphore_new(1, NULL), -EINVAL);
    cr_assert_null(rt_semaphore_ref(NULL));
    rt_semaphore_unref(NULL);
    cr_assert_eq(rt_semaphore_release(NULL, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_try_acquire(NULL, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_available(NULL), 0);
    cr_assert_eq(rt_semaphore_acquire_init(NULL, &sem, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_init(&acq, NULL, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_init(&acq, &sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(NULL, &cx), RT_READY);
    cr_assert_eq(rt_semaphore_acquire_poll(&acq, NULL), RT_PENDING);
    cr_assert_eq(rt_semaphore_available(&sem), 1, "a poll without context took a permit");
    cr_assert_eq(rt_semaphore_acquire_poll(&acq, &cx), RT_READY);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    rt_semaphore_acquire_drop(&acq);
    rt_semaphore_acquire_drop(NULL);
    cr_assert_eq(rt_semaphore_acquire_blocking(NULL, 1, 0), -EINVAL);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    rt_semaphore_destroy(&sem);

    rt_mutex m;
    rt_mutex_lock lk;
    cr_assert_eq(rt_mutex_init(NULL), -EINVAL);
    cr_assert_eq(rt_mutex_init(&m), 0);
    rt_mutex_destroy(NULL);
    cr_assert_eq(rt_mutex_new(NULL), -EINVAL);
    cr_assert_null(rt_mutex_ref(NULL));
    rt_mutex_unref(NULL);
    cr_assert_eq(rt_mutex_try_lock(NULL), -EINVAL);
    rt_mutex_unlock(NULL);
    cr_assert_eq(rt_mutex_lock_init(NULL, &m), -EINVAL);
    cr_assert_eq(rt_mutex_lock_init(&lk, NULL), -EINVAL);
    cr_assert_eq(rt_mutex_lock_init(&lk, &m), 0);
    cr_assert_eq(rt_mutex_lock_poll(NULL, &cx), RT_READY);
    cr_assert_eq(rt_mutex_lock_poll(&lk, NULL), RT_PENDING);
    cr_assert_eq(rt_mutex_try_lock(&m), 0, "a poll without context took the lock");
    rt_mutex_unlock(&m);
    cr_assert_eq(rt_mutex_lock_poll(&lk, &cx), RT_READY);
    rt_mutex_lock_drop(&lk);
    rt_mutex_lock_drop(NULL);
    rt_mutex_unlock(&m);
    cr_assert_eq(rt_mutex_lock_blocking(NULL, 0), -EINVAL);
    rt_mutex_destroy(&m);

    rt_notify n;
    rt_notified wait;
    cr_assert_eq(rt_notify_init(NULL), -EINVAL);
    cr_assert_eq(rt_notify_init(&n), 0);
    rt_notify_destroy(NULL);
    cr_assert_eq(rt_notify_new(NULL), -EINVAL);
    cr_assert_null(rt_notify_ref(NULL));
    rt_notify_unref(NULL);
    rt_notify_one(NULL);
    rt_notify_all(NULL);
    cr_assert_eq(rt_notified_init(NULL, &n), -EINVAL);
    cr_assert_eq(rt_notified_init(&wait, NULL), -EINVAL);
    cr_assert_eq(rt_notified_init(&wait, &n), 0);
    rt_notify_one(&n); /* a stored permit */
    cr_assert_eq(rt_notified_poll(NULL, &cx), RT_READY);
    cr_assert_eq(rt_notified_poll(&wait, NULL), RT_PENDING);
    cr_assert_eq(rt_notified_poll(&wait, &cx), RT_READY, "the permit was consumed");
    rt_notified_drop(&wait);
    rt_notified_drop(NULL);
    rt_notify_destroy(&n);
}

/* ---- channel.h --------------------------------------------------------- */

Test(null, channel)
{
    rt_context cx = noop_context();
    void *v = (void *)1;
    int status = 1;

    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(NULL), -EINVAL);
    cr_assert_eq(rt_oneshot_new(&o), 0);
    cr_assert_eq(rt_oneshot_send(NULL, (void *)5), -EINVAL);
    rt_oneshot_sender_drop(NULL);
    cr_assert_eq(rt_oneshot_recv_poll(NULL, &cx, &v, &status), RT_READY);
    cr_assert_null(v);
    cr_assert_eq(status, -EINVAL);
    cr_assert_eq(rt_oneshot_recv_poll(NULL, &cx, NULL, NULL), RT_READY);
    rt_oneshot_recv_drop(NULL);
    rt_oneshot_recv orecv;
    cr_assert_eq(rt_oneshot_recv_init(NULL, o), -EINVAL);
    cr_assert_eq(rt_oneshot_recv_init(&orecv, NULL), -EINVAL);
    cr_assert_eq(rt_oneshot_recv_init(&orecv, o), 0);
    cr_assert_eq(rt_oneshot_send(o, (void *)5), 0);
    v = (void *)1;
    status = 1;
    cr_assert_eq(rt_oneshot_recv_poll(&orecv, NULL, &v, &status), RT_READY);
    cr_assert_null(v);
    cr_assert_eq(status, -EINVAL);
    rt_oneshot_recv_drop(&orecv);
    cr_assert_eq(rt_oneshot_try_recv(NULL, &v), -EINVAL);
    cr_assert_eq(rt_oneshot_recv_blocking(NULL, 0, &v), -EINVAL);
    /* The value is still there; value may be NULL. */
    cr_assert_eq(rt_oneshot_try_recv(o, NULL), 0);
    cr_assert_eq(rt_oneshot_try_recv(o, &v), -EALREADY);
    v = (void *)1;
    cr_assert_eq(rt_oneshot_receiver_drop(NULL, &v), 0);
    cr_assert_null(v);
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);

    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, NULL), -EINVAL);
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    cr_assert_eq(rt_chan_sender_clone(NULL), -EINVAL);
    rt_chan_sender_drop(NULL);
    rt_chan_close(NULL);
    rt_chan_receiver_drop(NULL, NULL, NULL);
    cr_assert_eq(rt_chan_len(NULL), 0);
    cr_assert_eq(rt_chan_capacity(NULL), 0);
    cr_assert_eq(rt_chan_try_send(NULL, (void *)5), -EINVAL);
    cr_assert_eq(rt_chan_try_recv(NULL, &v), -EINVAL);
    v = (void *)1;
    status = 1;
    cr_assert_eq(rt_chan_recv_poll(NULL, &cx, &v, &status), RT_READY);
    cr_assert_null(v);
    cr_assert_eq(status, -EINVAL);
    cr_assert_eq(rt_chan_recv_poll(NULL, &cx, NULL, NULL), RT_READY);
    rt_chan_recv_drop(NULL);
    cr_assert_eq(rt_chan_receiver_clone(NULL), -EINVAL);
    cr_assert_eq(rt_chan_recv_blocking(NULL, 0, &v), -EINVAL);
    cr_assert_eq(rt_chan_send_blocking(NULL, (void *)5, 0), -EINVAL);

    rt_chan_send op;
    cr_assert_eq(rt_chan_send_init(NULL, ch, (void *)5), -EINVAL);
    cr_assert_eq(rt_chan_send_init(&op, NULL, (void *)5), -EINVAL);
    cr_assert_eq(rt_chan_send_init(&op, ch, (void *)5), 0);
    status = 1;
    cr_assert_eq(rt_chan_send_poll(NULL, &cx, &status), RT_READY);
    cr_assert_eq(status, -EINVAL);
    cr_assert_eq(rt_chan_send_poll(NULL, &cx, NULL), RT_READY);
    status = 1;
    cr_assert_eq(rt_chan_send_poll(&op, NULL, &status), RT_READY);
    cr_assert_eq(status, -EINVAL);
    cr_assert_eq(rt_chan_len(ch), 0, "a send without context sent");
    cr_assert_eq(op.ch, ch, "a refused send poll changed the operation");
    cr_assert_eq(rt_chan_send_drop(&op), 0);
    cr_assert_eq(rt_chan_send_drop(NULL), 0);

    /* A buffered value survives a receive without context. */
    cr_assert_eq(rt_chan_try_send(ch, (void *)6), 0);
    rt_chan_recv rop;
    cr_assert_eq(rt_chan_recv_init(NULL, ch), -EINVAL);
    cr_assert_eq(rt_chan_recv_init(&rop, NULL), -EINVAL);
    cr_assert_eq(rt_chan_recv_init(&rop, ch), 0);
    v = (void *)1;
    status = 1;
    cr_assert_eq(rt_chan_recv_poll(&rop, NULL, &v, &status), RT_READY);
    cr_assert_null(v);
    cr_assert_eq(status, -EINVAL);
    cr_assert_eq(rt_chan_len(ch), 1);
    rt_chan_recv_drop(&rop);
    cr_assert_eq(rt_chan_try_recv(ch, NULL), 0); /* value may be NULL */
    cr_assert_eq(rt_chan_len(ch), 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

/* ---- group.h ----------------------------------------------------------- */

Test(null, group)
{
    rt_runtime *rt = new_runtime(1);
    rt_context cx = noop_context();
    rt_group *g = (rt_group *)1;

    cr_assert_eq(rt_group_new(rt, NULL, NULL, NULL), -EINVAL);
    cr_assert_eq(rt_group_new(NULL, NULL, NULL, &g), -EINVAL); /* no runtime here */
    rt_group_options_init(NULL);
    cr_assert_eq(rt_group_new_ex(rt, NULL, NULL), -EINVAL);
    cr_assert_eq(rt_group_new_ex(NULL, NULL, &g), -EINVAL); /* no runtime here */
    cr_assert_null(g);
    cr_assert_eq(rt_group_new(rt, NULL, NULL, &g), 0);

    uint64_t id = 1;
    cr_assert_eq(rt_group_spawn(NULL, NULL, ready_poll, NULL, NULL, 0, &id), -EINVAL);
    cr_assert_eq(id, 0);
    cr_assert_eq(rt_group_spawn(g, NULL, NULL, NULL, NULL, 0, &id), -EINVAL);
    cr_assert_eq(rt_group_spawn(g, NULL, ready_poll, NULL, NULL, 8, &id), -EINVAL);
    /* opts, drop, state (size 0) and id may be NULL. */
    cr_assert_eq(rt_group_spawn(g, NULL, ready_poll, NULL, NULL, 0, NULL), 0);
    cr_assert_eq(rt_group_len(NULL), 0);
    rt_group_cancel(NULL);

    rt_group_next next;
    rt_group_result res;
    int err = 1;
    cr_assert_eq(rt_group_next_init(NULL, g, -1), -EINVAL);
    cr_assert_eq(rt_group_next_init(&next, NULL, -1), -EINVAL);
    cr_assert_eq(rt_group_next_init(&next, g, -1), 0);
    cr_assert_eq(rt_group_next_poll(NULL, &cx, &res, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    err = 1;
    cr_assert_eq(rt_group_next_poll(&next, NULL, &res, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    cr_assert_eq(rt_group_next_poll(NULL, &cx, NULL, NULL), RT_READY);
    cr_assert_eq(rt_group_len(g), 1, "a refused poll collected the child");
    /* res and err may be NULL: the child is collected all the same. */
    POLL_UNTIL_READY(rt_group_next_poll(&next, &cx, NULL, NULL));
    cr_assert_eq(rt_group_len(g), 0);
    rt_group_next_drop(&next);
    rt_group_next_drop(NULL);

    rt_group_wait wait;
    size_t failed = 99;
    cr_assert_eq(rt_group_join_all_init(NULL, g, -1), -EINVAL);
    cr_assert_eq(rt_group_join_all_init(&wait, NULL, -1), -EINVAL);
    cr_assert_eq(rt_group_close_init(NULL, g, -1), -EINVAL);
    cr_assert_eq(rt_group_close_init(&wait, NULL, -1), -EINVAL);
    cr_assert_eq(rt_group_close_init(&wait, g, -1), 0);
    err = 1;
    cr_assert_eq(rt_group_wait_poll(NULL, &cx, &failed, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    err = 1;
    cr_assert_eq(rt_group_wait_poll(&wait, NULL, &failed, &err), RT_READY);
    cr_assert_eq(err, -EINVAL);
    cr_assert_eq(failed, 99, "a refused wait wrote *failed");
    cr_assert_eq(rt_group_wait_poll(NULL, &cx, NULL, NULL), RT_READY);
    /* failed and err may be NULL. */
    cr_assert_eq(rt_group_wait_poll(&wait, &cx, NULL, NULL), RT_READY);
    rt_group_wait_drop(&wait);
    rt_group_wait_drop(NULL);

    rt_group_free(NULL);
    rt_group_free(g);
    finish_runtime(rt, 0);
}
