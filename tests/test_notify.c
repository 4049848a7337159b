/* Black-box tests of rt_notify (asyncrt/sync.h): notify_one's single stored
 * permit and FIFO wake-ups, notify_all's "initialised before" rule, a
 * dropped notified passing its notification on, ping-pong and condition
 * patterns between tasks, aborted waiting tasks and aborts racing
 * notify_one; and shutdown while tasks wait on every primitive of sync.h. */
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

/* Waits for a notification, like the waiters of support_sync.h: announces
 * `queued` once waiting, records its rank and signals `notified`. The
 * notified is initialised in the task's first poll. */
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
    RT_AWAIT_POLL(&w->co, announce(RT_POLL_OP(&w->op, cx), &w->announced, w->queued));
    if (w->op.result != 0)
        RT_RETURN(&w->co, out, (intptr_t)w->op.result);
    record_rank(w->index);
    if (w->notified != NULL)
        event_signal(w->notified);
    RT_RETURN(&w->co, out, (intptr_t)1);
    RT_CORO_END(&w->co, out);
}

static void notify_waiter_drop(void *state)
{
    struct notify_waiter *w = state;
    RT_DROP(&w->op);
    if (w->dropped != NULL)
        event_signal(w->dropped);
}

static rt_task *spawn_notify_waiter(rt_runtime *rt, struct notify_waiter *w)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, notify_waiter_poll, notify_waiter_drop, w, &task), 0);
    return task;
}

/* ---- notify: permits and order ---------------------------------------------- */

Test(sync, notify_init_functions_reject_null)
{
    rt_notify *n;
    rt_notified op;
    cr_assert_eq(rt_notify_new(NULL), -EINVAL);
    cr_assert_eq(rt_notify_new(&n), 0);
    cr_assert_eq(rt_notified_init(NULL, n), -EINVAL);
    cr_assert_eq(rt_notified_init(&op, NULL), -EINVAL);
    rt_context cx = noop_context();
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY, "a failed init did not leave the wait finished");
    cr_assert_eq(op.result, -EINVAL);
    rt_notify_drop(n);
}

Test(sync, notify_one_before_the_wait_is_not_lost)
{
    rt_notify *n;
    cr_assert_eq(rt_notify_new(&n), 0);
    rt_notify_one(n);
    struct hand h;
    hand_init(&h);
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, n), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY, "the stored permit was not consumed");
    cr_assert_eq(op.result, 0);
    /* Finished: a second poll reports the same result (and takes nothing). */
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    RT_DROP(&op);
    cr_assert_eq(op.result, 0, "a drop after RT_READY changed the result");
    /* Consumed: the next wait waits. */
    cr_assert_eq(rt_notified_init(&op, n), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING, "the permit was used twice");
    rt_notify_one(n);
    cr_assert_eq(counting_wakes(&h.w), 1);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    /* A notification after init but before the first poll counts too. */
    cr_assert_eq(rt_notified_init(&op, n), 0);
    rt_notify_one(n);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(rt_notified_init(&op, n), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    RT_DROP(&op);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_notify_drop(n);
}

Test(sync, notify_one_repeated_stores_only_one_permit)
{
    rt_notify *n;
    cr_assert_eq(rt_notify_new(&n), 0);
    for (int i = 0; i < 5; i++)
        rt_notify_one(n);
    rt_context cx = noop_context();
    rt_notified a, b;
    cr_assert_eq(rt_notified_init(&a, n), 0);
    cr_assert_eq(RT_POLL_OP(&a, &cx), RT_READY);
    cr_assert_eq(a.result, 0);
    cr_assert_eq(rt_notified_init(&b, n), 0);
    cr_assert_eq(RT_POLL_OP(&b, &cx), RT_PENDING, "repeated notify_one added up");
    RT_DROP(&b);
    RT_DROP(&a);
    rt_notify_drop(n);
}

Test(sync, notify_one_wakes_waiters_in_fifo_order)
{
    enum { N = 4 };
    rt_notify *n;
    cr_assert_eq(rt_notify_new(&n), 0);
    struct hand h[N];
    rt_notified op[N];
    for (int i = 0; i < N; i++) {
        hand_init(&h[i]);
        cr_assert_eq(rt_notified_init(&op[i], n), 0);
        cr_assert_eq(RT_POLL_OP(&op[i], &h[i].cx), RT_PENDING);
    }
    for (int k = 0; k < N; k++) {
        rt_notify_one(n);
        for (int i = 0; i < N; i++)
            cr_assert_eq(counting_wakes(&h[i].w), i <= k ? 1 : 0,
                         "after notify %d, waiter %d woken %ld", k, i, counting_wakes(&h[i].w));
        for (int i = N - 1; i > k; i--)
            cr_assert_eq(RT_POLL_OP(&op[i], &h[i].cx), RT_PENDING);
        cr_assert_eq(RT_POLL_OP(&op[k], &h[k].cx), RT_READY, "waiter %d", k);
        cr_assert_eq(op[k].result, 0);
    }
    /* Nobody waits now and nothing is stored. */
    rt_notified extra;
    rt_context cx = noop_context();
    cr_assert_eq(rt_notified_init(&extra, n), 0);
    cr_assert_eq(RT_POLL_OP(&extra, &cx), RT_PENDING);
    RT_DROP(&extra);
    for (int i = 0; i < N; i++)
        cr_assert_eq(counting_outstanding(&h[i].w), 0);
    rt_notify_drop(n);
}

Test(sync, notify_all_wakes_every_waiter_initialised_before_it_even_unpolled)
{
    rt_notify *n;
    cr_assert_eq(rt_notify_new(&n), 0);
    struct hand h1, h2, h3;
    hand_init(&h1);
    hand_init(&h2);
    hand_init(&h3);
    rt_notified polled1, polled2, unpolled, later;
    cr_assert_eq(rt_notified_init(&polled1, n), 0);
    cr_assert_eq(RT_POLL_OP(&polled1, &h1.cx), RT_PENDING);
    cr_assert_eq(rt_notified_init(&polled2, n), 0);
    cr_assert_eq(RT_POLL_OP(&polled2, &h2.cx), RT_PENDING);
    cr_assert_eq(rt_notified_init(&unpolled, n), 0);
    rt_notify_all(n);
    cr_assert_eq(rt_notified_init(&later, n), 0);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    cr_assert_eq(counting_wakes(&h2.w), 1);
    cr_assert_eq(RT_POLL_OP(&unpolled, &h3.cx), RT_READY,
                 "a wait initialised before notify_all but not polled missed it");
    cr_assert_eq(unpolled.result, 0);
    cr_assert_eq(RT_POLL_OP(&polled2, &h2.cx), RT_READY);
    cr_assert_eq(polled2.result, 0);
    cr_assert_eq(RT_POLL_OP(&polled1, &h1.cx), RT_READY);
    cr_assert_eq(polled1.result, 0);
    cr_assert_eq(RT_POLL_OP(&later, &h3.cx), RT_PENDING,
                 "a wait initialised after notify_all was woken by it");
    /* notify_all stored no permit: the later wait is woken only by another. */
    rt_notify_one(n);
    cr_assert_eq(RT_POLL_OP(&later, &h3.cx), RT_READY);
    cr_assert_eq(later.result, 0);
    for (int i = 0; i < 3; i++) {
        struct hand *h = i == 0 ? &h1 : i == 1 ? &h2 : &h3;
        cr_assert_eq(counting_outstanding(&h->w), 0, "waker %d", i);
    }
    rt_notify_drop(n);
}

Test(sync, notify_all_with_nobody_waiting_stores_no_permit)
{
    rt_notify *n;
    cr_assert_eq(rt_notify_new(&n), 0);
    rt_notify_all(n);
    rt_notify_all(n);
    rt_context cx = noop_context();
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, n), 0);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING, "notify_all left a permit");
    RT_DROP(&op);
    rt_notify_drop(n);
}

Test(sync, notified_drop_passes_a_notify_one_on_to_the_next_waiter)
{
    rt_notify *n;
    cr_assert_eq(rt_notify_new(&n), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_notified op1, op2;
    cr_assert_eq(rt_notified_init(&op1, n), 0);
    cr_assert_eq(RT_POLL_OP(&op1, &h1.cx), RT_PENDING);
    cr_assert_eq(rt_notified_init(&op2, n), 0);
    cr_assert_eq(RT_POLL_OP(&op2, &h2.cx), RT_PENDING);
    rt_notify_one(n);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    cr_assert_eq(counting_wakes(&h2.w), 0);
    RT_DROP(&op1);
    cr_assert_eq(op1.result, -ECANCELED, "a dropped wait reported the notification");
    cr_assert_eq(counting_wakes(&h2.w), 1, "the uncollected notification was not passed on");
    cr_assert_eq(RT_POLL_OP(&op2, &h2.cx), RT_READY);
    cr_assert_eq(op2.result, 0);
    RT_DROP(&op1);
    /* Passed on, not also kept as the permit. */
    rt_notified op3;
    rt_context cx = noop_context();
    cr_assert_eq(rt_notified_init(&op3, n), 0);
    cr_assert_eq(RT_POLL_OP(&op3, &cx), RT_PENDING, "the notification was duplicated");
    RT_DROP(&op3);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    rt_notify_drop(n);
}

Test(sync, notified_drop_keeps_an_uncollected_notify_one_as_the_permit)
{
    rt_notify *n;
    cr_assert_eq(rt_notify_new(&n), 0);
    struct hand h;
    hand_init(&h);
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, n), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    rt_notify_one(n);
    cr_assert_eq(counting_wakes(&h.w), 1);
    RT_DROP(&op);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_context cx = noop_context();
    rt_notified next, after;
    cr_assert_eq(rt_notified_init(&next, n), 0);
    cr_assert_eq(RT_POLL_OP(&next, &cx), RT_READY, "the notification was lost");
    cr_assert_eq(next.result, 0);
    cr_assert_eq(rt_notified_init(&after, n), 0);
    cr_assert_eq(RT_POLL_OP(&after, &cx), RT_PENDING);
    RT_DROP(&after);
    /* A pending waiter dropped leaves the queue: the next notify_one is
     * stored rather than spent on it. */
    struct hand h2;
    hand_init(&h2);
    cr_assert_eq(rt_notified_init(&op, n), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h2.cx), RT_PENDING);
    RT_DROP(&op);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    rt_notify_one(n);
    cr_assert_eq(counting_wakes(&h2.w), 0);
    cr_assert_eq(rt_notified_init(&next, n), 0);
    cr_assert_eq(RT_POLL_OP(&next, &cx), RT_READY, "notify_one was spent on a dropped wait");
    cr_assert_eq(next.result, 0);
    rt_notify_drop(n);
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
        RT_AWAIT(&p->co, cx, &p->op);
        if (p->op.result != 0)
            RT_RETURN(&p->co, out, (intptr_t)p->op.result);
        if (!p->first)
            rt_notify_one(p->theirs);
    }
    RT_RETURN(&p->co, out, (intptr_t)p->i);
    RT_CORO_END(&p->co, out);
}

static void pinger_drop(void *state)
{
    struct pinger *p = state;
    RT_DROP(&p->op);
}

Test(sync, notify_one_ping_pong_between_two_tasks_loses_nothing)
{
    rt_runtime *rt = new_runtime(2);
    rt_notify *ping, *pong;
    cr_assert_eq(rt_notify_new(&ping), 0);
    cr_assert_eq(rt_notify_new(&pong), 0);
    struct pinger a = {0}, b = {0};
    a.mine = pong;
    a.theirs = ping;
    a.first = true;
    b.mine = ping;
    b.theirs = pong;
    rt_task *ta = NULL, *tb = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, pinger_poll, pinger_drop, &a, &ta), 0);
    cr_assert_eq(RT_SPAWN_STATE(rt, pinger_poll, pinger_drop, &b, &tb), 0);
    void *va = NULL, *vb = NULL;
    cr_assert_eq(task_wait_status(ta, WAIT_DEADLINE_NS, &va), 0, "a notification was lost");
    cr_assert_eq(task_wait_status(tb, WAIT_DEADLINE_NS, &vb), 0, "a notification was lost");
    cr_assert_eq((intptr_t)va, PING_ROUNDS);
    cr_assert_eq((intptr_t)vb, PING_ROUNDS);
    /* Every notification was consumed by exactly one wait. */
    rt_context cx = noop_context();
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, ping), 0);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING, "a permit is left on ping");
    RT_DROP(&op);
    cr_assert_eq(rt_notified_init(&op, pong), 0);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING, "a permit is left on pong");
    RT_DROP(&op);
    finish_runtime(rt, 0);
    rt_notify_drop(ping);
    rt_notify_drop(pong);
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
                RT_DROP(&w->op);
                break;
            }
            RT_AWAIT(&w->co, cx, &w->op);
            if (w->op.result != 0)
                RT_RETURN(&w->co, out, (intptr_t)w->op.result);
        }
        event_signal(&cond_seen);
    }
    RT_RETURN(&w->co, out, NULL);
    RT_CORO_END(&w->co, out);
}

static void cond_waiter_drop(void *state)
{
    struct cond_waiter *w = state;
    RT_DROP(&w->op);
}

Test(sync, notify_all_condition_pattern_never_misses_a_wakeup)
{
    rt_runtime *rt = new_runtime(2);
    rt_notify *n;
    cr_assert_eq(rt_notify_new(&n), 0);
    rt_task *tasks[COND_WAITERS];
    for (int i = 0; i < COND_WAITERS; i++) {
        struct cond_waiter w = {0};
        w.n = n;
        cr_assert_eq(RT_SPAWN_STATE(rt, cond_waiter_poll, cond_waiter_drop, &w, &tasks[i]), 0);
    }
    for (int s = 1; s <= COND_STEPS; s++) {
        atomic_store(&cond_value, s);
        rt_notify_all(n);
        cr_assert(event_wait_for(&cond_seen, (unsigned long)s * COND_WAITERS),
                  "step %d: only %lu of %d sightings: a notify_all was missed", s,
                  event_count(&cond_seen), s * COND_WAITERS);
    }
    for (int i = 0; i < COND_WAITERS; i++)
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
    rt_notify_drop(n);
}

static struct event nabort_queued = EVENT_INIT;
static struct event nabort_dropped = EVENT_INIT;

Test(sync, notify_aborted_waiting_tasks_leave_no_waiter_behind)
{
    rt_runtime *rt = new_runtime(2);
    rt_notify *n;
    cr_assert_eq(rt_notify_new(&n), 0);
    enum { N = 4 };
    rt_task *tasks[N];
    for (int i = 0; i < N; i++) {
        struct notify_waiter w = {0};
        w.n = n;
        w.index = i;
        w.queued = &nabort_queued;
        w.dropped = &nabort_dropped;
        tasks[i] = spawn_notify_waiter(rt, &w);
        cr_assert(event_wait_for(&nabort_queued, (unsigned long)i + 1), "waiter %d never queued",
                  i);
    }
    for (int i = 0; i < N; i++)
        rt_task_cancel(tasks[i]);
    for (int i = 0; i < N; i++)
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(event_count(&nabort_dropped), N);
    /* Nobody waits any more: notify_one is stored for the next wait. */
    rt_notify_one(n);
    rt_notify_all(n);
    rt_context cx = noop_context();
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, n), 0);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY, "notify_one was spent on an aborted waiter");
    cr_assert_eq(op.result, 0);
    cr_assert_eq(atomic_load(&rank_next), 0);
    finish_runtime(rt, 0);
    rt_notify_drop(n);
}

static struct event nrace_queued = EVENT_INIT;

Test(sync, notify_abort_racing_notify_one_never_loses_or_duplicates_it)
{
    rt_runtime *rt = new_runtime(2);
    int first_took = 0, passed_on = 0;
    for (int r = 0; r < RACE_ROUNDS / 2; r++) {
        rt_notify *n;
        cr_assert_eq(rt_notify_new(&n), 0);
        struct notify_waiter wa = {0}, wb = {0};
        wa.n = n;
        wa.index = 0;
        wa.queued = &nrace_queued;
        wb.n = n;
        wb.index = 1;
        wb.queued = &nrace_queued;
        rt_task *a = spawn_notify_waiter(rt, &wa);
        cr_assert(event_wait_for(&nrace_queued, (unsigned long)2 * r + 1));
        rt_task *b = spawn_notify_waiter(rt, &wb);
        cr_assert(event_wait_for(&nrace_queued, (unsigned long)2 * r + 2));
        rt_notify_one(n);
        rt_task_cancel(a);
        int rca = task_wait_status(a, WAIT_DEADLINE_NS, NULL);
        cr_assert(rca == 0 || rca == -ECANCELED, "round %d: %s", r, rt_strerror(rca));
        if (rca == 0) {
            /* a collected it: b still waits for its own. */
            first_took++;
            cr_assert(!rt_task_is_finished(b), "round %d: one notify_one woke two waiters", r);
            rt_notify_one(n);
        } else {
            passed_on++;
        }
        int rcb = task_wait_status(b, 5 * SEC, NULL);
        cr_assert_eq(rcb, 0, "round %d (%s): the second waiter never got the notification (%s)", r,
                     rca == 0 ? "first completed" : "first aborted", rt_strerror(rcb));
        rt_context cx = noop_context();
        rt_notified op;
        cr_assert_eq(rt_notified_init(&op, n), 0);
        cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING, "round %d: a permit was left over", r);
        RT_DROP(&op);
        rt_notify_drop(n);
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
    rt_semaphore *sem;
    rt_mutex *m;
    rt_notify *n;
    cr_assert_eq(rt_semaphore_new(1, &sem), 0);
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_notify_new(&n), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    enum { EACH = 3 };
    for (int i = 0; i < EACH; i++) {
        struct sem_waiter w = {0};
        w.sem = sem;
        w.want = 2;
        w.index = i;
        w.queued = &shut_queued;
        w.dropped = &shut_dropped;
        cr_assert_eq(RT_SPAWN_STATE(rt, sem_waiter_poll, sem_waiter_drop, &w, NULL), 0);
        struct mutex_waiter mw = {0};
        mw.m = m;
        mw.index = 10 + i;
        mw.queued = &shut_queued;
        mw.dropped = &shut_dropped;
        cr_assert_eq(RT_SPAWN_STATE(rt, mutex_waiter_poll, mutex_waiter_drop, &mw, NULL), 0);
        struct notify_waiter nw = {0};
        nw.n = n;
        nw.index = 20 + i;
        nw.queued = &shut_queued;
        nw.dropped = &shut_dropped;
        cr_assert_eq(RT_SPAWN_STATE(rt, notify_waiter_poll, notify_waiter_drop, &nw, NULL), 0);
    }
    cr_assert(event_wait_for(&shut_queued, 3 * EACH), "only %lu of %d waiters queued",
              event_count(&shut_queued), 3 * EACH);
    finish_runtime(rt, 3 * EACH);
    cr_assert_eq(event_count(&shut_dropped), 3 * EACH);
    cr_assert_eq(atomic_load(&rank_next), 0, "a waiter was served");
    /* Nothing is left queued on any of them. */
    cr_assert_eq(rt_semaphore_available(sem), 1);
    cr_assert_eq(rt_semaphore_release(sem, 1), 0);
    cr_assert_eq(rt_semaphore_available(sem), 2, "a release went to a cancelled waiter");
    rt_mutex_unlock(m);
    cr_assert_eq(rt_mutex_try_lock(m), 0, "the lock went to a cancelled waiter");
    rt_mutex_unlock(m);
    rt_notify_one(n);
    rt_context cx = noop_context();
    rt_notified op;
    cr_assert_eq(rt_notified_init(&op, n), 0);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY, "notify_one went to a cancelled waiter");
    cr_assert_eq(op.result, 0);
    rt_semaphore_drop(sem);
    rt_mutex_drop(m);
    rt_notify_drop(n);
}
