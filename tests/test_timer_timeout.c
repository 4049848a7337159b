/* Black-box tests of asyncrt/timer.h's timeouts and intervals: a timeout
 * around a future that never finishes gives -ETIMEDOUT after the duration,
 * one around a future that finishes first gives its result, the inner future
 * is polled first, an expired timeout leaves the inner future to the caller;
 * aborting a task sleeping alone or inside a timeout drops it promptly and
 * cancels its timers; an interval ticks no earlier than start plus k periods,
 * skips missed ticks instead of bursting, and wakes once per tick. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_timer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

TestSuite(timer, .timeout = 110, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* A future that never finishes and stores no waker; counts its polls. */
struct never {
    atomic_int polls;
};

static rt_poll never_counted_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    (void)out;
    struct never *n = state;
    atomic_fetch_add(&n->polls, 1);
    return RT_PENDING;
}

/* A future that finishes at once with a fixed value. */
static rt_poll ready_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    *out = *(void **)state;
    return RT_READY;
}

/* A sleep as an ordinary future (rt_poll_fn), to nest inside a timeout. It
 * finishes with SLEEP_FUTURE_VALUE. */
#define SLEEP_FUTURE_VALUE ((void *)(uintptr_t)0x5EE9)

struct sleep_future {
    rt_sleep s;
    int err;
    int polls;
};

static rt_poll sleep_future_poll(void *state, rt_context *cx, void **out)
{
    struct sleep_future *f = state;
    f->polls++;
    if (rt_sleep_poll(&f->s, cx, &f->err) != RT_READY)
        return RT_PENDING;
    *out = SLEEP_FUTURE_VALUE;
    return RT_READY;
}

/* ---- timeouts ------------------------------------------------------------------ */

struct timeout_case {
    rt_coro co;
    int64_t timeout;     /* of the rt_timeout */
    int64_t inner_sleep; /* < 0: the inner future never finishes */
    int64_t start, end;
    int init_rc;
    int status;
    bool armed;
    bool inner_armed;
    void *inner_out;
    rt_timeout t;
    struct never never;
    struct sleep_future inner;
};

static rt_poll timeout_case_poll(void *state, rt_context *cx, void **out)
{
    struct timeout_case *c = state;
    RT_CORO_BEGIN(&c->co);
    c->start = rt_now_ns();
    c->init_rc = rt_timeout_init(&c->t, NULL, c->timeout);
    if (c->init_rc != 0)
        RT_RETURN(&c->co, out, NULL);
    c->armed = true;
    if (c->inner_sleep >= 0) {
        c->init_rc = rt_sleep_init(&c->inner.s, NULL, c->inner_sleep);
        if (c->init_rc != 0)
            RT_RETURN(&c->co, out, NULL);
        c->inner_armed = true;
    }
    c->status = 12345;
    c->inner_out = (void *)(uintptr_t)0xBAD;
    if (c->inner_sleep >= 0)
        RT_AWAIT(&c->co, rt_timeout_poll(&c->t, cx, sleep_future_poll, &c->inner, &c->inner_out,
                                         &c->status));
    else
        RT_AWAIT(&c->co, rt_timeout_poll(&c->t, cx, never_counted_poll, &c->never, &c->inner_out,
                                         &c->status));
    c->end = rt_now_ns();
    rt_timeout_drop(&c->t);
    c->armed = false;
    if (c->inner_armed)
        rt_sleep_drop(&c->inner.s);
    c->inner_armed = false;
    RT_RETURN(&c->co, out, c);
    RT_CORO_END(&c->co, out);
}

static atomic_int timeout_case_drops;
static struct event timeout_case_dropped = EVENT_INIT;
static int64_t timeout_case_drop_time;

static void timeout_case_drop(void *state)
{
    struct timeout_case *c = state;
    if (c->armed)
        rt_timeout_drop(&c->t);
    if (c->inner_armed)
        rt_sleep_drop(&c->inner.s);
    c->armed = c->inner_armed = false;
    timeout_case_drop_time = rt_now_ns();
    atomic_fetch_add(&timeout_case_drops, 1);
    event_signal(&timeout_case_dropped);
}

/* Runs a timeout case as a task and copies its final state out (the task's
 * result is a pointer to its own state, which lives until the drop: copy it
 * in the poll instead). */
struct timeout_result {
    int init_rc;
    int status;
    void *inner_out;
    int64_t elapsed;
    int never_polls;
    int inner_polls;
};

static struct timeout_result last_timeout_result;

static rt_poll timeout_case_outer_poll(void *state, rt_context *cx, void **out)
{
    struct timeout_case *c = state;
    void *ignored;
    if (timeout_case_poll(state, cx, &ignored) != RT_READY)
        return RT_PENDING;
    last_timeout_result.init_rc = c->init_rc;
    last_timeout_result.status = c->status;
    last_timeout_result.inner_out = c->inner_out;
    last_timeout_result.elapsed = c->end - c->start;
    last_timeout_result.never_polls = atomic_load(&c->never.polls);
    last_timeout_result.inner_polls = c->inner.polls;
    *out = NULL;
    return RT_READY;
}

static struct timeout_result run_timeout_case(rt_runtime *rt, int64_t timeout, int64_t inner_sleep)
{
    struct timeout_case c;
    memset(&c, 0, sizeof c);
    c.timeout = timeout;
    c.inner_sleep = inner_sleep;
    cr_assert_eq(rt_block_on(rt, timeout_case_outer_poll, timeout_case_drop, &c, sizeof c, NULL),
                 0);
    cr_assert_eq(last_timeout_result.init_rc, 0, "init: %s",
                 rt_strerror(last_timeout_result.init_rc));
    return last_timeout_result;
}

Test(timer, timeout_around_a_future_that_never_finishes_gives_etimedout_after_the_duration)
{
    rt_runtime *rt = new_runtime(2);
    struct timeout_result r = run_timeout_case(rt, 30 * MS, -1);
    cr_assert_eq(r.status, -ETIMEDOUT, "status %d (%s)", r.status, rt_strerror(r.status));
    cr_assert_geq(r.elapsed, 30 * MS, "timed out after only %lld ns", (long long)r.elapsed);
    cr_assert_lt(r.elapsed, 30 * MS + OUTLIER_BOUND_NS, "timed out %lld ms late",
                 (long long)((r.elapsed - 30 * MS) / MS));
    cr_assert_geq(r.never_polls, 1, "the inner future was never polled");
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&timeout_case_drops), 1);
}

Test(timer, timeout_around_a_future_that_finishes_first_gives_status_0_and_its_result)
{
    rt_runtime *rt = new_runtime(2);
    struct timeout_result r = run_timeout_case(rt, 5 * SEC, 20 * MS);
    cr_assert_eq(r.status, 0, "status %d (%s)", r.status, rt_strerror(r.status));
    cr_assert_eq(r.inner_out, SLEEP_FUTURE_VALUE, "the inner result was not passed on");
    cr_assert_geq(r.elapsed, 20 * MS, "the inner sleep finished early");
    cr_assert_lt(r.elapsed, 20 * MS + OUTLIER_BOUND_NS);
    cr_assert_geq(r.inner_polls, 2, "the inner future was polled %d times", r.inner_polls);
    /* The 5 s timer was dropped with the timeout: shutdown does not wait. */
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms", (long long)(took / MS));
}

Test(timer, timeout_polls_the_inner_future_first_even_when_already_due)
{
    rt_runtime *rt = new_runtime(1);
    struct counting_waker w;
    counting_waker_init(&w);
    rt_context cx = counting_context(&w);

    /* Inner ready at once, deadline already passed: the inner result wins. */
    rt_timeout t;
    cr_assert_eq(rt_timeout_init(&t, rt, 0), 0);
    void *value = (void *)(uintptr_t)0xACE;
    void *out = NULL;
    int status = 12345;
    cr_assert_eq(rt_timeout_poll(&t, &cx, ready_poll, &value, &out, &status), RT_READY);
    cr_assert_eq(status, 0, "a ready inner future lost to a due deadline: %s", rt_strerror(status));
    cr_assert_eq(out, value);
    rt_timeout_drop(&t);

    /* Inner pending, deadline already passed: -ETIMEDOUT at once. */
    struct never n;
    atomic_init(&n.polls, 0);
    cr_assert_eq(rt_timeout_init(&t, rt, -1), 0);
    status = 12345;
    cr_assert_eq(rt_timeout_poll(&t, &cx, never_counted_poll, &n, NULL, &status), RT_READY);
    cr_assert_eq(status, -ETIMEDOUT, "status %s", rt_strerror(status));
    cr_assert_eq(atomic_load(&n.polls), 1, "the inner future was not polled first");
    rt_timeout_drop(&t);

    /* Inner ready at once with a long deadline; out and status may be NULL. */
    cr_assert_eq(rt_timeout_init(&t, rt, 10 * SEC), 0);
    cr_assert_eq(rt_timeout_poll(&t, &cx, ready_poll, &value, NULL, NULL), RT_READY);
    rt_timeout_drop(&t);

    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&w), 0, "%ld waker references never given back",
                 counting_outstanding(&w));
}

Test(timer, timeout_expiring_around_a_long_inner_sleep_leaves_the_inner_to_the_caller)
{
    rt_runtime *rt = new_runtime(2);
    /* The inner 10 s sleep is dropped by the case after the timeout. */
    struct timeout_result r = run_timeout_case(rt, 40 * MS, 10 * SEC);
    cr_assert_eq(r.status, -ETIMEDOUT, "status %s", rt_strerror(r.status));
    cr_assert_geq(r.elapsed, 40 * MS);
    cr_assert_lt(r.elapsed, 40 * MS + OUTLIER_BOUND_NS);
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms: a dropped timer is still waited for",
                 (long long)(took / MS));
}

/* A sleep inside a timeout inside a task that is aborted: both timers are
 * cancelled and the task is dropped at once. */
static struct event timeout_case_pending = EVENT_INIT;

static rt_poll announcing_timeout_case_poll(void *state, rt_context *cx, void **out)
{
    rt_poll p = timeout_case_poll(state, cx, out);
    if (p == RT_PENDING)
        event_signal(&timeout_case_pending);
    return p;
}

Test(timer, aborting_a_task_sleeping_inside_a_timeout_drops_it_promptly_and_cancels_both_timers)
{
    rt_runtime *rt = new_runtime(2);
    struct timeout_case c;
    memset(&c, 0, sizeof c);
    c.timeout = 10 * SEC;
    c.inner_sleep = 10 * SEC;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, announcing_timeout_case_poll, timeout_case_drop, &c, &task), 0);
    cr_assert(event_wait_for(&timeout_case_pending, 1), "the task never waited");
    int64_t abort_time = rt_now_ns();
    rt_task_abort(task);
    cr_assert(event_wait_for_s(&timeout_case_dropped, 1, 5), "the aborted task was not dropped");
    cr_assert_lt(timeout_case_drop_time - abort_time, SEC, "the drop ran %lld ms after the abort",
                 (long long)((timeout_case_drop_time - abort_time) / MS));
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms", (long long)(took / MS));
    cr_assert_eq(atomic_load(&timeout_case_drops), 1);
}

/* ---- an aborted sleeping task ---------------------------------------------------- */

static struct event long_sleeper_pending = EVENT_INIT;
static struct event long_sleeper_dropped = EVENT_INIT;
static atomic_int long_sleeper_drops;
static int64_t long_sleeper_drop_time;

static rt_poll long_sleeper_poll(void *state, rt_context *cx, void **out)
{
    rt_poll p = plain_sleep_poll(state, cx, out);
    if (p == RT_PENDING)
        event_signal(&long_sleeper_pending);
    return p;
}

static void long_sleeper_drop(void *state)
{
    plain_sleep_drop(state);
    long_sleeper_drop_time = rt_now_ns();
    atomic_fetch_add(&long_sleeper_drops, 1);
    event_signal(&long_sleeper_dropped);
}

Test(timer, aborting_a_task_sleeping_10s_drops_it_promptly_and_shuts_down_quickly)
{
    rt_runtime *rt = new_runtime(2);
    struct plain_sleep p = {{0}, 10 * SEC, false, 0, {0}};
    rt_task *task = NULL;
    int64_t start = rt_now_ns();
    cr_assert_eq(RT_SPAWN(rt, long_sleeper_poll, long_sleeper_drop, &p, &task), 0);
    cr_assert(event_wait_for(&long_sleeper_pending, 1), "the task never slept");
    int64_t abort_time = rt_now_ns();
    rt_task_abort(task);
    cr_assert(event_wait_for_s(&long_sleeper_dropped, 1, 5), "the aborted task was not dropped");
    cr_assert_lt(long_sleeper_drop_time - abort_time, SEC, "the drop ran %lld ms after the abort",
                 (long long)((long_sleeper_drop_time - abort_time) / MS));
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms: the cancelled timer is still waited for",
                 (long long)(took / MS));
    cr_assert_lt(rt_now_ns() - start, 5 * SEC, "the whole test took as long as the sleep");
    cr_assert_eq(atomic_load(&long_sleeper_drops), 1);
}

/* ---- intervals --------------------------------------------------------------------- */

#define INTERVAL_TICKS 10
#define INTERVAL_PERIOD (10LL * MS)

struct ticker {
    rt_coro co;
    int k;
    int err;
    bool armed;
    int64_t start;
    int64_t *ticks; /* INTERVAL_TICKS, owned by the test */
    rt_interval iv;
};

static rt_poll ticker_poll(void *state, rt_context *cx, void **out)
{
    struct ticker *t = state;
    RT_CORO_BEGIN(&t->co);
    t->start = rt_now_ns();
    if (rt_interval_init(&t->iv, NULL, INTERVAL_PERIOD) != 0)
        RT_RETURN(&t->co, out, (intptr_t)-1);
    t->armed = true;
    for (t->k = 0; t->k < INTERVAL_TICKS; t->k++) {
        RT_AWAIT(&t->co, rt_interval_poll(&t->iv, cx, &t->err));
        if (t->err != 0)
            RT_RETURN(&t->co, out, (intptr_t)t->err);
        t->ticks[t->k] = rt_now_ns() - t->start;
    }
    rt_interval_drop(&t->iv);
    t->armed = false;
    RT_RETURN(&t->co, out, 0);
    RT_CORO_END(&t->co, out);
}

static void ticker_drop(void *state)
{
    struct ticker *t = state;
    if (t->armed)
        rt_interval_drop(&t->iv);
    t->armed = false;
}

Test(timer, interval_ticks_n_times_each_no_earlier_than_start_plus_k_periods)
{
    rt_runtime *rt = new_runtime(2);
    int64_t ticks[INTERVAL_TICKS] = {0};
    struct ticker t;
    memset(&t, 0, sizeof t);
    t.ticks = ticks;
    void *value = (void *)(intptr_t)-99;
    cr_assert_eq(rt_block_on(rt, ticker_poll, ticker_drop, &t, sizeof t, &value), 0);
    cr_assert_eq((intptr_t)value, 0, "interval: %s", rt_strerror((int)(intptr_t)value));
    for (int k = 0; k < INTERVAL_TICKS; k++) {
        int64_t due = (int64_t)(k + 1) * INTERVAL_PERIOD;
        cr_assert_geq(ticks[k], due, "tick %d came at %lld us, before start + %d periods", k + 1,
                      (long long)(ticks[k] / 1000), k + 1);
        if (k > 0)
            cr_assert_gt(ticks[k], ticks[k - 1]);
    }
    /* Skipped ticks may stretch the run, but not absurdly. */
    cr_assert_lt(ticks[INTERVAL_TICKS - 1], 2 * INTERVAL_TICKS * INTERVAL_PERIOD + OUTLIER_BOUND_NS,
                 "10 ticks of 10 ms took %lld ms", (long long)(ticks[INTERVAL_TICKS - 1] / MS));
    finish_runtime(rt, 0);
}

#define SKIP_PERIOD (20LL * MS)

struct skipper {
    rt_coro co;
    int err;
    int sleep_err;
    bool iv_armed, sleep_armed;
    int64_t start;       /* before rt_interval_init */
    int64_t first_tick;  /* after the first ready */
    int64_t before_late; /* just before the late poll */
    int64_t late_tick;   /* the late poll's (or the first after it) ready */
    int64_t next_tick;   /* the ready after that */
    rt_interval iv;
    rt_sleep s;
};

static struct skipper skipper_result;

static rt_poll skipper_poll(void *state, rt_context *cx, void **out)
{
    struct skipper *k = state;
    RT_CORO_BEGIN(&k->co);
    k->start = rt_now_ns();
    if (rt_interval_init(&k->iv, NULL, SKIP_PERIOD) != 0)
        RT_RETURN(&k->co, out, (intptr_t)-1);
    k->iv_armed = true;
    RT_AWAIT(&k->co, rt_interval_poll(&k->iv, cx, &k->err));
    k->first_tick = rt_now_ns();
    /* Fall behind by several periods. */
    if (rt_sleep_init(&k->s, NULL, 4 * SKIP_PERIOD - SKIP_PERIOD / 4) != 0)
        RT_RETURN(&k->co, out, (intptr_t)-2);
    k->sleep_armed = true;
    RT_AWAIT(&k->co, rt_sleep_poll(&k->s, cx, &k->sleep_err));
    rt_sleep_drop(&k->s);
    k->sleep_armed = false;
    k->before_late = rt_now_ns();
    RT_AWAIT(&k->co, rt_interval_poll(&k->iv, cx, &k->err));
    k->late_tick = rt_now_ns();
    RT_AWAIT(&k->co, rt_interval_poll(&k->iv, cx, &k->err));
    k->next_tick = rt_now_ns();
    rt_interval_drop(&k->iv);
    k->iv_armed = false;
    skipper_result = *k;
    RT_RETURN(&k->co, out, 0);
    RT_CORO_END(&k->co, out);
}

static void skipper_drop(void *state)
{
    struct skipper *k = state;
    if (k->iv_armed)
        rt_interval_drop(&k->iv);
    if (k->sleep_armed)
        rt_sleep_drop(&k->s);
    k->iv_armed = k->sleep_armed = false;
}

Test(timer, interval_that_falls_behind_skips_missed_ticks_instead_of_bursting)
{
    rt_runtime *rt = new_runtime(2);
    struct skipper k;
    memset(&k, 0, sizeof k);
    void *value = (void *)(intptr_t)-99;
    cr_assert_eq(rt_block_on(rt, skipper_poll, skipper_drop, &k, sizeof k, &value), 0);
    cr_assert_eq((intptr_t)value, 0);
    struct skipper *r = &skipper_result;
    cr_assert_eq(r->err, 0);
    cr_assert_geq(r->first_tick - r->start, SKIP_PERIOD, "first tick before one period");
    /* The tick after the late one is the first multiple of the period after
     * the late poll began (the interval's own start is at or after r->start). */
    int64_t behind = r->before_late - r->start;
    int64_t next_multiple = (behind / SKIP_PERIOD + 1) * SKIP_PERIOD;
    cr_assert_geq(r->next_tick - r->start, next_multiple,
                  "missed ticks came in a burst: late poll at +%lld us, next tick at +%lld us, "
                  "expected none before +%lld us",
                  (long long)(behind / 1000), (long long)((r->next_tick - r->start) / 1000),
                  (long long)(next_multiple / 1000));
    cr_assert_lt(r->next_tick - r->start, next_multiple + SKIP_PERIOD + OUTLIER_BOUND_NS,
                 "the tick after the skip is far too late");
    finish_runtime(rt, 0);
}

Test(timer, interval_polled_by_hand_wakes_once_per_tick)
{
    rt_runtime *rt = new_runtime(1);
    struct counting_waker w;
    counting_waker_init(&w);
    rt_context cx = counting_context(&w);
    rt_interval iv;
    int64_t start = rt_now_ns();
    cr_assert_eq(rt_interval_init(&iv, rt, 15 * MS), 0);
    for (int k = 1; k <= 3; k++) {
        int err = 12345;
        unsigned long seen = event_count(&w.woken);
        rt_poll p = rt_interval_poll(&iv, &cx, &err);
        /* Wait for a wake, poll again; a spurious wake only costs a round. */
        for (int round = 0; p == RT_PENDING && round < 1000; round++) {
            cr_assert(event_wait_for(&w.woken, seen + 1), "tick %d never woke", k);
            seen = event_count(&w.woken);
            p = rt_interval_poll(&iv, &cx, &err);
        }
        cr_assert_eq(p, RT_READY, "tick %d: still pending after 1000 wakes", k);
        cr_assert_eq(err, 0);
        cr_assert_geq(rt_now_ns() - start, k * 15 * MS, "tick %d early", k);
    }
    rt_interval_drop(&iv);
    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&w), 0, "%ld waker references never given back",
                 counting_outstanding(&w));
}
