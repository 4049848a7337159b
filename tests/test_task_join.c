/* Black-box tests of a task's end (asyncrt/task.h): the rt_task_join
 * operation inside a task and polled by hand (aborted through, dropped while
 * pending), task_wait_status (its value, a NULL task, timeouts that leave the
 * handle valid), -EDEADLK from blocking calls on a worker, detach, and abort
 * (of an idle, a queued or a finished task, during a poll, during the final
 * poll), rt_task_is_finished, a joiner aborted while its child runs on, and
 * handles that stay usable after the runtime is freed. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_task.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

TestSuite(task, .timeout = 120, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

struct gated_value {
    struct gate *gate;
    void *value;
};

/* Finishes with s->value once the gate opens. The poll is announced only
 * after the gate has the waker, so a test that opens the gate once it sees
 * the poll always wakes a waiting task. */
static rt_poll gated_value_poll(void *state, rt_context *cx, void **out)
{
    struct gated_value *s = state;
    bool open = gate_pass(s->gate, cx);
    atomic_fetch_add(&polls, 1);
    event_signal(&polled);
    if (!open)
        return RT_PENDING;
    *out = s->value;
    return RT_READY;
}

/* ---- join and wait ------------------------------------------------------- */

struct joins_two {
    rt_coro co;
    struct report *r;
    rt_task *first;
    rt_task *second;
    rt_task_join join_first;
    rt_task_join join_second;
};

/* Joins one child reading its value and status, and another whose outcome
 * it ignores. */
static rt_poll joins_two_poll(void *state, rt_context *cx, void **out)
{
    struct joins_two *s = state;
    RT_CORO_BEGIN(&s->co);
    {
        void *payload = (void *)(uintptr_t)0xABC;
        s->r->rc[0] =
            rt_spawn(NULL, value_poll, counting_drop, &payload, sizeof payload, &s->first);
        s->r->rc[1] =
            rt_spawn(NULL, value_poll, counting_drop, &payload, sizeof payload, &s->second);
    }
    if (s->r->rc[0] != 0 || s->r->rc[1] != 0)
        RT_RETURN(&s->co, out, NULL);
    rt_task_join_init(&s->join_first, s->first);
    rt_task_join_init(&s->join_second, s->second);
    RT_AWAIT(&s->co, cx, &s->join_first);
    s->r->values[0] = s->join_first.value;
    s->r->status[0] = (int)s->join_first.result;
    RT_AWAIT(&s->co, cx, &s->join_second);
    RT_RETURN(&s->co, out, (uintptr_t)2);
    RT_CORO_END(&s->co, out);
}

Test(task, join_inside_a_task_reports_the_value_and_a_zero_status)
{
    rt_runtime *rt = new_runtime(2);
    struct report r;
    memset(&r, 0, sizeof r);
    r.status[0] = 12345;
    struct joins_two state;
    memset(&state, 0, sizeof state);
    state.r = &r;
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, joins_two_poll, NULL, &state, sizeof state, &value), 0);
    cr_assert_eq(r.rc[0], 0);
    cr_assert_eq(r.rc[1], 0);
    cr_assert_eq(value, (void *)(uintptr_t)2);
    cr_assert_eq(r.values[0], (void *)(uintptr_t)0xABC);
    cr_assert_eq(r.status[0], 0);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops), 2);
}

Test(task, wait_returns_the_value_and_accepts_a_null_value_pointer)
{
    rt_runtime *rt = new_runtime(2);
    void *payload = (void *)(uintptr_t)0x5150;
    rt_task *with_value = NULL;
    rt_task *without_value = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, value_poll, counting_drop, &payload, &with_value), 0);
    cr_assert_eq(RT_SPAWN_STATE(rt, value_poll, counting_drop, &payload, &without_value), 0);
    void *value = NULL;
    cr_assert_eq(task_wait_status(with_value, -1, &value), 0);
    cr_assert_eq(value, payload);
    cr_assert_eq(task_wait_status(without_value, -1, NULL), 0);
    finish_runtime(rt, 0);
}

Test(task, wait_on_a_null_task_is_einval)
{
    cr_assert_eq(task_wait_status(NULL, -1, NULL), -EINVAL);
    cr_assert_eq(task_wait_status(NULL, 0, NULL), -EINVAL);
}

static int64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

Test(task, wait_times_out_after_the_deadline_and_leaves_the_handle_valid)
{
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)0x77};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, counting_drop, &state, &task), 0);

    void *value = (void *)(uintptr_t)1;
    cr_assert_eq(task_wait_status(task, 0, &value), -ETIMEDOUT, "a zero timeout must not block");
    const int64_t timeout_ns = 30 * 1000000LL;
    int64_t start = monotonic_ns();
    cr_assert_eq(task_wait_status(task, timeout_ns, &value), -ETIMEDOUT);
    int64_t elapsed = monotonic_ns() - start;
    cr_assert_geq(elapsed, timeout_ns - 1000000LL, "timed out after %lld ns only",
                  (long long)elapsed);
    cr_assert_not(rt_task_is_finished(task));

    /* The handle is still ours: the task can finish and be waited on. */
    gate_open(&gate);
    cr_assert_eq(task_wait_status(task, -1, &value), 0);
    cr_assert_eq(value, (void *)(uintptr_t)0x77);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops), 1);
    gate_clear(&gate);
}

Test(task, wait_with_zero_timeout_on_a_finished_task_returns_its_value)
{
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(1);
    struct gated_value state = {&gate, (void *)(uintptr_t)0x99};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, counting_drop, &state, &task), 0);
    cr_assert(event_wait_for(&polled, 1));

    /* A join operation would take the handle over, so the finish is learnt
     * otherwise: the drop has run, and then the only worker has gone back to
     * sleep, which it does only after it has finished with the task. */
    gate_open(&gate);
    cr_assert(event_wait_for(&dropped, 1));
    cr_assert(wait_all_workers_parked(rt), "the worker never went back to sleep");
    cr_assert(rt_task_is_finished(task));

    void *value = NULL;
    cr_assert_eq(task_wait_status(task, 0, &value), 0);
    cr_assert_eq(value, (void *)(uintptr_t)0x99);
    finish_runtime(rt, 0);
    gate_clear(&gate);
}

/* ---- blocking calls from a worker ------------------------------------------ */

static atomic_int block_on_drops;

static void block_on_drop(void *state)
{
    (void)state;
    atomic_fetch_add(&block_on_drops, 1);
}

struct blocks_on_worker {
    rt_coro co;
    struct report *r;
    struct gate *gate;
    rt_runtime *other_rt;
    rt_task *other_task;
    rt_task *child;
    rt_task_join join;
};

/* From inside a task, tries every blocking call the contract forbids on a
 * worker, then joins its child to show the handle stayed valid. */
static rt_poll blocks_on_worker_poll(void *state, rt_context *cx, void **out)
{
    struct blocks_on_worker *s = state;
    RT_CORO_BEGIN(&s->co);
    {
        struct gated_value child = {s->gate, (void *)(uintptr_t)0xD1};
        s->r->rc[0] = RT_SPAWN_STATE(NULL, gated_value_poll, NULL, &child, &s->child);
    }
    if (s->r->rc[0] != 0)
        RT_RETURN(&s->co, out, NULL);
    {
        void *value = NULL;
        s->r->rc[1] = task_wait_status(s->child, -1, &value);
        s->r->rc[2] = task_wait_status(s->child, 0, &value);
        s->r->rc[3] =
            block_on_status(rt_current_runtime(), trivial_poll, block_on_drop, NULL, 0, &value);
        s->r->rc[4] = block_on_status(s->other_rt, trivial_poll, block_on_drop, NULL, 0, &value);
        s->r->rc[5] = task_wait_status(s->other_task, -1, &value);
    }
    /* The child was gated so that it could not finish during those calls. */
    gate_open(s->gate);
    rt_task_join_init(&s->join, s->child);
    RT_AWAIT(&s->co, cx, &s->join);
    s->r->values[0] = s->join.value;
    s->r->status[0] = (int)s->join.result;
    RT_RETURN(&s->co, out, (uintptr_t)3);
    RT_CORO_END(&s->co, out);
}

Test(task, wait_and_block_on_inside_a_task_return_edeadlk_and_keep_the_handle)
{
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    rt_runtime *other = new_runtime(1);
    rt_task *other_task = NULL;
    cr_assert_eq(rt_spawn(other, never_poll, NULL, NULL, 0, &other_task), 0);

    struct report r;
    memset(&r, 0, sizeof r);
    r.status[0] = 12345;
    struct blocks_on_worker state;
    memset(&state, 0, sizeof state);
    state.r = &r;
    state.gate = &gate;
    state.other_rt = other;
    state.other_task = other_task;
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, blocks_on_worker_poll, NULL, &state, sizeof state, &value), 0);
    cr_assert_eq(value, (void *)(uintptr_t)3);
    cr_assert_eq(r.rc[0], 0);
    cr_assert_eq(r.rc[1], -EDEADLK, "rt_task_wait(-1) on a worker: %s", rt_strerror(r.rc[1]));
    cr_assert_eq(r.rc[2], -EDEADLK, "rt_task_wait(0) on a worker: %s", rt_strerror(r.rc[2]));
    cr_assert_eq(r.rc[3], -EDEADLK, "rt_block_on of its own runtime: %s", rt_strerror(r.rc[3]));
    cr_assert_eq(r.rc[4], -EDEADLK, "rt_block_on of another runtime from a worker: %s",
                 rt_strerror(r.rc[4]));
    cr_assert_eq(r.rc[5], -EDEADLK, "rt_task_wait on another runtime's task from a worker: %s",
                 rt_strerror(r.rc[5]));
    cr_assert_eq(r.values[0], (void *)(uintptr_t)0xD1, "the handle was consumed by a failed wait");
    cr_assert_eq(r.status[0], 0);
    cr_assert_eq(atomic_load(&block_on_drops), 0,
                 "a future refused with -EDEADLK must not be dropped");

    finish_runtime(rt, 0);
    /* The other runtime's task never finishes; shutdown cancels it, and its
     * handle still works after the runtime is freed. */
    finish_runtime(other, 1);
    cr_assert_eq(task_wait_status(other_task, -1, NULL), -ECANCELED);
    gate_clear(&gate);
}

/* ---- detach -------------------------------------------------------------- */

Test(task, detached_task_keeps_running_to_completion)
{
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, NULL};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, counting_drop, &state, &task), 0);
    cr_assert(event_wait_for(&polled, 1));
    rt_task_drop(task);
    rt_task_drop(NULL);

    gate_open(&gate);
    cr_assert(event_wait_for(&dropped, 1), "a detached task did not run to completion");
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.completed, 1);
    cr_assert_eq(m.cancelled, 0);
    cr_assert_eq(atomic_load(&polls), 2, "polled %d times", atomic_load(&polls));
    cr_assert_eq(atomic_load(&drops), 1);
    gate_clear(&gate);
}

Test(task, spawn_without_a_handle_and_detach_of_a_finished_task_release_everything)
{
    rt_runtime *rt = new_runtime(2);
    cr_assert_eq(rt_spawn(rt, empty_poll, counting_drop, NULL, 0, NULL), 0);
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, empty_poll, counting_drop, NULL, 0, &task), 0);
    cr_assert(event_wait_for(&dropped, 2));
    /* Both have run; detaching the finished one releases its memory (the
     * sanitizer build reports a leak otherwise). */
    rt_task_drop(task);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&polls), 2);
    cr_assert_eq(atomic_load(&drops), 2);
}

/* ---- abort --------------------------------------------------------------- */

Test(task, abort_of_an_idle_task_drops_it_once_and_the_waiter_gets_ecanceled)
{
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)1};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, counting_drop, &state, &task), 0);
    cr_assert(event_wait_for(&polled, 1));

    /* Any number of aborts, from any thread, is allowed. */
    rt_task_cancel(task);
    rt_task_cancel(task);
    cr_assert(event_wait_for(&dropped, 1), "an aborted idle task was never dropped");
    void *value = (void *)(uintptr_t)1;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &value), -ECANCELED);

    /* Waking the aborted task through the waker it left behind must not poll
     * it again. */
    gate_open(&gate);
    run_probe(rt);

    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&polls), 1, "an aborted task was polled again");
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.cancelled, 1);
    cr_assert_eq(m.completed, 1, "only the probe completes");
    gate_clear(&gate);
}

Test(task, abort_of_a_task_that_stored_no_waker_still_cancels_it)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, &task), 0);
    cr_assert(event_wait_for(&polled, 1));
    rt_task_cancel(task);
    /* Nobody will ever wake it, so the abort itself must get it cancelled. */
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(event_wait_for(&dropped, 1));
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&polls), 1);
    cr_assert_eq(atomic_load(&drops), 1);
}

Test(task, abort_of_a_queued_task_drops_it_without_ever_polling_it)
{
    static struct blocker blocker = {EVENT_INIT, EVENT_INIT};
    rt_runtime *rt = new_runtime(1);
    struct blocker *bp = &blocker;
    rt_task *blocking = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, blocker_poll, NULL, &bp, &blocking), 0);
    cr_assert(event_wait_for(&blocker.entered, 1));

    /* The only worker is busy, so the new task is still queued when aborted. */
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, &task), 0);
    rt_task_cancel(task);
    event_signal(&blocker.release);

    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(event_wait_for(&dropped, 1));
    cr_assert_eq(task_wait_status(blocking, WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&polls), 0, "an aborted task was polled");
    cr_assert_eq(atomic_load(&drops), 1);
}

/* A poll that holds still until the test has aborted the task, to show that
 * the drop waits for the poll in progress. */
struct abort_in_poll {
    bool finish;
    bool self_wake;
};

static atomic_int in_poll;
static atomic_int overlapping_polls;
static atomic_int drops_during_poll;
static struct event entered_poll = EVENT_INIT;
static struct event resume_poll = EVENT_INIT;

static rt_poll abort_in_poll_poll(void *state, rt_context *cx, void **out)
{
    const struct abort_in_poll *s = state;
    if (atomic_exchange(&in_poll, 1) != 0)
        atomic_fetch_add(&overlapping_polls, 1);
    if (atomic_fetch_add(&polls, 1) == 0) {
        event_signal(&entered_poll);
        event_wait_for(&resume_poll, 1);
    }
    if (s->self_wake)
        rt_waker_wake_by_ref(rt_context_waker(cx));
    atomic_store(&in_poll, 0);
    if (s->finish) {
        *out = (void *)(uintptr_t)0x600D;
        return RT_READY;
    }
    return RT_PENDING;
}

static void abort_in_poll_drop(void *state)
{
    if (atomic_load(&in_poll) != 0)
        atomic_fetch_add(&drops_during_poll, 1);
    counting_drop(state);
}

/* Aborts the task while its first poll is held inside, checks the drop has
 * not run, lets the poll return, and hands back rt_task_wait's result. */
static int abort_during_poll(rt_runtime *rt, struct abort_in_poll how, void **value)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, abort_in_poll_poll, abort_in_poll_drop, &how, &task), 0);
    cr_assert(event_wait_for(&entered_poll, 1));
    rt_task_cancel(task);
    /* Let the other worker run something, in case the abort wrongly handed
     * the task to it. */
    run_probe(rt);
    cr_assert_eq(atomic_load(&drops), 0, "the drop ran while the poll was still in progress");
    event_signal(&resume_poll);
    int rc = task_wait_status(task, WAIT_DEADLINE_NS, value);
    cr_assert(event_wait_for(&dropped, 1), "the task was never dropped");
    return rc;
}

Test(task, abort_during_a_poll_drops_the_future_only_after_the_poll_returns)
{
    rt_runtime *rt = new_runtime(2);
    struct abort_in_poll how = {false, false};
    cr_assert_eq(abort_during_poll(rt, how, NULL), -ECANCELED);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&drops_during_poll), 0);
    cr_assert_eq(atomic_load(&overlapping_polls), 0);
    cr_assert_eq(atomic_load(&polls), 1, "an aborted task was polled again");
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.cancelled, 1);
}

Test(task, abort_during_a_poll_that_wakes_itself_is_not_polled_again)
{
    rt_runtime *rt = new_runtime(2);
    struct abort_in_poll how = {false, true};
    cr_assert_eq(abort_during_poll(rt, how, NULL), -ECANCELED);
    run_probe(rt);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops_during_poll), 0);
    cr_assert_eq(atomic_load(&polls), 1, "an aborted task was polled again after a self wake");
    cr_assert_eq(atomic_load(&drops), 1);
}

Test(task, abort_during_the_final_poll_keeps_the_result)
{
    rt_runtime *rt = new_runtime(2);
    struct abort_in_poll how = {true, false};
    void *value = NULL;
    cr_assert_eq(abort_during_poll(rt, how, &value), 0,
                 "a task that finished in the poll in progress must keep its result");
    cr_assert_eq(value, (void *)(uintptr_t)0x600D);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&drops_during_poll), 0);
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.cancelled, 0);
    cr_assert_eq(m.completed, 2, "the task and the probe complete");
}

Test(task, is_finished_turns_true_when_the_task_finishes)
{
    static struct event joined = EVENT_INIT;
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)0x42};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, NULL, &state, &task), 0);
    cr_assert(event_wait_for(&polled, 1));
    cr_assert_not(rt_task_is_finished(task), "a task behind a shut gate cannot be finished");

    rt_context cx = event_context(&joined);
    rt_task_join join;
    cr_assert_eq(rt_task_join_init(&join, task), 0);
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_PENDING);
    cr_assert_not(rt_task_is_finished(join.task));
    gate_open(&gate);
    cr_assert(event_wait_for(&joined, 1));
    cr_assert(rt_task_is_finished(join.task), "the joiner was woken but the task is not finished");
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_READY);
    cr_assert_eq(join.value, (void *)(uintptr_t)0x42);
    cr_assert_eq(join.result, 0);
    cr_assert_null(join.task, "the finished join kept the handle");
    finish_runtime(rt, 0);
    gate_clear(&gate);
}

Test(task, abort_through_a_pending_join_cancels_the_task_and_the_join_reports_it)
{
    static struct event joined = EVENT_INIT;
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)0xBAD};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, counting_drop, &state, &task), 0);
    cr_assert(event_wait_for(&polled, 1));

    rt_context cx = event_context(&joined);
    rt_task_join join;
    cr_assert_eq(rt_task_join_init(&join, task), 0);
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_PENDING);
    rt_task_cancel(join.task);
    cr_assert(event_wait_for(&joined, 1), "the joiner was not woken by the abort");
    cr_assert(event_wait_for(&dropped, 1));
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_READY);
    cr_assert_eq(join.result, -ECANCELED);
    cr_assert_null(join.value, "a cancelled join must report a NULL value");
    cr_assert_null(join.task);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.cancelled, 1);
    gate_clear(&gate);
}

Test(task, join_dropped_while_pending_detaches_and_the_task_runs_on)
{
    static struct event joined = EVENT_INIT;
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)0xD7};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, counting_drop, &state, &task), 0);
    cr_assert(event_wait_for(&polled, 1));

    rt_context cx = event_context(&joined);
    rt_task_join join;
    cr_assert_eq(rt_task_join_init(&join, task), 0);
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_PENDING);
    RT_DROP(&join);
    cr_assert_eq(join.result, -ECANCELED);
    cr_assert_null(join.task, "a dropped join still names the handle");
    /* Dropped: polling it again reports the same, and waits for nothing. */
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_READY);
    cr_assert_eq(join.result, -ECANCELED);

    /* The task was detached, not aborted: it finishes normally, and the
     * detached handle leaks nothing (the sanitizer build checks). */
    gate_open(&gate);
    cr_assert(event_wait_for(&dropped, 1), "the detached task never finished");
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.completed, 1);
    cr_assert_eq(m.cancelled, 0);
    cr_assert_eq(atomic_load(&polls), 2);
    cr_assert_eq(event_count(&joined), 0, "the dropped join's waker was still woken");
    gate_clear(&gate);
}

Test(task, abort_of_a_finished_task_keeps_its_result)
{
    static struct event joined = EVENT_INIT;
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)0x1EF7};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, counting_drop, &state, &task), 0);
    rt_context cx = event_context(&joined);
    rt_task_join join;
    cr_assert_eq(rt_task_join_init(&join, task), 0);
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_PENDING);
    gate_open(&gate);
    cr_assert(event_wait_for(&joined, 1));
    cr_assert(rt_task_is_finished(join.task));

    /* The join still owns the handle (it has not been polled to the end),
     * and an abort through it is allowed. */
    rt_task_cancel(join.task);
    rt_task_cancel(join.task);
    cr_assert(rt_task_is_finished(join.task));
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_READY);
    cr_assert_eq(join.result, 0, "aborting a finished task changed its result to %lld",
                 (long long)join.result);
    cr_assert_eq(join.value, (void *)(uintptr_t)0x1EF7);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.completed, 1);
    cr_assert_eq(m.cancelled, 0);
    gate_clear(&gate);
}

static atomic_int joiner_drops;
static struct event joiner_dropped = EVENT_INIT;
static struct event joiner_joining = EVENT_INIT;

struct joiner {
    rt_coro co;
    struct gate *child_gate;
    rt_task *child;
    int spawn_rc;
    rt_task_join join;
};

static rt_poll joiner_poll(void *state, rt_context *cx, void **out)
{
    struct joiner *s = state;
    RT_CORO_BEGIN(&s->co);
    {
        struct gated_value child = {s->child_gate, (void *)(uintptr_t)0xC4};
        s->spawn_rc = RT_SPAWN_STATE(NULL, gated_value_poll, counting_drop, &child, &s->child);
    }
    if (s->spawn_rc != 0)
        RT_RETURN(&s->co, out, NULL);
    /* From here on the join owns the handle. */
    rt_task_join_init(&s->join, s->child);
    s->child = NULL;
    event_signal(&joiner_joining);
    RT_AWAIT(&s->co, cx, &s->join);
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

/* Drops the join it may be waiting in: a join dropped unfinished detaches
 * the handle it owns (and the child is not touched otherwise). */
static void joiner_drop(void *state)
{
    struct joiner *s = state;
    RT_DROP(&s->join);
    if (s->join.result == -ECANCELED && s->join.task == NULL)
        atomic_fetch_add(&joiner_drops, 1);
    event_signal(&joiner_dropped);
}

Test(task, aborted_joiner_whose_drop_drops_the_join_leaves_the_child_running)
{
    static struct gate child_gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct joiner state;
    memset(&state, 0, sizeof state);
    state.child_gate = &child_gate;
    state.spawn_rc = -1;
    rt_task *joiner = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, joiner_poll, joiner_drop, &state, &joiner), 0);
    cr_assert(event_wait_for(&joiner_joining, 1));
    rt_task_cancel(joiner);
    cr_assert_eq(task_wait_status(joiner, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(event_wait_for(&joiner_dropped, 1));
    cr_assert_eq(atomic_load(&drops), 0, "the child was dropped with its joiner");

    /* The child is still alive and finishes normally once its gate opens. */
    gate_open(&child_gate);
    cr_assert(event_wait_for(&dropped, 1), "the detached child never finished");
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&joiner_drops), 1,
                 "the dropped join does not report -ECANCELED or still names the handle");
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.completed, 1, "the child completes");
    cr_assert_eq(m.cancelled, 1, "the joiner is cancelled");
    gate_clear(&child_gate);
}

Test(task, handles_stay_usable_after_the_runtime_is_freed)
{
    rt_runtime *rt = new_runtime(2);
    void *payload = (void *)(uintptr_t)0x55;
    rt_task *completed = NULL;
    rt_task *pending = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, value_poll, counting_drop, &payload, &completed), 0);
    cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, &pending), 0);
    /* Both polled; the first one's drop shows it returned READY. */
    cr_assert(event_wait_for(&polled, 2));
    cr_assert(event_wait_for(&dropped, 1));
    finish_runtime(rt, 1);

    cr_assert(rt_task_is_finished(completed));
    cr_assert(rt_task_is_finished(pending), "a task cancelled by shutdown counts as finished");
    void *value = NULL;
    cr_assert_eq(task_wait_status(completed, 0, &value), 0);
    cr_assert_eq(value, payload);
    cr_assert_eq(task_wait_status(pending, 0, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&drops), 2);
}
