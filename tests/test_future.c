/* Black-box tests of asyncrt/future.h: the waker helpers, the life of an
 * operation (a user-defined one polled and dropped through its vtable),
 * user-defined wakers stored and called by the runtime, and the lifetime
 * guarantees of the runtime's own wakers (they keep their task alive and stay
 * safe to use after the runtime is shut down and freed). */
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

TestSuite(future, .timeout = 120, .fini = fail_on_leaks);

/* ---- the helper functions on a user-defined waker ------------------------ */

Test(future, clone_calls_the_vtable_clone_once_and_targets_the_same_data)
{
    struct counting_waker t = COUNTING_WAKER_INIT;
    rt_waker original = make_counting_waker(&t);

    rt_waker copy = rt_waker_clone(&original);

    cr_assert_eq(atomic_load(&t.clones), 1);
    cr_assert_eq(atomic_load(&t.wakes_by_value) + atomic_load(&t.wakes_by_ref) +
                     atomic_load(&t.drops),
                 0, "cloning must not wake or drop");
    cr_assert_eq(copy.vtable, &counting_waker_vtable);
    cr_assert_eq(copy.data, (const void *)&t);
    /* The original is untouched by cloning. */
    cr_assert_eq(original.vtable, &counting_waker_vtable);
    cr_assert_eq(original.data, (const void *)&t);
    rt_waker_drop(&copy);
    cr_assert_eq(counting_outstanding(&t), 0);
}

Test(future, wake_calls_the_vtable_wake_once_and_leaves_the_noop_waker)
{
    struct counting_waker t = COUNTING_WAKER_INIT;
    rt_waker original = make_counting_waker(&t);
    rt_waker w = rt_waker_clone(&original);

    rt_waker_wake(&w);

    cr_assert_eq(atomic_load(&t.wakes_by_value), 1);
    cr_assert_eq(atomic_load(&t.wakes_by_ref), 0);
    cr_assert_eq(atomic_load(&t.drops), 0, "wake consumes the reference itself; no extra drop");
    cr_assert(rt_waker_is_noop(&w), "a consumed waker must be left as the no-op waker");
    cr_assert_eq(counting_outstanding(&t), 0);

    /* Waking the consumed (now no-op) value again must not reach the target. */
    rt_waker_wake(&w);
    cr_assert_eq(atomic_load(&t.wakes_by_value), 1);
}

Test(future, wake_by_ref_calls_the_vtable_wake_by_ref_and_keeps_the_waker)
{
    struct counting_waker t = COUNTING_WAKER_INIT;
    rt_waker original = make_counting_waker(&t);
    rt_waker w = rt_waker_clone(&original);

    rt_waker_wake_by_ref(&w);
    rt_waker_wake_by_ref(&w);

    cr_assert_eq(atomic_load(&t.wakes_by_ref), 2);
    cr_assert_eq(atomic_load(&t.wakes_by_value), 0);
    cr_assert_eq(atomic_load(&t.drops), 0);
    cr_assert_not(rt_waker_is_noop(&w), "wake_by_ref must leave the waker valid");
    cr_assert_eq(w.vtable, &counting_waker_vtable);
    cr_assert_eq(w.data, (const void *)&t);
    cr_assert_eq(counting_outstanding(&t), 1);

    rt_waker_drop(&w);
    cr_assert_eq(counting_outstanding(&t), 0);
}

Test(future, drop_calls_the_vtable_drop_once_and_leaves_the_noop_waker)
{
    struct counting_waker t = COUNTING_WAKER_INIT;
    rt_waker original = make_counting_waker(&t);
    rt_waker w = rt_waker_clone(&original);

    rt_waker_drop(&w);

    cr_assert_eq(atomic_load(&t.drops), 1);
    cr_assert_eq(atomic_load(&t.wakes_by_value) + atomic_load(&t.wakes_by_ref), 0,
                 "dropping must not wake");
    cr_assert(rt_waker_is_noop(&w));

    /* Dropping the no-op value left behind is safe and reaches nobody. */
    rt_waker_drop(&w);
    cr_assert_eq(atomic_load(&t.drops), 1);
    cr_assert_eq(counting_outstanding(&t), 0);
}

Test(future, will_wake_compares_both_vtable_and_data)
{
    struct counting_waker t1 = COUNTING_WAKER_INIT;
    struct counting_waker t2 = COUNTING_WAKER_INIT;
    rt_waker a = make_counting_waker(&t1);
    rt_waker same = make_counting_waker(&t1);
    rt_waker other_data = make_counting_waker(&t2);
    /* Same data under a different vtable is a different target. */
    static const rt_waker_vtable other_vtable = {counting_waker_clone, counting_waker_wake,
                                                 counting_waker_wake_by_ref, counting_waker_drop};
    rt_waker other_vtable_waker = {&other_vtable, &t1};
    rt_waker noop = rt_waker_noop();

    cr_assert(rt_waker_will_wake(&a, &a));
    cr_assert(rt_waker_will_wake(&a, &same));
    cr_assert_not(rt_waker_will_wake(&a, &other_data));
    cr_assert_not(rt_waker_will_wake(&a, &other_vtable_waker));
    cr_assert_not(rt_waker_will_wake(&a, &noop));
    cr_assert_not(rt_waker_will_wake(&noop, &a));
    /* will_wake only compares; it takes or gives no reference. */
    cr_assert_eq(atomic_load(&t1.clones) + atomic_load(&t1.drops) +
                     atomic_load(&t1.wakes_by_value) + atomic_load(&t1.wakes_by_ref),
                 0);
}

Test(future, noop_waker_is_recognised_and_every_operation_on_it_is_harmless)
{
    struct counting_waker t = COUNTING_WAKER_INIT;
    rt_waker user = make_counting_waker(&t);
    rt_waker noop = rt_waker_noop();
    rt_waker noop2 = rt_waker_noop();

    cr_assert_not_null(noop.vtable, "even the no-op waker has a vtable");
    cr_assert(rt_waker_is_noop(&noop));
    cr_assert_not(rt_waker_is_noop(&user));
    cr_assert(rt_waker_will_wake(&noop, &noop2), "two no-op wakers wake the same (nobody)");

    rt_waker copy = rt_waker_clone(&noop);
    cr_assert(rt_waker_is_noop(&copy), "a clone of the no-op waker is the no-op waker");
    rt_waker_wake_by_ref(&copy);
    rt_waker_wake(&copy);
    cr_assert(rt_waker_is_noop(&copy));
    rt_waker_drop(&noop);
    cr_assert(rt_waker_is_noop(&noop));
    rt_waker_drop(&noop2);

    /* A context built around the no-op waker hands back that waker. */
    rt_context cx = rt_context_from_waker(rt_waker_noop());
    cr_assert(rt_waker_is_noop(rt_context_waker(&cx)));
    /* A context built around a user waker borrows it: nothing is cloned. */
    rt_context ucx = rt_context_from_waker(user);
    cr_assert_eq(rt_context_waker(&ucx)->data, (const void *)&t);
    cr_assert_eq(atomic_load(&t.clones), 0);
}

/* ---- the life of an operation ------------------------------------------ */

/* A user-defined operation: pending (after a wake by reference, like a
 * yield) until `remaining` reaches zero, then finished with `value`. It
 * counts what its vtable is asked to do. */
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
    struct countdown_op *op = (struct countdown_op *)f;
    op->drops++;
}

static const rt_future_vtable countdown_op_vtable = {countdown_op_poll, countdown_op_drop, NULL};

static void countdown_op_init(struct countdown_op *op, int remaining, int64_t value)
{
    memset(op, 0, sizeof *op);
    op->future.vtable = &countdown_op_vtable;
    op->remaining = remaining;
    op->value = value;
}

Test(future, the_header_makes_future_and_result_the_same_memory)
{
    struct countdown_op op;
    countdown_op_init(&op, 0, 0);
    cr_assert_eq((void *)&op.future, (void *)&op, "the header is not the first member");
    op.result = 1234;
    cr_assert_eq(op.future.result, 1234, "`result` is not the header's result");
    op.future.result = -5;
    cr_assert_eq(op.result, -5);
}

Test(future, user_operation_is_polled_through_its_vtable_until_it_finishes)
{
    struct counting_waker t = COUNTING_WAKER_INIT;
    rt_context cx = counting_context(&t);
    struct countdown_op op;
    countdown_op_init(&op, 2, 77);
    cr_assert_not(rt_future_is_done(&op.future), "an operation never polled is not done");

    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING);
    cr_assert_eq(rt_future_poll(&op.future, &cx), RT_PENDING,
                 "RT_POLL_OP and rt_future_poll differ");
    cr_assert_not(rt_future_is_done(&op.future));
    cr_assert_eq(atomic_load(&t.wakes_by_ref), 2, "the operation was not given the context");
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, 77);
    cr_assert_eq(op.polls, 3);
    cr_assert(rt_future_is_done(&op.future));

    /* Finished: later polls report the same result without asking the
     * vtable, and a drop is a no-op. */
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, 77);
    cr_assert_eq(op.polls, 3, "a finished operation was polled through its vtable");
    RT_DROP(&op);
    cr_assert_eq(op.drops, 0, "a finished operation was dropped through its vtable");
    cr_assert_eq(op.result, 77, "dropping a finished operation changed its result");
    cr_assert(rt_future_is_done(&op.future));
    cr_assert_eq(atomic_load(&t.clones), 0);
}

Test(future, user_operation_ready_at_the_first_poll_finishes_with_a_negative_result_too)
{
    rt_context cx = noop_context();
    struct countdown_op op;
    countdown_op_init(&op, 0, -ENOENT);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, -ENOENT);
    cr_assert(rt_future_is_done(&op.future));
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, -ENOENT);
    cr_assert_eq(op.polls, 1);
}

Test(future, dropping_an_unfinished_operation_cancels_it_once)
{
    rt_context cx = noop_context();
    struct countdown_op op;
    countdown_op_init(&op, 5, 1);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING);

    RT_DROP(&op);
    cr_assert_eq(op.drops, 1);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert(rt_future_is_done(&op.future), "a dropped operation is done");

    /* Idempotent, and a dropped operation reports its -ECANCELED. */
    RT_DROP(&op);
    rt_future_drop(&op.future);
    cr_assert_eq(op.drops, 1, "the vtable drop ran more than once");
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_eq(op.polls, 1, "a dropped operation was polled through its vtable");

    /* A dropped operation may be initialised again. */
    countdown_op_init(&op, 0, 9);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, 9);
}

Test(future, dropping_an_operation_never_polled_calls_its_drop)
{
    struct countdown_op op;
    countdown_op_init(&op, 5, 1);
    RT_DROP(&op);
    cr_assert_eq(op.drops, 1);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_eq(op.polls, 0);
}

Test(future, finish_marks_the_operation_done_from_any_poll)
{
    struct countdown_op op;
    countdown_op_init(&op, 5, 1);
    cr_assert_eq(rt_future_finish(&op.future, 3), RT_READY);
    cr_assert(rt_future_is_done(&op.future));
    cr_assert_eq(op.result, 3);
    rt_context cx = noop_context();
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, 3);
    cr_assert_eq(op.polls, 0);
    RT_DROP(&op);
    cr_assert_eq(op.drops, 0);
    cr_assert_eq(op.result, 3);
}

/* ---- user wakers stored and called by the runtime ------------------------- */

struct gated_value {
    struct gate *gate;
    void *value;
};

/* Finishes with s->value once the gate opens. */
static rt_poll gated_value_poll(void *state, rt_context *cx, void **out)
{
    struct gated_value *s = state;
    if (!gate_pass(s->gate, cx))
        return RT_PENDING;
    *out = s->value;
    return RT_READY;
}

Test(future, user_waker_polling_a_join_by_hand_is_woken_when_the_task_finishes)
{
    static struct gate gate = GATE_INIT;
    static struct counting_waker target = COUNTING_WAKER_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)0x1234};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, NULL, &state, &task), 0);
    atomic_store(&target.watched, task);

    /* The gate is shut, so the task cannot have finished: the join must store
     * the user waker and report RT_PENDING. */
    rt_context cx = rt_context_from_waker(make_counting_waker(&target));
    rt_task_join join;
    cr_assert_eq(rt_task_join_init(&join, task), 0);
    cr_assert_eq(join.task, task, "the join owns the handle");
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_PENDING);
    cr_assert_not(rt_future_is_done(&join.future));
    cr_assert_not(rt_task_is_finished(join.task));

    gate_open(&gate);
    cr_assert(event_wait_for(&target.woken, 1), "the runtime never woke the user waker");
    cr_assert_eq(atomic_load(&target.wakes_before_finish), 0,
                 "the joiner was woken before the task counted as finished");
    cr_assert(rt_task_is_finished(join.task));

    /* The READY join releases the handle, so the waker must stop looking at it. */
    atomic_store(&target.watched, NULL);
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_READY);
    cr_assert_eq(join.value, (void *)(uintptr_t)0x1234);
    cr_assert_eq(join.result, 0);
    cr_assert_null(join.task, "a finished join still names the handle it released");
    cr_assert(rt_future_is_done(&join.future));
    /* Finished: every later poll reports the same, and a drop changes nothing. */
    cr_assert_eq(RT_POLL_OP(&join, &cx), RT_READY);
    cr_assert_eq(join.result, 0);
    cr_assert_eq(join.value, (void *)(uintptr_t)0x1234);
    RT_DROP(&join);
    cr_assert_eq(join.result, 0, "dropping a finished join changed its result");

    finish_runtime(rt, 0);
    /* Whatever the runtime cloned from the user waker it has given back. */
    cr_assert_eq(counting_outstanding(&target), 0, "runtime leaked %ld user waker references",
                 counting_outstanding(&target));
    gate_clear(&gate);
}

Test(future, join_polled_with_a_second_user_waker_wakes_that_one_and_releases_the_first)
{
    static struct gate gate = GATE_INIT;
    static struct counting_waker first = COUNTING_WAKER_INIT;
    static struct counting_waker second = COUNTING_WAKER_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)77};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, NULL, &state, &task), 0);

    rt_context cx1 = rt_context_from_waker(make_counting_waker(&first));
    rt_context cx2 = rt_context_from_waker(make_counting_waker(&second));
    rt_task_join join;
    cr_assert_eq(rt_task_join_init(&join, task), 0);
    cr_assert_eq(RT_POLL_OP(&join, &cx1), RT_PENDING);
    /* A later poll with another waker replaces the one to wake, as a Rust
     * future must: only the most recent waker is guaranteed a wake-up. */
    cr_assert_eq(RT_POLL_OP(&join, &cx2), RT_PENDING);

    gate_open(&gate);
    cr_assert(event_wait_for(&second.woken, 1), "the most recent joiner waker was not woken");
    cr_assert_eq(RT_POLL_OP(&join, &cx2), RT_READY);
    cr_assert_eq(join.result, 0);
    cr_assert_eq(join.value, (void *)(uintptr_t)77);

    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&first), 0, "the replaced waker was never released");
    cr_assert_eq(counting_outstanding(&second), 0);
    gate_clear(&gate);
}

Test(future, join_of_a_finished_task_is_ready_at_once_and_keeps_no_reference)
{
    static struct gate gate = GATE_INIT;
    static struct counting_waker waiting = COUNTING_WAKER_INIT;
    static struct counting_waker late = COUNTING_WAKER_INIT;
    rt_runtime *rt = new_runtime(1);
    struct gated_value state = {&gate, (void *)(uintptr_t)5};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_value_poll, NULL, &state, &task), 0);

    /* Use one join poll only to learn, by its wake-up, that the task finished
     * before the join is polled again. */
    rt_context cx_waiting = rt_context_from_waker(make_counting_waker(&waiting));
    rt_task_join join;
    cr_assert_eq(rt_task_join_init(&join, task), 0);
    cr_assert_eq(RT_POLL_OP(&join, &cx_waiting), RT_PENDING);
    gate_open(&gate);
    cr_assert(event_wait_for(&waiting.woken, 1));
    cr_assert(rt_task_is_finished(join.task));

    rt_context cx_late = rt_context_from_waker(make_counting_waker(&late));
    cr_assert_eq(RT_POLL_OP(&join, &cx_late), RT_READY);
    cr_assert_eq(join.value, (void *)(uintptr_t)5);
    cr_assert_eq(join.result, 0);
    cr_assert_eq(counting_outstanding(&late), 0,
                 "a join that is ready at once must not keep the waker");
    cr_assert_eq(atomic_load(&late.wakes_by_value) + atomic_load(&late.wakes_by_ref), 0);

    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&waiting), 0);
    gate_clear(&gate);
}

/* ---- the runtime's own wakers ------------------------------------------- */

/* Where tasks leave clones of their own waker for the test to use later. */
struct waker_stash {
    rt_waker wakers[3];
    atomic_int polls;
    atomic_int drops;
    atomic_int will_wake_ok;
    struct event stored;
};

static struct waker_stash stash = {.polls = 0, .drops = 0, .will_wake_ok = 0, .stored = EVENT_INIT};

static void stash_drop(void *state)
{
    (void)state;
    atomic_fetch_add(&stash.drops, 1);
}

/* Clones its waker three times into the stash, checks will_wake against its
 * own context, and finishes in the same poll. */
static rt_poll clone_then_finish_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    atomic_fetch_add(&stash.polls, 1);
    for (int i = 0; i < 3; i++)
        stash.wakers[i] = rt_waker_clone(rt_context_waker(cx));
    if (rt_waker_will_wake(&stash.wakers[0], rt_context_waker(cx)) &&
        rt_waker_will_wake(&stash.wakers[0], &stash.wakers[1]))
        atomic_store(&stash.will_wake_ok, 1);
    event_signal(&stash.stored);
    *out = NULL;
    return RT_READY;
}

/* Clones its waker three times into the stash and never finishes: nothing
 * ever wakes it, so only shutdown ends it. */
static rt_poll clone_then_pend_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)out;
    if (atomic_fetch_add(&stash.polls, 1) == 0) {
        for (int i = 0; i < 3; i++)
            stash.wakers[i] = rt_waker_clone(rt_context_waker(cx));
        event_signal(&stash.stored);
    }
    return RT_PENDING;
}

Test(future, task_waker_clones_outlive_the_task_and_waking_them_does_not_poll_it_again)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, clone_then_finish_poll, stash_drop, NULL, 0, &task), 0);
    cr_assert_eq(task_wait_status(task, -1, NULL), 0);
    cr_assert(event_wait_for(&stash.stored, 1));
    cr_assert_eq(atomic_load(&stash.will_wake_ok), 1,
                 "a clone of a task's waker must will_wake like the original");

    /* The task is finished; its wakers must still be usable (they hold the
     * task's memory) and must not schedule it again. */
    rt_waker_wake_by_ref(&stash.wakers[0]);
    rt_waker_wake(&stash.wakers[0]);
    cr_assert(rt_waker_is_noop(&stash.wakers[0]));
    rt_waker extra = rt_waker_clone(&stash.wakers[1]);
    rt_waker_wake(&extra);
    rt_waker_drop(&stash.wakers[1]);

    /* A probe task after the wakes gives a wrongly rescheduled task the
     * chance to be polled before we look. */
    rt_task *probe = NULL;
    cr_assert_eq(rt_spawn(rt, trivial_poll, NULL, NULL, 0, &probe), 0);
    cr_assert_eq(task_wait_status(probe, -1, NULL), 0);

    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&stash.polls), 1, "a finished task was polled again");
    cr_assert_eq(atomic_load(&stash.drops), 1);

    /* The last clone is released after the runtime is gone. */
    rt_waker_drop(&stash.wakers[2]);
    cr_assert(rt_waker_is_noop(&stash.wakers[2]));
}

Test(future, waker_of_a_cancelled_task_is_safe_to_drop_after_runtime_free)
{
    rt_runtime *rt = new_runtime(2);
    cr_assert_eq(rt_spawn(rt, clone_then_pend_poll, stash_drop, NULL, 0, NULL), 0);
    cr_assert(event_wait_for(&stash.stored, 1));

    /* The task is still pending, so shutdown cancels exactly it. */
    finish_runtime(rt, 1);
    cr_assert_eq(atomic_load(&stash.drops), 1, "the cancelled task's drop must run once");

    /* The runtime is freed; the wakers are inert and only release memory. */
    rt_waker_drop(&stash.wakers[0]);
    cr_assert(rt_waker_is_noop(&stash.wakers[0]));
    rt_waker_wake_by_ref(&stash.wakers[1]);
    rt_waker_wake(&stash.wakers[1]);
    rt_waker copy = rt_waker_clone(&stash.wakers[2]);
    rt_waker_drop(&stash.wakers[2]);
    rt_waker_drop(&copy);

    cr_assert_eq(atomic_load(&stash.polls), 1, "the cancelled task was polled again");
    cr_assert_eq(atomic_load(&stash.drops), 1, "waking after free must not drop again");
}
