/* asyncrt: time, sleeps, timeouts and intervals.
 *
 * Timers live in a hierarchical timing wheel (6 levels, 250 us resolution)
 * owned by the runtime's reactor thread, which sleeps until the earliest
 * deadline. A timer never fires early: a sleep of d ns that starts at t
 * completes at some time >= t + d; it is late by the reactor's wake-up
 * latency plus up to 250 us of rounding.
 *
 * The futures here are "operation" structs the caller embeds in its own state
 * (for a task, the state copied at spawn) and polls with the functions below;
 * each needs its drop function called if it is abandoned before it finished
 * (for example from the task's drop function when the task is aborted).
 * Call the init function before the first poll. A zero-initialised struct may
 * be passed to its drop function (which then does nothing), so a task's drop
 * can release an operation its poll never got to initialise.
 * Abort safety: dropping an unfinished sleep, timeout or interval cancels its
 * timer; nothing else is lost. */
#ifndef ASYNCRT_TIMER_H
#define ASYNCRT_TIMER_H

#include <stdint.h>

#include "future.h"
#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The monotonic clock (CLOCK_MONOTONIC) in nanoseconds. Any thread. */
int64_t rt_now_ns(void);

struct rt__timer;

/* A sleep: completes once its deadline has passed. */
typedef struct rt_sleep {
    rt_runtime *rt;          /* whose reactor keeps the timer */
    int64_t deadline_ns;     /* absolute, on rt_now_ns()'s clock */
    struct rt__timer *timer; /* armed at the first pending poll; NULL before */
} rt_sleep;

/* Prepares a sleep of `duration_ns` from now (<= 0: already due).
 * rt: the runtime whose reactor times it; NULL means rt_current().
 * Returns 0, or -EINVAL (s NULL, no runtime). Any thread. */
int rt_sleep_init(rt_sleep *s, rt_runtime *rt, int64_t duration_ns);

/* The same with an absolute deadline on rt_now_ns()'s clock. Errors as
 * rt_sleep_init: -EINVAL (s NULL, no runtime). */
int rt_sleep_until_init(rt_sleep *s, rt_runtime *rt, int64_t deadline_ns);

/* Polls the sleep: RT_READY once the deadline has passed (and on every poll
 * after that), else RT_PENDING with the context's waker stored (a later poll
 * with another waker replaces it). *err (may be NULL) receives 0, or -ENOMEM
 * when the timer could not be allocated, or -ESHUTDOWN when the runtime is
 * shut down; in those two cases it returns RT_READY at once so the caller can
 * see the error. A sleep still pending when the runtime shuts down has its
 * waker woken, and its next poll reports -ESHUTDOWN. s or cx NULL: RT_READY
 * with *err -EINVAL. From one task (or thread) at a time. */
rt_poll rt_sleep_poll(rt_sleep *s, rt_context *cx, int *err);

/* Releases the sleep's timer (cancelling it if pending). Idempotent, and safe
 * whether or not the sleep finished and on a zeroed struct; the struct may
 * then be initialised again.
 * A sleep that was polled must be dropped before rt_runtime_free of its
 * runtime (after rt_runtime_shutdown it may still be polled, and reports
 * -ESHUTDOWN), since the drop hands the cancellation to that runtime. NULL is
 * a no-op. */
void rt_sleep_drop(rt_sleep *s);

/* A timeout around another future: polls `inner` over `inner_state` until it
 * finishes or the deadline passes, whichever is first. */
typedef struct rt_timeout {
    rt_sleep sleep; /* the deadline */
} rt_timeout;

/* Prepares a timeout of `duration_ns` from now (rt: NULL means rt_current()).
 * Returns 0 or -EINVAL (t NULL, no runtime). */
int rt_timeout_init(rt_timeout *t, rt_runtime *rt, int64_t duration_ns);

/* Polls the inner future first; RT_READY with *status 0 when it finished
 * (its result in *out), or RT_READY with *status -ETIMEDOUT when the deadline
 * passed first (the inner future has not finished: the caller still owns it
 * and must drop it), or another negative errno from the timer as for
 * rt_sleep_poll. out and status may be NULL; inner_state is only passed to
 * inner. t, cx or inner NULL: RT_READY with *status -EINVAL, without polling
 * the inner future (*out is not written). */
rt_poll rt_timeout_poll(rt_timeout *t, rt_context *cx, rt_poll_fn inner, void *inner_state,
                        void **out, int *status);

/* Releases the timeout's timer. Does not touch the inner future. Idempotent,
 * safe on a zeroed struct; NULL is a no-op. */
void rt_timeout_drop(rt_timeout *t);

/* A periodic tick: ready once per period, at start + period, start + 2 x
 * period, ... When the poller falls behind by more than a period, the missed
 * ticks are skipped (the next one is the first future multiple), so a slow
 * consumer does not get a burst. */
typedef struct rt_interval {
    rt_sleep sleep;    /* the next tick */
    int64_t period_ns; /* > 0 */
} rt_interval;

/* Prepares an interval whose first tick is one period from now.
 * Returns 0, or -EINVAL (iv NULL, period_ns <= 0, no runtime). */
int rt_interval_init(rt_interval *iv, rt_runtime *rt, int64_t period_ns);

/* RT_READY once per tick (then the next poll waits for the next tick), else
 * RT_PENDING. *err (may be NULL) as for rt_sleep_poll; iv or cx NULL:
 * RT_READY with *err -EINVAL. */
rt_poll rt_interval_poll(rt_interval *iv, rt_context *cx, int *err);

/* Releases the interval's timer. Idempotent, safe on a zeroed struct; NULL is
 * a no-op. */
void rt_interval_drop(rt_interval *iv);

#ifdef __cplusplus
}
#endif
#endif
