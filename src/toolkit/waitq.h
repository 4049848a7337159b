/* Wait queues for the synchronization primitives and channels: an intrusive
 * FIFO of rt_waitnode (the node lives in the waiting operation, at a stable
 * address), always touched under its primitive's spinlock, and a small list
 * of wakers collected under the lock and woken after it is released (a wake
 * may run user code or take other locks). Internal, not installed. */
#ifndef RT_SRC_WAITQ_H
#define RT_SRC_WAITQ_H

#include <stddef.h>
#include <stdint.h>

#include <asyncrt/sync.h>

#include "spinlock.h"
#include "waker.h"

/* The states of an rt_waitnode, changed only under the primitive's lock:
 *
 *   IDLE ──first pending poll──► QUEUED ──served──► GRANTED ──poll──► DONE
 *     │                            │                   │
 *     └──ready at once──► DONE     └──closed──► CLOSED └──drop: give back
 *
 * IDLE: not in a queue (initialised, or never waited). QUEUED: linked, its
 * waker stored. GRANTED: taken off the queue and served (permits assigned, a
 * notification or a send accepted); the next poll reports it. GRANTED_ALL is
 * the notify_all flavour, which a drop need not pass on. CLOSED: taken off
 * the queue because the channel closed. DONE: reported to the caller. */
enum {
    RT__WAIT_IDLE = 0,
    RT__WAIT_QUEUED,
    RT__WAIT_GRANTED,
    RT__WAIT_GRANTED_ALL,
    RT__WAIT_CLOSED,
    RT__WAIT_DONE,
};

/* The primitives keep their lock as a bare word in the public struct. */
static inline void rt__waitq_lock(uint32_t *word)
{
    rt__spin_lock((rt__spinlock *)word);
}

static inline void rt__waitq_unlock(uint32_t *word)
{
    rt__spin_unlock((rt__spinlock *)word);
}

static inline void rt__waitq_push(rt_waitnode **head, rt_waitnode **tail, rt_waitnode *n)
{
    n->next = NULL;
    n->prev = *tail;
    if (*tail != NULL)
        (*tail)->next = n;
    else
        *head = n;
    *tail = n;
}

static inline void rt__waitq_remove(rt_waitnode **head, rt_waitnode **tail, rt_waitnode *n)
{
    if (n->prev != NULL)
        n->prev->next = n->next;
    else
        *head = n->next;
    if (n->next != NULL)
        n->next->prev = n->prev;
    else
        *tail = n->prev;
    n->prev = n->next = NULL;
}

static inline rt_waitnode *rt__waitq_pop(rt_waitnode **head, rt_waitnode **tail)
{
    rt_waitnode *n = *head;
    if (n != NULL)
        rt__waitq_remove(head, tail, n);
    return n;
}

/* Wakers taken out of served nodes, to wake once the lock is released. */
#define RT__WAKE_LIST_MAX 32
typedef struct rt__wake_list {
    unsigned n;
    rt_waker wakers[RT__WAKE_LIST_MAX];
} rt__wake_list;

/* Moves the node's waker into the list (the node keeps the no-op waker).
 * Returns false when the list is full: release the lock, wake, and go on. */
static inline bool rt__wake_list_take(rt__wake_list *l, rt_waitnode *n)
{
    if (l->n == RT__WAKE_LIST_MAX)
        return false;
    l->wakers[l->n++] = n->waker;
    n->waker = rt__waker_noop();
    return true;
}

static inline void rt__wake_list_wake(rt__wake_list *l)
{
    for (unsigned i = 0; i < l->n; i++)
        rt__waker_wake(&l->wakers[i]);
    l->n = 0;
}

/* Blocks the calling thread, which must not be a worker, on a poll-style
 * function: polls `poll(arg, cx)` with a waker that unparks this thread
 * until it returns RT_READY or timeout_ns passes (< 0: no limit).
 * Returns 0 (ready), -ETIMEDOUT, -EDEADLK (a worker thread) or -ENOMEM.
 * On -ETIMEDOUT the caller drops its operation. */
int rt__block_on_poll(rt_poll (*poll)(void *arg, rt_context *cx), void *arg, int64_t timeout_ns);

/* rt__block_on_poll for an operation: 0 once it finished (its outcome in
 * f->result), or an error of the wait itself as above (the caller then
 * drops it). */
int rt__block_on_future(rt_future *f, int64_t timeout_ns);

#endif
