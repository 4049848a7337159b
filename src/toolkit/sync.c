/* Semaphore, mutex and notify: FIFO wait queues under a spinlock.
 *
 * Every field of a primitive and the state of every node queued on it is
 * read and written under the primitive's spinlock (the CAS taking it is the
 * acquire, the store releasing it the release), so the protocols here are
 * ordinary critical sections. Wakers are taken out of served nodes under
 * the lock and woken after it is released: a wake may take other locks
 * (a task's state word, the injector) and must not nest inside ours. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <asyncrt/diag.h>
#include <asyncrt/sync.h>
#include <asyncrt/task.h>

#include "operation.h"
#include "atomic.h"
#include "common.h"
#include "sync_internal.h"
#include "fault.h"
#include "budget.h"
#include "waitq.h"
#include "waker.h"

/* ---- Semaphore -------------------------------------------------------------*/

/* A semaphore's fields at its start: `permits` free, nobody waiting, one
 * reference. */
static void semaphore_start(rt_semaphore *sem, size_t permits)
{
    memset(sem, 0, sizeof(*sem));
    sem->permits = permits;
    sem->refs = 1;
}

/* ---- Reference counts -------------------------------------------------------
 *
 * Every primitive starts with refs 1, its creator's. Each *_drop is an
 * atomic decrement, a full barrier: whatever a holder did with the
 * primitive happens before its decrement, and the holder whose decrement
 * takes the count to 0 frees it after seeing every other decrement, so no
 * use of another holder comes after the free. A *_clone needs no ordering
 * (a relaxed increment would do; the RMW is the one the atomics layer has):
 * its caller holds a reference already, so the count cannot reach 0 under
 * it. */

static void refs_take(uint32_t *refs)
{
    rt__faa_u32(refs, 1);
}

/* Gives one back: true when it was the last one (the caller frees). */
static bool refs_give(uint32_t *refs)
{
    return rt__faa_u32(refs, (uint32_t)-1) == 1;
}

RT_EXPORT int rt_semaphore_new(size_t permits, rt_semaphore **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (permits > RT_SEMAPHORE_MAX)
        return -EINVAL;
    rt_semaphore *sem = rt__malloc(sizeof(*sem));
    if (sem == NULL)
        return -ENOMEM;
    semaphore_start(sem, permits);
    *out = sem;
    return 0;
}

RT_EXPORT rt_semaphore *rt_semaphore_clone(rt_semaphore *sem)
{
    if (sem != NULL)
        refs_take(&sem->refs);
    return sem;
}

RT_EXPORT void rt_semaphore_drop(rt_semaphore *sem)
{
    if (sem != NULL && refs_give(&sem->refs)) {
        free(sem);
    }
}

/* Serves queued waiters in FIFO order while the head's request fits: the
 * head is never overtaken, so a large request is not starved by small ones.
 * Under the lock. Returns false when `wakes` filled up before the queue
 * was served (the caller wakes them, retakes the lock and calls again). */
static bool sem_grant(rt_semaphore *sem, rt__wake_list *wakes)
{
    while (sem->head != NULL && sem->permits >= sem->head->want) {
        if (wakes->n == RT__WAKE_LIST_MAX)
            return false;
        rt_waitnode *n = rt__waitq_pop(&sem->head, &sem->tail);
        sem->permits -= n->want;
        sem->granted += n->want;
        n->state = RT__WAIT_GRANTED;
        rt__wake_list_take(wakes, n);
    }
    return true;
}

/* Releases the lock after serving whoever the permits now reach. */
static void sem_grant_and_unlock(rt_semaphore *sem)
{
    rt__wake_list wakes = {0};
    while (!sem_grant(sem, &wakes)) {
        rt__waitq_unlock(&sem->lock);
        rt__wake_list_wake(&wakes);
        rt__waitq_lock(&sem->lock);
    }
    rt__waitq_unlock(&sem->lock);
    rt__wake_list_wake(&wakes);
}

RT_EXPORT int rt_semaphore_release(rt_semaphore *sem, size_t n)
{
    if (sem == NULL)
        return -EINVAL;
    rt__waitq_lock(&sem->lock);
    /* Permits granted but not collected come back if their waiter drops:
     * they count toward the maximum too. */
    if (n > RT_SEMAPHORE_MAX - sem->permits - sem->granted) {
        rt__waitq_unlock(&sem->lock);
        return -EINVAL;
    }
    sem->permits += n;
    sem_grant_and_unlock(sem);
    return 0;
}

RT_EXPORT int rt_semaphore_try_acquire(rt_semaphore *sem, size_t n)
{
    if (sem == NULL || n == 0 || n > RT_SEMAPHORE_MAX)
        return -EINVAL;
    int err = -EAGAIN;
    rt__waitq_lock(&sem->lock);
    if (sem->head == NULL && sem->permits >= n) {
        sem->permits -= n;
        err = 0;
    }
    rt__waitq_unlock(&sem->lock);
    return err;
}

RT_EXPORT size_t rt_semaphore_available(rt_semaphore *sem)
{
    if (sem == NULL)
        return 0;
    rt__waitq_lock(&sem->lock);
    size_t n = sem->permits;
    rt__waitq_unlock(&sem->lock);
    return n;
}

static rt_poll sem_acquire_vpoll(rt_future *f, rt_context *cx);
static void sem_acquire_vdrop(rt_future *f);
static void sem_acquire_vdescribe(const rt_future *f, rt_wait_info *info);
static const rt_future_vtable sem_acquire_vtable = {sem_acquire_vpoll, sem_acquire_vdrop,
                                                    sem_acquire_vdescribe};

/* The guard of an acquisition awaited with RT_AWAIT_HOLD. */
static void sem_guard_release(rt_guard *g)
{
    rt_semaphore_acquire *op =
        (rt_semaphore_acquire *)((char *)g - offsetof(rt_semaphore_acquire, guard));
    rt_semaphore *sem = op->held;
    op->held = NULL;
    if (sem != NULL)
        rt_semaphore_release(sem, op->node.want);
}

RT_EXPORT int rt_semaphore_acquire_init(rt_semaphore_acquire *op, rt_semaphore *sem, size_t n)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &sem_acquire_vtable;
    op->guard.release = sem_guard_release;
    op->node.waker = rt__waker_noop();
    if (sem == NULL || n == 0 || n > RT_SEMAPHORE_MAX) {
        rt__future_finish(&op->future, -EINVAL);
        return -EINVAL;
    }
    op->sem = sem;
    op->node.want = n;
    op->node.waker = rt__waker_noop();
    op->node.state = RT__WAIT_IDLE;
    return 0;
}

static rt_poll sem_acquire_vpoll(rt_future *f, rt_context *cx)
{
    rt_semaphore_acquire *op = (rt_semaphore_acquire *)f;
    rt_semaphore *sem = op->sem;
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    rt_waker old = rt__waker_noop();
    rt_poll r = RT_PENDING;
    rt__waitq_lock(&sem->lock);
    switch (op->node.state) {
    case RT__WAIT_GRANTED:
        old = op->node.waker;
        op->node.waker = rt__waker_noop();
        sem->granted -= op->node.want; /* collected: the caller's now */
        r = RT_READY;
        break;
    case RT__WAIT_QUEUED:
        old = rt__waker_store(&op->node.waker, rt_context_waker(cx));
        break;
    default: /* IDLE: take the permits now unless someone is queued first */
        if (sem->head == NULL && sem->permits >= op->node.want) {
            sem->permits -= op->node.want;
            r = RT_READY;
        } else {
            op->node.waker = rt_waker_clone(rt_context_waker(cx));
            op->node.state = RT__WAIT_QUEUED;
            rt__waitq_push(&sem->head, &sem->tail, &op->node);
        }
        break;
    }
    if (r == RT_READY)
        op->node.state = RT__WAIT_DONE;
    rt__waitq_unlock(&sem->lock);
    rt__waker_drop(&old);
    if (r == RT_PENDING) {
        rt__coop_refund(); /* only completed operations spend budget */
        return r;
    }
    op->sem = NULL;
    op->held = sem;
    return rt__future_finish(f, 0);
}

static void sem_acquire_vdrop(rt_future *f)
{
    rt_semaphore_acquire *op = (rt_semaphore_acquire *)f;
    rt_semaphore *sem = op->sem;
    if (sem == NULL)
        return;
    op->sem = NULL;
    rt__waitq_lock(&sem->lock);
    rt_waker old = op->node.waker;
    op->node.waker = rt__waker_noop();
    switch (op->node.state) {
    case RT__WAIT_QUEUED:
        /* Leaving from the head may let the next waiters through. */
        rt__waitq_remove(&sem->head, &sem->tail, &op->node);
        break;
    case RT__WAIT_GRANTED:
        /* Served but never told: the permits go back (to the next waiter). */
        sem->granted -= op->node.want;
        sem->permits += op->node.want;
        break;
    default:
        break;
    }
    op->node.state = RT__WAIT_DONE;
    sem_grant_and_unlock(sem);
    rt__waker_drop(&old);
}

/* The number asked for is the operation's own (node.want, set at init and
 * only read by the semaphore); the node's state and the semaphore's counts
 * are the lock's and left out. */
static void sem_acquire_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_semaphore_acquire *op = (const rt_semaphore_acquire *)f;
    info->kind = RT_WAIT_ACQUIRE;
    info->object = op->sem;
    rt__wait_printf(info, "acquire %zu permit%s of semaphore %p", op->node.want,
                    op->node.want == 1 ? "" : "s", (const void *)op->sem);
}

RT_EXPORT int rt_semaphore_acquire_wait(rt_semaphore *sem, size_t n, int64_t timeout_ns)
{
    rt_semaphore_acquire op;
    int err = rt_semaphore_acquire_init(&op, sem, n);
    if (err < 0)
        return err;
    err = rt__block_on_future(&op.future, timeout_ns);
    /* On a timeout (or an error) the wait is abandoned; permits granted in
     * the meantime go back. */
    RT_DROP(&op);
    return err < 0 ? err : (int)op.result;
}

/* ---- Mutex -----------------------------------------------------------------*/

RT_EXPORT int rt_mutex_new(rt_mutex **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    rt_mutex *m = rt__malloc(sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    semaphore_start(&m->sem, 1);
    *out = m;
    return 0;
}

RT_EXPORT rt_mutex *rt_mutex_clone(rt_mutex *m)
{
    if (m != NULL)
        refs_take(&m->sem.refs);
    return m;
}

RT_EXPORT void rt_mutex_drop(rt_mutex *m)
{
    if (m != NULL && refs_give(&m->sem.refs))
        free(m);
}

RT_EXPORT int rt_mutex_try_lock(rt_mutex *m)
{
    if (m == NULL)
        return -EINVAL;
    return rt_semaphore_try_acquire(&m->sem, 1) == 0 ? 0 : -EBUSY;
}

RT_EXPORT void rt_mutex_unlock(rt_mutex *m)
{
    if (m == NULL)
        return;
    /* The permit goes straight to the oldest waiter: no barging. */
    rt_semaphore_release(&m->sem, 1);
}

/* A lock is an acquisition of the one permit; the outer header mirrors the
 * inner one's outcome. */
static rt_poll mutex_lock_vpoll(rt_future *f, rt_context *cx)
{
    rt_mutex_lock *op = (rt_mutex_lock *)f;
    if (sem_acquire_vpoll(&op->acquire.future, cx) == RT_PENDING)
        return RT_PENDING;
    op->held = (rt_mutex *)op->acquire.held;
    op->acquire.held = NULL;
    return rt__future_finish(f, 0);
}

static void mutex_lock_vdrop(rt_future *f)
{
    RT_DROP(&((rt_mutex_lock *)f)->acquire);
}

/* The mutex is the semaphore the inner acquisition waits on (its first
 * member). */
static void mutex_lock_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_mutex_lock *op = (const rt_mutex_lock *)f;
    info->kind = RT_WAIT_LOCK;
    info->object = op->acquire.sem;
    rt__wait_printf(info, "lock of mutex %p", (const void *)op->acquire.sem);
}

static const rt_future_vtable mutex_lock_vtable = {mutex_lock_vpoll, mutex_lock_vdrop,
                                                   mutex_lock_vdescribe};

static void mutex_guard_release(rt_guard *g)
{
    rt_mutex_lock *op = (rt_mutex_lock *)((char *)g - offsetof(rt_mutex_lock, guard));
    rt_mutex *m = op->held;
    op->held = NULL;
    rt_mutex_unlock(m);
}

RT_EXPORT int rt_mutex_lock_init(rt_mutex_lock *op, rt_mutex *m)
{
    if (op == NULL)
        return -EINVAL;
    int err = rt_semaphore_acquire_init(&op->acquire, m == NULL ? NULL : &m->sem, 1);
    op->future.vtable = &mutex_lock_vtable;
    op->result = 0;
    op->guard.next = NULL;
    op->guard.release = mutex_guard_release;
    op->held = NULL;
    if (err < 0)
        rt__future_finish(&op->future, err);
    return err;
}

RT_EXPORT int rt_mutex_lock_wait(rt_mutex *m, int64_t timeout_ns)
{
    if (m == NULL)
        return -EINVAL;
    return rt_semaphore_acquire_wait(&m->sem, 1, timeout_ns);
}

/* ---- Notify ----------------------------------------------------------------*/

RT_EXPORT int rt_notify_new(rt_notify **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    rt_notify *n = rt__malloc(sizeof(*n));
    if (n == NULL)
        return -ENOMEM;
    memset(n, 0, sizeof(*n));
    n->refs = 1;
    *out = n;
    return 0;
}

RT_EXPORT rt_notify *rt_notify_clone(rt_notify *n)
{
    if (n != NULL)
        refs_take(&n->refs);
    return n;
}

RT_EXPORT void rt_notify_drop(rt_notify *n)
{
    if (n != NULL && refs_give(&n->refs)) {
        free(n);
    }
}

/* Serves the oldest waiter, or stores the permit. Under the lock; the
 * waiter's waker goes to *wake (no-op when none). */
static void notify_one_locked(rt_notify *n, rt_waker *wake)
{
    rt_waitnode *w = rt__waitq_pop(&n->head, &n->tail);
    if (w == NULL) {
        n->permit = 1;
        return;
    }
    w->state = RT__WAIT_GRANTED;
    *wake = w->waker;
    w->waker = rt__waker_noop();
}

RT_EXPORT void rt_notify_one(rt_notify *n)
{
    if (rt__unlikely(n == NULL))
        return;
    rt_waker wake = rt__waker_noop();
    rt__waitq_lock(&n->lock);
    notify_one_locked(n, &wake);
    rt__waitq_unlock(&n->lock);
    rt__waker_wake(&wake);
}

RT_EXPORT void rt_notify_all(rt_notify *n)
{
    if (rt__unlikely(n == NULL))
        return;
    rt__wake_list wakes = {0};
    rt__waitq_lock(&n->lock);
    /* Waiters initialised before now but not queued yet see the new
     * generation at their next poll. The store is atomic because init reads
     * the generation without the lock; the lock orders everything else. */
    uint64_t gen = n->generation + 1;
    rt__store_release_u64(&n->generation, gen);
    /* Each queued node carries the generation its wait was initialised in
     * (node.want). Those queued before this call all precede, in FIFO
     * order, any queued after it (a wait initialised before but first
     * polled after sees the new generation and never queues), so serving
     * stops at the first node of the new generation. The wakers are woken
     * in rounds, outside the lock. */
    for (;;) {
        while (n->head != NULL && n->head->want < gen && wakes.n < RT__WAKE_LIST_MAX) {
            rt_waitnode *w = rt__waitq_pop(&n->head, &n->tail);
            w->state = RT__WAIT_GRANTED_ALL;
            rt__wake_list_take(&wakes, w);
        }
        if (n->head == NULL || n->head->want >= gen)
            break;
        rt__waitq_unlock(&n->lock);
        rt__wake_list_wake(&wakes);
        rt__waitq_lock(&n->lock);
    }
    rt__waitq_unlock(&n->lock);
    rt__wake_list_wake(&wakes);
}

static rt_poll notified_vpoll(rt_future *f, rt_context *cx);
static void notified_vdrop(rt_future *f);
static void notified_vdescribe(const rt_future *f, rt_wait_info *info);
static const rt_future_vtable notified_vtable = {notified_vpoll, notified_vdrop,
                                                 notified_vdescribe};

RT_EXPORT int rt_notified_init(rt_notified *op, rt_notify *n)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &notified_vtable;
    op->node.waker = rt__waker_noop();
    if (n == NULL) {
        rt__future_finish(&op->future, -EINVAL);
        return -EINVAL;
    }
    op->notify = n;
    /* Acquire pairs with rt_notify_all's release: a notify_all that
     * happened before this init is not counted against us. */
    op->generation = rt__load_acquire_u64(&n->generation);
    op->node.want = (size_t)op->generation;
    op->node.waker = rt__waker_noop();
    op->node.state = RT__WAIT_IDLE;
    return 0;
}

static rt_poll notified_vpoll(rt_future *f, rt_context *cx)
{
    rt_notified *op = (rt_notified *)f;
    rt_notify *n = op->notify;
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    rt_waker old = rt__waker_noop();
    rt_poll r = RT_PENDING;
    rt__waitq_lock(&n->lock);
    switch (op->node.state) {
    case RT__WAIT_GRANTED:
    case RT__WAIT_GRANTED_ALL:
        old = op->node.waker;
        op->node.waker = rt__waker_noop();
        r = RT_READY;
        break;
    case RT__WAIT_QUEUED:
        old = rt__waker_store(&op->node.waker, rt_context_waker(cx));
        break;
    default:
        if (n->generation != op->generation) {
            r = RT_READY;
        } else if (n->permit) {
            n->permit = 0;
            r = RT_READY;
        } else {
            op->node.waker = rt_waker_clone(rt_context_waker(cx));
            op->node.state = RT__WAIT_QUEUED;
            rt__waitq_push(&n->head, &n->tail, &op->node);
        }
        break;
    }
    if (r == RT_READY)
        op->node.state = RT__WAIT_DONE;
    rt__waitq_unlock(&n->lock);
    rt__waker_drop(&old);
    if (r == RT_PENDING) {
        rt__coop_refund();
        return r;
    }
    op->notify = NULL;
    return rt__future_finish(f, 0);
}

static void notified_vdrop(rt_future *f)
{
    rt_notified *op = (rt_notified *)f;
    rt_notify *n = op->notify;
    if (n == NULL)
        return;
    op->notify = NULL;
    rt_waker wake = rt__waker_noop();
    rt__waitq_lock(&n->lock);
    rt_waker old = op->node.waker;
    op->node.waker = rt__waker_noop();
    if (op->node.state == RT__WAIT_QUEUED)
        rt__waitq_remove(&n->head, &n->tail, &op->node);
    else if (op->node.state == RT__WAIT_GRANTED)
        notify_one_locked(n, &wake); /* a notify_one chose us: pass it on */
    op->node.state = RT__WAIT_DONE;
    rt__waitq_unlock(&n->lock);
    rt__waker_drop(&old);
    rt__waker_wake(&wake);
}

/* Only the address: the permit, the generation and the queue are the
 * lock's. */
static void notified_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_notified *op = (const rt_notified *)f;
    info->kind = RT_WAIT_NOTIFIED;
    info->object = op->notify;
    rt__wait_printf(info, "notification of notify %p", (const void *)op->notify);
}
