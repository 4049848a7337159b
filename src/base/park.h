/* Putting a thread to sleep until another thread wakes it: a futex word per
 * sleeper. Used by idle workers and by foreign threads blocked in
 * rt_task_wait / rt_block_on. */
#ifndef RT_SRC_PARK_H
#define RT_SRC_PARK_H

#include <stdbool.h>
#include <stdint.h>

#include <asyncrt/future.h>

#include "clock.h"

/* A one-sleeper parker. State word:
 *
 *            park()                 unpark()
 *   EMPTY ───────────► PARKED ───────────────► NOTIFIED
 *     ▲  \                                        │
 *     │   └──────────── unpark() ────────────────►│
 *     └────────── park() consumes the token ◄─────┘
 *
 * An unpark that comes before the park is not lost: it leaves NOTIFIED and the
 * next park returns at once. */
typedef struct rt__parker {
    uint32_t state; /* RT__PARK_EMPTY / PARKED / NOTIFIED */
} rt__parker;

enum { RT__PARK_EMPTY = 0, RT__PARK_PARKED = 1, RT__PARK_NOTIFIED = 2 };

void rt__parker_init(rt__parker *p);

/* Sleeps until unparked or `timeout_ns` passes (< 0: no limit). Returns true
 * when it consumed an unpark, false on timeout. Only the owning thread. */
bool rt__parker_park(rt__parker *p, int64_t timeout_ns);

/* Wakes the owner, now or at its next park. Any thread. */
void rt__parker_unpark(rt__parker *p);

/* A waker that unparks a foreign thread: the thread blocking in rt_task_wait
 * stores it as a task's join waker. Heap-allocated and reference counted,
 * because the task may drop its clone after the waiting thread has returned. */
typedef struct rt__thread_waker rt__thread_waker;

/* Returns NULL when out of memory. The caller holds one reference. */
rt__thread_waker *rt__thread_waker_new(void);
/* A waker value holding a new reference. */
rt_waker rt__thread_waker_get(rt__thread_waker *tw);
/* Gives up the creator's reference. */
void rt__thread_waker_release(rt__thread_waker *tw);

/* Blocks the calling thread (the owner of tw) on a poll-style operation:
 * calls poll(arg, cx) with a context whose waker unparks it, parking between
 * calls, until it returns RT_READY (0) or timeout_ns passes (-ETIMEDOUT;
 * < 0: no limit). Whoever still holds a clone of the waker afterwards keeps
 * the thread waker alive. Used by rt_task_wait, rt_block_on and every
 * *_blocking form. */
int rt__thread_waker_block(rt__thread_waker *tw, rt_poll (*poll)(void *arg, rt_context *cx),
                           void *arg, int64_t timeout_ns);

#endif
