/* Black-box tests of asyncrt/sync.h: semaphores, mutexes and notifications.
 * Argument checking; FIFO service without barging (tasks that queue one
 * after another, a big acquisition at the head that small ones must not
 * overtake); exclusion and permit conservation under contention from tasks
 * and foreign threads; abort safety at every await point (a waiter dropped
 * while queued, a grant or notification dropped before it was collected,
 * aborts racing releases); notify_one's single stored permit and
 * notify_all's "initialised before" rule; the blocking forms (timeouts,
 * -EDEADLK on a worker); the cooperative budget; and shutdown while tasks
 * wait on every primitive. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#define TEST_WANT_COUNTING_WAKER /* the shared counting user waker */
#include "support.h"

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

#define MS (1000000LL)
#define SEC (1000000000LL)

/* Seconds any wait for an event may take before the test reports a hang. */
#define EVENT_DEADLINE_S 30
/* The same bound, for rt_task_wait calls that must not hang the suite. */
#define WAIT_DEADLINE_NS (30LL * SEC)

TestSuite(sync, .timeout = 120, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

static rt_context noop_context(void)
{
    return rt_context_from_waker(rt_waker_noop());
}

/* Order in which tasks got what they waited for. */
#define MAX_RANKS 64
static atomic_int rank_next;
static int rank_order[MAX_RANKS];

static void record_rank(int index)
{
    int r = atomic_fetch_add(&rank_next, 1);
    if (r >= 0 && r < MAX_RANKS)
        rank_order[r] = index;
}

/* ---- waiter tasks ------------------------------------------------------- */

/* Acquires `want` permits; announces `queued` once waiting, records its rank
 * and signals `acquired` once it has them; then either keeps them (the test
 * releases them) or, with release_after, gives them straight back. Returns
 * 1 once acquired. The drop drops the operation and signals `dropped`. */
struct sem_waiter {
    rt_coro co;
    rt_semaphore *sem;
    size_t want;
    int index;
    bool release_after;
    bool announced;
    struct event *queued;
    struct event *acquired;
    struct event *dropped;
    rt_semaphore_acquire op;
};

static rt_poll sem_waiter_poll(void *state, rt_context *cx, void **out)
{
    struct sem_waiter *w = state;
    RT_CORO_BEGIN(&w->co);
    if (rt_semaphore_acquire_init(&w->op, w->sem, w->want) != 0)
        RT_RETURN(&w->co, out, (intptr_t)-1);
    RT_AWAIT(&w->co, announce(rt_semaphore_acquire_poll(&w->op, cx), &w->announced, w->queued));
    record_rank(w->index);
    if (w->release_after)
        rt_semaphore_release(w->sem, w->want);
    if (w->acquired != NULL)
        event_signal(w->acquired);
    RT_RETURN(&w->co, out, (intptr_t)1);
    RT_CORO_END(&w->co, out);
}

static void sem_waiter_drop(void *state)
{
    struct sem_waiter *w = state;
    rt_semaphore_acquire_drop(&w->op);
    if (w->dropped != NULL)
        event_signal(w->dropped);
}

static rt_task *spawn_sem_waiter(rt_runtime *rt, struct sem_waiter *w)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, sem_waiter_poll, sem_waiter_drop, w, &task), 0);
    return task;
}

/* The same for the mutex: locks, records its rank, signals, then unlocks
 * (unlock_after) or keeps the lock. */
struct mutex_waiter {
    rt_coro co;
    rt_mutex *m;
    int index;
    bool unlock_after;
    bool announced;
    struct event *queued;
    struct event *acquired;
    struct event *dropped;
    rt_mutex_lock op;
};

static rt_poll mutex_waiter_poll(void *state, rt_context *cx, void **out)
{
    struct mutex_waiter *w = state;
    RT_CORO_BEGIN(&w->co);
    if (rt_mutex_lock_init(&w->op, w->m) != 0)
        RT_RETURN(&w->co, out, (intptr_t)-1);
    RT_AWAIT(&w->co, announce(rt_mutex_lock_poll(&w->op, cx), &w->announced, w->queued));
    record_rank(w->index);
    if (w->unlock_after)
        rt_mutex_unlock(w->m);
    if (w->acquired != NULL)
        event_signal(w->acquired);
    RT_RETURN(&w->co, out, (intptr_t)1);
    RT_CORO_END(&w->co, out);
}

static void mutex_waiter_drop(void *state)
{
    struct mutex_waiter *w = state;
    rt_mutex_lock_drop(&w->op);
    if (w->dropped != NULL)
        event_signal(w->dropped);
}

static rt_task *spawn_mutex_waiter(rt_runtime *rt, struct mutex_waiter *w)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, mutex_waiter_poll, mutex_waiter_drop, w, &task), 0);
    return task;
}

/* The same for a notification. The notified is initialised in the task's
 * first poll. */
struct notify_waiter {
    rt_coro co;
    rt_notify *n;
    int index;
    bool announced;
    struct event *queued;
    struct event *notified;
    struct event *dropped;
    rt_notified op;
};

static rt_poll notify_waiter_poll(void *state, rt_context *cx, void **out)
{
    struct notify_waiter *w = state;
    RT_CORO_BEGIN(&w->co);
    if (rt_notified_init(&w->op, w->n) != 0)
        RT_RETURN(&w->co, out, (intptr_t)-1);
    RT_AWAIT(&w->co, announce(rt_notified_poll(&w->op, cx), &w->announced, w->queued));
    record_rank(w->index);
    if (w->notified != NULL)
        event_signal(w->notified);
    RT_RETURN(&w->co, out, (intptr_t)1);
    RT_CORO_END(&w->co, out);
}

static void notify_waiter_drop(void *state)
{
    struct notify_waiter *w = state;
    rt_notified_drop(&w->op);
    if (w->dropped != NULL)
        event_signal(w->dropped);
}

static rt_task *spawn_notify_waiter(rt_runtime *rt, struct notify_waiter *w)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, notify_waiter_poll, notify_waiter_drop, w, &task), 0);
    return task;
}

/* ---- semaphore: arguments and non-waiting forms -------------------------- */

Test(sync, semaphore_init_and_release_reject_bad_arguments)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(NULL, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_init(&sem, RT_SEMAPHORE_MAX + 1), -EINVAL);
    cr_assert_eq(rt_semaphore_init(&sem, RT_SEMAPHORE_MAX), 0);
    cr_assert_eq(rt_semaphore_available(&sem), RT_SEMAPHORE_MAX);
    /* Full: one more would exceed the maximum, and nothing is added. */
    cr_assert_eq(rt_semaphore_release(&sem, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_available(&sem), RT_SEMAPHORE_MAX);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, RT_SEMAPHORE_MAX), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    rt_semaphore_destroy(&sem);

    cr_assert_eq(rt_semaphore_init(&sem, 5), 0);
    cr_assert_eq(rt_semaphore_release(NULL, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_release(&sem, RT_SEMAPHORE_MAX), -EINVAL,
                 "5 + RT_SEMAPHORE_MAX exceeds the maximum");
    cr_assert_eq(rt_semaphore_available(&sem), 5, "a refused release added permits");
    cr_assert_eq(rt_semaphore_release(&sem, RT_SEMAPHORE_MAX - 5), 0);
    cr_assert_eq(rt_semaphore_available(&sem), RT_SEMAPHORE_MAX);
    rt_semaphore_destroy(&sem);

    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    cr_assert_eq(rt_semaphore_acquire_init(&op, &sem, 0), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_init(&op, &sem, RT_SEMAPHORE_MAX + 1), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_init(NULL, &sem, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_init(&op, NULL, 1), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_init(&op, &sem, RT_SEMAPHORE_MAX), 0);
    rt_semaphore_acquire_drop(&op); /* initialised, never polled */
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    rt_semaphore_destroy(&sem);
}

Test(sync, semaphore_try_acquire_takes_only_available_permits)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 3), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 3);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 0), -EINVAL);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, RT_SEMAPHORE_MAX + 1), -EINVAL);
    cr_assert_eq(rt_semaphore_available(&sem), 3);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 4), -EAGAIN);
    cr_assert_eq(rt_semaphore_available(&sem), 3, "a failed try took permits");
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 2), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 1);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 2), -EAGAIN);
    cr_assert_eq(rt_semaphore_available(&sem), 1);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 1), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 1), -EAGAIN);
    cr_assert_eq(rt_semaphore_release(&sem, 3), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 3);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 3), 0);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(rt_semaphore_release(&sem, 2), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 3);
    rt_semaphore_destroy(&sem);
}

Test(sync, semaphore_acquire_is_ready_at_once_when_permits_are_free)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 2), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, &sem, 2), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&op, &h.cx), RT_READY);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    /* After RT_READY the permits are the caller's: drop does nothing. */
    rt_semaphore_acquire_drop(&op);
    rt_semaphore_acquire_drop(&op);
    cr_assert_eq(rt_semaphore_available(&sem), 0, "drop after RT_READY gave permits back");
    cr_assert_eq(counting_wakes(&h.w), 0);
    cr_assert_eq(counting_outstanding(&h.w), 0, "a ready acquisition kept a waker");
    cr_assert_eq(rt_semaphore_release(&sem, 2), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 2);
    rt_semaphore_destroy(&sem);
}

Test(sync, zero_initialised_operations_may_be_dropped)
{
    rt_semaphore_acquire a;
    rt_mutex_lock l;
    rt_notified n;
    memset(&a, 0, sizeof a);
    memset(&l, 0, sizeof l);
    memset(&n, 0, sizeof n);
    rt_semaphore_acquire_drop(&a);
    rt_mutex_lock_drop(&l);
    rt_notified_drop(&n);
    rt_semaphore_acquire_drop(&a);
    rt_mutex_lock_drop(&l);
    rt_notified_drop(&n);
    /* And they are then usable as usual. */
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 1), 0);
    rt_context cx = noop_context();
    cr_assert_eq(rt_semaphore_acquire_init(&a, &sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&a, &cx), RT_READY);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    rt_semaphore_destroy(&sem);
}

/* ---- semaphore: FIFO, no barging ---------------------------------------- */

Test(sync, semaphore_try_acquire_never_overtakes_a_queued_waiter)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 1), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, &sem, 2), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&op, &h.cx), RT_PENDING);
    /* One permit is available, but a waiter is queued before the caller. */
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 1), -EAGAIN, "try_acquire barged past a waiter");
    cr_assert_eq(counting_wakes(&h.w), 0);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(counting_wakes(&h.w), 1, "the waiter was not woken once its 2 permits were there");
    /* Granted but not collected: nobody else may take them. */
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 1), -EAGAIN, "try_acquire took granted permits");
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&op, &h.cx), RT_READY);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(counting_outstanding(&h.w), 0, "a waker reference was not given back");
    cr_assert_eq(rt_semaphore_release(&sem, 2), 0);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 2), 0);
    rt_semaphore_destroy(&sem);
}

Test(sync, semaphore_waiters_polled_by_hand_are_served_in_fifo_order)
{
    enum { N = 6 };
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    static struct hand h[N];
    static rt_semaphore_acquire op[N];
    for (int i = 0; i < N; i++) {
        hand_init(&h[i]);
        cr_assert_eq(rt_semaphore_acquire_init(&op[i], &sem, 1), 0);
        cr_assert_eq(rt_semaphore_acquire_poll(&op[i], &h[i].cx), RT_PENDING);
    }
    for (int k = 0; k < N; k++) {
        cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
        for (int i = 0; i < N; i++)
            cr_assert_eq(counting_wakes(&h[i].w), i <= k ? 1 : 0,
                         "after release %d, waiter %d was woken %ld times", k, i,
                         counting_wakes(&h[i].w));
        /* The later ones, polled first, still wait. */
        for (int i = N - 1; i > k; i--)
            cr_assert_eq(rt_semaphore_acquire_poll(&op[i], &h[i].cx), RT_PENDING,
                         "waiter %d overtook waiter %d", i, k);
        cr_assert_eq(rt_semaphore_acquire_poll(&op[k], &h[k].cx), RT_READY, "waiter %d", k);
        cr_assert_eq(rt_semaphore_available(&sem), 0);
    }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(counting_wakes(&h[i].w), 1, "waiter %d woken %ld times", i,
                     counting_wakes(&h[i].w));
        cr_assert_eq(counting_outstanding(&h[i].w), 0, "waiter %d's waker leaked", i);
    }
    cr_assert_eq(rt_semaphore_release(&sem, N), 0);
    cr_assert_eq(rt_semaphore_available(&sem), N);
    rt_semaphore_destroy(&sem);
}

Test(sync, semaphore_repoll_with_another_waker_wakes_the_latest_one)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, &sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&op, &h1.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_acquire_poll(&op, &h2.cx), RT_PENDING);
    cr_assert_eq(counting_outstanding(&h1.w), 0, "the replaced waker was not released");
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(counting_wakes(&h2.w), 1, "the latest waker was not woken");
    cr_assert_eq(counting_wakes(&h1.w), 0, "the replaced waker was woken");
    cr_assert_eq(rt_semaphore_acquire_poll(&op, &h2.cx), RT_READY);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    rt_semaphore_destroy(&sem);
}

#define FIFO_TASKS 16
static struct event fifo_queued = EVENT_INIT;
static struct event fifo_acquired = EVENT_INIT;

Test(sync, semaphore_tasks_queued_one_after_another_acquire_in_fifo_order)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    rt_task *tasks[FIFO_TASKS];
    for (int i = 0; i < FIFO_TASKS; i++) {
        struct sem_waiter w = {0};
        w.sem = &sem;
        w.want = 1;
        w.index = i;
        w.queued = &fifo_queued;
        w.acquired = &fifo_acquired;
        tasks[i] = spawn_sem_waiter(rt, &w);
        cr_assert(event_wait_for(&fifo_queued, (unsigned long)i + 1), "waiter %d never queued", i);
    }
    for (int k = 0; k < FIFO_TASKS; k++) {
        cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
        cr_assert(event_wait_for(&fifo_acquired, (unsigned long)k + 1), "nobody acquired permit %d",
                  k);
        cr_assert_eq(event_count(&fifo_acquired), (unsigned long)k + 1,
                     "one permit served two waiters");
        cr_assert_eq(rank_order[k], k, "permit %d went to waiter %d", k, rank_order[k]);
    }
    for (int i = 0; i < FIFO_TASKS; i++) {
        void *v = NULL;
        cr_assert_eq(rt_task_wait(tasks[i], WAIT_DEADLINE_NS, &v), 0);
        cr_assert_eq((intptr_t)v, 1);
    }
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    finish_runtime(rt, 0);
    rt_semaphore_destroy(&sem);
}

Test(sync, semaphore_big_acquire_at_the_head_is_not_overtaken_by_small_ones)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    struct hand hb, hs1, hs2;
    hand_init(&hb);
    hand_init(&hs1);
    hand_init(&hs2);
    rt_semaphore_acquire big, s1, s2;
    cr_assert_eq(rt_semaphore_acquire_init(&big, &sem, 3), 0);
    cr_assert_eq(rt_semaphore_acquire_init(&s1, &sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_init(&s2, &sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&big, &hb.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_acquire_poll(&s1, &hs1.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_acquire_poll(&s2, &hs2.cx), RT_PENDING);
    for (int k = 1; k <= 2; k++) {
        cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
        cr_assert_eq(counting_wakes(&hb.w) + counting_wakes(&hs1.w) + counting_wakes(&hs2.w), 0,
                     "a waiter was woken with %d of the head's 3 permits released", k);
        cr_assert_eq(rt_semaphore_acquire_poll(&s1, &hs1.cx), RT_PENDING,
                     "a small acquisition overtook the big one at the head (%d released)", k);
        cr_assert_eq(rt_semaphore_acquire_poll(&s2, &hs2.cx), RT_PENDING,
                     "a small acquisition overtook the big one at the head (%d released)", k);
        cr_assert_eq(rt_semaphore_try_acquire(&sem, 1), -EAGAIN, "try_acquire barged (%d)", k);
        cr_assert_eq(rt_semaphore_acquire_poll(&big, &hb.cx), RT_PENDING);
    }
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(counting_wakes(&hb.w), 1, "the head was not woken with its 3 permits there");
    cr_assert_eq(counting_wakes(&hs1.w) + counting_wakes(&hs2.w), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&big, &hb.cx), RT_READY);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&s2, &hs2.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_acquire_poll(&s1, &hs1.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(counting_wakes(&hs1.w), 1);
    cr_assert_eq(counting_wakes(&hs2.w), 0, "the third waiter was served before the second");
    cr_assert_eq(rt_semaphore_acquire_poll(&s2, &hs2.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_acquire_poll(&s1, &hs1.cx), RT_READY);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(counting_wakes(&hs2.w), 1);
    cr_assert_eq(rt_semaphore_acquire_poll(&s2, &hs2.cx), RT_READY);
    cr_assert_eq(counting_outstanding(&hb.w), 0);
    cr_assert_eq(counting_outstanding(&hs1.w), 0);
    cr_assert_eq(counting_outstanding(&hs2.w), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(rt_semaphore_release(&sem, 5), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 5);
    rt_semaphore_destroy(&sem);
}

/* ---- semaphore: abort safety by hand -------------------------------------- */

Test(sync, semaphore_dropping_a_partly_served_head_passes_its_permits_on)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    struct hand hb, hs1, hs2;
    hand_init(&hb);
    hand_init(&hs1);
    hand_init(&hs2);
    rt_semaphore_acquire big, s1, s2;
    cr_assert_eq(rt_semaphore_acquire_init(&big, &sem, 3), 0);
    cr_assert_eq(rt_semaphore_acquire_init(&s1, &sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_init(&s2, &sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&big, &hb.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_acquire_poll(&s1, &hs1.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_acquire_poll(&s2, &hs2.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(&sem, 2), 0);
    cr_assert_eq(counting_wakes(&hs1.w) + counting_wakes(&hs2.w), 0);
    /* The head gives up: the two permits it was waiting on go to the next
     * two waiters. */
    rt_semaphore_acquire_drop(&big);
    cr_assert_eq(counting_outstanding(&hb.w), 0, "the dropped head kept its waker");
    cr_assert_eq(counting_wakes(&hb.w), 0);
    cr_assert_eq(counting_wakes(&hs1.w), 1, "the permits did not pass to the second waiter");
    cr_assert_eq(counting_wakes(&hs2.w), 1, "the permits did not pass to the third waiter");
    cr_assert_eq(rt_semaphore_acquire_poll(&s1, &hs1.cx), RT_READY);
    cr_assert_eq(rt_semaphore_acquire_poll(&s2, &hs2.cx), RT_READY);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(counting_outstanding(&hs1.w), 0);
    cr_assert_eq(counting_outstanding(&hs2.w), 0);
    cr_assert_eq(rt_semaphore_release(&sem, 2), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 2);
    rt_semaphore_destroy(&sem);
}

Test(sync, semaphore_dropping_a_partly_served_lone_waiter_returns_its_permits)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 1), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, &sem, 4), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&op, &h.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(&sem, 2), 0);
    rt_semaphore_acquire_drop(&op);
    cr_assert_eq(rt_semaphore_available(&sem), 3, "permits were lost with the dropped waiter");
    cr_assert_eq(counting_outstanding(&h.w), 0);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 3), 0);
    rt_semaphore_destroy(&sem);
}

Test(sync, semaphore_granted_but_uncollected_permits_pass_to_the_next_waiter)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_semaphore_acquire op1, op2;
    cr_assert_eq(rt_semaphore_acquire_init(&op1, &sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_init(&op2, &sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&op1, &h1.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_acquire_poll(&op2, &h2.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    cr_assert_eq(counting_wakes(&h2.w), 0);
    /* op1 was granted the permit but is dropped before it polls again. */
    rt_semaphore_acquire_drop(&op1);
    cr_assert_eq(counting_wakes(&h2.w), 1, "the uncollected permit was not passed on");
    cr_assert_eq(rt_semaphore_acquire_poll(&op2, &h2.cx), RT_READY);
    cr_assert_eq(rt_semaphore_available(&sem), 0, "the permit was both passed on and returned");
    rt_semaphore_acquire_drop(&op1); /* idempotent */
    rt_semaphore_acquire_drop(&op2); /* after RT_READY: nothing */
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 1);
    rt_semaphore_destroy(&sem);
}

Test(sync, semaphore_granted_but_uncollected_permits_return_when_nobody_waits)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, &sem, 2), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&op, &h.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(&sem, 2), 0);
    cr_assert_eq(counting_wakes(&h.w), 1);
    cr_assert_eq(rt_semaphore_available(&sem), 0, "granted permits are counted as available");
    rt_semaphore_acquire_drop(&op);
    cr_assert_eq(rt_semaphore_available(&sem), 2, "the granted permits were not given back");
    rt_semaphore_acquire_drop(&op);
    cr_assert_eq(rt_semaphore_available(&sem), 2, "a second drop gave permits back again");
    cr_assert_eq(counting_outstanding(&h.w), 0);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 2), 0);
    rt_semaphore_destroy(&sem);
}

Test(sync, semaphore_pending_waiter_dropped_leaves_the_queue_and_its_waker)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    struct hand h[3];
    rt_semaphore_acquire op[3];
    for (int i = 0; i < 3; i++) {
        hand_init(&h[i]);
        cr_assert_eq(rt_semaphore_acquire_init(&op[i], &sem, 1), 0);
        cr_assert_eq(rt_semaphore_acquire_poll(&op[i], &h[i].cx), RT_PENDING);
    }
    rt_semaphore_acquire_drop(&op[1]);
    cr_assert_eq(counting_outstanding(&h[1].w), 0, "the dropped waiter's waker was kept");
    rt_semaphore_acquire_drop(&op[1]);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(counting_wakes(&h[0].w), 1);
    cr_assert_eq(rt_semaphore_acquire_poll(&op[0], &h[0].cx), RT_READY);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(counting_wakes(&h[1].w), 0, "a dropped waiter was woken");
    cr_assert_eq(counting_wakes(&h[2].w), 1, "the permit went to the dropped waiter");
    cr_assert_eq(rt_semaphore_acquire_poll(&op[2], &h[2].cx), RT_READY);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(counting_outstanding(&h[i].w), 0, "waiter %d", i);
    cr_assert_eq(rt_semaphore_release(&sem, 2), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 2);
    rt_semaphore_destroy(&sem);
}

/* ---- semaphore: contention ---------------------------------------------- */

#define CONS_PERMITS 3
#define CONS_TASKS 32
#define CONS_TASK_ROUNDS 300
#define CONS_THREADS 2
#define CONS_THREAD_ROUNDS 300

static atomic_long cons_holding;
static atomic_long cons_max_holding;
static atomic_long cons_over;
static atomic_long cons_errors;
static atomic_long cons_done_rounds;

static void cons_enter(size_t k)
{
    long now = atomic_fetch_add(&cons_holding, (long)k) + (long)k;
    if (now > CONS_PERMITS)
        atomic_fetch_add(&cons_over, 1);
    long prev = atomic_load(&cons_max_holding);
    while (now > prev && !atomic_compare_exchange_weak(&cons_max_holding, &prev, now)) {
    }
}

static void cons_leave(size_t k)
{
    atomic_fetch_sub(&cons_holding, (long)k);
    atomic_fetch_add(&cons_done_rounds, 1);
}

struct cons_task {
    rt_coro co;
    rt_semaphore *sem;
    int id;
    int i;
    size_t k;
    rt_semaphore_acquire op;
};

static rt_poll cons_task_poll(void *state, rt_context *cx, void **out)
{
    struct cons_task *t = state;
    RT_CORO_BEGIN(&t->co);
    for (t->i = 0; t->i < CONS_TASK_ROUNDS; t->i++) {
        t->k = 1 + (size_t)((t->i + t->id) % CONS_PERMITS);
        if (rt_semaphore_acquire_init(&t->op, t->sem, t->k) != 0) {
            atomic_fetch_add(&cons_errors, 1);
            RT_RETURN(&t->co, out, NULL);
        }
        RT_AWAIT(&t->co, rt_semaphore_acquire_poll(&t->op, cx));
        cons_enter(t->k);
        if (t->i % 4 == 0)
            RT_YIELD(&t->co, cx); /* hold the permits across a suspension */
        cons_leave(t->k);
        if (rt_semaphore_release(t->sem, t->k) != 0)
            atomic_fetch_add(&cons_errors, 1);
    }
    RT_RETURN(&t->co, out, NULL);
    RT_CORO_END(&t->co, out);
}

static void cons_task_drop(void *state)
{
    struct cons_task *t = state;
    rt_semaphore_acquire_drop(&t->op);
}

struct cons_thread {
    rt_semaphore *sem;
    int id;
};

static void *cons_thread_main(void *arg)
{
    struct cons_thread *c = arg;
    for (int i = 0; i < CONS_THREAD_ROUNDS; i++) {
        size_t k = 1 + (size_t)((i + c->id) % CONS_PERMITS);
        int rc;
        if (i % 5 == 0) {
            rc = rt_semaphore_try_acquire(c->sem, k);
            if (rc == -EAGAIN)
                rc = rt_semaphore_acquire_blocking(c->sem, k, WAIT_DEADLINE_NS);
        } else {
            rc = rt_semaphore_acquire_blocking(c->sem, k, WAIT_DEADLINE_NS);
        }
        if (rc != 0) {
            atomic_fetch_add(&cons_errors, 1);
            continue;
        }
        cons_enter(k);
        if (i % 16 == 0)
            sched_yield();
        cons_leave(k);
        if (rt_semaphore_release(c->sem, k) != 0)
            atomic_fetch_add(&cons_errors, 1);
    }
    return NULL;
}

Test(sync, semaphore_permits_are_conserved_under_contention_from_tasks_and_threads)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, CONS_PERMITS), 0);
    rt_task *tasks[CONS_TASKS];
    for (int i = 0; i < CONS_TASKS; i++) {
        struct cons_task t = {0};
        t.sem = &sem;
        t.id = i;
        cr_assert_eq(RT_SPAWN(rt, cons_task_poll, cons_task_drop, &t, &tasks[i]), 0);
    }
    pthread_t threads[CONS_THREADS];
    struct cons_thread ct[CONS_THREADS];
    for (int i = 0; i < CONS_THREADS; i++) {
        ct[i].sem = &sem;
        ct[i].id = i;
        cr_assert_eq(pthread_create(&threads[i], NULL, cons_thread_main, &ct[i]), 0);
    }
    for (int i = 0; i < CONS_TASKS; i++)
        cr_assert_eq(rt_task_wait(tasks[i], WAIT_DEADLINE_NS, NULL), 0, "task %d", i);
    for (int i = 0; i < CONS_THREADS; i++)
        pthread_join(threads[i], NULL);
    cr_assert_eq(atomic_load(&cons_errors), 0, "%ld acquisitions or releases failed",
                 atomic_load(&cons_errors));
    cr_assert_eq(atomic_load(&cons_over), 0, "more than %d permits were held %ld times",
                 CONS_PERMITS, atomic_load(&cons_over));
    cr_assert_leq(atomic_load(&cons_max_holding), CONS_PERMITS);
    cr_assert_eq(atomic_load(&cons_holding), 0);
    cr_assert_eq(atomic_load(&cons_done_rounds),
                 CONS_TASKS * CONS_TASK_ROUNDS + CONS_THREADS * CONS_THREAD_ROUNDS);
    cr_assert_eq(rt_semaphore_available(&sem), CONS_PERMITS, "permits leaked or were created");
    cr_assert_eq(rt_semaphore_try_acquire(&sem, CONS_PERMITS), 0);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 1), -EAGAIN);
    finish_runtime(rt, 0);
    rt_semaphore_destroy(&sem);
}

/* ---- semaphore: aborted waiting tasks -------------------------------------- */

static struct event abort_queued = EVENT_INIT;
static struct event abort_acquired = EVENT_INIT;
static struct event abort_dropped = EVENT_INIT;

Test(sync, semaphore_aborted_waiting_tasks_leak_no_permit_and_leave_no_waker)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    enum { N = 4 };
    rt_task *tasks[N];
    for (int i = 0; i < N; i++) {
        struct sem_waiter w = {0};
        w.sem = &sem;
        w.want = 2;
        w.index = i;
        w.queued = &abort_queued;
        w.acquired = &abort_acquired;
        w.dropped = &abort_dropped;
        tasks[i] = spawn_sem_waiter(rt, &w);
        cr_assert(event_wait_for(&abort_queued, (unsigned long)i + 1), "waiter %d never queued", i);
    }
    /* The two in the middle of the queue go. */
    rt_task_abort(tasks[1]);
    rt_task_abort(tasks[2]);
    cr_assert_eq(rt_task_wait(tasks[1], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(rt_task_wait(tasks[2], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(event_count(&abort_dropped), 2);
    /* Four permits serve exactly the two that remain. */
    cr_assert_eq(rt_semaphore_release(&sem, 4), 0);
    void *v = NULL;
    cr_assert_eq(rt_task_wait(tasks[0], WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq((intptr_t)v, 1);
    cr_assert_eq(rt_task_wait(tasks[3], WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq((intptr_t)v, 1);
    /* Both were granted by the one release; they may run in either order. */
    cr_assert_eq(atomic_load(&rank_next), 2);
    cr_assert((rank_order[0] == 0 && rank_order[1] == 3) ||
                  (rank_order[0] == 3 && rank_order[1] == 0),
              "served %d and %d", rank_order[0], rank_order[1]);
    cr_assert_eq(rt_semaphore_available(&sem), 0);

    /* Now every waiter is aborted: nothing may stay queued. */
    for (int i = 0; i < N; i++) {
        struct sem_waiter w = {0};
        w.sem = &sem;
        w.want = 1 + (size_t)i;
        w.index = 10 + i;
        w.queued = &abort_queued;
        w.dropped = &abort_dropped;
        tasks[i] = spawn_sem_waiter(rt, &w);
        cr_assert(event_wait_for(&abort_queued, (unsigned long)N + i + 1), "waiter %d", i);
    }
    for (int i = 0; i < N; i++)
        rt_task_abort(tasks[i]);
    for (int i = 0; i < N; i++)
        cr_assert_eq(rt_task_wait(tasks[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(rt_semaphore_release(&sem, 5), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 5, "an aborted waiter took permits");
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 5), 0);
    cr_assert_eq(atomic_load(&rank_next), 2, "an aborted task acquired");
    finish_runtime(rt, 0);
    rt_semaphore_destroy(&sem);
}

#define RACE_ROUNDS 200
static struct event race_queued = EVENT_INIT;

Test(sync, semaphore_abort_racing_a_release_leaks_no_permit)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    int completed = 0, cancelled = 0;
    for (int r = 0; r < RACE_ROUNDS; r++) {
        struct sem_waiter w = {0};
        w.sem = &sem;
        w.want = 2;
        w.index = r;
        w.release_after = true;
        w.queued = &race_queued;
        rt_task *task = spawn_sem_waiter(rt, &w);
        cr_assert(event_wait_for(&race_queued, (unsigned long)r + 1), "round %d: never queued", r);
        /* Granted now; the abort races the task's poll that collects. */
        cr_assert_eq(rt_semaphore_release(&sem, 2), 0);
        rt_task_abort(task);
        int rc = rt_task_wait(task, WAIT_DEADLINE_NS, NULL);
        cr_assert(rc == 0 || rc == -ECANCELED, "round %d: %s", r, rt_strerror(rc));
        if (rc == 0)
            completed++;
        else
            cancelled++;
        cr_assert_eq(rt_semaphore_available(&sem), 2, "round %d (%s): %zu permits available", r,
                     rc == 0 ? "completed" : "aborted", rt_semaphore_available(&sem));
        cr_assert_eq(rt_semaphore_try_acquire(&sem, 2), 0);
    }
    cr_log_info("abort vs release: %d completed, %d aborted", completed, cancelled);
    finish_runtime(rt, 0);
    rt_semaphore_destroy(&sem);
}

/* ---- semaphore: blocking form -------------------------------------------- */

Test(sync, semaphore_acquire_blocking_times_out_and_takes_nothing)
{
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    cr_assert_eq(rt_semaphore_acquire_blocking(NULL, 1, 0), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_blocking(&sem, 0, 0), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_blocking(&sem, RT_SEMAPHORE_MAX + 1, 0), -EINVAL);
    int64_t t0 = rt_now_ns();
    cr_assert_eq(rt_semaphore_acquire_blocking(&sem, 1, 20 * MS), -ETIMEDOUT);
    int64_t took = rt_now_ns() - t0;
    cr_assert_geq(took, 20 * MS, "timed out after only %lld us", (long long)(took / 1000));
    cr_assert_lt(took, 10 * SEC);
    cr_assert_eq(rt_semaphore_acquire_blocking(&sem, 1, 0), -ETIMEDOUT);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    /* The timed-out waiters are gone from the queue: a release stays
     * available and try_acquire is not blocked by a ghost waiter. */
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 1);
    cr_assert_eq(rt_semaphore_try_acquire(&sem, 1), 0);
    /* Part of the ask there: still times out, and keeps nothing. */
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_blocking(&sem, 2, 5 * MS), -ETIMEDOUT);
    cr_assert_eq(rt_semaphore_available(&sem), 1, "a timed-out acquisition kept a permit");
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_blocking(&sem, 2, 0), 0, "permits there, timeout 0");
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(rt_semaphore_release(&sem, 2), 0);
    cr_assert_eq(rt_semaphore_acquire_blocking(&sem, 2, -1), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    rt_semaphore_destroy(&sem);
}

struct blocking_acquirer {
    rt_semaphore *sem;
    size_t n;
    int rc;
    struct event started;
    struct event done;
};

static void *blocking_acquirer_main(void *arg)
{
    struct blocking_acquirer *b = arg;
    event_signal(&b->started);
    b->rc = rt_semaphore_acquire_blocking(b->sem, b->n, WAIT_DEADLINE_NS);
    event_signal(&b->done);
    return NULL;
}

struct releaser {
    rt_semaphore *sem;
    size_t n;
};

static rt_poll releaser_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct releaser *r = state;
    *out = (void *)(intptr_t)rt_semaphore_release(r->sem, r->n);
    return RT_READY;
}

Test(sync, semaphore_acquire_blocking_queues_behind_a_waiter_and_wakes_on_a_release_from_a_task)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire head;
    cr_assert_eq(rt_semaphore_acquire_init(&head, &sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&head, &h.cx), RT_PENDING);

    static struct blocking_acquirer b = {NULL, 0, -1, EVENT_INIT, EVENT_INIT};
    b.sem = &sem;
    b.n = 2;
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, blocking_acquirer_main, &b), 0);
    cr_assert(event_wait_for(&b.started, 1));
    /* One permit from a task: it is the head's. */
    struct releaser r = {&sem, 1};
    void *v = (void *)(intptr_t)-1;
    cr_assert_eq(rt_block_on(rt, releaser_poll, NULL, &r, sizeof r, &v), 0);
    cr_assert_eq((intptr_t)v, 0);
    cr_assert_eq(counting_wakes(&h.w), 1, "the head waiter was not served first");
    cr_assert_eq(event_count(&b.done), 0, "the blocked thread took the head's permit");
    cr_assert_eq(rt_semaphore_acquire_poll(&head, &h.cx), RT_READY);
    /* Two more from a task: the blocked thread's. */
    r.n = 2;
    cr_assert_eq(rt_block_on(rt, releaser_poll, NULL, &r, sizeof r, &v), 0);
    cr_assert(event_wait_for(&b.done, 1), "the blocked thread was never woken");
    pthread_join(thread, NULL);
    cr_assert_eq(b.rc, 0, "rt_semaphore_acquire_blocking: %s", rt_strerror(b.rc));
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(rt_semaphore_release(&sem, 3), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 3);
    rt_semaphore_destroy(&sem);
}

/* Calls every blocking form of sync.h from inside a task. */
struct deadlock_probe {
    rt_semaphore *empty;
    rt_semaphore *full;
    rt_mutex *m;
    int sem_empty_rc;
    int sem_full_rc;
    int mutex_rc;
};

static rt_poll deadlock_probe_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct deadlock_probe *p = *(struct deadlock_probe **)state;
    p->sem_empty_rc = rt_semaphore_acquire_blocking(p->empty, 1, 50 * MS);
    p->sem_full_rc = rt_semaphore_acquire_blocking(p->full, 1, 50 * MS);
    p->mutex_rc = rt_mutex_lock_blocking(p->m, 50 * MS);
    *out = NULL;
    return RT_READY;
}

Test(sync, blocking_forms_fail_with_edeadlk_inside_a_task_and_take_nothing)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore empty, full;
    rt_mutex m;
    cr_assert_eq(rt_semaphore_init(&empty, 0), 0);
    cr_assert_eq(rt_semaphore_init(&full, 1), 0);
    cr_assert_eq(rt_mutex_init(&m), 0);
    struct deadlock_probe p = {&empty, &full, &m, 1, 1, 1};
    struct deadlock_probe *pp = &p;
    cr_assert_eq(rt_block_on(rt, deadlock_probe_poll, NULL, &pp, sizeof pp, NULL), 0);
    cr_assert_eq(p.sem_empty_rc, -EDEADLK, "semaphore with no permit: %s",
                 rt_strerror(p.sem_empty_rc));
    cr_assert_eq(p.sem_full_rc, -EDEADLK, "semaphore with a permit: %s",
                 rt_strerror(p.sem_full_rc));
    cr_assert_eq(p.mutex_rc, -EDEADLK, "free mutex: %s", rt_strerror(p.mutex_rc));
    cr_assert_eq(rt_semaphore_available(&full), 1, "the failed call took a permit");
    cr_assert_eq(rt_semaphore_available(&empty), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0, "the failed call left the mutex locked");
    rt_mutex_unlock(&m);
    finish_runtime(rt, 0);
    rt_mutex_destroy(&m);
    rt_semaphore_destroy(&empty);
    rt_semaphore_destroy(&full);
}

/* ---- mutex: basics -------------------------------------------------------- */

Test(sync, mutex_try_lock_and_unlock_basics)
{
    rt_mutex m;
    cr_assert_eq(rt_mutex_init(NULL), -EINVAL);
    cr_assert_eq(rt_mutex_init(&m), 0);
    rt_mutex_lock op;
    cr_assert_eq(rt_mutex_lock_init(NULL, &m), -EINVAL);
    cr_assert_eq(rt_mutex_lock_init(&op, NULL), -EINVAL);
    cr_assert_eq(rt_mutex_lock_blocking(NULL, 0), -EINVAL);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), -EBUSY, "the mutex is not recursive");
    rt_mutex_unlock(&m);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    rt_mutex_unlock(&m);
    /* The poll form on a free mutex is ready at once. */
    struct hand h;
    hand_init(&h);
    cr_assert_eq(rt_mutex_lock_init(&op, &m), 0);
    cr_assert_eq(rt_mutex_lock_poll(&op, &h.cx), RT_READY);
    cr_assert_eq(rt_mutex_try_lock(&m), -EBUSY);
    rt_mutex_lock_drop(&op); /* after RT_READY: the lock stays held */
    cr_assert_eq(rt_mutex_try_lock(&m), -EBUSY, "drop after RT_READY unlocked the mutex");
    rt_mutex_unlock(&m);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    rt_mutex_unlock(&m);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_mutex_destroy(&m);
}

Test(sync, mutex_unlock_hands_the_lock_to_the_oldest_waiter_without_barging)
{
    rt_mutex m;
    cr_assert_eq(rt_mutex_init(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_mutex_lock op1, op2;
    cr_assert_eq(rt_mutex_lock_init(&op1, &m), 0);
    cr_assert_eq(rt_mutex_lock_init(&op2, &m), 0);
    cr_assert_eq(rt_mutex_lock_poll(&op1, &h1.cx), RT_PENDING);
    cr_assert_eq(rt_mutex_lock_poll(&op2, &h2.cx), RT_PENDING);
    rt_mutex_unlock(&m);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    cr_assert_eq(counting_wakes(&h2.w), 0);
    /* Handed over: a newcomer may not take it. */
    cr_assert_eq(rt_mutex_try_lock(&m), -EBUSY, "try_lock barged past the waiter");
    cr_assert_eq(rt_mutex_lock_poll(&op2, &h2.cx), RT_PENDING);
    cr_assert_eq(rt_mutex_lock_poll(&op1, &h1.cx), RT_READY);
    cr_assert_eq(rt_mutex_try_lock(&m), -EBUSY);
    rt_mutex_unlock(&m);
    cr_assert_eq(counting_wakes(&h2.w), 1);
    cr_assert_eq(rt_mutex_try_lock(&m), -EBUSY, "try_lock barged past the waiter");
    cr_assert_eq(rt_mutex_lock_poll(&op2, &h2.cx), RT_READY);
    rt_mutex_unlock(&m);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    rt_mutex_unlock(&m);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    rt_mutex_destroy(&m);
}

static struct event mfifo_queued = EVENT_INIT;
static struct event mfifo_acquired = EVENT_INIT;

Test(sync, mutex_tasks_queued_one_after_another_lock_in_fifo_order)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex m;
    cr_assert_eq(rt_mutex_init(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    rt_task *tasks[FIFO_TASKS];
    for (int i = 0; i < FIFO_TASKS; i++) {
        struct mutex_waiter w = {0};
        w.m = &m;
        w.index = i;
        w.unlock_after = true;
        w.queued = &mfifo_queued;
        w.acquired = &mfifo_acquired;
        tasks[i] = spawn_mutex_waiter(rt, &w);
        cr_assert(event_wait_for(&mfifo_queued, (unsigned long)i + 1), "waiter %d never queued", i);
    }
    cr_assert_eq(event_count(&mfifo_acquired), 0);
    rt_mutex_unlock(&m);
    cr_assert(event_wait_for(&mfifo_acquired, FIFO_TASKS), "only %lu of %d tasks got the lock",
              event_count(&mfifo_acquired), FIFO_TASKS);
    for (int i = 0; i < FIFO_TASKS; i++)
        cr_assert_eq(rt_task_wait(tasks[i], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(atomic_load(&rank_next), FIFO_TASKS);
    for (int k = 0; k < FIFO_TASKS; k++)
        cr_assert_eq(rank_order[k], k, "turn %d went to waiter %d", k, rank_order[k]);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    rt_mutex_unlock(&m);
    finish_runtime(rt, 0);
    rt_mutex_destroy(&m);
}

/* ---- mutex: exclusion under contention -------------------------------------- */

#define EXCL_TASKS 64
#define EXCL_TASK_ROUNDS 1000
#define EXCL_THREADS 2
#define EXCL_THREAD_ROUNDS 2000

static rt_mutex excl_mu;
static long excl_counter;  /* plain: protected by excl_mu only */
static bool excl_inside;   /* plain: protected by excl_mu only */
static long excl_overlaps; /* plain: written under excl_mu only */
static atomic_long excl_errors;

struct excl_task {
    rt_coro co;
    int id;
    int i;
    rt_mutex_lock op;
};

static void excl_critical_enter(void)
{
    if (excl_inside)
        excl_overlaps++;
    excl_inside = true;
    excl_counter++;
}

static void excl_critical_leave(void)
{
    excl_inside = false;
}

static rt_poll excl_task_poll(void *state, rt_context *cx, void **out)
{
    struct excl_task *t = state;
    RT_CORO_BEGIN(&t->co);
    for (t->i = 0; t->i < EXCL_TASK_ROUNDS; t->i++) {
        if (rt_mutex_lock_init(&t->op, &excl_mu) != 0) {
            atomic_fetch_add(&excl_errors, 1);
            RT_RETURN(&t->co, out, NULL);
        }
        RT_AWAIT(&t->co, rt_mutex_lock_poll(&t->op, cx));
        excl_critical_enter();
        if ((t->i + t->id) % 50 == 0)
            RT_YIELD(&t->co, cx); /* hold the lock across a suspension */
        excl_critical_leave();
        rt_mutex_unlock(&excl_mu);
    }
    RT_RETURN(&t->co, out, NULL);
    RT_CORO_END(&t->co, out);
}

static void excl_task_drop(void *state)
{
    struct excl_task *t = state;
    rt_mutex_lock_drop(&t->op);
}

static void *excl_thread_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < EXCL_THREAD_ROUNDS; i++) {
        int rc;
        if (i % 3 == 0 && rt_mutex_try_lock(&excl_mu) == 0)
            rc = 0;
        else
            rc = rt_mutex_lock_blocking(&excl_mu, WAIT_DEADLINE_NS);
        if (rc != 0) {
            atomic_fetch_add(&excl_errors, 1);
            continue;
        }
        excl_critical_enter();
        excl_critical_leave();
        rt_mutex_unlock(&excl_mu);
    }
    return NULL;
}

Test(sync, mutex_excludes_64_tasks_and_foreign_threads)
{
    rt_runtime *rt = new_runtime(2);
    cr_assert_eq(rt_mutex_init(&excl_mu), 0);
    rt_task *tasks[EXCL_TASKS];
    for (int i = 0; i < EXCL_TASKS; i++) {
        struct excl_task t = {0};
        t.id = i;
        cr_assert_eq(RT_SPAWN(rt, excl_task_poll, excl_task_drop, &t, &tasks[i]), 0);
    }
    pthread_t threads[EXCL_THREADS];
    for (int i = 0; i < EXCL_THREADS; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, excl_thread_main, NULL), 0);
    for (int i = 0; i < EXCL_TASKS; i++)
        cr_assert_eq(rt_task_wait(tasks[i], WAIT_DEADLINE_NS, NULL), 0, "task %d", i);
    for (int i = 0; i < EXCL_THREADS; i++)
        pthread_join(threads[i], NULL);
    cr_assert_eq(atomic_load(&excl_errors), 0, "%ld lock calls failed", atomic_load(&excl_errors));
    cr_assert_eq(rt_mutex_try_lock(&excl_mu), 0, "the mutex is not free at the end");
    cr_assert_eq(excl_overlaps, 0, "two holders were inside at once %ld times", excl_overlaps);
    cr_assert_eq(excl_counter,
                 (long)EXCL_TASKS * EXCL_TASK_ROUNDS + (long)EXCL_THREADS * EXCL_THREAD_ROUNDS,
                 "lost updates: counter %ld", excl_counter);
    rt_mutex_unlock(&excl_mu);
    finish_runtime(rt, 0);
    rt_mutex_destroy(&excl_mu);
}

/* ---- mutex: abort safety ---------------------------------------------------- */

Test(sync, mutex_handed_over_but_uncollected_passes_to_the_next_waiter)
{
    rt_mutex m;
    cr_assert_eq(rt_mutex_init(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_mutex_lock op1, op2;
    cr_assert_eq(rt_mutex_lock_init(&op1, &m), 0);
    cr_assert_eq(rt_mutex_lock_init(&op2, &m), 0);
    cr_assert_eq(rt_mutex_lock_poll(&op1, &h1.cx), RT_PENDING);
    cr_assert_eq(rt_mutex_lock_poll(&op2, &h2.cx), RT_PENDING);
    rt_mutex_unlock(&m);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    rt_mutex_lock_drop(&op1);
    cr_assert_eq(counting_wakes(&h2.w), 1, "the uncollected lock was not passed on");
    cr_assert_eq(rt_mutex_lock_poll(&op2, &h2.cx), RT_READY);
    cr_assert_eq(rt_mutex_try_lock(&m), -EBUSY, "the lock was passed on and released");
    rt_mutex_lock_drop(&op1);
    rt_mutex_unlock(&m);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    rt_mutex_unlock(&m);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    rt_mutex_destroy(&m);
}

Test(sync, mutex_handed_over_but_uncollected_is_released_when_nobody_waits)
{
    rt_mutex m;
    cr_assert_eq(rt_mutex_init(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    struct hand h;
    hand_init(&h);
    rt_mutex_lock op;
    cr_assert_eq(rt_mutex_lock_init(&op, &m), 0);
    cr_assert_eq(rt_mutex_lock_poll(&op, &h.cx), RT_PENDING);
    rt_mutex_unlock(&m);
    cr_assert_eq(counting_wakes(&h.w), 1);
    cr_assert_eq(rt_mutex_try_lock(&m), -EBUSY);
    rt_mutex_lock_drop(&op);
    cr_assert_eq(rt_mutex_try_lock(&m), 0, "the uncollected lock stayed locked");
    rt_mutex_unlock(&m);
    /* A pending waiter dropped leaves the queue: nothing wakes it. */
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    struct hand h2;
    hand_init(&h2);
    cr_assert_eq(rt_mutex_lock_init(&op, &m), 0);
    cr_assert_eq(rt_mutex_lock_poll(&op, &h2.cx), RT_PENDING);
    rt_mutex_lock_drop(&op);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    rt_mutex_unlock(&m);
    cr_assert_eq(counting_wakes(&h2.w), 0, "a dropped waiter was woken");
    cr_assert_eq(rt_mutex_try_lock(&m), 0, "the lock went to a dropped waiter");
    rt_mutex_unlock(&m);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_mutex_destroy(&m);
}

static struct event mabort_queued = EVENT_INIT;
static struct event mabort_acquired = EVENT_INIT;
static struct event mabort_dropped = EVENT_INIT;

Test(sync, mutex_aborted_waiting_tasks_leave_the_lock_usable)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex m;
    cr_assert_eq(rt_mutex_init(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    enum { N = 5 };
    rt_task *tasks[N];
    for (int i = 0; i < N; i++) {
        struct mutex_waiter w = {0};
        w.m = &m;
        w.index = i;
        w.unlock_after = true;
        w.queued = &mabort_queued;
        w.acquired = &mabort_acquired;
        w.dropped = &mabort_dropped;
        tasks[i] = spawn_mutex_waiter(rt, &w);
        cr_assert(event_wait_for(&mabort_queued, (unsigned long)i + 1), "waiter %d never queued",
                  i);
    }
    /* The first, the middle and the last go. */
    rt_task_abort(tasks[0]);
    rt_task_abort(tasks[2]);
    rt_task_abort(tasks[4]);
    cr_assert_eq(rt_task_wait(tasks[0], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(rt_task_wait(tasks[2], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(rt_task_wait(tasks[4], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    rt_mutex_unlock(&m);
    cr_assert_eq(rt_task_wait(tasks[1], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_task_wait(tasks[3], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(atomic_load(&rank_next), 2);
    cr_assert_eq(rank_order[0], 1);
    cr_assert_eq(rank_order[1], 3);
    cr_assert_eq(rt_mutex_try_lock(&m), 0, "the lock is not free after the waiters");
    rt_mutex_unlock(&m);
    finish_runtime(rt, 0);
    rt_mutex_destroy(&m);
}

Test(sync, mutex_abort_racing_an_unlock_never_loses_the_lock)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex m;
    cr_assert_eq(rt_mutex_init(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    int completed = 0, cancelled = 0;
    for (int r = 0; r < RACE_ROUNDS; r++) {
        struct mutex_waiter w = {0};
        w.m = &m;
        w.index = r;
        w.unlock_after = true;
        w.queued = &race_queued;
        rt_task *task = spawn_mutex_waiter(rt, &w);
        cr_assert(event_wait_for(&race_queued, (unsigned long)r + 1), "round %d: never queued", r);
        rt_mutex_unlock(&m); /* handed to the task */
        rt_task_abort(task);
        int rc = rt_task_wait(task, WAIT_DEADLINE_NS, NULL);
        cr_assert(rc == 0 || rc == -ECANCELED, "round %d: %s", r, rt_strerror(rc));
        if (rc == 0)
            completed++;
        else
            cancelled++;
        cr_assert_eq(rt_mutex_try_lock(&m), 0, "round %d (%s): the lock was lost", r,
                     rc == 0 ? "completed" : "aborted");
    }
    cr_log_info("abort vs unlock: %d completed, %d aborted", completed, cancelled);
    rt_mutex_unlock(&m);
    finish_runtime(rt, 0);
    rt_mutex_destroy(&m);
}

/* ---- mutex: blocking form --------------------------------------------------- */

Test(sync, mutex_lock_blocking_times_out_while_held_and_locks_when_free)
{
    rt_mutex m;
    cr_assert_eq(rt_mutex_init(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    int64_t t0 = rt_now_ns();
    cr_assert_eq(rt_mutex_lock_blocking(&m, 20 * MS), -ETIMEDOUT);
    int64_t took = rt_now_ns() - t0;
    cr_assert_geq(took, 20 * MS, "timed out after only %lld us", (long long)(took / 1000));
    cr_assert_eq(rt_mutex_lock_blocking(&m, 0), -ETIMEDOUT);
    rt_mutex_unlock(&m);
    /* The timed-out waiters left the queue: the lock is simply free. */
    cr_assert_eq(rt_mutex_try_lock(&m), 0, "a timed-out waiter kept the lock or the queue");
    rt_mutex_unlock(&m);
    cr_assert_eq(rt_mutex_lock_blocking(&m, 0), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), -EBUSY);
    rt_mutex_unlock(&m);
    cr_assert_eq(rt_mutex_lock_blocking(&m, -1), 0);
    rt_mutex_unlock(&m);
    rt_mutex_destroy(&m);
}

/* Locks, announces it, waits for a notification while holding the lock,
 * then unlocks. */
struct holder {
    rt_coro co;
    rt_mutex *m;
    rt_notify *n;
    struct event *holding;
    rt_mutex_lock lock;
    rt_notified wait;
};

static rt_poll holder_poll(void *state, rt_context *cx, void **out)
{
    struct holder *h = state;
    RT_CORO_BEGIN(&h->co);
    if (rt_mutex_lock_init(&h->lock, h->m) != 0)
        RT_RETURN(&h->co, out, (intptr_t)-1);
    RT_AWAIT(&h->co, rt_mutex_lock_poll(&h->lock, cx));
    if (rt_notified_init(&h->wait, h->n) != 0)
        RT_RETURN(&h->co, out, (intptr_t)-1);
    event_signal(h->holding);
    RT_AWAIT(&h->co, rt_notified_poll(&h->wait, cx));
    rt_mutex_unlock(h->m);
    RT_RETURN(&h->co, out, 0);
    RT_CORO_END(&h->co, out);
}

static void holder_drop(void *state)
{
    struct holder *h = state;
    rt_mutex_lock_drop(&h->lock);
    rt_notified_drop(&h->wait);
}

struct blocking_locker {
    rt_mutex *m;
    int rc;
    struct event started;
    struct event done;
};

static void *blocking_locker_main(void *arg)
{
    struct blocking_locker *b = arg;
    event_signal(&b->started);
    b->rc = rt_mutex_lock_blocking(b->m, WAIT_DEADLINE_NS);
    event_signal(&b->done);
    if (b->rc == 0)
        rt_mutex_unlock(b->m);
    return NULL;
}

static struct event holder_holding = EVENT_INIT;

Test(sync, mutex_lock_blocking_waits_for_a_task_to_unlock)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex m;
    rt_notify n;
    cr_assert_eq(rt_mutex_init(&m), 0);
    cr_assert_eq(rt_notify_init(&n), 0);
    struct holder h = {0};
    h.m = &m;
    h.n = &n;
    h.holding = &holder_holding;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, holder_poll, holder_drop, &h, &task), 0);
    cr_assert(event_wait_for(&holder_holding, 1), "the holder never locked");
    static struct blocking_locker b = {NULL, -1, EVENT_INIT, EVENT_INIT};
    b.m = &m;
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, blocking_locker_main, &b), 0);
    cr_assert(event_wait_for(&b.started, 1));
    cr_assert_eq(event_count(&b.done), 0, "the thread locked a mutex a task holds");
    rt_notify_one(&n);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert(event_wait_for(&b.done, 1), "the blocked thread was never handed the lock");
    pthread_join(thread, NULL);
    cr_assert_eq(b.rc, 0, "rt_mutex_lock_blocking: %s", rt_strerror(b.rc));
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    rt_mutex_unlock(&m);
    finish_runtime(rt, 0);
    rt_notify_destroy(&n);
    rt_mutex_destroy(&m);
}

/* ---- the cooperative budget ------------------------------------------------- */

static atomic_bool budget_other_ran;

static rt_poll budget_flag_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    atomic_store(&budget_other_ran, true);
    *out = NULL;
    return RT_READY;
}

/* On a one-worker runtime: spawns a task that sets a flag, then locks and
 * unlocks a free mutex 1000 times (each lock ready at once) and returns
 * whether the other task ran meanwhile. */
struct budget_locker {
    rt_coro co;
    rt_mutex *m;
    int i;
    intptr_t result;
    rt_task *other;
    rt_mutex_lock op;
};

static rt_poll budget_locker_poll(void *state, rt_context *cx, void **out)
{
    struct budget_locker *b = state;
    RT_CORO_BEGIN(&b->co);
    if (rt_spawn(NULL, budget_flag_poll, NULL, NULL, 0, &b->other) != 0)
        RT_RETURN(&b->co, out, (intptr_t)-1);
    for (b->i = 0; b->i < 1000; b->i++) {
        rt_mutex_lock_init(&b->op, b->m);
        RT_AWAIT(&b->co, rt_mutex_lock_poll(&b->op, cx));
        rt_mutex_unlock(b->m);
    }
    b->result = atomic_load(&budget_other_ran) ? 1 : 0;
    /* Joined, so that shutdown finds nothing left to cancel. */
    RT_AWAIT(&b->co, rt_task_join(b->other, cx, NULL, NULL));
    b->other = NULL;
    RT_RETURN(&b->co, out, b->result);
    RT_CORO_END(&b->co, out);
}

static void budget_locker_drop(void *state)
{
    struct budget_locker *b = state;
    rt_mutex_lock_drop(&b->op);
    if (b->other != NULL)
        rt_task_detach(b->other);
}

Test(sync, mutex_acquisitions_spend_the_cooperative_budget)
{
    rt_mutex m;
    cr_assert_eq(rt_mutex_init(&m), 0);
    /* Budget off: the locker never gives up its only worker. */
    rt_runtime *rt = new_runtime_budget(1, 0);
    struct budget_locker b = {0};
    b.m = &m;
    void *v = (void *)(intptr_t)-5;
    cr_assert_eq(rt_block_on(rt, budget_locker_poll, budget_locker_drop, &b, sizeof b, &v), 0);
    cr_assert_eq((intptr_t)v, 0, "the other task ran with the budget off (the test is blind)");
    finish_runtime(rt, 0);
    /* Budget 128: the locker is suspended after 128 acquisitions in a poll. */
    atomic_store(&budget_other_ran, false);
    rt = new_runtime_budget(1, 128);
    memset(&b, 0, sizeof b);
    b.m = &m;
    v = (void *)(intptr_t)-5;
    cr_assert_eq(rt_block_on(rt, budget_locker_poll, budget_locker_drop, &b, sizeof b, &v), 0);
    cr_assert_eq((intptr_t)v, 1, "1000 ready acquisitions never let the other task run");
    finish_runtime(rt, 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    rt_mutex_unlock(&m);
    rt_mutex_destroy(&m);
}

/* ---- notify: permits and order ---------------------------------------------- */

Test(sync, notify_init_functions_reject_null)
{
    rt_notify n;
    rt_notified op;
    cr_assert_eq(rt_notify_init(NULL), -EINVAL);
    cr_assert_eq(rt_notify_init(&n), 0);
    cr_assert_eq(rt_notified_init(NULL, &n), -EINVAL);
    cr_assert_eq(rt_notified_init(&op, NULL), -EINVAL);
    rt_notify_destroy(&n);
}

Test(sync, notify_one_before_the_wait_is_not_lost)
{
    rt_notify n;
    cr_assert_eq(rt_notify_init(&n), 0);
    rt_notify_one(&n);
    struct hand h;
    hand_init(&h);
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, &n), 0);
    cr_assert_eq(rt_notified_poll(&op, &h.cx), RT_READY, "the stored permit was not consumed");
    rt_notified_drop(&op);
    /* Consumed: the next wait waits. */
    cr_assert_eq(rt_notified_init(&op, &n), 0);
    cr_assert_eq(rt_notified_poll(&op, &h.cx), RT_PENDING, "the permit was used twice");
    rt_notify_one(&n);
    cr_assert_eq(counting_wakes(&h.w), 1);
    cr_assert_eq(rt_notified_poll(&op, &h.cx), RT_READY);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    /* A notification after init but before the first poll counts too. */
    cr_assert_eq(rt_notified_init(&op, &n), 0);
    rt_notify_one(&n);
    cr_assert_eq(rt_notified_poll(&op, &h.cx), RT_READY);
    cr_assert_eq(rt_notified_init(&op, &n), 0);
    cr_assert_eq(rt_notified_poll(&op, &h.cx), RT_PENDING);
    rt_notified_drop(&op);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_notify_destroy(&n);
}

Test(sync, notify_one_repeated_stores_only_one_permit)
{
    rt_notify n;
    cr_assert_eq(rt_notify_init(&n), 0);
    for (int i = 0; i < 5; i++)
        rt_notify_one(&n);
    rt_context cx = noop_context();
    rt_notified a, b;
    cr_assert_eq(rt_notified_init(&a, &n), 0);
    cr_assert_eq(rt_notified_poll(&a, &cx), RT_READY);
    cr_assert_eq(rt_notified_init(&b, &n), 0);
    cr_assert_eq(rt_notified_poll(&b, &cx), RT_PENDING, "repeated notify_one added up");
    rt_notified_drop(&b);
    rt_notified_drop(&a);
    rt_notify_destroy(&n);
}

Test(sync, notify_one_wakes_waiters_in_fifo_order)
{
    enum { N = 4 };
    rt_notify n;
    cr_assert_eq(rt_notify_init(&n), 0);
    struct hand h[N];
    rt_notified op[N];
    for (int i = 0; i < N; i++) {
        hand_init(&h[i]);
        cr_assert_eq(rt_notified_init(&op[i], &n), 0);
        cr_assert_eq(rt_notified_poll(&op[i], &h[i].cx), RT_PENDING);
    }
    for (int k = 0; k < N; k++) {
        rt_notify_one(&n);
        for (int i = 0; i < N; i++)
            cr_assert_eq(counting_wakes(&h[i].w), i <= k ? 1 : 0,
                         "after notify %d, waiter %d woken %ld", k, i, counting_wakes(&h[i].w));
        for (int i = N - 1; i > k; i--)
            cr_assert_eq(rt_notified_poll(&op[i], &h[i].cx), RT_PENDING);
        cr_assert_eq(rt_notified_poll(&op[k], &h[k].cx), RT_READY, "waiter %d", k);
    }
    /* Nobody waits now and nothing is stored. */
    rt_notified extra;
    rt_context cx = noop_context();
    cr_assert_eq(rt_notified_init(&extra, &n), 0);
    cr_assert_eq(rt_notified_poll(&extra, &cx), RT_PENDING);
    rt_notified_drop(&extra);
    for (int i = 0; i < N; i++)
        cr_assert_eq(counting_outstanding(&h[i].w), 0);
    rt_notify_destroy(&n);
}

Test(sync, notify_all_wakes_every_waiter_initialised_before_it_even_unpolled)
{
    rt_notify n;
    cr_assert_eq(rt_notify_init(&n), 0);
    struct hand h1, h2, h3;
    hand_init(&h1);
    hand_init(&h2);
    hand_init(&h3);
    rt_notified polled1, polled2, unpolled, later;
    cr_assert_eq(rt_notified_init(&polled1, &n), 0);
    cr_assert_eq(rt_notified_poll(&polled1, &h1.cx), RT_PENDING);
    cr_assert_eq(rt_notified_init(&polled2, &n), 0);
    cr_assert_eq(rt_notified_poll(&polled2, &h2.cx), RT_PENDING);
    cr_assert_eq(rt_notified_init(&unpolled, &n), 0);
    rt_notify_all(&n);
    cr_assert_eq(rt_notified_init(&later, &n), 0);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    cr_assert_eq(counting_wakes(&h2.w), 1);
    cr_assert_eq(rt_notified_poll(&unpolled, &h3.cx), RT_READY,
                 "a wait initialised before notify_all but not polled missed it");
    cr_assert_eq(rt_notified_poll(&polled2, &h2.cx), RT_READY);
    cr_assert_eq(rt_notified_poll(&polled1, &h1.cx), RT_READY);
    cr_assert_eq(rt_notified_poll(&later, &h3.cx), RT_PENDING,
                 "a wait initialised after notify_all was woken by it");
    /* notify_all stored no permit: the later wait is woken only by another. */
    rt_notify_one(&n);
    cr_assert_eq(rt_notified_poll(&later, &h3.cx), RT_READY);
    for (int i = 0; i < 3; i++) {
        struct hand *h = i == 0 ? &h1 : i == 1 ? &h2 : &h3;
        cr_assert_eq(counting_outstanding(&h->w), 0, "waker %d", i);
    }
    rt_notify_destroy(&n);
}

Test(sync, notify_all_with_nobody_waiting_stores_no_permit)
{
    rt_notify n;
    cr_assert_eq(rt_notify_init(&n), 0);
    rt_notify_all(&n);
    rt_notify_all(&n);
    rt_context cx = noop_context();
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, &n), 0);
    cr_assert_eq(rt_notified_poll(&op, &cx), RT_PENDING, "notify_all left a permit");
    rt_notified_drop(&op);
    rt_notify_destroy(&n);
}

Test(sync, notified_drop_passes_a_notify_one_on_to_the_next_waiter)
{
    rt_notify n;
    cr_assert_eq(rt_notify_init(&n), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_notified op1, op2;
    cr_assert_eq(rt_notified_init(&op1, &n), 0);
    cr_assert_eq(rt_notified_poll(&op1, &h1.cx), RT_PENDING);
    cr_assert_eq(rt_notified_init(&op2, &n), 0);
    cr_assert_eq(rt_notified_poll(&op2, &h2.cx), RT_PENDING);
    rt_notify_one(&n);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    cr_assert_eq(counting_wakes(&h2.w), 0);
    rt_notified_drop(&op1);
    cr_assert_eq(counting_wakes(&h2.w), 1, "the uncollected notification was not passed on");
    cr_assert_eq(rt_notified_poll(&op2, &h2.cx), RT_READY);
    rt_notified_drop(&op1);
    /* Passed on, not also kept as the permit. */
    rt_notified op3;
    rt_context cx = noop_context();
    cr_assert_eq(rt_notified_init(&op3, &n), 0);
    cr_assert_eq(rt_notified_poll(&op3, &cx), RT_PENDING, "the notification was duplicated");
    rt_notified_drop(&op3);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    rt_notify_destroy(&n);
}

Test(sync, notified_drop_keeps_an_uncollected_notify_one_as_the_permit)
{
    rt_notify n;
    cr_assert_eq(rt_notify_init(&n), 0);
    struct hand h;
    hand_init(&h);
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, &n), 0);
    cr_assert_eq(rt_notified_poll(&op, &h.cx), RT_PENDING);
    rt_notify_one(&n);
    cr_assert_eq(counting_wakes(&h.w), 1);
    rt_notified_drop(&op);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_context cx = noop_context();
    rt_notified next, after;
    cr_assert_eq(rt_notified_init(&next, &n), 0);
    cr_assert_eq(rt_notified_poll(&next, &cx), RT_READY, "the notification was lost");
    cr_assert_eq(rt_notified_init(&after, &n), 0);
    cr_assert_eq(rt_notified_poll(&after, &cx), RT_PENDING);
    rt_notified_drop(&after);
    /* A pending waiter dropped leaves the queue: the next notify_one is
     * stored rather than spent on it. */
    struct hand h2;
    hand_init(&h2);
    cr_assert_eq(rt_notified_init(&op, &n), 0);
    cr_assert_eq(rt_notified_poll(&op, &h2.cx), RT_PENDING);
    rt_notified_drop(&op);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    rt_notify_one(&n);
    cr_assert_eq(counting_wakes(&h2.w), 0);
    cr_assert_eq(rt_notified_init(&next, &n), 0);
    cr_assert_eq(rt_notified_poll(&next, &cx), RT_READY, "notify_one was spent on a dropped wait");
    rt_notify_destroy(&n);
}

/* ---- notify: tasks ------------------------------------------------------------ */

#define PING_ROUNDS 5000

struct pinger {
    rt_coro co;
    rt_notify *mine;   /* waited on */
    rt_notify *theirs; /* notified */
    bool first;        /* notifies before the first wait */
    int i;
    rt_notified op;
};

static rt_poll pinger_poll(void *state, rt_context *cx, void **out)
{
    struct pinger *p = state;
    RT_CORO_BEGIN(&p->co);
    for (p->i = 0; p->i < PING_ROUNDS; p->i++) {
        if (p->first)
            rt_notify_one(p->theirs);
        rt_notified_init(&p->op, p->mine);
        RT_AWAIT(&p->co, rt_notified_poll(&p->op, cx));
        if (!p->first)
            rt_notify_one(p->theirs);
    }
    RT_RETURN(&p->co, out, (intptr_t)p->i);
    RT_CORO_END(&p->co, out);
}

static void pinger_drop(void *state)
{
    struct pinger *p = state;
    rt_notified_drop(&p->op);
}

Test(sync, notify_one_ping_pong_between_two_tasks_loses_nothing)
{
    rt_runtime *rt = new_runtime(2);
    rt_notify ping, pong;
    cr_assert_eq(rt_notify_init(&ping), 0);
    cr_assert_eq(rt_notify_init(&pong), 0);
    struct pinger a = {0}, b = {0};
    a.mine = &pong;
    a.theirs = &ping;
    a.first = true;
    b.mine = &ping;
    b.theirs = &pong;
    rt_task *ta = NULL, *tb = NULL;
    cr_assert_eq(RT_SPAWN(rt, pinger_poll, pinger_drop, &a, &ta), 0);
    cr_assert_eq(RT_SPAWN(rt, pinger_poll, pinger_drop, &b, &tb), 0);
    void *va = NULL, *vb = NULL;
    cr_assert_eq(rt_task_wait(ta, WAIT_DEADLINE_NS, &va), 0, "a notification was lost");
    cr_assert_eq(rt_task_wait(tb, WAIT_DEADLINE_NS, &vb), 0, "a notification was lost");
    cr_assert_eq((intptr_t)va, PING_ROUNDS);
    cr_assert_eq((intptr_t)vb, PING_ROUNDS);
    /* Every notification was consumed by exactly one wait. */
    rt_context cx = noop_context();
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, &ping), 0);
    cr_assert_eq(rt_notified_poll(&op, &cx), RT_PENDING, "a permit is left on ping");
    rt_notified_drop(&op);
    cr_assert_eq(rt_notified_init(&op, &pong), 0);
    cr_assert_eq(rt_notified_poll(&op, &cx), RT_PENDING, "a permit is left on pong");
    rt_notified_drop(&op);
    finish_runtime(rt, 0);
    rt_notify_destroy(&ping);
    rt_notify_destroy(&pong);
}

/* Waiters that follow a shared value with the "init the wait, check the
 * condition, await" pattern; the test advances the value one step at a time
 * with notify_all and waits until every waiter has seen each step. A missed
 * notify_all hangs a waiter and the step never completes. */
#define COND_WAITERS 8
#define COND_STEPS 400

static atomic_int cond_value;
static struct event cond_seen = EVENT_INIT;

struct cond_waiter {
    rt_coro co;
    rt_notify *n;
    int step;
    rt_notified op;
};

static rt_poll cond_waiter_poll(void *state, rt_context *cx, void **out)
{
    struct cond_waiter *w = state;
    RT_CORO_BEGIN(&w->co);
    for (w->step = 1; w->step <= COND_STEPS; w->step++) {
        for (;;) {
            rt_notified_init(&w->op, w->n);
            if (atomic_load(&cond_value) >= w->step) {
                rt_notified_drop(&w->op);
                break;
            }
            RT_AWAIT(&w->co, rt_notified_poll(&w->op, cx));
        }
        event_signal(&cond_seen);
    }
    RT_RETURN(&w->co, out, NULL);
    RT_CORO_END(&w->co, out);
}

static void cond_waiter_drop(void *state)
{
    struct cond_waiter *w = state;
    rt_notified_drop(&w->op);
}

Test(sync, notify_all_condition_pattern_never_misses_a_wakeup)
{
    rt_runtime *rt = new_runtime(2);
    rt_notify n;
    cr_assert_eq(rt_notify_init(&n), 0);
    rt_task *tasks[COND_WAITERS];
    for (int i = 0; i < COND_WAITERS; i++) {
        struct cond_waiter w = {0};
        w.n = &n;
        cr_assert_eq(RT_SPAWN(rt, cond_waiter_poll, cond_waiter_drop, &w, &tasks[i]), 0);
    }
    for (int s = 1; s <= COND_STEPS; s++) {
        atomic_store(&cond_value, s);
        rt_notify_all(&n);
        cr_assert(event_wait_for(&cond_seen, (unsigned long)s * COND_WAITERS),
                  "step %d: only %lu of %d sightings: a notify_all was missed", s,
                  event_count(&cond_seen), s * COND_WAITERS);
    }
    for (int i = 0; i < COND_WAITERS; i++)
        cr_assert_eq(rt_task_wait(tasks[i], WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
    rt_notify_destroy(&n);
}

static struct event nabort_queued = EVENT_INIT;
static struct event nabort_dropped = EVENT_INIT;

Test(sync, notify_aborted_waiting_tasks_leave_no_waiter_behind)
{
    rt_runtime *rt = new_runtime(2);
    rt_notify n;
    cr_assert_eq(rt_notify_init(&n), 0);
    enum { N = 4 };
    rt_task *tasks[N];
    for (int i = 0; i < N; i++) {
        struct notify_waiter w = {0};
        w.n = &n;
        w.index = i;
        w.queued = &nabort_queued;
        w.dropped = &nabort_dropped;
        tasks[i] = spawn_notify_waiter(rt, &w);
        cr_assert(event_wait_for(&nabort_queued, (unsigned long)i + 1), "waiter %d never queued",
                  i);
    }
    for (int i = 0; i < N; i++)
        rt_task_abort(tasks[i]);
    for (int i = 0; i < N; i++)
        cr_assert_eq(rt_task_wait(tasks[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(event_count(&nabort_dropped), N);
    /* Nobody waits any more: notify_one is stored for the next wait. */
    rt_notify_one(&n);
    rt_notify_all(&n);
    rt_context cx = noop_context();
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, &n), 0);
    cr_assert_eq(rt_notified_poll(&op, &cx), RT_READY, "notify_one was spent on an aborted waiter");
    cr_assert_eq(atomic_load(&rank_next), 0);
    finish_runtime(rt, 0);
    rt_notify_destroy(&n);
}

static struct event nrace_queued = EVENT_INIT;

Test(sync, notify_abort_racing_notify_one_never_loses_or_duplicates_it)
{
    rt_runtime *rt = new_runtime(2);
    int first_took = 0, passed_on = 0;
    for (int r = 0; r < RACE_ROUNDS / 2; r++) {
        rt_notify n;
        cr_assert_eq(rt_notify_init(&n), 0);
        struct notify_waiter wa = {0}, wb = {0};
        wa.n = &n;
        wa.index = 0;
        wa.queued = &nrace_queued;
        wb.n = &n;
        wb.index = 1;
        wb.queued = &nrace_queued;
        rt_task *a = spawn_notify_waiter(rt, &wa);
        cr_assert(event_wait_for(&nrace_queued, (unsigned long)2 * r + 1));
        rt_task *b = spawn_notify_waiter(rt, &wb);
        cr_assert(event_wait_for(&nrace_queued, (unsigned long)2 * r + 2));
        rt_notify_one(&n);
        rt_task_abort(a);
        int rca = rt_task_wait(a, WAIT_DEADLINE_NS, NULL);
        cr_assert(rca == 0 || rca == -ECANCELED, "round %d: %s", r, rt_strerror(rca));
        if (rca == 0) {
            /* a collected it: b still waits for its own. */
            first_took++;
            cr_assert(!rt_task_is_finished(b), "round %d: one notify_one woke two waiters", r);
            rt_notify_one(&n);
        } else {
            passed_on++;
        }
        int rcb = rt_task_wait(b, 5 * SEC, NULL);
        cr_assert_eq(rcb, 0, "round %d (%s): the second waiter never got the notification (%s)", r,
                     rca == 0 ? "first completed" : "first aborted", rt_strerror(rcb));
        rt_context cx = noop_context();
        rt_notified op;
        cr_assert_eq(rt_notified_init(&op, &n), 0);
        cr_assert_eq(rt_notified_poll(&op, &cx), RT_PENDING, "round %d: a permit was left over", r);
        rt_notified_drop(&op);
        rt_notify_destroy(&n);
    }
    cr_log_info("abort vs notify_one: first waiter took it %d times, passed on %d times",
                first_took, passed_on);
    finish_runtime(rt, 0);
}

/* ---- shutdown ----------------------------------------------------------------- */

static struct event shut_queued = EVENT_INIT;
static struct event shut_dropped = EVENT_INIT;

Test(sync, shutdown_with_tasks_waiting_on_every_primitive_releases_everything)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore sem;
    rt_mutex m;
    rt_notify n;
    cr_assert_eq(rt_semaphore_init(&sem, 1), 0);
    cr_assert_eq(rt_mutex_init(&m), 0);
    cr_assert_eq(rt_notify_init(&n), 0);
    cr_assert_eq(rt_mutex_try_lock(&m), 0);
    enum { EACH = 3 };
    for (int i = 0; i < EACH; i++) {
        struct sem_waiter w = {0};
        w.sem = &sem;
        w.want = 2;
        w.index = i;
        w.queued = &shut_queued;
        w.dropped = &shut_dropped;
        cr_assert_eq(RT_SPAWN(rt, sem_waiter_poll, sem_waiter_drop, &w, NULL), 0);
        struct mutex_waiter mw = {0};
        mw.m = &m;
        mw.index = 10 + i;
        mw.queued = &shut_queued;
        mw.dropped = &shut_dropped;
        cr_assert_eq(RT_SPAWN(rt, mutex_waiter_poll, mutex_waiter_drop, &mw, NULL), 0);
        struct notify_waiter nw = {0};
        nw.n = &n;
        nw.index = 20 + i;
        nw.queued = &shut_queued;
        nw.dropped = &shut_dropped;
        cr_assert_eq(RT_SPAWN(rt, notify_waiter_poll, notify_waiter_drop, &nw, NULL), 0);
    }
    cr_assert(event_wait_for(&shut_queued, 3 * EACH), "only %lu of %d waiters queued",
              event_count(&shut_queued), 3 * EACH);
    finish_runtime(rt, 3 * EACH);
    cr_assert_eq(event_count(&shut_dropped), 3 * EACH);
    cr_assert_eq(atomic_load(&rank_next), 0, "a waiter was served");
    /* Nothing is left queued on any of them. */
    cr_assert_eq(rt_semaphore_available(&sem), 1);
    cr_assert_eq(rt_semaphore_release(&sem, 1), 0);
    cr_assert_eq(rt_semaphore_available(&sem), 2, "a release went to a cancelled waiter");
    rt_mutex_unlock(&m);
    cr_assert_eq(rt_mutex_try_lock(&m), 0, "the lock went to a cancelled waiter");
    rt_mutex_unlock(&m);
    rt_notify_one(&n);
    rt_context cx = noop_context();
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, &n), 0);
    cr_assert_eq(rt_notified_poll(&op, &cx), RT_READY, "notify_one went to a cancelled waiter");
    rt_semaphore_destroy(&sem);
    rt_mutex_destroy(&m);
    rt_notify_destroy(&n);
}

/* ---- corner cases ------------------------------------------------------------- */

Test(sync, permits_granted_but_not_collected_count_toward_the_maximum)
{
    /* A waiter served RT_SEMAPHORE_MAX permits but not yet polled still
     * owns them (its drop gives them back), so a release on top of that must
     * be refused: otherwise the drop would leave more than the maximum. */
    rt_semaphore sem;
    cr_assert_eq(rt_semaphore_init(&sem, 0), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire op;
    cr_assert_eq(rt_semaphore_acquire_init(&op, &sem, RT_SEMAPHORE_MAX), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&op, &h.cx), RT_PENDING);
    cr_assert_eq(rt_semaphore_release(&sem, RT_SEMAPHORE_MAX), 0);
    cr_assert_eq(counting_wakes(&h.w), 1);
    cr_assert_eq(rt_semaphore_available(&sem), 0);
    cr_assert_eq(rt_semaphore_release(&sem, 1), -EINVAL,
                 "a release beyond the maximum counting the uncollected grant");
    rt_semaphore_acquire_drop(&op);
    cr_assert_eq(rt_semaphore_available(&sem), RT_SEMAPHORE_MAX);
    cr_assert_eq(rt_semaphore_release(&sem, 1), -EINVAL);
    /* Collected permits are the caller's: releasing them is fine. */
    cr_assert_eq(rt_semaphore_acquire_init(&op, &sem, 5), 0);
    cr_assert_eq(rt_semaphore_acquire_poll(&op, &h.cx), RT_READY);
    cr_assert_eq(rt_semaphore_release(&sem, 5), 0);
    cr_assert_eq(rt_semaphore_available(&sem), RT_SEMAPHORE_MAX);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_semaphore_destroy(&sem);
}
