/* Black-box tests of rt_semaphore (asyncrt/sync.h) shared by tasks and
 * foreign threads: permits conserved under contention, waiting tasks aborted
 * in the queue or racing a release, the blocking form (timeouts, a thread
 * queued behind a waiter and woken by a release from a task), and every
 * blocking form of sync.h failing with -EDEADLK inside a task. */
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
        RT_AWAIT(&t->co, cx, &t->op);
        if (t->op.result != 0) {
            atomic_fetch_add(&cons_errors, 1);
            RT_RETURN(&t->co, out, NULL);
        }
        cons_enter(t->k);
        if (t->i % 4 == 0)
            RT_CORO_YIELD(&t->co, cx); /* hold the permits across a suspension */
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
    RT_DROP(&t->op);
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
                rc = rt_semaphore_acquire_wait(c->sem, k, WAIT_DEADLINE_NS);
        } else {
            rc = rt_semaphore_acquire_wait(c->sem, k, WAIT_DEADLINE_NS);
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
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(CONS_PERMITS, &sem), 0);
    rt_task *tasks[CONS_TASKS];
    for (int i = 0; i < CONS_TASKS; i++) {
        struct cons_task t = {0};
        t.sem = sem;
        t.id = i;
        cr_assert_eq(RT_SPAWN_STATE(rt, cons_task_poll, cons_task_drop, &t, &tasks[i]), 0);
    }
    pthread_t threads[CONS_THREADS];
    struct cons_thread ct[CONS_THREADS];
    for (int i = 0; i < CONS_THREADS; i++) {
        ct[i].sem = sem;
        ct[i].id = i;
        cr_assert_eq(pthread_create(&threads[i], NULL, cons_thread_main, &ct[i]), 0);
    }
    for (int i = 0; i < CONS_TASKS; i++)
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, NULL), 0, "task %d", i);
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
    cr_assert_eq(rt_semaphore_available(sem), CONS_PERMITS, "permits leaked or were created");
    cr_assert_eq(rt_semaphore_try_acquire(sem, CONS_PERMITS), 0);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 1), -EAGAIN);
    finish_runtime(rt, 0);
    rt_semaphore_drop(sem);
}

/* ---- semaphore: aborted waiting tasks -------------------------------------- */

static struct event abort_queued = EVENT_INIT;
static struct event abort_acquired = EVENT_INIT;
static struct event abort_dropped = EVENT_INIT;

Test(sync, semaphore_aborted_waiting_tasks_leak_no_permit_and_leave_no_waker)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    enum { N = 4 };
    rt_task *tasks[N];
    for (int i = 0; i < N; i++) {
        struct sem_waiter w = {0};
        w.sem = sem;
        w.want = 2;
        w.index = i;
        w.queued = &abort_queued;
        w.acquired = &abort_acquired;
        w.dropped = &abort_dropped;
        tasks[i] = spawn_sem_waiter(rt, &w);
        cr_assert(event_wait_for(&abort_queued, (unsigned long)i + 1), "waiter %d never queued", i);
    }
    /* The two in the middle of the queue go. */
    rt_task_cancel(tasks[1]);
    rt_task_cancel(tasks[2]);
    cr_assert_eq(task_wait_status(tasks[1], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(task_wait_status(tasks[2], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(event_count(&abort_dropped), 2);
    /* Four permits serve exactly the two that remain. */
    cr_assert_eq(rt_semaphore_release(sem, 4), 0);
    void *v = NULL;
    cr_assert_eq(task_wait_status(tasks[0], WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq((intptr_t)v, 1);
    cr_assert_eq(task_wait_status(tasks[3], WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq((intptr_t)v, 1);
    /* Both were granted by the one release; they may run in either order. */
    cr_assert_eq(atomic_load(&rank_next), 2);
    cr_assert((rank_order[0] == 0 && rank_order[1] == 3) ||
                  (rank_order[0] == 3 && rank_order[1] == 0),
              "served %d and %d", rank_order[0], rank_order[1]);
    cr_assert_eq(rt_semaphore_available(sem), 0);

    /* Now every waiter is aborted: nothing may stay queued. */
    for (int i = 0; i < N; i++) {
        struct sem_waiter w = {0};
        w.sem = sem;
        w.want = 1 + (size_t)i;
        w.index = 10 + i;
        w.queued = &abort_queued;
        w.dropped = &abort_dropped;
        tasks[i] = spawn_sem_waiter(rt, &w);
        cr_assert(event_wait_for(&abort_queued, (unsigned long)N + i + 1), "waiter %d", i);
    }
    for (int i = 0; i < N; i++)
        rt_task_cancel(tasks[i]);
    for (int i = 0; i < N; i++)
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(rt_semaphore_release(sem, 5), 0);
    cr_assert_eq(rt_semaphore_available(sem), 5, "an aborted waiter took permits");
    cr_assert_eq(rt_semaphore_try_acquire(sem, 5), 0);
    cr_assert_eq(atomic_load(&rank_next), 2, "an aborted task acquired");
    finish_runtime(rt, 0);
    rt_semaphore_drop(sem);
}

static struct event race_queued = EVENT_INIT;

Test(sync, semaphore_abort_racing_a_release_leaks_no_permit)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    int completed = 0, cancelled = 0;
    for (int r = 0; r < RACE_ROUNDS; r++) {
        struct sem_waiter w = {0};
        w.sem = sem;
        w.want = 2;
        w.index = r;
        w.release_after = true;
        w.queued = &race_queued;
        rt_task *task = spawn_sem_waiter(rt, &w);
        cr_assert(event_wait_for(&race_queued, (unsigned long)r + 1), "round %d: never queued", r);
        /* Granted now; the abort races the task's poll that collects. */
        cr_assert_eq(rt_semaphore_release(sem, 2), 0);
        rt_task_cancel(task);
        int rc = task_wait_status(task, WAIT_DEADLINE_NS, NULL);
        cr_assert(rc == 0 || rc == -ECANCELED, "round %d: %s", r, rt_strerror(rc));
        if (rc == 0)
            completed++;
        else
            cancelled++;
        cr_assert_eq(rt_semaphore_available(sem), 2, "round %d (%s): %zu permits available", r,
                     rc == 0 ? "completed" : "aborted", rt_semaphore_available(sem));
        cr_assert_eq(rt_semaphore_try_acquire(sem, 2), 0);
    }
    cr_log_info("abort vs release: %d completed, %d aborted", completed, cancelled);
    finish_runtime(rt, 0);
    rt_semaphore_drop(sem);
}

/* ---- semaphore: blocking form -------------------------------------------- */

Test(sync, semaphore_acquire_blocking_times_out_and_takes_nothing)
{
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    cr_assert_eq(rt_semaphore_acquire_wait(NULL, 1, 0), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_wait(sem, 0, 0), -EINVAL);
    cr_assert_eq(rt_semaphore_acquire_wait(sem, RT_SEMAPHORE_MAX + 1, 0), -EINVAL);
    int64_t t0 = rt_now_ns();
    cr_assert_eq(rt_semaphore_acquire_wait(sem, 1, 20 * MS), -ETIMEDOUT);
    int64_t took = rt_now_ns() - t0;
    cr_assert_geq(took, 20 * MS, "timed out after only %lld us", (long long)(took / 1000));
    cr_assert_lt(took, 10 * SEC);
    cr_assert_eq(rt_semaphore_acquire_wait(sem, 1, 0), -ETIMEDOUT);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    /* The timed-out waiters are gone from the queue: a release stays
     * available and try_acquire is not blocked by a ghost waiter. */
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(rt_semaphore_available(sem), 1);
    cr_assert_eq(rt_semaphore_try_acquire(sem, 1), 0);
    /* Part of the ask there: still times out, and keeps nothing. */
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_wait(sem, 2, 5 * MS), -ETIMEDOUT);
    cr_assert_eq(rt_semaphore_available(sem), 1, "a timed-out acquisition kept a permit");
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(rt_semaphore_acquire_wait(sem, 2, 0), 0, "permits there, timeout 0");
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(rt_semaphore_release(sem, 2), 0);
    cr_assert_eq(rt_semaphore_acquire_wait(sem, 2, -1), 0);
    cr_assert_eq(rt_semaphore_available(sem), 0);
    rt_semaphore_drop(sem);
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
    b->rc = rt_semaphore_acquire_wait(b->sem, b->n, WAIT_DEADLINE_NS);
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
    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    struct hand h;
    hand_init(&h);
    rt_semaphore_acquire head;
    cr_assert_eq(rt_semaphore_acquire_init(&head, sem, 1), 0);
    cr_assert_eq(RT_POLL_OP(&head, &h.cx), RT_PENDING);

    static struct blocking_acquirer b = {NULL, 0, -1, EVENT_INIT, EVENT_INIT};
    b.sem = sem;
    b.n = 2;
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, blocking_acquirer_main, &b), 0);
    cr_assert(event_wait_for(&b.started, 1));
    /* One permit from a task: it is the head's. */
    struct releaser r = {sem, 1};
    void *v = (void *)(intptr_t)-1;
    cr_assert_eq(block_on_status(rt, releaser_poll, NULL, &r, sizeof r, &v), 0);
    cr_assert_eq((intptr_t)v, 0);
    cr_assert_eq(counting_wakes(&h.w), 1, "the head waiter was not served first");
    cr_assert_eq(event_count(&b.done), 0, "the blocked thread took the head's permit");
    cr_assert_eq(RT_POLL_OP(&head, &h.cx), RT_READY);
    cr_assert_eq(head.result, 0);
    /* Two more from a task: the blocked thread's. */
    r.n = 2;
    cr_assert_eq(block_on_status(rt, releaser_poll, NULL, &r, sizeof r, &v), 0);
    cr_assert(event_wait_for(&b.done, 1), "the blocked thread was never woken");
    pthread_join(thread, NULL);
    cr_assert_eq(b.rc, 0, "rt_semaphore_acquire_wait: %s", rt_strerror(b.rc));
    cr_assert_eq(rt_semaphore_available(sem), 0);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(rt_semaphore_release(sem, 3), 0);
    cr_assert_eq(rt_semaphore_available(sem), 3);
    rt_semaphore_drop(sem);
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
    p->sem_empty_rc = rt_semaphore_acquire_wait(p->empty, 1, 50 * MS);
    p->sem_full_rc = rt_semaphore_acquire_wait(p->full, 1, 50 * MS);
    p->mutex_rc = rt_mutex_lock_wait(p->m, 50 * MS);
    *out = NULL;
    return RT_READY;
}

Test(sync, blocking_forms_fail_with_edeadlk_inside_a_task_and_take_nothing)
{
    rt_runtime *rt = new_runtime(2);
    rt_semaphore *empty, *full;
    rt_mutex *m;
    cr_assert_eq(rt_semaphore_new(0, &empty), 0);
    cr_assert_eq(rt_semaphore_new(1, &full), 0);
    cr_assert_eq(rt_mutex_new(&m), 0);
    struct deadlock_probe p = {empty, full, m, 1, 1, 1};
    struct deadlock_probe *pp = &p;
    cr_assert_eq(block_on_status(rt, deadlock_probe_poll, NULL, &pp, sizeof pp, NULL), 0);
    cr_assert_eq(p.sem_empty_rc, -EDEADLK, "semaphore with no permit: %s",
                 rt_strerror(p.sem_empty_rc));
    cr_assert_eq(p.sem_full_rc, -EDEADLK, "semaphore with a permit: %s",
                 rt_strerror(p.sem_full_rc));
    cr_assert_eq(p.mutex_rc, -EDEADLK, "free mutex: %s", rt_strerror(p.mutex_rc));
    cr_assert_eq(rt_semaphore_available(full), 1, "the failed call took a permit");
    cr_assert_eq(rt_semaphore_available(empty), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0, "the failed call left the mutex locked");
    rt_mutex_unlock(m);
    finish_runtime(rt, 0);
    rt_mutex_drop(m);
    rt_semaphore_drop(empty);
    rt_semaphore_drop(full);
}
