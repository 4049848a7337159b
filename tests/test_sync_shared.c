/* Black-box tests of the reference-counted primitives (asyncrt/sync.h:
 * rt_mutex_new, rt_semaphore_new, rt_notify_new and their clone and drop): a
 * primitive shared by the tasks a thread spawned outlives its creator and is
 * freed by whichever holder lets go last, whether the holders finish, are
 * aborted while they wait, or are cancelled by shutdown in any order. A
 * premature free shows up as a use after free and a missing one as a leak
 * in the ASan build. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(sync, .timeout = 120, .fini = fail_on_leaks);

/* ---- a shared mutex ------------------------------------------------------------ */

#define SHARED_TASKS 32
#define SHARED_ROUNDS 200

/* Guarded by the shared mutex: a lost update means two holders at once. */
static long shared_counter;

struct locker {
    rt_mutex *m; /* a reference of its own */
    int rounds;  /* left to do */
    int armed;   /* op is initialised */
    int holding; /* holds the lock */
    rt_mutex_lock op;
};

static rt_poll locker_poll(void *state, rt_context *cx, void **out)
{
    struct locker *l = state;
    while (l->rounds > 0) {
        if (!l->holding) {
            if (!l->armed) {
                cr_assert_eq(rt_mutex_lock_init(&l->op, l->m), 0);
                l->armed = 1;
            }
            if (RT_POLL_OP(&l->op, cx) == RT_PENDING)
                return RT_PENDING;
            cr_assert_eq(l->op.result, 0, "lock: %s", rt_strerror((int)l->op.result));
            RT_DROP(&l->op); /* after RT_READY: the lock stays held */
            l->armed = 0;
            l->holding = 1;
        }
        long v = shared_counter;
        if (l->rounds % 7 == 0) {
            /* Now and then, unlock and yield: the others get their turn. */
            l->rounds--;
            shared_counter = v + 1;
            rt_waker_wake_by_ref(rt_context_waker(cx));
            rt_mutex_unlock(l->m);
            l->holding = 0;
            return RT_PENDING;
        }
        shared_counter = v + 1;
        l->rounds--;
        rt_mutex_unlock(l->m);
        l->holding = 0;
    }
    *out = NULL;
    return RT_READY;
}

static void locker_drop(void *state)
{
    struct locker *l = state;
    RT_DROP(&l->op);
    if (l->holding)
        rt_mutex_unlock(l->m);
    rt_mutex_drop(l->m); /* after its operation: maybe the last reference */
}

Test(sync, a_shared_mutex_outlives_its_creator_and_the_last_holder_frees_it)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex *m = NULL;
    cr_assert_eq(rt_mutex_new(&m), 0);
    rt_task *h[SHARED_TASKS];
    for (int i = 0; i < SHARED_TASKS; i++) {
        struct locker l;
        memset(&l, 0, sizeof l);
        l.m = rt_mutex_clone(m);
        l.rounds = SHARED_ROUNDS;
        cr_assert_eq(l.m, m);
        cr_assert_eq(rt_spawn(rt, locker_poll, locker_drop, &l, sizeof l, &h[i]), 0);
    }
    rt_mutex_drop(m); /* the creator lets go first */
    for (int i = 0; i < SHARED_TASKS; i++)
        cr_assert_eq(task_wait_status(h[i], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(shared_counter, (long)SHARED_TASKS * SHARED_ROUNDS, "lost updates: %ld",
                 shared_counter);
    finish_runtime(rt, 0);
}

/* ---- holders aborted or cancelled while they wait ------------------------------- */

enum wait_kind { WAIT_SEMAPHORE, WAIT_NOTIFY };

struct waiter {
    enum wait_kind kind;
    rt_semaphore *sem;
    rt_notify *n;
    rt_semaphore_acquire acquire;
    rt_notified notified;
    int started;
};

static struct event waiter_waiting = EVENT_INIT;
static struct event waiter_dropped = EVENT_INIT;

static rt_poll waiter_poll(void *state, rt_context *cx, void **out)
{
    struct waiter *w = state;
    if (!w->started) {
        w->started = 1;
        if (w->kind == WAIT_SEMAPHORE)
            cr_assert_eq(rt_semaphore_acquire_init(&w->acquire, w->sem, 1), 0);
        else
            cr_assert_eq(rt_notified_init(&w->notified, w->n), 0);
    }
    rt_poll r =
        w->kind == WAIT_SEMAPHORE ? RT_POLL_OP(&w->acquire, cx) : RT_POLL_OP(&w->notified, cx);
    if (r == RT_PENDING) {
        event_signal(&waiter_waiting);
        return RT_PENDING;
    }
    *out = NULL;
    return RT_READY; /* not expected: nobody releases or notifies */
}

static void waiter_drop(void *state)
{
    struct waiter *w = state;
    RT_DROP(&w->acquire);
    RT_DROP(&w->notified);
    rt_semaphore_drop(w->sem);
    rt_notify_drop(w->n);
    event_signal(&waiter_dropped);
}

#define WAITERS 24

/* Spawns WAITERS tasks waiting on a shared semaphore without permits or on
 * a shared notify, half each, every one holding a reference to both; the
 * creator's references are given back before the tasks end. */
static void spawn_waiters(rt_runtime *rt, rt_task **h)
{
    rt_semaphore *sem = NULL;
    rt_notify *n = NULL;
    cr_assert_eq(rt_semaphore_new(0, &sem), 0);
    cr_assert_eq(rt_notify_new(&n), 0);
    for (int i = 0; i < WAITERS; i++) {
        struct waiter w;
        memset(&w, 0, sizeof w);
        w.kind = i % 2 == 0 ? WAIT_SEMAPHORE : WAIT_NOTIFY;
        w.sem = rt_semaphore_clone(sem);
        w.n = rt_notify_clone(n);
        cr_assert_eq(rt_spawn(rt, waiter_poll, waiter_drop, &w, sizeof w, h ? &h[i] : NULL), 0);
    }
    cr_assert(event_wait_for(&waiter_waiting, WAITERS));
    rt_semaphore_drop(sem);
    rt_notify_drop(n);
}

Test(sync, holders_aborted_while_they_wait_free_the_shared_primitives_once)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *h[WAITERS];
    spawn_waiters(rt, h);
    /* Aborted in an order unrelated to their spawn: the drops release the
     * references in that order, and the last frees both primitives. */
    for (int i = 0; i < WAITERS; i++)
        rt_task_cancel(h[(i * 7) % WAITERS]);
    for (int i = 0; i < WAITERS; i++)
        cr_assert_eq(task_wait_status(h[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(event_count(&waiter_dropped), WAITERS);
    finish_runtime(rt, 0);
}

Test(sync, shutdown_cancelling_every_holder_frees_the_shared_primitives_once)
{
    rt_runtime *rt = new_runtime(2);
    spawn_waiters(rt, NULL);
    finish_runtime(rt, WAITERS);
    cr_assert_eq(event_count(&waiter_dropped), WAITERS);
}

/* ---- edges ----------------------------------------------------------------------- */

Test(sync, clone_and_drop_edges)
{
    cr_assert_eq(rt_mutex_new(NULL), -EINVAL);
    cr_assert_eq(rt_notify_new(NULL), -EINVAL);
    cr_assert_eq(rt_semaphore_new(1, NULL), -EINVAL);
    rt_semaphore *sem = (rt_semaphore *)1;
    cr_assert_eq(rt_semaphore_new(RT_SEMAPHORE_MAX + 1, &sem), -EINVAL);
    cr_assert_null(sem);
    cr_assert_null(rt_mutex_clone(NULL));
    cr_assert_null(rt_semaphore_clone(NULL));
    cr_assert_null(rt_notify_clone(NULL));
    rt_mutex_drop(NULL);
    rt_semaphore_drop(NULL);
    rt_notify_drop(NULL);

    /* A clone is the same object, counted: the first drop leaves it. */
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_mutex_clone(m), m);
    rt_mutex_drop(m);
    cr_assert_eq(rt_mutex_try_lock(m), 0, "the clone's drop freed the mutex");
    rt_mutex_unlock(m);
    rt_mutex_drop(m);

    /* Its permits are its own, whoever holds the reference. */
    cr_assert_eq(rt_semaphore_new(3, &sem), 0);
    cr_assert_eq(rt_semaphore_available(sem), 3);
    cr_assert_eq(rt_semaphore_try_acquire(rt_semaphore_clone(sem), 2), 0);
    rt_semaphore_drop(sem);
    cr_assert_eq(rt_semaphore_available(sem), 1, "the extra reference freed it early");
    rt_semaphore_drop(sem);
}
