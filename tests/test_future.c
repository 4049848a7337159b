/* Black-box tests of asyncrt/future.h: the waker helpers, user-defined wakers
 * stored and called by the runtime, and the lifetime guarantees of the
 * runtime's own wakers (they keep their task alive and stay safe to use after
 * the runtime is shut down and freed). */
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
    cr_assert_eq(RT_SPAWN(rt, gated_value_poll, NULL, &state, &task), 0);
    atomic_store(&target.watched, task);

    /* The gate is shut, so the task cannot have finished: the join must store
     * the user waker and report RT_PENDING. */
    rt_context cx = rt_context_from_waker(make_counting_waker(&target));
    void *value = NULL;
    int status = 12345;
    cr_assert_eq(rt_task_join(task, &cx, &value, &status), RT_PENDING);
    cr_assert_not(rt_task_is_finished(task));

    gate_open(&gate);
    cr_assert(event_wait_for(&target.woken, 1), "the runtime never woke the user waker");
    cr_assert_eq(atomic_load(&target.wakes_before_finish), 0,
                 "the joiner was woken before the task counted as finished");
    cr_assert(rt_task_is_finished(task));

    /* The READY join releases the handle, so the waker must stop looking at it. */
    atomic_store(&target.watched, NULL);
    cr_assert_eq(rt_task_join(task, &cx, &value, &status), RT_READY);
    cr_assert_eq(value, (void *)(uintptr_t)0x1234);
    cr_assert_eq(status, 0);

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
    cr_assert_eq(RT_SPAWN(rt, gated_value_poll, NULL, &state, &task), 0);

    rt_context cx1 = rt_context_from_waker(make_counting_waker(&first));
    rt_context cx2 = rt_context_from_waker(make_counting_waker(&second));
    void *value = NULL;
    cr_assert_eq(rt_task_join(task, &cx1, &value, NULL), RT_PENDING);
    /* A later poll with another waker replaces the one to wake, as a Rust
     * future must: only the most recent waker is guaranteed a wake-up. */
    cr_assert_eq(rt_task_join(task, &cx2, &value, NULL), RT_PENDING);

    gate_open(&gate);
    cr_assert(event_wait_for(&second.woken, 1), "the most recent joiner waker was not woken");
    cr_assert_eq(rt_task_join(task, &cx2, &value, NULL), RT_READY);
    cr_assert_eq(value, (void *)(uintptr_t)77);

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
    cr_assert_eq(RT_SPAWN(rt, gated_value_poll, NULL, &state, &task), 0);

    /* Use one join poll only to learn, by its wake-up, that the task finished
     * while we still hold the handle. */
    rt_context cx_waiting = rt_context_from_waker(make_counting_waker(&waiting));
    cr_assert_eq(rt_task_join(task, &cx_waiting, NULL, NULL), RT_PENDING);
    gate_open(&gate);
    cr_assert(event_wait_for(&waiting.woken, 1));
    cr_assert(rt_task_is_finished(task));

    rt_context cx_late = rt_context_from_waker(make_counting_waker(&late));
    void *value = NULL;
    int status = -1;
    cr_assert_eq(rt_task_join(task, &cx_late, &value, &status), RT_READY);
    cr_assert_eq(value, (void *)(uintptr_t)5);
    cr_assert_eq(status, 0);
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
    cr_assert_eq(rt_task_wait(task, -1, NULL), 0);
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
    cr_assert_eq(rt_task_wait(probe, -1, NULL), 0);

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
