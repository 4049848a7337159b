/* Black-box tests of asyncrt/coro.h: the RT_CORO_BEGIN / RT_AWAIT /
 * RT_AWAIT_POLL / RT_CORO_YIELD / RT_RETURN / RT_CORO_END macros, the operation in
 * flight a coroutine remembers, the guards RT_AWAIT_HOLD takes and RT_RELEASE
 * gives back, and rt_coro_cleanup / rt_coro_drop, polled by hand with a no-op
 * or a counting waker and run as tasks on a runtime (aborted too). */
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
#include <string.h>
#include <time.h>
#include <unistd.h>

TestSuite(coro, .timeout = 120, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* A poll-style countdown for RT_AWAIT_POLL: pending (after a self wake-up,
 * like a yield) until *remaining reaches zero. */
static rt_poll countdown_poll(int *remaining, rt_context *cx)
{
    if (*remaining == 0)
        return RT_READY;
    (*remaining)--;
    rt_waker_wake_by_ref(rt_context_waker(cx));
    return RT_PENDING;
}

/* The same countdown as an operation for RT_AWAIT, with its own vtable; it
 * counts its polls and its drops, and finishes with `value`. */
struct countdown_op {
    RT_FUTURE_HEADER;
    int remaining;
    int64_t value;
    int polls;
    int drops;
};

static rt_poll countdown_op_poll(rt_future *f, rt_context *cx)
{
    struct countdown_op *op = (struct countdown_op *)f;
    op->polls++;
    if (op->remaining == 0)
        return rt_future_finish(f, op->value);
    op->remaining--;
    rt_waker_wake_by_ref(rt_context_waker(cx));
    return RT_PENDING;
}

static void countdown_op_drop(rt_future *f)
{
    ((struct countdown_op *)f)->drops++;
}

static const rt_future_vtable countdown_op_vtable = {countdown_op_poll, countdown_op_drop, NULL};

static void countdown_op_init(struct countdown_op *op, int remaining, int64_t value)
{
    memset(op, 0, sizeof *op);
    op->future.vtable = &countdown_op_vtable;
    op->remaining = remaining;
    op->value = value;
}

/* A task that holds its worker until `release` is signalled, so that a test
 * can keep a one-worker runtime from polling anything else meanwhile. */
struct hold_worker {
    struct event *entered;
    struct event *release;
};

static rt_poll hold_worker_poll(void *p, rt_context *cx, void **out)
{
    struct hold_worker *h = p;
    (void)cx;
    event_signal(h->entered);
    cr_assert(event_wait_for(h->release, 1), "the test never released the worker");
    *out = NULL;
    return RT_READY;
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
    RT_CORO_YIELD(&s->co, cx);
    s->step = 2;
    RT_CORO_YIELD(&s->co, cx);
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
    cr_assert_eq(atomic_load(&t.wakes_by_ref), 1,
                 "RT_CORO_YIELD must wake the context by reference");
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
    RT_CORO_YIELD(&s->co, cx);
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
    RT_AWAIT_POLL(&s->co, countdown_poll(&s->remaining, cx));
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
        cr_assert_eq(s.before_await, 1, "code before RT_AWAIT_POLL ran again on poll %d", i + 1);
        cr_assert_eq(s.after_await, 0);
        cr_assert_null(s.co.awaiting, "a poll expression is not an operation in flight");
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
        RT_AWAIT_POLL(&s->co, countdown_poll(&s->counters[s->i], cx));
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

/* ---- operations awaited by hand ------------------------------------------ */

struct awaits_op {
    rt_coro co;
    struct countdown_op op;
    int remaining;
    int before_await;
    int after_await;
    int64_t seen_result;
};

/* Initialises an operation, awaits it and reads its result. */
static rt_poll awaits_op_poll(void *p, rt_context *cx, void **out)
{
    struct awaits_op *s = p;
    RT_CORO_BEGIN(&s->co);
    s->before_await++;
    countdown_op_init(&s->op, s->remaining, 55);
    RT_AWAIT(&s->co, cx, &s->op);
    s->after_await++;
    s->seen_result = s->op.result;
    RT_RETURN(&s->co, out, (uintptr_t)(s->before_await * 100 + s->after_await));
    RT_CORO_END(&s->co, out);
}

Test(coro, await_remembers_the_operation_in_flight_while_it_is_pending)
{
    struct counting_waker t = COUNTING_WAKER_INIT;
    rt_context cx = counting_context(&t);
    struct awaits_op s;
    memset(&s, 0, sizeof s);
    s.remaining = 3;
    void *out = NULL;
    cr_assert_null(s.co.awaiting, "a zeroed coroutine awaits nothing");

    for (int i = 0; i < 3; i++) {
        cr_assert_eq(awaits_op_poll(&s, &cx, &out), RT_PENDING, "poll %d", i + 1);
        cr_assert_eq(s.co.awaiting, &s.op.future, "poll %d: the operation in flight is not known",
                     i + 1);
        cr_assert_eq(s.before_await, 1, "code before RT_AWAIT ran again on poll %d", i + 1);
        cr_assert_eq(s.after_await, 0);
        cr_assert_eq(s.op.polls, i + 1, "the operation was not polled once per poll");
    }
    cr_assert_eq(awaits_op_poll(&s, &cx, &out), RT_READY);
    cr_assert_null(s.co.awaiting, "a finished await still names its operation");
    cr_assert_eq(s.seen_result, 55, "the outcome is not in the operation's result");
    cr_assert_eq(out, (void *)(uintptr_t)101);
    cr_assert_eq(s.op.polls, 4);
    cr_assert_eq(s.op.drops, 0, "a finished operation was dropped");
    cr_assert_eq(atomic_load(&t.wakes_by_ref), 3);
    cr_assert_eq(s.co.line, RT_CORO_DONE);
}

Test(coro, await_of_an_operation_ready_at_once_does_not_suspend)
{
    rt_context cx = noop_context();
    struct awaits_op s;
    memset(&s, 0, sizeof s);
    void *out = NULL;
    cr_assert_eq(awaits_op_poll(&s, &cx, &out), RT_READY);
    cr_assert_null(s.co.awaiting);
    cr_assert_eq(s.op.polls, 1);
    cr_assert_eq(s.seen_result, 55);
    cr_assert_eq(out, (void *)(uintptr_t)101);
}

Test(coro, cleanup_drops_the_operation_in_flight_once)
{
    rt_context cx = noop_context();
    struct awaits_op s;
    memset(&s, 0, sizeof s);
    s.remaining = 10;
    void *out = NULL;
    cr_assert_eq(awaits_op_poll(&s, &cx, &out), RT_PENDING);
    cr_assert_eq(s.co.awaiting, &s.op.future);

    rt_coro_cleanup(&s.co);
    cr_assert_null(s.co.awaiting, "cleanup left an operation in flight");
    cr_assert_null(s.co.held);
    cr_assert_eq(s.op.drops, 1);
    cr_assert_eq(s.op.result, -ECANCELED);
    /* Nothing is left to clean up: a second cleanup, or the drop function,
     * does nothing. */
    rt_coro_cleanup(&s.co);
    rt_coro_drop(&s);
    cr_assert_eq(s.op.drops, 1, "the operation was dropped twice");
}

Test(coro, cleanup_of_a_finished_coroutine_drops_nothing)
{
    rt_context cx = noop_context();
    struct awaits_op s;
    memset(&s, 0, sizeof s);
    s.remaining = 1;
    void *out = NULL;
    while (awaits_op_poll(&s, &cx, &out) == RT_PENDING)
        ;
    rt_coro_drop(&s);
    cr_assert_eq(s.op.drops, 0);
    cr_assert_eq(s.op.result, 55, "cleanup changed a finished operation's result");
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
        RT_CORO_YIELD(&c->co, cx);
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
    s->report->current = rt_current_runtime();
    RT_CORO_YIELD(&s->co, cx);
    RT_CORO_YIELD(&s->co, cx);
    RT_CORO_YIELD(&s->co, cx);
    RT_RETURN(&s->co, out, (uintptr_t)0xC0FFEE);
    RT_CORO_END(&s->co, out);
}

Test(coro, coroutine_run_by_block_on_yields_and_returns_its_value)
{
    rt_runtime *rt = new_runtime(2);
    struct report report = {0};
    struct yielder_task state = {{0}, &report};
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, yielder_task_poll, NULL, &state, sizeof state, &value), 0);
    cr_assert_eq(value, (void *)(uintptr_t)0xC0FFEE);
    finish_runtime(rt, 0);
    /* Three polls end in a yield, the fourth returns. */
    cr_assert_eq(report.polls, 4);
    cr_assert_eq(report.current, rt);
    /* The state came back as the task left it: a finished coroutine. */
    cr_assert_eq(state.co.line, RT_CORO_DONE);
}

struct parent {
    rt_coro co;
    struct report *report;
    rt_task *children[3];
    rt_task_join joins[3];
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
        s->report->spawn_rc[s->i] = RT_SPAWN_STATE(NULL, counted_child_poll, counted_child_drop,
                                                   &child, &s->children[s->i]);
        if (s->report->spawn_rc[s->i] != 0)
            RT_RETURN(&s->co, out, (intptr_t)-1);
    }
    RT_CORO_YIELD(&s->co, cx);
    for (s->i = 0; s->i < 3; s->i++) {
        rt_task_join_init(&s->joins[s->i], s->children[s->i]);
        RT_AWAIT(&s->co, cx, &s->joins[s->i]);
        s->report->values[s->i] = s->joins[s->i].value;
        s->report->status[s->i] = (int)s->joins[s->i].result;
        s->sum += (intptr_t)s->report->values[s->i];
        RT_CORO_YIELD(&s->co, cx);
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
        struct parent state;
        memset(&state, 0, sizeof state);
        state.report = &report;
        void *value = NULL;
        cr_assert_eq(block_on_status(rt, parent_poll, NULL, &state, sizeof state, &value), 0);
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

/* A parent task that spawns a child and awaits its join. */
struct spawn_join {
    rt_coro co;
    rt_task *child;
    rt_task_join join;
};

static rt_poll spawn_join_child_poll(void *p, rt_context *cx, void **out)
{
    (void)p;
    (void)cx;
    *out = (void *)(uintptr_t)0xFE7C;
    return RT_READY;
}

static rt_poll spawn_join_poll(void *p, rt_context *cx, void **out)
{
    struct spawn_join *f = p;
    RT_CORO_BEGIN(&f->co);
    if (rt_spawn(NULL, spawn_join_child_poll, NULL, NULL, 0, &f->child) != 0)
        RT_RETURN(&f->co, out, NULL);
    rt_task_join_init(&f->join, f->child);
    RT_AWAIT(&f->co, cx, &f->join);
    RT_CORO_YIELD(&f->co, cx);
    RT_RETURN(&f->co, out, f->join.value);
    RT_CORO_END(&f->co, out);
}

Test(coro, spawn_and_join_example_returns_the_childs_value)
{
    rt_runtime *rt = new_runtime(2);
    struct spawn_join state;
    memset(&state, 0, sizeof state);
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, spawn_join_poll, rt_coro_drop, &state, sizeof state, &value),
                 0);
    cr_assert_eq(value, (void *)(uintptr_t)0xFE7C);
    finish_runtime(rt, 0);
}

/* The example from coro.h, nearly verbatim: a read limited by a timeout,
 * spawned with rt_coro_drop. It returns the timeout's result, and signals
 * `pending` (when set) after a poll that left it waiting. */
struct fetch {
    rt_coro co;
    rt_io *io;
    rt_timeout limit;
    rt_io_read rd;
    char buf[512];
    int64_t limit_ns;
    struct event *pending;
    bool announced;
};

static rt_poll fetch_body(struct fetch *f, rt_context *cx, void **out)
{
    RT_CORO_BEGIN(&f->co);
    rt_io_read_init(&f->rd, f->io, f->buf, sizeof f->buf);
    rt_timeout_init(&f->limit, NULL, &f->rd.future, f->limit_ns);
    RT_AWAIT(&f->co, cx, &f->limit);
    if (f->limit.result < 0) /* -ETIMEDOUT, or the read's error */
        RT_RETURN(&f->co, out, (intptr_t)f->limit.result);
    RT_CORO_YIELD(&f->co, cx);
    RT_RETURN(&f->co, out, (intptr_t)f->limit.result);
    RT_CORO_END(&f->co, out);
}

static rt_poll fetch_poll(void *p, rt_context *cx, void **out)
{
    struct fetch *f = p;
    return announce(fetch_body(f, cx, out), &f->announced, f->pending);
}

/* A fetch over the read end of a fresh pipe; *write_end gets the other end. */
static rt_task *spawn_fetch(rt_runtime *rt, int64_t limit_ns, struct event *pending, rt_io **io,
                            int *write_end)
{
    int fds[2];
    make_pipe(fds);
    cr_assert_eq(rt_io_open(rt, fds[0], io), 0);
    *write_end = fds[1];
    struct fetch f;
    memset(&f, 0, sizeof f);
    f.io = *io;
    f.limit_ns = limit_ns;
    f.pending = pending;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, fetch_poll, rt_coro_drop, &f, &task), 0);
    return task;
}

Test(coro, documented_fetch_example_reads_what_arrives_in_time)
{
    rt_runtime *rt = new_runtime(2);
    rt_io *io = NULL;
    int w = -1;
    static struct event pending = EVENT_INIT;
    rt_task *task = spawn_fetch(rt, RT_SEC(30), &pending, &io, &w);
    cr_assert(event_wait_for(&pending, 1), "the fetch never waited for its read");
    cr_assert_eq(write(w, "hello", 5), 5);
    void *value = NULL;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq((intptr_t)value, 5, "the fetch got %ld", (long)(intptr_t)value);
    cr_assert_eq(rt_io_close(io), 0);
    close(w);
    finish_runtime(rt, 0);
}

Test(coro, documented_fetch_example_times_out_when_nothing_arrives)
{
    rt_runtime *rt = new_runtime(2);
    rt_io *io = NULL;
    int w = -1;
    rt_task *task = spawn_fetch(rt, RT_MS(20), NULL, &io, &w);
    void *value = NULL;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq((intptr_t)value, -ETIMEDOUT, "the fetch got %ld", (long)(intptr_t)value);
    /* The dropped read consumed nothing. */
    cr_assert_eq(write(w, "x", 1), 1);
    char c = 0;
    cr_assert_eq(read(rt_io_fd(io), &c, 1), 1);
    cr_assert_eq(c, 'x');
    cr_assert_eq(rt_io_close(io), 0);
    close(w);
    finish_runtime(rt, 0);
}

Test(coro, documented_fetch_example_aborted_mid_await_is_dropped_by_rt_coro_drop)
{
    rt_runtime *rt = new_runtime(2);
    rt_io *io = NULL;
    int w = -1;
    static struct event pending = EVENT_INIT;
    rt_task *task = spawn_fetch(rt, RT_SEC(60), &pending, &io, &w);
    cr_assert(event_wait_for(&pending, 1), "the fetch never waited for its read");
    rt_task_cancel(task);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    /* rt_coro_drop dropped the timeout (its timer) and the read: the bytes
     * written now are still there for anyone else, and nothing leaks. */
    cr_assert_eq(write(w, "y", 1), 1);
    char c = 0;
    cr_assert_eq(read(rt_io_fd(io), &c, 1), 1);
    cr_assert_eq(c, 'y');
    cr_assert_eq(rt_io_close(io), 0);
    close(w);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.cancelled, 1);
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
    rt_task_join join;
};

static rt_poll aborts_child_poll(void *p, rt_context *cx, void **out)
{
    struct aborts_child *s = p;
    RT_CORO_BEGIN(&s->co);
    s->report->spawn_rc[0] = rt_spawn(NULL, never_poll, never_drop, NULL, 0, &s->child);
    if (s->report->spawn_rc[0] != 0)
        RT_RETURN(&s->co, out, NULL);
    /* Let the child be polled once, so it is idle rather than queued. */
    RT_CORO_YIELD(&s->co, cx);
    rt_task_cancel(s->child);
    rt_task_join_init(&s->join, s->child);
    RT_AWAIT(&s->co, cx, &s->join);
    s->report->values[0] = s->join.value;
    s->report->status[0] = (int)s->join.result;
    RT_RETURN(&s->co, out, (uintptr_t)1);
    RT_CORO_END(&s->co, out);
}

Test(coro, awaiting_an_aborted_child_gives_ecanceled_and_a_null_value)
{
    rt_runtime *rt = new_runtime(2);
    struct report report = {0};
    report.values[0] = (void *)(uintptr_t)99;
    struct aborts_child state;
    memset(&state, 0, sizeof state);
    state.report = &report;
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, aborts_child_poll, NULL, &state, sizeof state, &value), 0);
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
    rt_task_join join;
};

/* A coroutine polled by the test thread itself (not a task) that spawns a
 * task on the runtime and awaits its join. */
static rt_poll hand_driven_poll(void *p, rt_context *cx, void **out)
{
    struct hand_driven *s = p;
    RT_CORO_BEGIN(&s->co);
    {
        struct counted_child child = {{0}, 3, 99};
        s->spawn_rc =
            RT_SPAWN_STATE(s->rt, counted_child_poll, counted_child_drop, &child, &s->task);
    }
    if (s->spawn_rc != 0)
        RT_RETURN(&s->co, out, NULL);
    rt_task_join_init(&s->join, s->task);
    RT_AWAIT(&s->co, cx, &s->join);
    RT_RETURN(&s->co, out, s->join.value);
    RT_CORO_END(&s->co, out);
}

Test(coro, coroutine_driven_by_hand_with_a_counting_waker_awaits_a_runtime_task)
{
    static struct counting_waker target = COUNTING_WAKER_INIT;
    rt_runtime *rt = new_runtime(2);
    rt_context cx = counting_context(&target);
    struct hand_driven s;
    memset(&s, 0, sizeof s);
    s.rt = rt;
    s.spawn_rc = -1;
    void *out = NULL;
    int polls = 0;
    for (;;) {
        /* Count wake-ups from before the poll starts, so one that lands
         * during the poll is not missed. */
        unsigned long wakes_before = event_count(&target.woken);
        polls++;
        if (hand_driven_poll(&s, &cx, &out) == RT_READY)
            break;
        cr_assert_eq(s.co.awaiting, &s.join.future,
                     "the pending join is not the operation in flight");
        cr_assert_lt(polls, 100, "the coroutine never finished");
        cr_assert(event_wait_for(&target.woken, wakes_before + 1),
                  "pending without a wake-up after poll %d", polls);
    }
    cr_assert_eq(s.spawn_rc, 0);
    cr_assert_eq(s.join.result, 0);
    cr_assert_null(s.co.awaiting);
    cr_assert_eq(out, (void *)(uintptr_t)99);
    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&target), 0, "the runtime kept a user waker reference");
    cr_assert_eq(atomic_load(&child_polls), 4);
    cr_assert_eq(atomic_load(&child_drops), 1);
}

/* ---- guards: RT_AWAIT_HOLD and RT_RELEASE, polled by hand ------------------ */

struct holder {
    rt_coro co;
    rt_mutex *m;
    rt_semaphore *sem;
    rt_mutex_lock lk;
    rt_semaphore_acquire acq;
    int step;
};

/* Locks the mutex and takes two permits, both held as guards; gives the
 * lock back first (the older guard), then the permits, twice. */
static rt_poll holder_poll(void *p, rt_context *cx, void **out)
{
    struct holder *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_mutex_lock_init(&s->lk, s->m);
    RT_AWAIT_HOLD(&s->co, cx, &s->lk);
    s->step = 1;
    rt_semaphore_acquire_init(&s->acq, s->sem, 2);
    RT_AWAIT_HOLD(&s->co, cx, &s->acq);
    s->step = 2;
    RT_CORO_YIELD(&s->co, cx);
    RT_RELEASE(&s->co, &s->lk);
    s->step = 3;
    RT_CORO_YIELD(&s->co, cx);
    RT_RELEASE(&s->co, &s->acq);
    RT_RELEASE(&s->co, &s->acq); /* a second release does nothing */
    RT_RELEASE(&s->co, &s->lk);  /* nor does one of a guard let go already */
    s->step = 4;
    RT_CORO_END(&s->co, out);
}

Test(coro, await_hold_keeps_a_lock_and_permits_until_release_gives_them_back)
{
    struct hand h;
    hand_init(&h);
    rt_mutex *m;
    rt_semaphore *sem;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_semaphore_new(2, &sem), 0);
    struct holder s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.sem = sem;
    void *out = NULL;

    /* The test thread holds the lock and one permit, so both awaits wait. */
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 1), 0);
    cr_assert_eq(holder_poll(&s, &h.cx, &out), RT_PENDING);
    cr_assert_eq(s.step, 0);
    cr_assert_eq(s.co.awaiting, &s.lk.future);
    cr_assert_null(s.co.held, "a lock not granted is held");

    long wakes = counting_wakes(&h.w);
    rt_mutex_unlock(m); /* handed to the waiting lock */
    cr_assert_gt(counting_wakes(&h.w), wakes, "the lock handed over did not wake its waiter");
    cr_assert_eq(holder_poll(&s, &h.cx, &out), RT_PENDING);
    cr_assert_eq(s.step, 1);
    cr_assert_eq(s.lk.result, 0);
    cr_assert_eq(s.co.awaiting, &s.acq.future);
    cr_assert_eq(s.co.held, &s.lk.guard, "the lock's guard is not held");
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY, "the held lock is free");

    wakes = counting_wakes(&h.w);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_gt(counting_wakes(&h.w), wakes, "the permits granted did not wake their waiter");
    cr_assert_eq(holder_poll(&s, &h.cx, &out), RT_PENDING); /* the yield */
    cr_assert_eq(s.step, 2);
    cr_assert_eq(s.acq.result, 0);
    cr_assert_null(s.co.awaiting);
    cr_assert_eq(s.co.held, &s.acq.guard, "the newest guard is not first");
    cr_assert_eq(s.co.held->next, &s.lk.guard, "the older guard is not behind it");
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY);

    cr_assert_eq(holder_poll(&s, &h.cx, &out), RT_PENDING); /* released the lock */
    cr_assert_eq(s.step, 3);
    cr_assert_eq(s.co.held, &s.acq.guard);
    cr_assert_null(s.co.held->next, "the released lock's guard is still held");
    cr_assert_eq(rt_mutex_try_lock(m), 0, "RT_RELEASE did not unlock");
    rt_mutex_unlock(m);
    cr_assert_eq(rt_semaphore_available(sem), 0, "releasing the lock gave permits back");

    cr_assert_eq(holder_poll(&s, &h.cx, &out), RT_READY);
    cr_assert_eq(s.step, 4);
    cr_assert_null(s.co.held);
    cr_assert_eq(rt_semaphore_available(sem), 2, "the permits were not given back exactly once");
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_mutex_unlock(m);

    /* Holding nothing, a cleanup gives nothing back. */
    rt_coro_cleanup(&s.co);
    cr_assert_eq(rt_semaphore_available(sem), 2);
    cr_assert_eq(counting_outstanding(&h.w), 0, "a waker reference was kept");
    rt_semaphore_drop(sem);
    rt_mutex_drop(m);
}

struct hold_and_return {
    rt_coro co;
    rt_mutex *m;
    rt_semaphore *sem;
    rt_mutex_lock lk;
    rt_semaphore_acquire acq;
};

/* Takes the lock and three permits as guards and returns holding them. */
static rt_poll hold_and_return_poll(void *p, rt_context *cx, void **out)
{
    struct hold_and_return *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_mutex_lock_init(&s->lk, s->m);
    RT_AWAIT_HOLD(&s->co, cx, &s->lk);
    rt_semaphore_acquire_init(&s->acq, s->sem, 3);
    RT_AWAIT_HOLD(&s->co, cx, &s->acq);
    RT_RETURN(&s->co, out, (uintptr_t)(s->lk.result == 0 && s->acq.result == 0));
    RT_CORO_END(&s->co, out);
}

Test(coro, guards_still_held_at_the_return_are_given_back_by_the_drop)
{
    rt_context cx = noop_context();
    rt_mutex *m;
    rt_semaphore *sem;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_semaphore_new(4, &sem), 0);
    struct hold_and_return s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.sem = sem;
    void *out = NULL;
    cr_assert_eq(hold_and_return_poll(&s, &cx, &out), RT_READY);
    cr_assert_eq(out, (void *)(uintptr_t)1);
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY);
    cr_assert_eq(rt_semaphore_available(sem), 1);
    cr_assert_not_null(s.co.held);

    /* What a task's drop function does: rt_coro_drop on its state. */
    rt_coro_drop(&s);
    cr_assert_null(s.co.held);
    cr_assert_eq(rt_semaphore_available(sem), 4, "the drop did not give the permits back");
    cr_assert_eq(rt_mutex_try_lock(m), 0, "the drop did not unlock");
    rt_mutex_unlock(m);
    rt_coro_drop(&s);
    cr_assert_eq(rt_semaphore_available(sem), 4, "a second drop gave permits back again");
    rt_semaphore_drop(sem);
    rt_mutex_drop(m);
}

Test(coro, dropped_while_awaiting_a_lock_it_holds_nothing_and_leaves_the_lock_free)
{
    struct hand h;
    hand_init(&h);
    rt_mutex *m;
    rt_semaphore *sem;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_semaphore_new(4, &sem), 0);

    /* Dropped while queued for the lock. */
    struct hold_and_return s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.sem = sem;
    void *out = NULL;
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    cr_assert_eq(hold_and_return_poll(&s, &h.cx, &out), RT_PENDING);
    cr_assert_eq(s.co.awaiting, &s.lk.future);
    rt_coro_drop(&s);
    cr_assert_null(s.co.awaiting);
    cr_assert_null(s.co.held);
    cr_assert_eq(s.lk.result, -ECANCELED);
    rt_mutex_unlock(m); /* nobody waits any more */
    cr_assert_eq(rt_mutex_try_lock(m), 0, "a dropped waiter kept the lock");
    rt_mutex_unlock(m);

    /* Dropped after the lock was handed to it but before it collected it. */
    memset(&s, 0, sizeof s);
    s.m = m;
    s.sem = sem;
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    cr_assert_eq(hold_and_return_poll(&s, &h.cx, &out), RT_PENDING);
    rt_mutex_unlock(m); /* handed over to the waiting lock */
    rt_coro_drop(&s);
    cr_assert_null(s.co.held);
    cr_assert_eq(rt_mutex_try_lock(m), 0, "a lock handed over but not collected was kept");
    rt_mutex_unlock(m);
    cr_assert_eq(rt_semaphore_available(sem), 4);
    cr_assert_eq(counting_outstanding(&h.w), 0, "a dropped waiter kept a waker reference");
    rt_semaphore_drop(sem);
    rt_mutex_drop(m);
}

/* ---- tasks aborted in the middle of an await -------------------------------- */

/* What a task's drop function saw of its coroutine, for the test thread. */
struct drop_report {
    struct event pending; /* a poll left the task waiting */
    struct event dropped; /* the drop function ran */
    int awaiting_ok;      /* while pending, co.awaiting was the operation */
    int awaiting_at_drop; /* the drop found the operation in flight */
    int awaiting_cleared; /* after rt_coro_drop, nothing is in flight */
    int64_t result;       /* the operation's result after rt_coro_drop */
};

struct sleeper {
    rt_coro co;
    rt_sleep sleep;
    struct drop_report *r;
    bool announced;
};

static rt_poll sleeper_body(struct sleeper *s, rt_context *cx, void **out)
{
    RT_CORO_BEGIN(&s->co);
    rt_sleep_init(&s->sleep, NULL, RT_SEC(60));
    RT_AWAIT(&s->co, cx, &s->sleep);
    RT_RETURN(&s->co, out, (uintptr_t)1);
    RT_CORO_END(&s->co, out);
}

static rt_poll sleeper_poll(void *p, rt_context *cx, void **out)
{
    struct sleeper *s = p;
    rt_poll r = sleeper_body(s, cx, out);
    if (r == RT_PENDING && !s->announced)
        s->r->awaiting_ok = s->co.awaiting == &s->sleep.future;
    return announce(r, &s->announced, &s->r->pending);
}

/* rt_coro_drop, watched. */
static void sleeper_drop(void *p)
{
    struct sleeper *s = p;
    s->r->awaiting_at_drop = s->co.awaiting == &s->sleep.future;
    rt_coro_drop(p);
    s->r->awaiting_cleared = s->co.awaiting == NULL;
    s->r->result = s->sleep.result;
    event_signal(&s->r->dropped);
}

Test(coro, task_aborted_while_awaiting_a_sleep_is_cleaned_up_by_rt_coro_drop)
{
    static struct drop_report r = {EVENT_INIT, EVENT_INIT, 0, 0, 0, 0};
    rt_runtime *rt = new_runtime(2);
    struct sleeper s;
    memset(&s, 0, sizeof s);
    s.r = &r;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, sleeper_poll, sleeper_drop, &s, &task), 0);
    cr_assert(event_wait_for(&r.pending, 1), "the task never waited for its sleep");
    cr_assert(r.awaiting_ok, "the pending sleep was not the operation in flight");

    rt_task_cancel(task);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(event_wait_for(&r.dropped, 1));
    cr_assert(r.awaiting_at_drop, "the aborted task's drop found no operation in flight");
    cr_assert(r.awaiting_cleared, "rt_coro_drop left the operation in flight");
    cr_assert_eq(r.result, -ECANCELED, "rt_coro_drop did not drop the sleep (result %lld)",
                 (long long)r.result);
    /* The timer was cancelled with the sleep: nothing is left for shutdown
     * to cancel, and nothing leaks. */
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.cancelled, 1);
}

struct chan_waiter {
    rt_coro co;
    rt_chan *ch;
    rt_chan_recv rx;
    struct drop_report *r;
    bool announced;
};

static rt_poll chan_waiter_body(struct chan_waiter *s, rt_context *cx, void **out)
{
    RT_CORO_BEGIN(&s->co);
    rt_chan_recv_init(&s->rx, s->ch);
    RT_AWAIT(&s->co, cx, &s->rx);
    RT_RETURN(&s->co, out, s->rx.value);
    RT_CORO_END(&s->co, out);
}

static rt_poll chan_waiter_poll(void *p, rt_context *cx, void **out)
{
    struct chan_waiter *s = p;
    rt_poll r = chan_waiter_body(s, cx, out);
    if (r == RT_PENDING && !s->announced)
        s->r->awaiting_ok = s->co.awaiting == &s->rx.future;
    return announce(r, &s->announced, &s->r->pending);
}

static void chan_waiter_drop(void *p)
{
    struct chan_waiter *s = p;
    s->r->awaiting_at_drop = s->co.awaiting == &s->rx.future;
    rt_coro_drop(p);
    s->r->awaiting_cleared = s->co.awaiting == NULL;
    s->r->result = s->rx.result;
    event_signal(&s->r->dropped);
}

Test(coro, task_aborted_while_awaiting_a_receive_leaves_the_message_in_the_channel)
{
    static struct drop_report r = {EVENT_INIT, EVENT_INIT, 0, 0, 0, 0};
    static struct event entered = EVENT_INIT;
    static struct event release = EVENT_INIT;
    rt_runtime *rt = new_runtime(1);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);

    struct chan_waiter s;
    memset(&s, 0, sizeof s);
    s.ch = ch;
    s.r = &r;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, chan_waiter_poll, chan_waiter_drop, &s, &task), 0);
    cr_assert(event_wait_for(&r.pending, 1), "the task never waited for its receive");
    cr_assert(r.awaiting_ok, "the pending receive was not the operation in flight");

    /* Hold the only worker, so the receive woken by the message cannot be
     * polled again before the abort drops it. */
    struct hold_worker hw = {&entered, &release};
    rt_task *holder = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, hold_worker_poll, NULL, &hw, &holder), 0);
    cr_assert(event_wait_for(&entered, 1));
    cr_assert_eq(rt_chan_try_send(ch, (void *)(uintptr_t)0x5EED), 0);
    rt_task_cancel(task);
    event_signal(&release);

    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(task_wait_status(holder, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert(event_wait_for(&r.dropped, 1));
    cr_assert(r.awaiting_at_drop, "the aborted task's drop found no operation in flight");
    cr_assert(r.awaiting_cleared, "rt_coro_drop left the operation in flight");
    cr_assert_eq(r.result, -ECANCELED, "rt_coro_drop did not drop the receive (result %lld)",
                 (long long)r.result);

    /* The receive never finished, so the message is still the channel's. */
    cr_assert_eq(rt_chan_len(ch), 1, "the aborted receive took the message");
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0,
                 "the message is still promised to the dropped receive");
    cr_assert_eq(v, (void *)(uintptr_t)0x5EED);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.cancelled, 1);
}

/* Locks the mutex as a guard, then sleeps (a minute) while holding it. */
struct lock_sitter {
    rt_coro co;
    rt_mutex *m;
    rt_mutex_lock lk;
    rt_sleep nap;
    struct event *holding;
};

static rt_poll lock_sitter_poll(void *p, rt_context *cx, void **out)
{
    struct lock_sitter *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_mutex_lock_init(&s->lk, s->m);
    RT_AWAIT_HOLD(&s->co, cx, &s->lk);
    if (s->lk.result != 0)
        RT_RETURN(&s->co, out, (intptr_t)s->lk.result);
    rt_sleep_init(&s->nap, NULL, RT_SEC(60));
    /* The abort cannot act in the middle of this poll: the task is waiting
     * in the sleep, holding the lock, by the time it takes effect. */
    event_signal(s->holding);
    RT_AWAIT(&s->co, cx, &s->nap);
    RT_RETURN(&s->co, out, (intptr_t)1);
    RT_CORO_END(&s->co, out);
}

/* Waits for the lock as a guard and returns 1 once it has it (the drop,
 * rt_coro_drop, gives it back). */
struct lock_taker {
    rt_coro co;
    rt_mutex *m;
    rt_mutex_lock lk;
    struct event *pending;
    bool announced;
};

static rt_poll lock_taker_body(struct lock_taker *s, rt_context *cx, void **out)
{
    RT_CORO_BEGIN(&s->co);
    rt_mutex_lock_init(&s->lk, s->m);
    RT_AWAIT_HOLD(&s->co, cx, &s->lk);
    RT_RETURN(&s->co, out, (intptr_t)(s->lk.result == 0 ? 1 : s->lk.result));
    RT_CORO_END(&s->co, out);
}

static rt_poll lock_taker_poll(void *p, rt_context *cx, void **out)
{
    struct lock_taker *s = p;
    return announce(lock_taker_body(s, cx, out), &s->announced, s->pending);
}

Test(coro, task_aborted_while_holding_a_lock_guard_releases_the_lock_to_the_next_task)
{
    static struct event holding = EVENT_INIT;
    static struct event taker_waits = EVENT_INIT;
    rt_runtime *rt = new_runtime(2);
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);

    struct lock_sitter sitter;
    memset(&sitter, 0, sizeof sitter);
    sitter.m = m;
    sitter.holding = &holding;
    rt_task *a = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, lock_sitter_poll, rt_coro_drop, &sitter, &a), 0);
    cr_assert(event_wait_for(&holding, 1), "the first task never took the lock");
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY, "the lock held by the task is free");

    /* A second task queues for the lock behind the first. */
    struct lock_taker taker;
    memset(&taker, 0, sizeof taker);
    taker.m = m;
    taker.pending = &taker_waits;
    rt_task *b = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, lock_taker_poll, rt_coro_drop, &taker, &b), 0);
    cr_assert(event_wait_for(&taker_waits, 1), "the second task never waited for the lock");

    /* Aborting the holder gives the lock back, to the task waiting for it. */
    rt_task_cancel(a);
    cr_assert_eq(task_wait_status(a, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    void *value = NULL;
    cr_assert_eq(task_wait_status(b, WAIT_DEADLINE_NS, &value), 0,
                 "the task waiting for the lock never got it");
    cr_assert_eq((intptr_t)value, 1, "the second task's lock finished with %ld",
                 (long)(intptr_t)value);

    /* And the second task's drop gave it back in turn. */
    cr_assert_eq(rt_mutex_try_lock(m), 0, "the lock is still held");
    rt_mutex_unlock(m);
    rt_metrics m_final;
    finish_runtime_metrics(rt, 0, &m_final);
    cr_assert_eq(m_final.cancelled, 1);
    cr_assert_eq(m_final.completed, 1);
    rt_mutex_drop(m);
}
