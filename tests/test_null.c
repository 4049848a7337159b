/* Black-box tests of the NULL-argument rules: every public function whose
 * header does not forbid NULL is called with NULL in each pointer argument,
 * one at a time, next to valid other arguments (a real runtime, descriptor,
 * channel...), and must give exactly the documented answer. For plain
 * functions that is error.h's rule: -EINVAL from a function that reports
 * errors, nothing done by a function that releases, drops, closes, cancels,
 * detaches, wakes or notifies, and the documented value from any other. For
 * operations it is future.h's one rule, checked for every kind of operation:
 * rt_future_poll(NULL, cx) is RT_READY; a zeroed operation is RT_READY with
 * result -EINVAL; a poll with cx NULL is RT_READY with result -EINVAL and
 * leaves the operation as it was (unfinished, nothing done, still usable);
 * an init refused for a NULL (or otherwise bad) argument returns the
 * negative errno and leaves the operation, when there is one, finished with
 * that errno as its result. One test per header. */
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
#include <limits.h>
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

static void *echo_job(void *arg)
{
    return arg;
}

/* A user operation that counts its polls and drops; with `ready` it finishes
 * at once with `value`, else it stays pending (storing no waker). */
struct probe_op {
    RT_FUTURE_HEADER;
    bool ready;
    int64_t value;
    int polls;
    int drops;
};

static rt_poll probe_op_poll(rt_future *f, rt_context *cx)
{
    struct probe_op *op = (struct probe_op *)f;
    (void)cx;
    op->polls++;
    if (op->ready)
        return rt_future_finish(f, op->value);
    return RT_PENDING;
}

static void probe_op_drop(rt_future *f)
{
    ((struct probe_op *)f)->drops++;
}

static const rt_future_vtable probe_op_vtable = {probe_op_poll, probe_op_drop, NULL};

static void probe_op_init(struct probe_op *op, bool ready, int64_t value)
{
    memset(op, 0, sizeof *op);
    op->future.vtable = &probe_op_vtable;
    op->ready = ready;
    op->value = value;
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

/* The result an init gives an operation it refused: before any poll it is
 * finished with `err` (a prior result is overwritten), every poll reports
 * RT_READY with it, and a drop changes nothing. */
static void check_refused(rt_future *f, int64_t err, const char *what)
{
    cr_assert_eq(f->result, err, "%s: a refused init left result %lld", what, (long long)f->result);
    cr_assert(rt_future_is_done(f), "%s: a refused init did not finish the operation", what);
    rt_context cx = noop_context();
    cr_assert_eq(rt_future_poll(f, &cx), RT_READY, "%s: a refused operation waited", what);
    cr_assert_eq(f->result, err, "%s", what);
    rt_future_drop(f);
    cr_assert_eq(f->result, err, "%s: dropping a refused operation changed its result", what);
}

/* Marks *op as holding stale contents, so that check_refused can tell an init
 * that wrote the error from one that left the field alone. */
#define STALE(op)                                                                                  \
    do {                                                                                           \
        memset((op), 0, sizeof *(op));                                                             \
        (op)->result = 12345;                                                                      \
    } while (0)

/* A poll without context of an initialised, unfinished operation: RT_READY
 * with result -EINVAL, and the operation is left as it was (not finished;
 * the caller checks that nothing else happened, then uses or drops it). */
static void check_no_context(rt_future *f, const char *what)
{
    cr_assert_eq(rt_future_poll(f, NULL), RT_READY, "%s: a poll without context", what);
    cr_assert_eq(f->result, -EINVAL, "%s: a poll without context gave result %lld", what,
                 (long long)f->result);
    cr_assert_not(rt_future_is_done(f), "%s: a poll without context finished the operation", what);
}

/* A zeroed operation of the given type: not done, RT_READY with -EINVAL on
 * every poll (with or without context), and safe to drop. */
#define CHECK_ZEROED(type)                                                                         \
    do {                                                                                           \
        type z_;                                                                                   \
        memset(&z_, 0, sizeof z_);                                                                 \
        rt_context zcx_ = noop_context();                                                          \
        cr_assert_not(rt_future_is_done(&z_.future), "a zeroed " #type " is done");                \
        cr_assert_eq(RT_POLL_OP(&z_, &zcx_), RT_READY, "a zeroed " #type " waited");               \
        cr_assert_eq(z_.result, -EINVAL, "a zeroed " #type " gave %lld", (long long)z_.result);    \
        z_.result = 0;                                                                             \
        cr_assert_eq(RT_POLL_OP(&z_, NULL), RT_READY);                                             \
        cr_assert_eq(z_.result, -EINVAL);                                                          \
        RT_DROP(&z_);                                                                              \
        RT_DROP(&z_);                                                                              \
    } while (0)

/* ---- error.h ----------------------------------------------------------- */

Test(null, error)
{
    /* rt_strerror takes no pointer; it names the -EINVAL every NULL gives. */
    cr_assert_str_eq(rt_strerror(-EINVAL), "invalid argument");
}

Test(null, strerror_says_what_the_errno_means_not_one_cause_of_it)
{
    /* -EAGAIN comes from an empty try-receive and a busy try-acquire as
     * well as from a thread that could not be created; -ECANCELED from an
     * operation a select or a timeout dropped as well as from an aborted
     * task; -ETIMEDOUT from every wait with a limit. */
    const char *again = rt_strerror(-EAGAIN);
    cr_assert(strstr(again, "thread") == NULL, "-EAGAIN: %s", again);
    cr_assert(strstr(again, "try again") != NULL, "-EAGAIN: %s", again);
    const char *cancelled = rt_strerror(-ECANCELED);
    cr_assert(strstr(cancelled, "task") == NULL, "-ECANCELED: %s", cancelled);
    cr_assert(strstr(cancelled, "cancel") != NULL, "-ECANCELED: %s", cancelled);
    cr_assert_str_eq(rt_strerror(-ETIMEDOUT), "timed out");
    cr_assert_str_eq(rt_strerror(ETIMEDOUT), rt_strerror(-ETIMEDOUT), "either sign");
    cr_assert_str_eq(rt_strerror(0), "success");
    cr_assert_str_eq(rt_strerror(-EPIPE), "Broken pipe", "the system's words for the rest");
    cr_assert_str_eq(rt_strerror(-100000), "unknown error");
    cr_assert_str_eq(rt_strerror(INT_MIN), "unknown error");
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

    /* Operations: NULL is ready, and dropping it or asking about it is
     * harmless. */
    rt_context cx = noop_context();
    cr_assert_eq(rt_future_poll(NULL, &cx), RT_READY);
    cr_assert_eq(rt_future_poll(NULL, NULL), RT_READY);
    rt_future_drop(NULL);
    cr_assert_not(rt_future_is_done(NULL));

    /* A bare zeroed header is a zeroed operation. */
    rt_future z;
    memset(&z, 0, sizeof z);
    cr_assert_not(rt_future_is_done(&z));
    cr_assert_eq(rt_future_poll(&z, &cx), RT_READY);
    cr_assert_eq(z.result, -EINVAL);
    cr_assert_eq(rt_future_poll(&z, NULL), RT_READY);
    cr_assert_eq(z.result, -EINVAL);
    rt_future_drop(&z);
    CHECK_ZEROED(struct probe_op);

    /* A user operation polled without context: its vtable is not asked,
     * and it carries on as before. */
    struct probe_op op;
    probe_op_init(&op, true, 42);
    check_no_context(&op.future, "user operation");
    cr_assert_eq(op.polls, 0, "a poll without context reached the vtable");
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, 42);
    cr_assert_eq(op.polls, 1);

    /* And dropped unfinished after such a poll: "drop it as usual". */
    probe_op_init(&op, false, 0);
    check_no_context(&op.future, "pending user operation");
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING);
    RT_DROP(&op);
    cr_assert_eq(op.drops, 1);
    cr_assert_eq(op.result, -ECANCELED);
}

/* ---- coro.h ------------------------------------------------------------ */

struct yielder {
    rt_coro co;
};

static rt_poll yielder_poll(void *state, rt_context *cx, void **out)
{
    struct yielder *y = state;
    RT_CORO_BEGIN(&y->co);
    RT_CORO_YIELD(&y->co, cx);
    RT_RETURN(&y->co, out, (intptr_t)7);
    RT_CORO_END(&y->co, out);
}

struct awaiter {
    rt_coro co;
    struct probe_op op;
};

static rt_poll awaiter_poll(void *state, rt_context *cx, void **out)
{
    struct awaiter *a = state;
    RT_CORO_BEGIN(&a->co);
    probe_op_init(&a->op, true, 5);
    RT_AWAIT(&a->co, cx, &a->op);
    RT_RETURN(&a->co, out, (intptr_t)a->op.result);
    RT_CORO_END(&a->co, out);
}

static int guard_releases;

static void count_release(rt_guard *g)
{
    (void)g;
    guard_releases++;
}

Test(null, coro)
{
    /* RT_CORO_YIELD with cx NULL wakes nothing and still suspends once. */
    struct yielder y = {{0}};
    void *out = NULL;
    cr_assert_eq(yielder_poll(&y, NULL, &out), RT_PENDING);
    cr_assert_eq(yielder_poll(&y, NULL, &out), RT_READY);
    cr_assert_eq((intptr_t)out, 7);

    /* RT_AWAIT with cx NULL: the operation's poll is refused (RT_READY,
     * -EINVAL), so the coroutine goes on past the await with the operation
     * unfinished and no longer in flight; it is still the caller's to drop. */
    struct awaiter a;
    memset(&a, 0, sizeof a);
    cr_assert_eq(awaiter_poll(&a, NULL, &out), RT_READY);
    cr_assert_eq((intptr_t)out, -EINVAL);
    cr_assert_null(a.co.awaiting);
    cr_assert_eq(a.op.polls, 0, "a poll without context reached the vtable");
    cr_assert_not(rt_future_is_done(&a.op.future));
    RT_DROP(&a.op);
    cr_assert_eq(a.op.drops, 1);

    /* Cleanup, drop, hold and release do nothing with NULL. */
    rt_coro_cleanup(NULL);
    rt_coro_drop(NULL);
    rt_guard g = {NULL, count_release};
    rt_coro co;
    memset(&co, 0, sizeof co);
    rt_coro_hold(NULL, &g);
    rt_coro_hold(&co, NULL);
    cr_assert_null(co.held, "a NULL guard was held");
    rt_coro_release(NULL, &g);
    rt_coro_release(&co, NULL);
    /* A guard that is not held is left alone. */
    rt_coro_release(&co, &g);
    cr_assert_eq(guard_releases, 0, "a guard that was not held was released");
    /* The same guard held, then released once, through the coroutine. */
    rt_coro_hold(&co, &g);
    cr_assert_eq(co.held, &g);
    rt_coro_release(NULL, &g);
    rt_coro_release(&co, NULL);
    cr_assert_eq(guard_releases, 0);
    rt_coro_cleanup(&co);
    cr_assert_eq(guard_releases, 1);
    cr_assert_null(co.held);
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
    cr_assert_null(rt_current_runtime());

    /* cfg NULL: the defaults. */
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(NULL, &rt), 0);
    cr_assert_not_null(rt);
    cr_assert_gt(rt_runtime_workers(rt), 0);

    void *value = (void *)1;
    cr_assert_eq(block_on_status(NULL, ready_poll, NULL, NULL, 0, &value), -EINVAL);
    cr_assert_eq(block_on_status(rt, NULL, NULL, NULL, 0, &value), -EINVAL);
    cr_assert_eq(block_on_status(rt, ready_poll, NULL, NULL, 8, &value), -EINVAL);
    cr_assert_eq(value, (void *)1, "a refused rt_block_on wrote its value");
    /* drop, state (size 0) and value may be NULL. */
    cr_assert_eq(block_on_status(rt, ready_poll, NULL, NULL, 0, NULL), 0);
    cr_assert_eq(block_on_status(rt, ready_poll, NULL, NULL, 0, &value), 0);
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
    cr_assert_eq(RT_SPAWN_STATE(rt, ready_poll, NULL, no_state, &h), -EINVAL);
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
    /* value may be NULL in a wait. */
    void *value = (void *)1;
    cr_assert_eq(task_wait_status(NULL, -1, &value), -EINVAL);
    cr_assert_eq(task_wait_status(h, 30000 * MS, NULL), 0);

    /* Join operations. With op NULL the handle is detached, not leaked (the
     * sanitizer build checks). */
    cr_assert_eq(rt_spawn(rt, ready_poll, NULL, NULL, 0, &h), 0);
    cr_assert_eq(rt_task_join_init(NULL, h), -EINVAL);
    cr_assert_eq(rt_task_join_init(NULL, NULL), -EINVAL);
    rt_task_join j;
    STALE(&j);
    cr_assert_eq(rt_task_join_init(&j, NULL), -EINVAL);
    check_refused(&j.future, -EINVAL, "rt_task_join_init(op, NULL)");
    cr_assert_null(j.value);
    CHECK_ZEROED(rt_task_join);

    /* A join polled without context keeps its handle and still works. */
    cr_assert_eq(rt_spawn(rt, ready_poll, NULL, NULL, 0, &h), 0);
    cr_assert_eq(rt_task_join_init(&j, h), 0);
    check_no_context(&j.future, "rt_task_join");
    cr_assert_eq(j.task, h, "a join polled without context released its handle");
    POLL_UNTIL_READY(RT_POLL_OP(&j, &cx));
    cr_assert_eq(j.result, 0);
    cr_assert_eq((intptr_t)j.value, 42);
    cr_assert_null(j.task);

    /* One dropped after a poll without context detaches its handle. */
    cr_assert_eq(rt_spawn(rt, ready_poll, NULL, NULL, 0, &h), 0);
    cr_assert_eq(rt_task_join_init(&j, h), 0);
    check_no_context(&j.future, "rt_task_join");
    RT_DROP(&j);
    cr_assert_eq(j.result, -ECANCELED);
    cr_assert_null(j.task);

    rt_task_drop(NULL);
    rt_task_cancel(NULL);
    cr_assert_not(rt_task_is_finished(NULL));
    cr_assert_eq(rt_yield(NULL), RT_PENDING);
    rt_spawn_options_init(NULL);
    cr_assert_eq(rt_task_id(NULL), 0);
    cr_assert_null(rt_task_name(NULL));
    cr_assert(rt_coop_proceed(NULL));

    /* Inside a task, rt_coop_proceed(NULL) is true and spends no budget. */
    value = NULL;
    cr_assert_eq(block_on_status(rt, coop_null_poll, NULL, NULL, 0, &value), 0);
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

    rt_sleep s;
    cr_assert_eq(rt_sleep_init(NULL, rt, MS), -EINVAL);
    cr_assert_eq(rt_sleep_until_init(NULL, rt, 0), -EINVAL);
    STALE(&s);
    cr_assert_eq(rt_sleep_init(&s, NULL, MS), -EINVAL); /* no runtime here */
    check_refused(&s.future, -EINVAL, "rt_sleep_init(s, NULL)");
    STALE(&s);
    cr_assert_eq(rt_sleep_until_init(&s, NULL, 0), -EINVAL);
    check_refused(&s.future, -EINVAL, "rt_sleep_until_init(s, NULL)");
    CHECK_ZEROED(rt_sleep);

    cr_assert_eq(rt_sleep_init(&s, rt, 60000 * MS), 0);
    check_no_context(&s.future, "rt_sleep");
    cr_assert_null(s.timer, "a refused poll armed the timer");
    cr_assert_eq(RT_POLL_OP(&s, &cx), RT_PENDING); /* still a sleep */
    RT_DROP(&s);
    cr_assert_eq(s.result, -ECANCELED);
    rt_future_drop(NULL);

    /* A sleep already due is ready even so: only a missing context is
     * refused. */
    cr_assert_eq(rt_sleep_init(&s, rt, 0), 0);
    check_no_context(&s.future, "rt_sleep (due)");
    cr_assert_eq(RT_POLL_OP(&s, &cx), RT_READY);
    cr_assert_eq(s.result, 0);

    rt_interval iv;
    cr_assert_eq(rt_interval_init(NULL, rt, MS), -EINVAL);
    cr_assert_eq(rt_interval_init(&iv, rt, 0), -EINVAL);
    rt_interval_tick tick;
    cr_assert_eq(rt_interval_tick_init(NULL, &iv), -EINVAL);
    STALE(&tick);
    cr_assert_eq(rt_interval_tick_init(&tick, NULL), -EINVAL);
    check_refused(&tick.future, -EINVAL, "rt_interval_tick_init(tick, NULL)");
    STALE(&tick);
    cr_assert_eq(rt_interval_tick_init(&tick, &iv), -EINVAL);
    check_refused(&tick.future, -EINVAL, "rt_interval_tick_init of a refused interval");
    CHECK_ZEROED(rt_interval_tick);
    cr_assert_eq(rt_interval_init(&iv, rt, 60000 * MS), 0);
    cr_assert_eq(rt_interval_tick_init(&tick, &iv), 0);
    check_no_context(&tick.future, "rt_interval_tick");
    cr_assert_eq(RT_POLL_OP(&tick, &cx), RT_PENDING);
    RT_DROP(&tick);

    finish_runtime(rt, 0);
}

/* ---- combine.h --------------------------------------------------------- */

Test(null, combine)
{
    rt_runtime *rt = new_runtime(1);
    rt_context cx = noop_context();
    struct probe_op inner;
    probe_op_init(&inner, false, 0);

    rt_timeout t;
    cr_assert_eq(rt_timeout_init(NULL, rt, &inner.future, MS), -EINVAL);
    cr_assert_eq(rt_timeout_until_init(NULL, rt, &inner.future, 0), -EINVAL);
    STALE(&t);
    cr_assert_eq(rt_timeout_init(&t, rt, NULL, MS), -EINVAL);
    check_refused(&t.future, -EINVAL, "rt_timeout_init(t, rt, NULL)");
    STALE(&t);
    cr_assert_eq(rt_timeout_init(&t, NULL, &inner.future, MS), -EINVAL); /* no runtime here */
    check_refused(&t.future, -EINVAL, "rt_timeout_init(t, NULL, inner)");
    STALE(&t);
    cr_assert_eq(rt_timeout_until_init(&t, rt, NULL, 0), -EINVAL);
    check_refused(&t.future, -EINVAL, "rt_timeout_until_init(t, rt, NULL)");
    STALE(&t);
    cr_assert_eq(rt_timeout_until_init(&t, NULL, &inner.future, 0), -EINVAL);
    check_refused(&t.future, -EINVAL, "rt_timeout_until_init(t, NULL, inner)");
    /* A refused timeout drops the operation it was given (nothing else
     * would), without polling it. */
    cr_assert_eq(inner.polls, 0, "a refused timeout polled its inner operation");
    cr_assert_eq(inner.drops, 1, "a refused timeout left its inner operation undropped");
    cr_assert(rt_future_is_done(&inner.future));
    CHECK_ZEROED(rt_timeout);
    probe_op_init(&inner, false, 0);

    /* A timeout polled without context neither polls nor drops the inner
     * operation and arms nothing; then it works as usual. */
    cr_assert_eq(rt_timeout_init(&t, rt, &inner.future, 60000 * MS), 0);
    check_no_context(&t.future, "rt_timeout");
    cr_assert_eq(inner.polls, 0, "a refused timeout polled its inner operation");
    cr_assert_eq(inner.drops, 0, "a refused timeout dropped its inner operation");
    cr_assert_not(rt_future_is_done(&inner.future));
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_PENDING);
    cr_assert_eq(inner.polls, 1);
    RT_DROP(&t);
    cr_assert_eq(inner.drops, 1, "dropping the timeout did not drop the inner operation");
    cr_assert_eq(inner.result, -ECANCELED);

    /* Around an operation ready at once, and around a zeroed one. */
    probe_op_init(&inner, true, 42);
    cr_assert_eq(rt_timeout_init(&t, rt, &inner.future, 60000 * MS), 0);
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_READY);
    cr_assert_eq(t.result, 42);
    struct probe_op zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    cr_assert_eq(rt_timeout_until_init(&t, rt, &zeroed.future, rt_now_ns() + 60000 * MS), 0);
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_READY, "a timeout around a zeroed operation waited");
    cr_assert_eq(t.result, -EINVAL);

    /* Select. */
    struct probe_op a, b;
    probe_op_init(&a, false, 0);
    probe_op_init(&b, false, 0);
    rt_select sel;
    cr_assert_eq(rt_select_init(NULL, RT_FUTURES(&a.future, &b.future)), -EINVAL);
    STALE(&sel);
    cr_assert_eq(rt_select_init(&sel, NULL, 2), -EINVAL);
    check_refused(&sel.future, -EINVAL, "rt_select_init(op, NULL)");
    STALE(&sel);
    cr_assert_eq(rt_select_init(&sel, RT_FUTURES(&a.future, NULL)), -EINVAL);
    check_refused(&sel.future, -EINVAL, "rt_select_init with a NULL entry");
    rt_future *const arms[1] = {&a.future};
    STALE(&sel);
    cr_assert_eq(rt_select_init(&sel, arms, 0), -EINVAL);
    check_refused(&sel.future, -EINVAL, "rt_select_init of none");
    rt_future *many[RT_COMBINE_MAX + 1];
    for (size_t i = 0; i < RT_COMBINE_MAX + 1; i++)
        many[i] = &a.future;
    STALE(&sel);
    cr_assert_eq(rt_select_init(&sel, many, RT_COMBINE_MAX + 1), -EINVAL);
    check_refused(&sel.future, -EINVAL, "rt_select_init of too many");
    CHECK_ZEROED(rt_select);
    cr_assert_eq(a.polls + b.polls, 0, "a refused select polled its operations");
    cr_assert_eq(a.drops, 1, "a refused select left its operations undropped");
    cr_assert_eq(b.drops, 1);
    probe_op_init(&a, false, 0);
    probe_op_init(&b, false, 0);
    cr_assert_eq(rt_select_init(&sel, RT_FUTURES(&a.future, &b.future)), 0);
    check_no_context(&sel.future, "rt_select");
    cr_assert_eq(a.polls + b.polls, 0, "a refused select polled its operations");
    cr_assert_eq(sel.index, sel.count, "a refused select named a winner");
    cr_assert_eq(RT_POLL_OP(&sel, &cx), RT_PENDING);
    RT_DROP(&sel);
    cr_assert_eq(a.drops + b.drops, 2);

    /* Join all. */
    probe_op_init(&a, false, 0);
    probe_op_init(&b, false, 0);
    rt_join_all ja;
    cr_assert_eq(rt_join_all_init(NULL, RT_FUTURES(&a.future, &b.future), 0), -EINVAL);
    STALE(&ja);
    cr_assert_eq(rt_join_all_init(&ja, NULL, 2, 0), -EINVAL);
    check_refused(&ja.future, -EINVAL, "rt_join_all_init(op, NULL)");
    STALE(&ja);
    cr_assert_eq(rt_join_all_init(&ja, RT_FUTURES(NULL, &b.future), 0), -EINVAL);
    check_refused(&ja.future, -EINVAL, "rt_join_all_init with a NULL entry");
    STALE(&ja);
    cr_assert_eq(rt_join_all_init(&ja, arms, 0, 0), -EINVAL);
    check_refused(&ja.future, -EINVAL, "rt_join_all_init of none");
    STALE(&ja);
    cr_assert_eq(rt_join_all_init(&ja, many, RT_COMBINE_MAX + 1, 0), -EINVAL);
    check_refused(&ja.future, -EINVAL, "rt_join_all_init of too many");
    STALE(&ja);
    cr_assert_eq(rt_join_all_init(&ja, RT_FUTURES(&a.future, &b.future), 0x80u), -EINVAL);
    check_refused(&ja.future, -EINVAL, "rt_join_all_init with unknown flags");
    CHECK_ZEROED(rt_join_all);
    cr_assert_eq(a.polls + b.polls, 0, "a refused join_all polled its operations");
    cr_assert_eq(a.drops, 1, "a refused join_all left its operations undropped");
    cr_assert_eq(b.drops, 1);
    probe_op_init(&a, false, 0);
    probe_op_init(&b, false, 0);
    cr_assert_eq(rt_join_all_init(&ja, RT_FUTURES(&a.future, &b.future), 0), 0);
    check_no_context(&ja.future, "rt_join_all");
    cr_assert_eq(a.polls + b.polls, 0, "a refused join_all polled its operations");
    cr_assert_eq(ja.done, 0);
    cr_assert_eq(RT_POLL_OP(&ja, &cx), RT_PENDING);
    RT_DROP(&ja);
    cr_assert_eq(a.drops + b.drops, 2);

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

    /* Readiness. */
    rt_io_ready ready;
    cr_assert_eq(rt_io_readable_init(NULL, r), -EINVAL);
    cr_assert_eq(rt_io_writable_init(NULL, w), -EINVAL);
    STALE(&ready);
    cr_assert_eq(rt_io_readable_init(&ready, NULL), -EINVAL);
    check_refused(&ready.future, -EINVAL, "rt_io_readable_init(op, NULL)");
    STALE(&ready);
    cr_assert_eq(rt_io_writable_init(&ready, NULL), -EINVAL);
    check_refused(&ready.future, -EINVAL, "rt_io_writable_init(op, NULL)");
    CHECK_ZEROED(rt_io_ready);
    cr_assert_eq(rt_io_readable_init(&ready, r), 0);
    check_no_context(&ready.future, "rt_io_readable");
    RT_DROP(&ready);
    cr_assert_eq(rt_io_writable_init(&ready, w), 0);
    check_no_context(&ready.future, "rt_io_writable");
    POLL_UNTIL_READY(RT_POLL_OP(&ready, &cx));
    cr_assert_eq(ready.result, 0);

    /* Writes: nothing is written by a refused one. */
    char byte = 'x';
    char got = 0;
    rt_io_write wr;
    cr_assert_eq(rt_io_write_init(NULL, w, &byte, 1), -EINVAL);
    STALE(&wr);
    cr_assert_eq(rt_io_write_init(&wr, NULL, &byte, 1), -EINVAL);
    check_refused(&wr.future, -EINVAL, "rt_io_write_init(op, NULL)");
    STALE(&wr);
    cr_assert_eq(rt_io_write_init(&wr, w, NULL, 1), -EINVAL);
    check_refused(&wr.future, -EINVAL, "rt_io_write_init(op, io, NULL, 1)");
    CHECK_ZEROED(rt_io_write);
    cr_assert_eq(rt_io_write_init(&wr, w, &byte, 1), 0);
    check_no_context(&wr.future, "rt_io_write");
    RT_DROP(&wr);
    cr_assert_eq(read(fds[0], &got, 1), -1);
    cr_assert_eq(errno, EAGAIN);

    rt_io_write_all wa;
    cr_assert_eq(rt_io_write_all_init(NULL, w, &byte, 1), -EINVAL);
    STALE(&wa);
    cr_assert_eq(rt_io_write_all_init(&wa, NULL, &byte, 1), -EINVAL);
    check_refused(&wa.future, -EINVAL, "rt_io_write_all_init(op, NULL)");
    STALE(&wa);
    cr_assert_eq(rt_io_write_all_init(&wa, w, NULL, 1), -EINVAL);
    check_refused(&wa.future, -EINVAL, "rt_io_write_all_init(op, io, NULL, 1)");
    CHECK_ZEROED(rt_io_write_all);
    cr_assert_eq(rt_io_write_all_init(&wa, w, &byte, 1), 0);
    check_no_context(&wa.future, "rt_io_write_all");
    cr_assert_eq(wa.progress, 0, "a refused write_all made progress");
    RT_DROP(&wa);
    cr_assert_eq(wa.progress, 0);
    cr_assert_eq(read(fds[0], &got, 1), -1);
    cr_assert_eq(errno, EAGAIN);

    /* One byte in the pipe; the refused reads must leave it there. */
    cr_assert_eq(rt_io_write_init(&wr, w, &byte, 1), 0);
    cr_assert_eq(RT_POLL_OP(&wr, &cx), RT_READY);
    cr_assert_eq(wr.result, 1);
    rt_io_read rd;
    cr_assert_eq(rt_io_read_init(NULL, r, &got, 1), -EINVAL);
    STALE(&rd);
    cr_assert_eq(rt_io_read_init(&rd, NULL, &got, 1), -EINVAL);
    check_refused(&rd.future, -EINVAL, "rt_io_read_init(op, NULL)");
    STALE(&rd);
    cr_assert_eq(rt_io_read_init(&rd, r, NULL, 1), -EINVAL);
    check_refused(&rd.future, -EINVAL, "rt_io_read_init(op, io, NULL, 1)");
    CHECK_ZEROED(rt_io_read);
    cr_assert_eq(rt_io_read_init(&rd, r, &got, 1), 0);
    check_no_context(&rd.future, "rt_io_read");
    RT_DROP(&rd);
    /* buf NULL with len 0 is a valid empty read. */
    cr_assert_eq(rt_io_read_init(&rd, r, NULL, 0), 0);
    cr_assert_eq(RT_POLL_OP(&rd, &cx), RT_READY);
    cr_assert_eq(rd.result, 0);
    cr_assert_eq(rt_io_read_init(&rd, r, &got, 1), 0);
    cr_assert_eq(RT_POLL_OP(&rd, &cx), RT_READY);
    cr_assert_eq(rd.result, 1);
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

    /* Accept: refused ones first, then a real one. */
    rt_tcp_accept acc;
    cr_assert_eq(rt_tcp_accept_init(NULL, listener), -EINVAL);
    STALE(&acc);
    cr_assert_eq(rt_tcp_accept_init(&acc, NULL), -EINVAL);
    check_refused(&acc.future, -EINVAL, "rt_tcp_accept_init(op, NULL)");
    CHECK_ZEROED(rt_tcp_accept);
    int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(client, 0);
    cr_assert_eq(connect(client, bsa, blen), 0);
    cr_assert_eq(rt_tcp_accept_init(&acc, listener), 0);
    /* The connection is queued, and a poll without context leaves it there. */
    check_no_context(&acc.future, "rt_tcp_accept");
    POLL_UNTIL_READY(RT_POLL_OP(&acc, &cx));
    cr_assert_eq(acc.result, 0, "the accept failed: %s", rt_strerror((int)acc.result));
    cr_assert_not_null(acc.conn);
    cr_assert_gt(acc.peer_len, 0);
    rt_io *conn = acc.conn;
    cr_assert_eq(rt_tcp_shutdown(NULL, SHUT_RDWR), -EINVAL);
    cr_assert_eq(rt_tcp_set_nodelay(NULL, true), -EINVAL);
    cr_assert_eq(rt_tcp_set_nodelay(conn, true), 0);
    cr_assert_eq(rt_tcp_shutdown(conn, SHUT_RDWR), 0);
    cr_assert_eq(rt_io_close(conn), 0);
    close(client);

    /* Connect: every refused init leaves the operation finished with the
     * error, and a refused poll leaves it unstarted. */
    rt_tcp_connect op;
    cr_assert_eq(rt_tcp_connect_init(NULL, rt, bsa, blen), -EINVAL);
    STALE(&op);
    cr_assert_eq(rt_tcp_connect_init(&op, rt, NULL, blen), -EINVAL);
    check_refused(&op.future, -EINVAL, "rt_tcp_connect_init(op, rt, NULL)");
    STALE(&op);
    cr_assert_eq(rt_tcp_connect_init(&op, NULL, bsa, blen), -EINVAL); /* no runtime here */
    check_refused(&op.future, -EINVAL, "rt_tcp_connect_init(op, NULL, addr)");
    STALE(&op);
    cr_assert_eq(rt_tcp_connect_init(&op, rt, bsa, 0), -EINVAL);
    check_refused(&op.future, -EINVAL, "rt_tcp_connect_init of an empty address");
    STALE(&op);
    cr_assert_eq(rt_tcp_connect_init(&op, rt, bsa, (socklen_t)sizeof(struct sockaddr_storage) + 1),
                 -EINVAL);
    check_refused(&op.future, -EINVAL, "rt_tcp_connect_init of an oversized address");
    CHECK_ZEROED(rt_tcp_connect);
    cr_assert_eq(rt_tcp_connect_init(&op, rt, bsa, blen), 0);
    check_no_context(&op.future, "rt_tcp_connect");
    cr_assert_null(op.io, "a refused connect poll started the connection");
    RT_DROP(&op);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_null(op.io);
    cr_assert_eq(rt_io_close(listener), 0);

    /* UDP. */
    rt_io *u = (rt_io *)1;
    cr_assert_eq(rt_udp_bind(rt, NULL, len, 0, &u), -EINVAL);
    cr_assert_eq(rt_udp_bind(rt, sa, len, 0, NULL), -EINVAL);
    cr_assert_eq(rt_udp_bind(NULL, sa, len, 0, &u), -EINVAL);
    cr_assert_eq(rt_udp_bind(rt, sa, len, 0, &u), 0);
    cr_assert_eq(rt_net_local_addr(u, &bound, &blen), 0);

    char byte = 'u';
    rt_udp_send_to snd;
    cr_assert_eq(rt_udp_send_to_init(NULL, u, &byte, 1, bsa, blen), -EINVAL);
    STALE(&snd);
    cr_assert_eq(rt_udp_send_to_init(&snd, NULL, &byte, 1, bsa, blen), -EINVAL);
    check_refused(&snd.future, -EINVAL, "rt_udp_send_to_init(op, NULL)");
    STALE(&snd);
    cr_assert_eq(rt_udp_send_to_init(&snd, u, NULL, 1, bsa, blen), -EINVAL);
    check_refused(&snd.future, -EINVAL, "rt_udp_send_to_init(op, io, NULL, 1)");
    STALE(&snd);
    cr_assert_eq(
        rt_udp_send_to_init(&snd, u, &byte, 1, bsa, (socklen_t)sizeof(struct sockaddr_storage) + 1),
        -EINVAL);
    check_refused(&snd.future, -EINVAL, "rt_udp_send_to_init of an oversized address");
    CHECK_ZEROED(rt_udp_send_to);
    cr_assert_eq(rt_udp_send_to_init(&snd, u, &byte, 1, bsa, blen), 0);
    check_no_context(&snd.future, "rt_udp_send_to");
    RT_DROP(&snd);
    /* addr NULL on a socket without a peer: the kernel's answer. */
    cr_assert_eq(rt_udp_send_to_init(&snd, u, &byte, 1, NULL, 0), 0);
    POLL_UNTIL_READY(RT_POLL_OP(&snd, &cx));
    cr_assert_eq(snd.result, -EDESTADDRREQ);

    char got = 0;
    rt_udp_recv_from rcv;
    cr_assert_eq(rt_udp_recv_from_init(NULL, u, &got, 1), -EINVAL);
    STALE(&rcv);
    cr_assert_eq(rt_udp_recv_from_init(&rcv, NULL, &got, 1), -EINVAL);
    check_refused(&rcv.future, -EINVAL, "rt_udp_recv_from_init(op, NULL)");
    STALE(&rcv);
    cr_assert_eq(rt_udp_recv_from_init(&rcv, u, NULL, 1), -EINVAL);
    check_refused(&rcv.future, -EINVAL, "rt_udp_recv_from_init(op, io, NULL, 1)");
    CHECK_ZEROED(rt_udp_recv_from);
    cr_assert_eq(rt_udp_recv_from_init(&rcv, u, &got, 1), 0);
    check_no_context(&rcv.future, "rt_udp_recv_from");
    /* Nothing was sent by the refused sends (loopback delivers at once). */
    cr_assert_eq(RT_POLL_OP(&rcv, &cx), RT_PENDING);
    RT_DROP(&rcv);

    cr_assert_eq(rt_udp_connect(NULL, bsa, blen), -EINVAL);
    cr_assert_eq(rt_udp_connect(u, NULL, blen), -EINVAL);
    cr_assert_eq(rt_udp_connect(u, bsa, blen), 0);
    /* addr NULL: to the connected peer (itself here). */
    cr_assert_eq(rt_udp_send_to_init(&snd, u, &byte, 1, NULL, 0), 0);
    POLL_UNTIL_READY(RT_POLL_OP(&snd, &cx));
    cr_assert_eq(snd.result, 1);
    /* The datagram stays queued through a receive polled without context. */
    rt_io_ready ready;
    cr_assert_eq(rt_io_readable_init(&ready, u), 0);
    POLL_UNTIL_READY(RT_POLL_OP(&ready, &cx));
    cr_assert_eq(rt_udp_recv_from_init(&rcv, u, &got, 1), 0);
    check_no_context(&rcv.future, "rt_udp_recv_from (datagram queued)");
    POLL_UNTIL_READY(RT_POLL_OP(&rcv, &cx));
    cr_assert_eq(rcv.result, 1);
    cr_assert_eq(got, 'u');
    cr_assert_gt(rcv.from_len, 0);
    cr_assert_eq(rt_io_close(u), 0);

    finish_runtime(rt, 0);
}

/* ---- sync.h ------------------------------------------------------------ */

Test(null, sync)
{
    rt_context cx = noop_context();

    rt_semaphore *sem;
    rt_semaphore_acquire acq;
    cr_assert_eq(rt_semaphore_new(1, NULL), -EINVAL);
    cr_assert_eq(rt_semaphore_new(1, &sem), 0);
    rt_semaphore_drop(NULL);
    cr_assert_eq(rt_semaphore_new(1, NULL), -EINVAL);
    cr_assert_null(rt_semaphore_clone(NULL));
    rt_semaphore_drop(NULL);
    cr_assert_eq(rt_semaphore_release(NULL, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_try_acquire(NULL, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_available(NULL), 0);
    cr_assert_eq(rt_semaphore_acquire_init(NULL, sem, 1), -EINVAL);
    STALE(&acq);
    cr_assert_eq(rt_semaphore_acquire_init(&acq, NULL, 1), -EINVAL);
    check_refused(&acq.future, -EINVAL, "rt_semaphore_acquire_init(op, NULL)");
    STALE(&acq);
    cr_assert_eq(rt_semaphore_acquire_init(&acq, sem, 0), -EINVAL);
    check_refused(&acq.future, -EINVAL, "rt_semaphore_acquire_init of 0 permits");
    CHECK_ZEROED(rt_semaphore_acquire);
    cr_assert_eq(rt_semaphore_acquire_init(&acq, sem, 1), 0);
    check_no_context(&acq.future, "rt_semaphore_acquire");
    cr_assert_eq(rt_semaphore_available(sem), 1, "a poll without context took a permit");
    cr_assert_eq(RT_POLL_OP(&acq, &cx), RT_READY);
    cr_assert_eq(acq.result, 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    RT_DROP(&acq); /* finished: the permit stays the caller's */
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(rt_semaphore_acquire_wait(NULL, 1, 0), -EINVAL);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    rt_semaphore_drop(sem);

    rt_mutex *m;
    rt_mutex_lock lk;
    cr_assert_eq(rt_mutex_new(NULL), -EINVAL);
    cr_assert_eq(rt_mutex_new(&m), 0);
    rt_mutex_drop(NULL);
    cr_assert_eq(rt_mutex_new(NULL), -EINVAL);
    cr_assert_null(rt_mutex_clone(NULL));
    rt_mutex_drop(NULL);
    cr_assert_eq(rt_mutex_try_lock(NULL), -EINVAL);
    rt_mutex_unlock(NULL);
    cr_assert_eq(rt_mutex_lock_init(NULL, m), -EINVAL);
    STALE(&lk);
    cr_assert_eq(rt_mutex_lock_init(&lk, NULL), -EINVAL);
    check_refused(&lk.future, -EINVAL, "rt_mutex_lock_init(op, NULL)");
    CHECK_ZEROED(rt_mutex_lock);
    cr_assert_eq(rt_mutex_lock_init(&lk, m), 0);
    check_no_context(&lk.future, "rt_mutex_lock");
    cr_assert_eq(rt_mutex_try_lock(m), 0, "a poll without context took the lock");
    rt_mutex_unlock(m);
    cr_assert_eq(RT_POLL_OP(&lk, &cx), RT_READY);
    cr_assert_eq(lk.result, 0);
    RT_DROP(&lk); /* finished: the lock stays the caller's */
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY);
    rt_mutex_unlock(m);
    cr_assert_eq(rt_mutex_lock_wait(NULL, 0), -EINVAL);
    rt_mutex_drop(m);

    rt_notify *n;
    rt_notified wait;
    cr_assert_eq(rt_notify_new(NULL), -EINVAL);
    cr_assert_eq(rt_notify_new(&n), 0);
    rt_notify_drop(NULL);
    cr_assert_eq(rt_notify_new(NULL), -EINVAL);
    cr_assert_null(rt_notify_clone(NULL));
    rt_notify_drop(NULL);
    rt_notify_one(NULL);
    rt_notify_all(NULL);
    cr_assert_eq(rt_notified_init(NULL, n), -EINVAL);
    STALE(&wait);
    cr_assert_eq(rt_notified_init(&wait, NULL), -EINVAL);
    check_refused(&wait.future, -EINVAL, "rt_notified_init(op, NULL)");
    CHECK_ZEROED(rt_notified);
    cr_assert_eq(rt_notified_init(&wait, n), 0);
    rt_notify_one(n); /* a stored permit */
    check_no_context(&wait.future, "rt_notified");
    cr_assert_eq(RT_POLL_OP(&wait, &cx), RT_READY, "a poll without context consumed the permit");
    cr_assert_eq(wait.result, 0);
    RT_DROP(&wait);
    rt_notify_drop(n);
}

/* ---- channel.h --------------------------------------------------------- */

Test(null, channel)
{
    rt_context cx = noop_context();
    void *v = (void *)1;

    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(NULL), -EINVAL);
    cr_assert_eq(rt_oneshot_new(&o), 0);
    cr_assert_eq(rt_oneshot_send(NULL, (void *)5), -EINVAL);
    rt_oneshot_sender_drop(NULL);
    rt_oneshot_recv orecv;
    cr_assert_eq(rt_oneshot_recv_init(NULL, o), -EINVAL);
    STALE(&orecv);
    cr_assert_eq(rt_oneshot_recv_init(&orecv, NULL), -EINVAL);
    check_refused(&orecv.future, -EINVAL, "rt_oneshot_recv_init(op, NULL)");
    cr_assert_null(orecv.value);
    CHECK_ZEROED(rt_oneshot_recv);
    cr_assert_eq(rt_oneshot_recv_init(&orecv, o), 0);
    cr_assert_eq(rt_oneshot_send(o, (void *)5), 0);
    check_no_context(&orecv.future, "rt_oneshot_recv");
    cr_assert_null(orecv.value, "a receive without context took the value");
    RT_DROP(&orecv);
    cr_assert_eq(orecv.result, -ECANCELED);
    cr_assert_eq(rt_oneshot_try_recv(NULL, &v), -EINVAL);
    cr_assert_eq(rt_oneshot_recv_wait(NULL, 0, &v), -EINVAL);
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
    cr_assert_eq(rt_chan_receiver_clone(NULL), -EINVAL);
    cr_assert_eq(rt_chan_recv_wait(NULL, 0, &v), -EINVAL);
    cr_assert_eq(rt_chan_send_wait(NULL, (void *)5, 0), -EINVAL);

    rt_chan_send op;
    cr_assert_eq(rt_chan_send_init(NULL, ch, (void *)5), -EINVAL);
    STALE(&op);
    cr_assert_eq(rt_chan_send_init(&op, NULL, (void *)5), -EINVAL);
    check_refused(&op.future, -EINVAL, "rt_chan_send_init(op, NULL)");
    CHECK_ZEROED(rt_chan_send);
    cr_assert_eq(rt_chan_send_init(&op, ch, (void *)5), 0);
    check_no_context(&op.future, "rt_chan_send");
    cr_assert_eq(rt_chan_len(ch), 0, "a send without context sent");
    cr_assert_eq(op.ch, ch, "a refused send poll changed the operation");
    RT_DROP(&op);
    cr_assert_eq(op.result, -ECANCELED, "a dropped send that was never polled reports it sent");
    cr_assert_eq(rt_chan_len(ch), 0);

    /* A buffered value survives a receive without context. */
    cr_assert_eq(rt_chan_try_send(ch, (void *)6), 0);
    rt_chan_recv rop;
    cr_assert_eq(rt_chan_recv_init(NULL, ch), -EINVAL);
    STALE(&rop);
    cr_assert_eq(rt_chan_recv_init(&rop, NULL), -EINVAL);
    check_refused(&rop.future, -EINVAL, "rt_chan_recv_init(op, NULL)");
    cr_assert_null(rop.value);
    CHECK_ZEROED(rt_chan_recv);
    cr_assert_eq(rt_chan_recv_init(&rop, ch), 0);
    check_no_context(&rop.future, "rt_chan_recv");
    cr_assert_null(rop.value, "a receive without context took a value");
    cr_assert_eq(rt_chan_len(ch), 1);
    RT_DROP(&rop);
    cr_assert_eq(rt_chan_try_recv(ch, NULL), 0); /* value may be NULL */
    cr_assert_eq(rt_chan_len(ch), 0);
    /* And a receive polled with its context after a refused poll works. */
    cr_assert_eq(rt_chan_try_send(ch, (void *)7), 0);
    cr_assert_eq(rt_chan_recv_init(&rop, ch), 0);
    check_no_context(&rop.future, "rt_chan_recv");
    cr_assert_eq(RT_POLL_OP(&rop, &cx), RT_READY);
    cr_assert_eq(rop.result, 0);
    cr_assert_eq(rop.value, (void *)7);
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
    cr_assert_eq(rt_group_next_init(NULL, g), -EINVAL);
    STALE(&next);
    cr_assert_eq(rt_group_next_init(&next, NULL), -EINVAL);
    check_refused(&next.future, -EINVAL, "rt_group_next_init(op, NULL)");
    CHECK_ZEROED(rt_group_next);
    cr_assert_eq(rt_group_next_init(&next, g), 0);
    check_no_context(&next.future, "rt_group_next");
    cr_assert_eq(rt_group_len(g), 1, "a refused poll collected the child");
    POLL_UNTIL_READY(RT_POLL_OP(&next, &cx));
    cr_assert_eq(next.result, 0);
    cr_assert_eq(next.child.status, 0);
    cr_assert_eq((intptr_t)next.child.value, 42);
    cr_assert_eq(rt_group_len(g), 0);
    RT_DROP(&next);

    rt_group_join wait;
    cr_assert_eq(rt_group_join_all_init(NULL, g), -EINVAL);
    STALE(&wait);
    cr_assert_eq(rt_group_join_all_init(&wait, NULL), -EINVAL);
    check_refused(&wait.future, -EINVAL, "rt_group_join_all_init(op, NULL)");
    cr_assert_eq(rt_group_close_init(NULL, g), -EINVAL);
    STALE(&wait);
    cr_assert_eq(rt_group_close_init(&wait, NULL), -EINVAL);
    check_refused(&wait.future, -EINVAL, "rt_group_close_init(op, NULL)");
    CHECK_ZEROED(rt_group_join);
    cr_assert_eq(rt_group_join_all_init(&wait, g), 0);
    check_no_context(&wait.future, "rt_group_join_all");
    RT_DROP(&wait);
    cr_assert_eq(rt_group_close_init(&wait, g), 0);
    check_no_context(&wait.future, "rt_group_close");
    cr_assert_eq(RT_POLL_OP(&wait, &cx), RT_READY);
    cr_assert_eq(wait.result, 0);
    cr_assert_eq(wait.failed, 0);
    RT_DROP(&wait);

    rt_group_free(NULL);
    rt_group_free(g);
    finish_runtime(rt, 0);
}
