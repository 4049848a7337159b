/* Black-box tests of rt_semaphore (asyncrt/sync.h) polled by hand and from
 * tasks: argument checking and the non-waiting forms, zero-initialised
 * operations of every primitive dropped safely, FIFO service without barging
 * (waiters polled by hand, tasks queued one after another, a big acquisition
 * at the head that small ones must not overtake), abort safety by hand (a
 * waiter dropped while queued or after a partial grant, granted permits never
 * collected), and uncollected permits counting toward the maximum. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_sync.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(sync, .timeout = 120, .fini = fail_on_leaks);

/* ---- semaphore: arguments and non-waiting forms -------------------------- */

/* Queues three acquisitions on `sem`, which has no permit: big (3 permits,
 * polled through hb) at the head, then s1 and s2 (1 each). */
static void queue_big_then_two_small(rt_semaphore *sem, struct hand *hb, rt_semaphore_acquire *big,
                                     struct hand *hs1, rt_semaphore_acquire *s1, struct hand *hs2,
                                     rt_semaphore_acquire *s2)
{
    hand_init(hb);
    hand_init(hs1);
    hand_init(hs2);
    cr_assert_eq(rt_semaphore_acquire_init(big, sem, 3), 0);
    cr_assert_eq(rt_semaphore_acquire_init(s1, sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_init(s2, sem, 1), 0);
    cr_assert_eq(RT_POLL_OP(big, &hb->cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(s1, &hs1->cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(s2, &hs2->cx), RT_PENDING);
}

Test(sync, semaphore_init_and_release_reject_bad_arguments)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(1, NULL), -EINVAL);
    cr_assert_eq(rt_semaphore_new(RT_SEMAPHORE_MAX + 1, &sem), -EINVAL);
    cr_assert_eq(rt_semaphore_new(RT_SEMAPHORE_MAX, &sem), 0);
    cr_assert_eq(rt_semaphore_available(sem), RT_SEMAPHORE_MAX);
    /* Full: one more would exceed the maximum, and nothing is added. */
    cr_assert_eq(rt_semaphore_release(sem, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_available(sem), RT_SEMAPHORE_MAX);
    cr_assert_eq(rt_semaphore_try_acquire(sem, RT_SEMAPHORE_MAX), 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    rt_semaphore_drop(sem);

    cr_assert_eq(rt_semaphore_new(5, &sem), 0);
    cr_assert_eq(rt_semaphore_release(NULL, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_release(sem, RT_SEMAPHORE_MAX), -EINVAL,
                 "5 + RT_SEMAPHORE_MAX exceeds the maximum");
    cr_assert_eq(rt_semaphore_available(sem), 5, "a refused release added permits");
    cr_assert_eq(rt_semaphore_release(sem, RT_SEMAPHORE_MAX - 5), 0);
    cr_assert_eq(rt_semaphore_available(sem), RT_SEMAPHORE_MAX);
    rt_semaphore_drop(sem);

    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    cr_assert_eq(rt_semaphore_acquire_init(&op, sem, 0), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_init(&op, sem, RT_SEMAPHORE_MAX + 1), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_init(NULL, sem, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_init(&op, NULL, 1), -EINVAL);
    /* A failed init leaves the operation finished with its error. */
    rt_context cx = noop_context();
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_init(&op, sem, RT_SEMAPHORE_MAX), 0);
    RT_DROP(&op); /* initialised, never polled */
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    rt_semaphore_drop(sem);
}

Test(sync, semaphore_try_acquire_takes_only_available_permits)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(3, &sem), 0);
    cr_assert_eq(rt_semaphore_available(sem), 3);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 0), -EINVAL);
    cr_assert_eq(rt_semaphore_try_acquire(sem, RT_SEMAPHORE_MAX + 1), -EINVAL);
    cr_assert_eq(rt_semaphore_available(sem), 3);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 4), -EAGAIN);
    cr_assert_eq(rt_semaphore_available(sem), 3, "a failed try took permits");
    cr_assert_eq(rt_semaphore_try_acquire(sem, 2), 0);
    cr_assert_eq(rt_semaphore_available(sem), 1);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 2), -EAGAIN);
    cr_assert_eq(rt_semaphore_available(sem), 1);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 1), 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 1), -EAGAIN);
    cr_assert_eq(rt_semaphore_release(sem, 3), 0);
    cr_assert_eq(rt_semaphore_available(sem), 3);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 3), 0);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(rt_semaphore_release(sem, 2), 0);
    cr_assert_eq(rt_semaphore_available(sem), 3);
    rt_semaphore_drop(sem);
}

Test(sync, semaphore_acquire_is_ready_at_once_when_permits_are_free)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(2, &sem), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, sem, 2), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    /* Finished: a second poll reports the same result and takes nothing. */
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    /* After RT_READY the permits are the caller's: drop does nothing. */
    RT_DROP(&op);
    RT_DROP(&op);
    cr_assert_eq(op.result, 0, "drop after RT_READY changed the result");
    cr_assert_eq(rt_semaphore_available(sem), 0, "drop after RT_READY gave permits back");
    cr_assert_eq(counting_wakes(&h.w), 0);
    cr_assert_eq(counting_outstanding(&h.w), 0, "a ready acquisition kept a waker");
    cr_assert_eq(rt_semaphore_release(sem, 2), 0);
    cr_assert_eq(rt_semaphore_available(sem), 2);
    rt_semaphore_drop(sem);
}

Test(sync, zero_initialised_operations_may_be_dropped)
{
    rt_semaphore_acquire a;
    rt_mutex_lock l;
    rt_notified n;
    memset(&a, 0, sizeof a);
    memset(&l, 0, sizeof l);
    memset(&n, 0, sizeof n);
    /* Polled, they finish at once with -EINVAL and wait for nothing. */
    rt_context cx = noop_context();
    cr_assert_eq(RT_POLL_OP(&a, &cx), RT_READY);
    cr_assert_eq(a.result, -EINVAL);
    cr_assert_eq(RT_POLL_OP(&l, &cx), RT_READY);
    cr_assert_eq(l.result, -EINVAL);
    cr_assert_eq(RT_POLL_OP(&n, &cx), RT_READY);
    cr_assert_eq(n.result, -EINVAL);
    memset(&a, 0, sizeof a);
    memset(&l, 0, sizeof l);
    memset(&n, 0, sizeof n);
    RT_DROP(&a);
    RT_DROP(&l);
    RT_DROP(&n);
    RT_DROP(&a);
    RT_DROP(&l);
    RT_DROP(&n);
    /* And they are then usable as usual. */
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(1, &sem), 0);
    cr_assert_eq(rt_semaphore_acquire_init(&a, sem, 1), 0);
    cr_assert_eq(RT_POLL_OP(&a, &cx), RT_READY);
    cr_assert_eq(a.result, 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    rt_semaphore_drop(sem);
}

/* ---- semaphore: FIFO, no barging ---------------------------------------- */

Test(sync, semaphore_try_acquire_never_overtakes_a_queued_waiter)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(1, &sem), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, sem, 2), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    /* One permit is available, but a waiter is queued before the caller. */
    cr_assert_eq(rt_semaphore_try_acquire(sem, 1), -EAGAIN, "try_acquire barged past a waiter");
    cr_assert_eq(counting_wakes(&h.w), 0);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(counting_wakes(&h.w), 1, "the waiter was not woken once its 2 permits were there");
    /* Granted but not collected: nobody else may take them. */
    cr_assert_eq(rt_semaphore_try_acquire(sem, 1), -EAGAIN, "try_acquire took granted permits");
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(counting_outstanding(&h.w), 0, "a waker reference was not given back");
    cr_assert_eq(rt_semaphore_release(sem, 2), 0);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 2), 0);
    rt_semaphore_drop(sem);
}

Test(sync, semaphore_waiters_polled_by_hand_are_served_in_fifo_order)
{
    enum { N = 6 };
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    static struct hand h[N];
    static rt_semaphore_acquire op[N];
    for (int i = 0; i < N; i++) {
        hand_init(&h[i]);
        cr_assert_eq(rt_semaphore_acquire_init(&op[i], sem, 1), 0);
        cr_assert_eq(RT_POLL_OP(&op[i], &h[i].cx), RT_PENDING);
    }
    for (int k = 0; k < N; k++) {
        cr_assert_eq(rt_semaphore_release(sem, 1), 0);
        for (int i = 0; i < N; i++)
            cr_assert_eq(counting_wakes(&h[i].w), i <= k ? 1 : 0,
                         "after release %d, waiter %d was woken %ld times", k, i,
                         counting_wakes(&h[i].w));
        /* The later ones, polled first, still wait. */
        for (int i = N - 1; i > k; i--)
            cr_assert_eq(RT_POLL_OP(&op[i], &h[i].cx), RT_PENDING, "waiter %d overtook waiter %d",
                         i, k);
        cr_assert_eq(RT_POLL_OP(&op[k], &h[k].cx), RT_READY, "waiter %d", k);
        cr_assert_eq(op[k].result, 0);
        cr_assert_eq(rt_semaphore_available(sem), 0);
    }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(counting_wakes(&h[i].w), 1, "waiter %d woken %ld times", i,
                     counting_wakes(&h[i].w));
        cr_assert_eq(counting_outstanding(&h[i].w), 0, "waiter %d's waker leaked", i);
    }
    cr_assert_eq(rt_semaphore_release(sem, N), 0);
    cr_assert_eq(rt_semaphore_available(sem), N);
    rt_semaphore_drop(sem);
}

Test(sync, semaphore_repoll_with_another_waker_wakes_the_latest_one)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, sem, 1), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h1.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&op, &h2.cx), RT_PENDING);
    cr_assert_eq(counting_outstanding(&h1.w), 0, "the replaced waker was not released");
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(counting_wakes(&h2.w), 1, "the latest waker was not woken");
    cr_assert_eq(counting_wakes(&h1.w), 0, "the replaced waker was woken");
    cr_assert_eq(RT_POLL_OP(&op, &h2.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    rt_semaphore_drop(sem);
}

static struct event fifo_queued = EVENT_INIT;
static struct event fifo_acquired = EVENT_INIT;

Test(sync, semaphore_tasks_queued_one_after_another_acquire_in_fifo_order)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    rt_task *tasks[FIFO_TASKS];
    for (int i = 0; i < FIFO_TASKS; i++) {
        struct sem_waiter w = {0};
        w.sem = sem;
        w.want = 1;
        w.index = i;
        w.queued = &fifo_queued;
        w.acquired = &fifo_acquired;
        tasks[i] = spawn_sem_waiter(rt, &w);
        cr_assert(event_wait_for(&fifo_queued, (unsigned long)i + 1), "waiter %d never queued", i);
    }
    for (int k = 0; k < FIFO_TASKS; k++) {
        cr_assert_eq(rt_semaphore_release(sem, 1), 0);
        cr_assert(event_wait_for(&fifo_acquired, (unsigned long)k + 1), "nobody acquired permit %d",
                  k);
        cr_assert_eq(event_count(&fifo_acquired), (unsigned long)k + 1,
                     "one permit served two waiters");
        cr_assert_eq(rank_order[k], k, "permit %d went to waiter %d", k, rank_order[k]);
    }
    for (int i = 0; i < FIFO_TASKS; i++) {
        void *v = NULL;
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, &v), 0);
        cr_assert_eq((intptr_t)v, 1);
    }
    cr_assert_eq(rt_semaphore_available(sem), 0);
    finish_runtime(rt, 0);
    rt_semaphore_drop(sem);
}

Test(sync, semaphore_big_acquire_at_the_head_is_not_overtaken_by_small_ones)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    struct hand hb, hs1, hs2;
    rt_semaphore_acquire big, s1, s2;
    queue_big_then_two_small(sem, &hb, &big, &hs1, &s1, &hs2, &s2);
    for (int k = 1; k <= 2; k++) {
        cr_assert_eq(rt_semaphore_release(sem, 1), 0);
        cr_assert_eq(counting_wakes(&hb.w) + counting_wakes(&hs1.w) + counting_wakes(&hs2.w), 0,
                     "a waiter was woken with %d of the head's 3 permits released", k);
        cr_assert_eq(RT_POLL_OP(&s1, &hs1.cx), RT_PENDING,
                     "a small acquisition overtook the big one at the head (%d released)", k);
        cr_assert_eq(RT_POLL_OP(&s2, &hs2.cx), RT_PENDING,
                     "a small acquisition overtook the big one at the head (%d released)", k);
        cr_assert_eq(rt_semaphore_try_acquire(sem, 1), -EAGAIN, "try_acquire barged (%d)", k);
        cr_assert_eq(RT_POLL_OP(&big, &hb.cx), RT_PENDING);
    }
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(counting_wakes(&hb.w), 1, "the head was not woken with its 3 permits there");
    cr_assert_eq(counting_wakes(&hs1.w) + counting_wakes(&hs2.w), 0);
    cr_assert_eq(RT_POLL_OP(&big, &hb.cx), RT_READY);
    cr_assert_eq(big.result, 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(RT_POLL_OP(&s2, &hs2.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&s1, &hs1.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(counting_wakes(&hs1.w), 1);
    cr_assert_eq(counting_wakes(&hs2.w), 0, "the third waiter was served before the second");
    cr_assert_eq(RT_POLL_OP(&s2, &hs2.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&s1, &hs1.cx), RT_READY);
    cr_assert_eq(s1.result, 0);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(counting_wakes(&hs2.w), 1);
    cr_assert_eq(RT_POLL_OP(&s2, &hs2.cx), RT_READY);
    cr_assert_eq(s2.result, 0);
    cr_assert_eq(counting_outstanding(&hb.w), 0);
    cr_assert_eq(counting_outstanding(&hs1.w), 0);
    cr_assert_eq(counting_outstanding(&hs2.w), 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(rt_semaphore_release(sem, 5), 0);
    cr_assert_eq(rt_semaphore_available(sem), 5);
    rt_semaphore_drop(sem);
}

/* ---- semaphore: abort safety by hand -------------------------------------- */

Test(sync, semaphore_dropping_a_partly_served_head_passes_its_permits_on)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    struct hand hb, hs1, hs2;
    rt_semaphore_acquire big, s1, s2;
    queue_big_then_two_small(sem, &hb, &big, &hs1, &s1, &hs2, &s2);
    cr_assert_eq(rt_semaphore_release(sem, 2), 0);
    cr_assert_eq(counting_wakes(&hs1.w) + counting_wakes(&hs2.w), 0);
    /* The head gives up: the two permits it was waiting on go to the next
     * two waiters. */
    RT_DROP(&big);
    cr_assert_eq(big.result, -ECANCELED);
    cr_assert_eq(counting_outstanding(&hb.w), 0, "the dropped head kept its waker");
    cr_assert_eq(counting_wakes(&hb.w), 0);
    cr_assert_eq(counting_wakes(&hs1.w), 1, "the permits did not pass to the second waiter");
    cr_assert_eq(counting_wakes(&hs2.w), 1, "the permits did not pass to the third waiter");
    cr_assert_eq(RT_POLL_OP(&s1, &hs1.cx), RT_READY);
    cr_assert_eq(s1.result, 0);
    cr_assert_eq(RT_POLL_OP(&s2, &hs2.cx), RT_READY);
    cr_assert_eq(s2.result, 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(counting_outstanding(&hs1.w), 0);
    cr_assert_eq(counting_outstanding(&hs2.w), 0);
    cr_assert_eq(rt_semaphore_release(sem, 2), 0);
    cr_assert_eq(rt_semaphore_available(sem), 2);
    rt_semaphore_drop(sem);
}

Test(sync, semaphore_dropping_a_partly_served_lone_waiter_returns_its_permits)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(1, &sem), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, sem, 4), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(sem, 2), 0);
    RT_DROP(&op);
    cr_assert_eq(rt_semaphore_available(sem), 3, "permits were lost with the dropped waiter");
    cr_assert_eq(counting_outstanding(&h.w), 0);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 3), 0);
    rt_semaphore_drop(sem);
}

Test(sync, semaphore_granted_but_uncollected_permits_pass_to_the_next_waiter)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_semaphore_acquire op1, op2;
    cr_assert_eq(rt_semaphore_acquire_init(&op1, sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_init(&op2, sem, 1), 0);
    cr_assert_eq(RT_POLL_OP(&op1, &h1.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&op2, &h2.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    cr_assert_eq(counting_wakes(&h2.w), 0);
    /* op1 was granted the permit but is dropped before it polls again. */
    RT_DROP(&op1);
    cr_assert_eq(op1.result, -ECANCELED, "a dropped acquisition reported the permit");
    cr_assert_eq(counting_wakes(&h2.w), 1, "the uncollected permit was not passed on");
    cr_assert_eq(RT_POLL_OP(&op2, &h2.cx), RT_READY);
    cr_assert_eq(op2.result, 0);
    cr_assert_eq(rt_semaphore_available(sem), 0, "the permit was both passed on and returned");
    RT_DROP(&op1); /* idempotent */
    RT_DROP(&op2); /* after RT_READY: nothing */
    cr_assert_eq(op1.result, -ECANCELED);
    cr_assert_eq(op2.result, 0, "a drop after RT_READY changed the result");
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(rt_semaphore_available(sem), 1);
    rt_semaphore_drop(sem);
}

Test(sync, semaphore_granted_but_uncollected_permits_return_when_nobody_waits)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, sem, 2), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(sem, 2), 0);
    cr_assert_eq(counting_wakes(&h.w), 1);
    cr_assert_eq(rt_semaphore_available(sem), 0, "granted permits are counted as available");
    RT_DROP(&op);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_eq(rt_semaphore_available(sem), 2, "the granted permits were not given back");
    RT_DROP(&op);
    cr_assert_eq(rt_semaphore_available(sem), 2, "a second drop gave permits back again");
    cr_assert_eq(counting_outstanding(&h.w), 0);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 2), 0);
    rt_semaphore_drop(sem);
}

Test(sync, semaphore_pending_waiter_dropped_leaves_the_queue_and_its_waker)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    struct hand h[3];
    rt_semaphore_acquire op[3];
    for (int i = 0; i < 3; i++) {
        hand_init(&h[i]);
        cr_assert_eq(rt_semaphore_acquire_init(&op[i], sem, 1), 0);
        cr_assert_eq(RT_POLL_OP(&op[i], &h[i].cx), RT_PENDING);
    }
    RT_DROP(&op[1]);
    cr_assert_eq(op[1].result, -ECANCELED);
    cr_assert_eq(counting_outstanding(&h[1].w), 0, "the dropped waiter's waker was kept");
    RT_DROP(&op[1]);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(counting_wakes(&h[0].w), 1);
    cr_assert_eq(RT_POLL_OP(&op[0], &h[0].cx), RT_READY);
    cr_assert_eq(op[0].result, 0);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(counting_wakes(&h[1].w), 0, "a dropped waiter was woken");
    cr_assert_eq(counting_wakes(&h[2].w), 1, "the permit went to the dropped waiter");
    cr_assert_eq(RT_POLL_OP(&op[2], &h[2].cx), RT_READY);
    cr_assert_eq(op[2].result, 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(counting_outstanding(&h[i].w), 0, "waiter %d", i);
    cr_assert_eq(rt_semaphore_release(sem, 2), 0);
    cr_assert_eq(rt_semaphore_available(sem), 2);
    rt_semaphore_drop(sem);
}

/* ---- corner cases ------------------------------------------------------------- */

Test(sync, permits_granted_but_not_collected_count_toward_the_maximum)
{
    /* A waiter served RT_SEMAPHORE_MAX permits but not yet polled still
     * owns them (its drop gives them back), so a release on top of that must
     * be refused: otherwise the drop would leave more than the maximum. */
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, sem, RT_SEMAPHORE_MAX), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(sem, RT_SEMAPHORE_MAX), 0);
    cr_assert_eq(counting_wakes(&h.w), 1);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(rt_semaphore_release(sem, 1), -EINVAL,
                 "a release beyond the maximum counting the uncollected grant");
    RT_DROP(&op);
    cr_assert_eq(rt_semaphore_available(sem), RT_SEMAPHORE_MAX);
    cr_assert_eq(rt_semaphore_release(sem, 1), -EINVAL);
    /* Collected permits are the caller's: releasing them is fine. */
    cr_assert_eq(rt_semaphore_acquire_init(&op, sem, 5), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(rt_semaphore_release(sem, 5), 0);
    cr_assert_eq(rt_semaphore_available(sem), RT_SEMAPHORE_MAX);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_semaphore_drop(sem);
}
