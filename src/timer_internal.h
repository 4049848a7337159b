/* A timer handed from a future to the reactor. Internal, not installed.
 *
 * Heap-allocated and reference counted, because the future that owns it may
 * be dropped (a task aborted) while the reactor still has the timer filed in
 * its wheel or queued as a command: references are held by the future, by the
 * command queue while queued, and by the wheel while filed.
 *
 * State word:
 *
 *            reactor fires                    future drops
 *   ARMED ─────────────────► FIRED     ARMED ─────────────► CANCELLED
 *
 * Both are one CAS from ARMED, so a timer either fires (its waker is woken)
 * or is cancelled, never both. The `queued` flag makes a timer sit in the
 * command queue at most once: a thread that changes the state submits the
 * timer; the reactor clears `queued` before it reads the state (both full
 * barriers), so a change made after the reactor looked is submitted again. */
#ifndef RT_SRC_TIMER_INTERNAL_H
#define RT_SRC_TIMER_INTERNAL_H

#include <stdint.h>

#include <urcu/wfcqueue.h>

#include <asyncrt/future.h>
#include <asyncrt/runtime.h>

#include "reactor.h"
#include "spinlock.h"
#include "timer_wheel.h"

enum { RT__TIMER_ARMED = 0, RT__TIMER_FIRED = 1, RT__TIMER_CANCELLED = 2 };

typedef struct rt__timer {
    rt__timer_entry entry;     /* in the wheel (reactor thread only) */
    struct cds_wfcq_node node; /* in the reactor's command queue */
    rt__reactor *reactor;      /* whose wheel */
    uint64_t deadline_tick;    /* wheel time */
    uint32_t state;            /* ARMED / FIRED / CANCELLED (atomic) */
    uint32_t queued;           /* in the command queue (atomic flag) */
    uint32_t refs;             /* future + queue + wheel (atomic) */
    rt__spinlock lock;         /* guards `waker` */
    rt_waker waker;            /* who to wake when it fires */
} rt__timer;

/* The reactor's side. */
void rt__timer_command(rt__reactor *r, rt__timer *t);
void rt__timer_fire(rt__timer_entry *entry, void *batch);
void rt__timer_unref(rt__timer *t);

#endif
