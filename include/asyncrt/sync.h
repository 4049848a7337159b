/* asyncrt: semaphores, mutexes and notifications for tasks.
 *
 * The three are shared objects on the heap with a reference count, made by
 * their new function (rt_semaphore_new, rt_mutex_new, rt_notify_new) with
 * one reference, the caller's, as channels are. A task that hands one to
 * another task (or thread) gives it a reference of its own (*_clone), and
 * every holder gives its reference back (*_drop) after dropping its own
 * operations on it, from its drop function too: the last one frees the
 * object, so no holder needs to know which of them finishes last. The
 * count is atomic; the decrement is a full barrier, so every use by one
 * holder happens before the free by another. Since the last drop frees the
 * object, a drop beyond the count is a use after free, which
 * AddressSanitizer reports (the objects come from malloc). Waiting is done
 * with operations (see future.h): init, RT_POLL_OP until RT_READY, RT_DROP if
 * abandoned. A lock or an acquisition awaited with RT_AWAIT_HOLD in a
 * coroutine is given back by itself when the task ends or is dropped, by
 * the rt_coro_cleanup its drop function runs (see coro.h).
 *
 * All queues are FIFO: whoever started waiting first is served first, and a
 * newcomer never overtakes a queued waiter (no barging), so nobody starves.
 *
 * Threads: every function may be called from any thread, tasks and foreign
 * threads alike; one operation is polled by one task (or thread) at a time.
 * The *_wait functions block the calling thread and fail with -EDEADLK on a
 * worker thread, in a fiber too (a fiber awaits the operation instead, with
 * rt_fiber_await or rt_mutex_lock_await: fiber.h).
 *
 * Abort safety: dropping an operation that is still waiting removes it from
 * the queue, leaving no dangling waker; dropping one that was granted
 * permits (or a notification) it had not yet collected gives them back (or
 * passes the notification on), so nothing is leaked by an aborted waiter.
 * Never polled: an acquisition, a lock or a notification wait joins its
 * queue only at its first poll (rt_notified_init reads a count, which holds
 * nothing), so one initialised and never polled holds nothing and needs no
 * drop; dropping it or initialising it again is safe. An operation's drop
 * locks the primitive, so it comes before the caller's *_drop of it.
 * Every successful acquisition spends one unit of the cooperative budget
 * (rt_coop_proceed). */
#ifndef ASYNCRT_SYNC_H
#define ASYNCRT_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "coro.h"
#include "future.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A waiter's place in a wait queue. Private to the library: do not touch. */
typedef struct rt_waitnode {
    struct rt_waitnode *prev; /* toward the head (older), NULL at the head */
    struct rt_waitnode *next; /* toward the tail (newer), NULL at the tail */
    rt_waker waker;           /* woken when the waiter is served */
    size_t want;              /* what the waiter waits for (permits) */
    uint32_t state;           /* the operation's state (library's own) */
} rt_waitnode;

/* ---- Semaphore -------------------------------------------------------------*/

/* Counts permits. Opaque. */
typedef struct rt_semaphore rt_semaphore;

/* Largest number of permits a semaphore may hold or one acquisition ask. */
#define RT_SEMAPHORE_MAX ((size_t)1 << 48)

/* A semaphore on the heap with `permits` permits and one reference, the
 * caller's. Errors: -EINVAL (out NULL, permits > RT_SEMAPHORE_MAX), -ENOMEM.
 * Any thread. */
int rt_semaphore_new(size_t permits, rt_semaphore **out);

/* Takes one more reference and returns sem (NULL for NULL). Any thread
 * holding a reference. */
rt_semaphore *rt_semaphore_clone(rt_semaphore *sem);

/* Gives back one reference; the last one frees the semaphore, so the
 * caller must have dropped its operations on it first, and nobody may be
 * waiting on it. NULL is a no-op. Any thread. */
void rt_semaphore_drop(rt_semaphore *sem);

/* Adds n permits and hands them to queued waiters in FIFO order. Errors:
 * -EINVAL (sem NULL, or the count would exceed RT_SEMAPHORE_MAX: nothing is
 * added). */
int rt_semaphore_release(rt_semaphore *sem, size_t n);

/* Takes n permits if they are available and nobody is queued before the
 * caller. Returns 0 (the permits are the caller's), -EAGAIN (not now), or
 * -EINVAL (sem NULL, n 0 or > RT_SEMAPHORE_MAX). Never waits. */
int rt_semaphore_try_acquire(rt_semaphore *sem, size_t n);

/* Permits available right now (a snapshot; 0 for NULL). */
size_t rt_semaphore_available(rt_semaphore *sem);

/* One acquisition of permits: an operation (see future.h) that finishes
 * with result 0 once the n permits are the caller's (release them with
 * rt_semaphore_release, or with RT_RELEASE when awaited with RT_AWAIT_HOLD).
 * Waits in FIFO order: n permits are granted to the oldest waiter before
 * anyone behind it gets any. Dropped while waiting, it leaves the queue, or
 * passes on permits granted but not collected by a poll. Fields are private
 * but for the header's result and the guard. */
typedef struct rt_semaphore_acquire {
    RT_FUTURE_HEADER;
    rt_semaphore *sem;  /* NULL once finished or dropped */
    rt_waitnode node;   /* place in the queue, and the grant state */
    rt_guard guard;     /* gives the permits back (RT_AWAIT_HOLD) */
    rt_semaphore *held; /* the semaphore the guard gives back to */
} rt_semaphore_acquire;

/* Prepares to acquire n permits (1 <= n <= RT_SEMAPHORE_MAX). Errors:
 * -EINVAL (op or sem NULL, n out of range). */
int rt_semaphore_acquire_init(rt_semaphore_acquire *op, rt_semaphore *sem, size_t n);

/* Blocks the calling (foreign) thread until n permits are its own or
 * timeout_ns passes (< 0: no limit). Errors: -ETIMEDOUT (no permit taken),
 * -EDEADLK (a worker thread or a fiber: await rt_semaphore_acquire_init's
 * operation there), -EINVAL (sem NULL, n out of range), -ENOMEM. */
int rt_semaphore_acquire_wait(rt_semaphore *sem, size_t n, int64_t timeout_ns);

/* ---- Mutex -----------------------------------------------------------------*/

/* An async mutual-exclusion lock: a task waiting for it does not block its
 * worker. FIFO fair: rt_mutex_unlock hands the lock straight to the oldest
 * waiter. It is not tied to a thread (a task may move between workers while
 * holding it) and is not recursive. Opaque. */
typedef struct rt_mutex rt_mutex;

/* A mutex on the heap, unlocked, with one reference, the caller's. Errors:
 * -EINVAL (out NULL), -ENOMEM. Any thread. */
int rt_mutex_new(rt_mutex **out);

/* One more reference; returns m (NULL for NULL). Any thread holding a
 * reference. */
rt_mutex *rt_mutex_clone(rt_mutex *m);

/* Gives back one reference; the last one frees the mutex (unlocked, with
 * every operation on it dropped). NULL is a no-op. Any thread. */
void rt_mutex_drop(rt_mutex *m);

/* Takes the lock if it is free and nobody waits for it: 0, or -EBUSY;
 * -EINVAL for m NULL. */
int rt_mutex_try_lock(rt_mutex *m);

/* Releases the lock (held by the caller's task or thread), handing it to
 * the oldest waiter if there is one. NULL is a no-op. */
void rt_mutex_unlock(rt_mutex *m);

/* One wait for the lock: an operation (see future.h) that finishes with
 * result 0 once the caller holds the lock, held until rt_mutex_unlock (or
 * RT_RELEASE, when awaited with RT_AWAIT_HOLD). Dropped while waiting, it
 * leaves the queue, or passes a lock handed over but not collected to the
 * next waiter (or releases it). Fields are private but for the header's
 * result and the guard. */
typedef struct rt_mutex_lock {
    RT_FUTURE_HEADER;
    rt_semaphore_acquire acquire; /* the one permit */
    rt_guard guard;               /* unlocks (RT_AWAIT_HOLD) */
    rt_mutex *held;               /* the mutex the guard unlocks */
} rt_mutex_lock;

/* Prepares to lock m. Errors: -EINVAL (op or m NULL). */
int rt_mutex_lock_init(rt_mutex_lock *op, rt_mutex *m);

/* Blocks the calling (foreign) thread until it holds the lock or timeout_ns
 * passes (< 0: no limit). Errors: -ETIMEDOUT, -EDEADLK (a worker thread or
 * a fiber: rt_mutex_lock_await there), -EINVAL (m NULL), -ENOMEM. */
int rt_mutex_lock_wait(rt_mutex *m, int64_t timeout_ns);

/* ---- Notify ----------------------------------------------------------------*/

/* Wakes waiting tasks: one at a time (rt_notify_one, which keeps one permit
 * when nobody waits, so a notification sent just before the wait begins is
 * not lost), or all those waiting (rt_notify_all). Opaque. */
typedef struct rt_notify rt_notify;

/* A notify on the heap, with no permit and one reference, the caller's.
 * Errors: -EINVAL (out NULL), -ENOMEM. Any thread. */
int rt_notify_new(rt_notify **out);

/* One more reference; returns n (NULL for NULL). Any thread holding a
 * reference. */
rt_notify *rt_notify_clone(rt_notify *n);

/* Gives back one reference; the last one frees the notify (every wait on it
 * dropped). NULL is a no-op. Any thread. */
void rt_notify_drop(rt_notify *n);

/* Wakes the oldest waiter; when nobody waits, stores the permit (at most one:
 * repeated calls do not add up) that the next wait consumes at once. NULL is
 * a no-op. */
void rt_notify_one(rt_notify *n);

/* Wakes every waiter whose rt_notified was initialised before this call,
 * polled yet or not, so "init the wait, check the condition, await" never
 * misses a notification. Stores no permit. NULL is a no-op. */
void rt_notify_all(rt_notify *n);

/* One wait for a notification: an operation (see future.h) that finishes
 * with result 0 once notified (by notify_one, a stored permit, or a
 * notify_all since the init). Dropped while waiting, it leaves the queue; a
 * notify_one that chose it but was not collected by a poll is passed on to
 * the next waiter (or kept as the permit), so it is never lost. Fields are
 * private but for the header's result. */
typedef struct rt_notified {
    RT_FUTURE_HEADER;
    rt_notify *notify;   /* NULL once finished or dropped */
    uint64_t generation; /* rt_notify_all calls seen at init */
    rt_waitnode node;    /* place in the queue, and the state */
} rt_notified;

/* Prepares a wait on n; from here on an rt_notify_all wakes it. Errors:
 * -EINVAL (op or n NULL). */
int rt_notified_init(rt_notified *op, rt_notify *n);

#ifdef __cplusplus
}
#endif
#endif
