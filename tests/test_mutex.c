/* Black-box tests of rt_mutex (asyncrt/sync.h): try_lock and unlock, the
 * lock handed to the oldest waiter without barging, exclusion under
 * contention from tasks and foreign threads, abort safety (a hand-over never
 * collected, aborted waiting tasks, aborts racing an unlock), the blocking
 * form, and acquisitions spending the cooperative budget. */
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

/* ---- helpers ----------------------------------------------------------- */

static rt_task *spawn_mutex_waiter(rt_runtime *rt, struct mutex_waiter *w)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, mutex_waiter_poll, mutex_waiter_drop, w, &task), 0);
    return task;
}

static struct event race_queued = EVENT_INIT;

/* ---- mutex: basics -------------------------------------------------------- */

/* Queues two lock operations on `m`, which the caller holds: op1 (polled
 * through h1) first, then op2 (through h2). */
static void queue_two_lockers(rt_mutex *m, struct hand *h1, rt_mutex_lock *op1, struct hand *h2,
                              rt_mutex_lock *op2)
{
    hand_init(h1);
    hand_init(h2);
    cr_assert_eq(rt_mutex_lock_init(op1, m), 0);
    cr_assert_eq(rt_mutex_lock_init(op2, m), 0);
    cr_assert_eq(RT_POLL_OP(op1, &h1->cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(op2, &h2->cx), RT_PENDING);
}

Test(sync, mutex_try_lock_and_unlock_basics)
{
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(NULL), -EINVAL);
    cr_assert_eq(rt_mutex_new(&m), 0);
    rt_mutex_lock op;
    cr_assert_eq(rt_mutex_lock_init(NULL, m), -EINVAL);
    cr_assert_eq(rt_mutex_lock_init(&op, NULL), -EINVAL);
    rt_context cx = noop_context();
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY, "a failed init did not leave the lock finished");
    cr_assert_eq(op.result, -EINVAL);
    cr_assert_eq(rt_mutex_lock_wait(NULL, 0), -EINVAL);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY, "the mutex is not recursive");
    rt_mutex_unlock(m);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_mutex_unlock(m);
    /* The poll form on a free mutex is ready at once. */
    struct hand h;
    hand_init(&h);
    cr_assert_eq(rt_mutex_lock_init(&op, m), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY);
    /* Finished: a second poll reports the same result, and locks nothing more. */
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    RT_DROP(&op); /* after RT_READY: the lock stays held */
    cr_assert_eq(op.result, 0, "drop after RT_READY changed the result");
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY, "drop after RT_READY unlocked the mutex");
    rt_mutex_unlock(m);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_mutex_unlock(m);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_mutex_drop(m);
}

Test(sync, mutex_unlock_hands_the_lock_to_the_oldest_waiter_without_barging)
{
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    struct hand h1, h2;
    rt_mutex_lock op1, op2;
    queue_two_lockers(m, &h1, &op1, &h2, &op2);
    rt_mutex_unlock(m);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    cr_assert_eq(counting_wakes(&h2.w), 0);
    /* Handed over: a newcomer may not take it. */
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY, "try_lock barged past the waiter");
    cr_assert_eq(RT_POLL_OP(&op2, &h2.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&op1, &h1.cx), RT_READY);
    cr_assert_eq(op1.result, 0);
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY);
    rt_mutex_unlock(m);
    cr_assert_eq(counting_wakes(&h2.w), 1);
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY, "try_lock barged past the waiter");
    cr_assert_eq(RT_POLL_OP(&op2, &h2.cx), RT_READY);
    cr_assert_eq(op2.result, 0);
    rt_mutex_unlock(m);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_mutex_unlock(m);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    rt_mutex_drop(m);
}

static struct event mfifo_queued = EVENT_INIT;
static struct event mfifo_acquired = EVENT_INIT;

Test(sync, mutex_tasks_queued_one_after_another_lock_in_fifo_order)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_task *tasks[FIFO_TASKS];
    for (int i = 0; i < FIFO_TASKS; i++) {
        struct mutex_waiter w = {0};
        w.m = m;
        w.index = i;
        w.unlock_after = true;
        w.queued = &mfifo_queued;
        w.acquired = &mfifo_acquired;
        tasks[i] = spawn_mutex_waiter(rt, &w);
        cr_assert(event_wait_for(&mfifo_queued, (unsigned long)i + 1), "waiter %d never queued", i);
    }
    cr_assert_eq(event_count(&mfifo_acquired), 0);
    rt_mutex_unlock(m);
    cr_assert(event_wait_for(&mfifo_acquired, FIFO_TASKS), "only %lu of %d tasks got the lock",
              event_count(&mfifo_acquired), FIFO_TASKS);
    for (int i = 0; i < FIFO_TASKS; i++)
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(atomic_load(&rank_next), FIFO_TASKS);
    for (int k = 0; k < FIFO_TASKS; k++)
        cr_assert_eq(rank_order[k], k, "turn %d went to waiter %d", k, rank_order[k]);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_mutex_unlock(m);
    finish_runtime(rt, 0);
    rt_mutex_drop(m);
}

/* ---- mutex: exclusion under contention -------------------------------------- */

#define EXCL_TASKS 64
#define EXCL_TASK_ROUNDS 1000
#define EXCL_THREADS 2
#define EXCL_THREAD_ROUNDS 2000

static rt_mutex *excl_mu;
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
        if (rt_mutex_lock_init(&t->op, excl_mu) != 0) {
            atomic_fetch_add(&excl_errors, 1);
            RT_RETURN(&t->co, out, NULL);
        }
        RT_AWAIT(&t->co, cx, &t->op);
        if (t->op.result != 0) {
            atomic_fetch_add(&excl_errors, 1);
            RT_RETURN(&t->co, out, NULL);
        }
        excl_critical_enter();
        if ((t->i + t->id) % 50 == 0)
            RT_CORO_YIELD(&t->co, cx); /* hold the lock across a suspension */
        excl_critical_leave();
        rt_mutex_unlock(excl_mu);
    }
    RT_RETURN(&t->co, out, NULL);
    RT_CORO_END(&t->co, out);
}

static void excl_task_drop(void *state)
{
    struct excl_task *t = state;
    RT_DROP(&t->op);
}

static void *excl_thread_main(void *arg)
{
    (void)arg;
    for (int i = 0; i < EXCL_THREAD_ROUNDS; i++) {
        int rc;
        if (i % 3 == 0 && rt_mutex_try_lock(excl_mu) == 0)
            rc = 0;
        else
            rc = rt_mutex_lock_wait(excl_mu, WAIT_DEADLINE_NS);
        if (rc != 0) {
            atomic_fetch_add(&excl_errors, 1);
            continue;
        }
        excl_critical_enter();
        excl_critical_leave();
        rt_mutex_unlock(excl_mu);
    }
    return NULL;
}

Test(sync, mutex_excludes_64_tasks_and_foreign_threads)
{
    rt_runtime *rt = new_runtime(2);
    cr_assert_eq(rt_mutex_new(&excl_mu), 0);
    rt_task *tasks[EXCL_TASKS];
    for (int i = 0; i < EXCL_TASKS; i++) {
        struct excl_task t = {0};
        t.id = i;
        cr_assert_eq(RT_SPAWN_STATE(rt, excl_task_poll, excl_task_drop, &t, &tasks[i]), 0);
    }
    pthread_t threads[EXCL_THREADS];
    for (int i = 0; i < EXCL_THREADS; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, excl_thread_main, NULL), 0);
    for (int i = 0; i < EXCL_TASKS; i++)
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, NULL), 0, "task %d", i);
    for (int i = 0; i < EXCL_THREADS; i++)
        pthread_join(threads[i], NULL);
    cr_assert_eq(atomic_load(&excl_errors), 0, "%ld lock calls failed", atomic_load(&excl_errors));
    cr_assert_eq(rt_mutex_try_lock(excl_mu), 0, "the mutex is not free at the end");
    cr_assert_eq(excl_overlaps, 0, "two holders were inside at once %ld times", excl_overlaps);
    cr_assert_eq(excl_counter,
                 (long)EXCL_TASKS * EXCL_TASK_ROUNDS + (long)EXCL_THREADS * EXCL_THREAD_ROUNDS,
                 "lost updates: counter %ld", excl_counter);
    rt_mutex_unlock(excl_mu);
    finish_runtime(rt, 0);
    rt_mutex_drop(excl_mu);
}

/* ---- mutex: abort safety ---------------------------------------------------- */

Test(sync, mutex_handed_over_but_uncollected_passes_to_the_next_waiter)
{
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    struct hand h1, h2;
    rt_mutex_lock op1, op2;
    queue_two_lockers(m, &h1, &op1, &h2, &op2);
    rt_mutex_unlock(m);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    RT_DROP(&op1);
    cr_assert_eq(op1.result, -ECANCELED, "a dropped lock reported the lock taken");
    cr_assert_eq(counting_wakes(&h2.w), 1, "the uncollected lock was not passed on");
    cr_assert_eq(RT_POLL_OP(&op2, &h2.cx), RT_READY);
    cr_assert_eq(op2.result, 0);
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY, "the lock was passed on and released");
    RT_DROP(&op1);
    rt_mutex_unlock(m);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_mutex_unlock(m);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    rt_mutex_drop(m);
}

Test(sync, mutex_handed_over_but_uncollected_is_released_when_nobody_waits)
{
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    struct hand h;
    hand_init(&h);
    rt_mutex_lock op;
    cr_assert_eq(rt_mutex_lock_init(&op, m), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    rt_mutex_unlock(m);
    cr_assert_eq(counting_wakes(&h.w), 1);
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY);
    RT_DROP(&op);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_eq(rt_mutex_try_lock(m), 0, "the uncollected lock stayed locked");
    rt_mutex_unlock(m);
    /* A pending waiter dropped leaves the queue: nothing wakes it. */
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    struct hand h2;
    hand_init(&h2);
    cr_assert_eq(rt_mutex_lock_init(&op, m), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h2.cx), RT_PENDING);
    RT_DROP(&op);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    rt_mutex_unlock(m);
    cr_assert_eq(counting_wakes(&h2.w), 0, "a dropped waiter was woken");
    cr_assert_eq(rt_mutex_try_lock(m), 0, "the lock went to a dropped waiter");
    rt_mutex_unlock(m);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_mutex_drop(m);
}

static struct event mabort_queued = EVENT_INIT;
static struct event mabort_acquired = EVENT_INIT;
static struct event mabort_dropped = EVENT_INIT;

Test(sync, mutex_aborted_waiting_tasks_leave_the_lock_usable)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    enum { N = 5 };
    rt_task *tasks[N];
    for (int i = 0; i < N; i++) {
        struct mutex_waiter w = {0};
        w.m = m;
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
    rt_task_cancel(tasks[0]);
    rt_task_cancel(tasks[2]);
    rt_task_cancel(tasks[4]);
    cr_assert_eq(task_wait_status(tasks[0], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(task_wait_status(tasks[2], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(task_wait_status(tasks[4], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    rt_mutex_unlock(m);
    cr_assert_eq(task_wait_status(tasks[1], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(task_wait_status(tasks[3], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(atomic_load(&rank_next), 2);
    cr_assert_eq(rank_order[0], 1);
    cr_assert_eq(rank_order[1], 3);
    cr_assert_eq(rt_mutex_try_lock(m), 0, "the lock is not free after the waiters");
    rt_mutex_unlock(m);
    finish_runtime(rt, 0);
    rt_mutex_drop(m);
}

Test(sync, mutex_abort_racing_an_unlock_never_loses_the_lock)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    int completed = 0, cancelled = 0;
    for (int r = 0; r < RACE_ROUNDS; r++) {
        struct mutex_waiter w = {0};
        w.m = m;
        w.index = r;
        w.unlock_after = true;
        w.queued = &race_queued;
        rt_task *task = spawn_mutex_waiter(rt, &w);
        cr_assert(event_wait_for(&race_queued, (unsigned long)r + 1), "round %d: never queued", r);
        rt_mutex_unlock(m); /* handed to the task */
        rt_task_cancel(task);
        int rc = task_wait_status(task, WAIT_DEADLINE_NS, NULL);
        cr_assert(rc == 0 || rc == -ECANCELED, "round %d: %s", r, rt_strerror(rc));
        if (rc == 0)
            completed++;
        else
            cancelled++;
        cr_assert_eq(rt_mutex_try_lock(m), 0, "round %d (%s): the lock was lost", r,
                     rc == 0 ? "completed" : "aborted");
    }
    cr_log_info("abort vs unlock: %d completed, %d aborted", completed, cancelled);
    rt_mutex_unlock(m);
    finish_runtime(rt, 0);
    rt_mutex_drop(m);
}

/* ---- mutex: blocking form --------------------------------------------------- */

Test(sync, mutex_lock_blocking_times_out_while_held_and_locks_when_free)
{
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    int64_t t0 = rt_now_ns();
    cr_assert_eq(rt_mutex_lock_wait(m, 20 * MS), -ETIMEDOUT);
    int64_t took = rt_now_ns() - t0;
    cr_assert_geq(took, 20 * MS, "timed out after only %lld us", (long long)(took / 1000));
    cr_assert_eq(rt_mutex_lock_wait(m, 0), -ETIMEDOUT);
    rt_mutex_unlock(m);
    /* The timed-out waiters left the queue: the lock is simply free. */
    cr_assert_eq(rt_mutex_try_lock(m), 0, "a timed-out waiter kept the lock or the queue");
    rt_mutex_unlock(m);
    cr_assert_eq(rt_mutex_lock_wait(m, 0), 0);
    cr_assert_eq(rt_mutex_try_lock(m), -EBUSY);
    rt_mutex_unlock(m);
    cr_assert_eq(rt_mutex_lock_wait(m, -1), 0);
    rt_mutex_unlock(m);
    rt_mutex_drop(m);
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
    RT_AWAIT(&h->co, cx, &h->lock);
    if (h->lock.result != 0)
        RT_RETURN(&h->co, out, (intptr_t)-1);
    if (rt_notified_init(&h->wait, h->n) != 0)
        RT_RETURN(&h->co, out, (intptr_t)-1);
    event_signal(h->holding);
    RT_AWAIT(&h->co, cx, &h->wait);
    rt_mutex_unlock(h->m);
    RT_RETURN(&h->co, out, (intptr_t)h->wait.result);
    RT_CORO_END(&h->co, out);
}

static void holder_drop(void *state)
{
    struct holder *h = state;
    RT_DROP(&h->lock);
    RT_DROP(&h->wait);
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
    b->rc = rt_mutex_lock_wait(b->m, WAIT_DEADLINE_NS);
    event_signal(&b->done);
    if (b->rc == 0)
        rt_mutex_unlock(b->m);
    return NULL;
}

static struct event holder_holding = EVENT_INIT;

Test(sync, mutex_lock_blocking_waits_for_a_task_to_unlock)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex *m;
    rt_notify *n;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_notify_new(&n), 0);
    struct holder h = {0};
    h.m = m;
    h.n = n;
    h.holding = &holder_holding;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, holder_poll, holder_drop, &h, &task), 0);
    cr_assert(event_wait_for(&holder_holding, 1), "the holder never locked");
    static struct blocking_locker b = {NULL, -1, EVENT_INIT, EVENT_INIT};
    b.m = m;
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, blocking_locker_main, &b), 0);
    cr_assert(event_wait_for(&b.started, 1));
    cr_assert_eq(event_count(&b.done), 0, "the thread locked a mutex a task holds");
    rt_notify_one(n);
    void *hv = (void *)(intptr_t)-5;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &hv), 0);
    cr_assert_eq((intptr_t)hv, 0, "the holder failed to lock or wait: %d", (int)(intptr_t)hv);
    cr_assert(event_wait_for(&b.done, 1), "the blocked thread was never handed the lock");
    pthread_join(thread, NULL);
    cr_assert_eq(b.rc, 0, "rt_mutex_lock_wait: %s", rt_strerror(b.rc));
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_mutex_unlock(m);
    finish_runtime(rt, 0);
    rt_notify_drop(n);
    rt_mutex_drop(m);
}

/* ---- the cooperative budget ------------------------------------------------- */

/* On a one-worker runtime: spawns a task that sets a flag, then locks and
 * unlocks a free mutex 1000 times (each lock ready at once) and returns
 * whether the other task ran meanwhile. */
struct budget_locker {
    rt_coro co;
    rt_mutex *m;
    int i;
    intptr_t result;
    rt_task *other; /* until the join takes it over */
    rt_mutex_lock op;
    rt_task_join join;
};

static rt_poll budget_locker_poll(void *state, rt_context *cx, void **out)
{
    struct budget_locker *b = state;
    RT_CORO_BEGIN(&b->co);
    if (rt_spawn(NULL, budget_flag_poll, NULL, NULL, 0, &b->other) != 0)
        RT_RETURN(&b->co, out, (intptr_t)-1);
    for (b->i = 0; b->i < 1000; b->i++) {
        rt_mutex_lock_init(&b->op, b->m);
        RT_AWAIT(&b->co, cx, &b->op);
        if (b->op.result != 0)
            RT_RETURN(&b->co, out, (intptr_t)-1);
        rt_mutex_unlock(b->m);
    }
    b->result = atomic_load(&budget_other_ran) ? 1 : 0;
    /* Joined, so that shutdown finds nothing left to cancel. */
    rt_task_join_init(&b->join, b->other);
    b->other = NULL; /* the join owns the handle now */
    RT_AWAIT(&b->co, cx, &b->join);
    RT_RETURN(&b->co, out, b->result);
    RT_CORO_END(&b->co, out);
}

static void budget_locker_drop(void *state)
{
    struct budget_locker *b = state;
    RT_DROP(&b->op);
    RT_DROP(&b->join); /* unfinished, it detaches the handle */
    if (b->other != NULL)
        rt_task_drop(b->other);
}

Test(sync, mutex_acquisitions_spend_the_cooperative_budget)
{
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    /* Budget off: the locker never gives up its only worker. */
    rt_runtime *rt = new_runtime_budget(1, 0);
    struct budget_locker b = {0};
    b.m = m;
    void *v = (void *)(intptr_t)-5;
    cr_assert_eq(block_on_status(rt, budget_locker_poll, budget_locker_drop, &b, sizeof b, &v), 0);
    cr_assert_eq((intptr_t)v, 0, "the other task ran with the budget off (the test is blind)");
    finish_runtime(rt, 0);
    /* Budget 128: the locker is suspended after 128 acquisitions in a poll. */
    atomic_store(&budget_other_ran, false);
    rt = new_runtime_budget(1, 128);
    memset(&b, 0, sizeof b);
    b.m = m;
    v = (void *)(intptr_t)-5;
    cr_assert_eq(block_on_status(rt, budget_locker_poll, budget_locker_drop, &b, sizeof b, &v), 0);
    cr_assert_eq((intptr_t)v, 1, "1000 ready acquisitions never let the other task run");
    finish_runtime(rt, 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_mutex_unlock(m);
    rt_mutex_drop(m);
}
