/* Black-box tests of asyncrt/coro.h: the RT_CORO_BEGIN / RT_AWAIT / RT_YIELD /
 * RT_RETURN / RT_CORO_END macros, polled by hand with a no-op or a counting
 * waker and run as tasks on a runtime. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

TestSuite(coro, .timeout = 120, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* A poll-style countdown for RT_AWAIT: pending (after a self wake-up, like a
 * yield) until *remaining reaches zero. */
static rt_poll countdown_poll(int *remaining, rt_context *cx)
{
    if (*remaining == 0)
        return RT_READY;
    (*remaining)--;
    rt_waker_wake_by_ref(rt_context_waker(cx));
    return RT_PENDING;
}

/* ---- coroutines polled by hand -------------------------------------------- */

struct two_yields {
    rt_coro co;
    int step;
};

/* Yields twice, recording its progress, then returns 42. */
static rt_poll two_yields_poll(void *p, rt_context *cx, void **out)
{
    struct two_yields *s = p;
    RT_CORO_BEGIN(&s->co);
    s->step = 1;
    RT_YIELD(&s->co, cx);
    s->step = 2;
    RT_YIELD(&s->co, cx);
    s->step = 3;
    RT_RETURN(&s->co, out, (uintptr_t)42);
    RT_CORO_END(&s->co, out);
}

Test(coro, yields_resume_after_the_yield_and_wake_the_context_each_time)
{
    struct counting_waker t = COUNTING_WAKER_INIT;
    rt_context cx = counting_context(&t);
    struct two_yields s = {{0}, 0};
    void *out = (void *)(uintptr_t)1;

    cr_assert_eq(two_yields_poll(&s, &cx, &out), RT_PENDING);
    cr_assert_eq(s.step, 1);
    cr_assert_eq(atomic_load(&t.wakes_by_ref), 1, "RT_YIELD must wake the context by reference");
    cr_assert_neq(s.co.line, 0);
    cr_assert_neq(s.co.line, RT_CORO_DONE);

    cr_assert_eq(two_yields_poll(&s, &cx, &out), RT_PENDING);
    cr_assert_eq(s.step, 2, "the second poll must resume after the first yield");
    cr_assert_eq(atomic_load(&t.wakes_by_ref), 2);

    cr_assert_eq(two_yields_poll(&s, &cx, &out), RT_READY);
    cr_assert_eq(s.step, 3);
    cr_assert_eq(out, (void *)(uintptr_t)42);
    cr_assert_eq(s.co.line, RT_CORO_DONE);

    /* A yield wakes by reference only: nothing is cloned, consumed or dropped. */
    cr_assert_eq(atomic_load(&t.clones) + atomic_load(&t.wakes_by_value) + atomic_load(&t.drops),
                 0);
    cr_assert_eq(atomic_load(&t.wakes_by_ref), 2);
}

Test(coro, finished_coroutine_polled_again_reports_ready_with_a_null_result)
{
    rt_context cx = rt_context_from_waker(rt_waker_noop());
    struct two_yields s = {{0}, 0};
    void *out = NULL;
    while (two_yields_poll(&s, &cx, &out) == RT_PENDING)
        ;
    cr_assert_eq(out, (void *)(uintptr_t)42);

    out = (void *)(uintptr_t)7;
    cr_assert_eq(two_yields_poll(&s, &cx, &out), RT_READY);
    cr_assert_null(out, "a finished coroutine reports a NULL result");
    cr_assert_eq(s.step, 3, "a finished coroutine must not run its body again");
    cr_assert_eq(s.co.line, RT_CORO_DONE);
}

struct falls_off {
    rt_coro co;
    int ran;
};

/* Ends without RT_RETURN. */
static rt_poll falls_off_poll(void *p, rt_context *cx, void **out)
{
    struct falls_off *s = p;
    RT_CORO_BEGIN(&s->co);
    s->ran++;
    RT_YIELD(&s->co, cx);
    s->ran++;
    RT_CORO_END(&s->co, out);
}

Test(coro, falling_off_the_end_finishes_with_a_null_result)
{
    rt_context cx = rt_context_from_waker(rt_waker_noop());
    struct falls_off s = {{0}, 0};
    void *out = (void *)(uintptr_t)3;
    cr_assert_eq(falls_off_poll(&s, &cx, &out), RT_PENDING);
    cr_assert_eq(falls_off_poll(&s, &cx, &out), RT_READY);
    cr_assert_null(out);
    cr_assert_eq(s.ran, 2);
    cr_assert_eq(s.co.line, RT_CORO_DONE);
}

struct awaits_countdown {
    rt_coro co;
    int remaining;
    int before_await;
    int after_await;
};

static rt_poll awaits_countdown_poll(void *p, rt_context *cx, void **out)
{
    struct awaits_countdown *s = p;
    RT_CORO_BEGIN(&s->co);
    s->before_await++;
    RT_AWAIT(&s->co, countdown_poll(&s->remaining, cx));
    s->after_await++;
    RT_RETURN(&s->co, out, (uintptr_t)(s->before_await * 100 + s->after_await));
    RT_CORO_END(&s->co, out);
}

Test(coro, await_re_evaluates_only_its_poll_expression_until_ready)
{
    struct counting_waker t = COUNTING_WAKER_INIT;
    rt_context cx = counting_context(&t);
    struct awaits_countdown s = {{0}, 3, 0, 0};
    void *out = NULL;

    for (int i = 0; i < 3; i++) {
        cr_assert_eq(awaits_countdown_poll(&s, &cx, &out), RT_PENDING, "poll %d", i + 1);
        cr_assert_eq(s.before_await, 1, "code before RT_AWAIT ran again on poll %d", i + 1);
        cr_assert_eq(s.after_await, 0);
    }
    cr_assert_eq(awaits_countdown_poll(&s, &cx, &out), RT_READY);
    cr_assert_eq(s.remaining, 0);
    cr_assert_eq(out, (void *)(uintptr_t)101);
    cr_assert_eq(atomic_load(&t.wakes_by_ref), 3);
}

Test(coro, await_of_an_already_ready_expression_does_not_suspend)
{
    struct counting_waker t = COUNTING_WAKER_INIT;
    rt_context cx = counting_context(&t);
    struct awaits_countdown s = {{0}, 0, 0, 0};
    void *out = NULL;
    cr_assert_eq(awaits_countdown_poll(&s, &cx, &out), RT_READY);
    cr_assert_eq(out, (void *)(uintptr_t)101);
    cr_assert_eq(atomic_load(&t.wakes_by_ref), 0);
}

struct await_loop {
    rt_coro co;
    int i;
    int counters[4];
    int completed_awaits;
};

/* Awaits four countdowns of different lengths in a loop whose index lives in
 * the state, as the rules require. */
static rt_poll await_loop_poll(void *p, rt_context *cx, void **out)
{
    struct await_loop *s = p;
    RT_CORO_BEGIN(&s->co);
    for (s->i = 0; s->i < 4; s->i++) {
        RT_AWAIT(&s->co, countdown_poll(&s->counters[s->i], cx));
        s->completed_awaits++;
    }
    RT_RETURN(&s->co, out, (uintptr_t)s->completed_awaits);
    RT_CORO_END(&s->co, out);
}

Test(coro, await_inside_a_loop_resumes_at_the_right_iteration)
{
    rt_context cx = rt_context_from_waker(rt_waker_noop());
    struct await_loop s = {{0}, 0, {2, 0, 1, 3}, 0};
    void *out = NULL;
    int pending_polls = 0;
    while (await_loop_poll(&s, &cx, &out) == RT_PENDING) {
        pending_polls++;
        cr_assert_leq(pending_polls, 6, "the loop ran past its awaits");
    }
    /* 2 + 0 + 1 + 3 pending results, then the finishing poll. */
    cr_assert_eq(pending_polls, 6);
    cr_assert_eq(out, (void *)(uintptr_t)4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(s.counters[i], 0);
}

/* ---- coroutines run as tasks --------------------------------------------- */

/* The test-owned record a task coroutine fills in; the runtime's completion
 * (rt_block_on / rt_task_wait returning) orders these writes before the test
 * thread reads them. */
struct report {
    int spawn_rc[4];
    int status[4];
    void *values[4];
    rt_runtime *current;
    int polls;
};

static atomic_int child_polls;
static atomic_int child_drops;

struct counted_child {
    rt_coro co;
    int yields_left;
    intptr_t result;
};

/* Yields `yields_left` times, then returns `result`. */
static rt_poll counted_child_poll(void *p, rt_context *cx, void **out)
{
    struct counted_child *c = p;
    atomic_fetch_add(&child_polls, 1);
    RT_CORO_BEGIN(&c->co);
    while (c->yields_left > 0) {
        c->yields_left--;
        RT_YIELD(&c->co, cx);
    }
    RT_RETURN(&c->co, out, c->result);
    RT_CORO_END(&c->co, out);
}

static void counted_child_drop(void *p)
{
    (void)p;
    atomic_fetch_add(&child_drops, 1);
}

struct yielder_task {
    rt_coro co;
    struct report *report;
};

static rt_poll yielder_task_poll(void *p, rt_context *cx, void **out)
{
    struct yielder_task *s = p;
    s->report->polls++;
    RT_CORO_BEGIN(&s->co);
    s->report->current = rt_current();
    RT_YIELD(&s->co, cx);
    RT_YIELD(&s->co, cx);
    RT_YIELD(&s->co, cx);
    RT_RETURN(&s->co, out, (uintptr_t)0xC0FFEE);
    RT_CORO_END(&s->co, out);
}

Test(coro, coroutine_run_by_block_on_yields_and_returns_its_value)
{
    rt_runtime *rt = new_runtime(2);
    struct report report = {0};
    struct yielder_task state = {{0}, &report};
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, yielder_task_poll, NULL, &state, sizeof state, &value), 0);
    cr_assert_eq(value, (void *)(uintptr_t)0xC0FFEE);
    finish_runtime(rt, 0);
    /* Three polls end in a yield, the fourth returns. */
    cr_assert_eq(report.polls, 4);
    cr_assert_eq(report.current, rt);
    /* The caller's copy of the state was never touched. */
    cr_assert_eq(state.co.line, 0);
}

struct parent {
    rt_coro co;
    struct report *report;
    rt_task *children[3];
    int i;
    intptr_t sum;
};

/* Spawns three children that yield a few times, yields itself, then awaits
 * the children's joins in order with a yield after each. */
static rt_poll parent_poll(void *p, rt_context *cx, void **out)
{
    struct parent *s = p;
    RT_CORO_BEGIN(&s->co);
    for (s->i = 0; s->i < 3; s->i++) {
        struct counted_child child = {{0}, s->i + 1, (s->i + 1) * 10};
        s->report->spawn_rc[s->i] =
            RT_SPAWN(NULL, counted_child_poll, counted_child_drop, &child, &s->children[s->i]);
        if (s->report->spawn_rc[s->i] != 0)
            RT_RETURN(&s->co, out, (intptr_t)-1);
    }
    RT_YIELD(&s->co, cx);
    for (s->i = 0; s->i < 3; s->i++) {
        RT_AWAIT(&s->co, rt_task_join(s->children[s->i], cx, &s->report->values[s->i],
                                      &s->report->status[s->i]));
        s->sum += (intptr_t)s->report->values[s->i];
        RT_YIELD(&s->co, cx);
    }
    RT_RETURN(&s->co, out, s->sum);
    RT_CORO_END(&s->co, out);
}

Test(coro, multi_step_coroutine_awaits_joins_of_children_and_yields_between_them)
{
    rt_runtime *rt = new_runtime(4);
    for (int round = 0; round < 20; round++) {
        struct report report = {0};
        for (int i = 0; i < 3; i++)
            report.status[i] = 12345;
        struct parent state = {{0}, &report, {NULL, NULL, NULL}, 0, 0};
        void *value = NULL;
        cr_assert_eq(rt_block_on(rt, parent_poll, NULL, &state, sizeof state, &value), 0);
        for (int i = 0; i < 3; i++) {
            cr_assert_eq(report.spawn_rc[i], 0, "child %d: %s", i, rt_strerror(report.spawn_rc[i]));
            cr_assert_eq(report.status[i], 0, "child %d status %d", i, report.status[i]);
            cr_assert_eq(report.values[i], (void *)(intptr_t)((i + 1) * 10));
        }
        cr_assert_eq(value, (void *)(intptr_t)60, "round %d: sum %ld", round,
                     (long)(intptr_t)value);
    }
    finish_runtime(rt, 0);
    /* Child i (1..3) polls i + 1 times: i yields and the return. */
    cr_assert_eq(atomic_load(&child_polls), 20 * (2 + 3 + 4));
    cr_assert_eq(atomic_load(&child_drops), 20 * 3);
}

/* The example from coro.h, nearly verbatim. */
struct fetch {
    rt_coro co;
    rt_task *child;
    void *value;
};

static rt_poll fetch_child_poll(void *p, rt_context *cx, void **out)
{
    (void)p;
    (void)cx;
    *out = (void *)(uintptr_t)0xFE7C;
    return RT_READY;
}

static rt_poll fetch_poll(void *p, rt_context *cx, void **out)
{
    struct fetch *f = p;
    RT_CORO_BEGIN(&f->co);
    if (rt_spawn(NULL, fetch_child_poll, NULL, NULL, 0, &f->child) != 0)
        RT_RETURN(&f->co, out, NULL);
    RT_AWAIT(&f->co, rt_task_join(f->child, cx, &f->value, NULL));
    RT_YIELD(&f->co, cx);
    RT_RETURN(&f->co, out, f->value);
    RT_CORO_END(&f->co, out);
}

Test(coro, documented_fetch_example_returns_the_childs_value)
{
    rt_runtime *rt = new_runtime(2);
    struct fetch state = {{0}, NULL, NULL};
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, fetch_poll, NULL, &state, sizeof state, &value), 0);
    cr_assert_eq(value, (void *)(uintptr_t)0xFE7C);
    finish_runtime(rt, 0);
}

static atomic_int never_drops;

static void never_drop(void *p)
{
    (void)p;
    atomic_fetch_add(&never_drops, 1);
}

struct aborts_child {
    rt_coro co;
    struct report *report;
    rt_task *child;
};

static rt_poll aborts_child_poll(void *p, rt_context *cx, void **out)
{
    struct aborts_child *s = p;
    RT_CORO_BEGIN(&s->co);
    s->report->spawn_rc[0] = rt_spawn(NULL, never_poll, never_drop, NULL, 0, &s->child);
    if (s->report->spawn_rc[0] != 0)
        RT_RETURN(&s->co, out, NULL);
    /* Let the child be polled once, so it is idle rather than queued. */
    RT_YIELD(&s->co, cx);
    rt_task_abort(s->child);
    RT_AWAIT(&s->co, rt_task_join(s->child, cx, &s->report->values[0], &s->report->status[0]));
    RT_RETURN(&s->co, out, (uintptr_t)1);
    RT_CORO_END(&s->co, out);
}

Test(coro, awaiting_an_aborted_child_gives_ecanceled_and_a_null_value)
{
    rt_runtime *rt = new_runtime(2);
    struct report report = {0};
    report.values[0] = (void *)(uintptr_t)99;
    struct aborts_child state = {{0}, &report, NULL};
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, aborts_child_poll, NULL, &state, sizeof state, &value), 0);
    cr_assert_eq(report.spawn_rc[0], 0);
    cr_assert_eq(value, (void *)(uintptr_t)1);
    cr_assert_eq(report.status[0], -ECANCELED);
    cr_assert_null(report.values[0], "a cancelled join must report a NULL value");
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&never_drops), 1);
}

struct hand_driven {
    rt_coro co;
    rt_runtime *rt;
    rt_task *task;
    int spawn_rc;
    void *value;
    int status;
};

/* A coroutine polled by the test thread itself (not a task) that spawns a
 * task on the runtime and awaits its join. */
static rt_poll hand_driven_poll(void *p, rt_context *cx, void **out)
{
    struct hand_driven *s = p;
    RT_CORO_BEGIN(&s->co);
    {
        struct counted_child child = {{0}, 3, 99};
        s->spawn_rc = RT_SPAWN(s->rt, counted_child_poll, counted_child_drop, &child, &s->task);
    }
    if (s->spawn_rc != 0)
        RT_RETURN(&s->co, out, NULL);
    RT_AWAIT(&s->co, rt_task_join(s->task, cx, &s->value, &s->status));
    RT_RETURN(&s->co, out, s->value);
    RT_CORO_END(&s->co, out);
}

Test(coro, coroutine_driven_by_hand_with_a_counting_waker_awaits_a_runtime_task)
{
    static struct counting_waker target = COUNTING_WAKER_INIT;
    rt_runtime *rt = new_runtime(2);
    rt_context cx = counting_context(&target);
    struct hand_driven s = {{0}, rt, NULL, -1, NULL, 12345};
    void *out = NULL;
    int polls = 0;
    for (;;) {
        /* Count wake-ups from before the poll starts, so one that lands
         * during the poll is not missed. */
        unsigned long wakes_before = event_count(&target.woken);
        polls++;
        if (hand_driven_poll(&s, &cx, &out) == RT_READY)
            break;
        cr_assert_lt(polls, 100, "the coroutine never finished");
        cr_assert(event_wait_for(&target.woken, wakes_before + 1),
                  "pending without a wake-up after poll %d", polls);
    }
    cr_assert_eq(s.spawn_rc, 0);
    cr_assert_eq(s.status, 0);
    cr_assert_eq(out, (void *)(uintptr_t)99);
    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&target), 0, "the runtime kept a user waker reference");
    cr_assert_eq(atomic_load(&child_polls), 4);
    cr_assert_eq(atomic_load(&child_drops), 1);
}
