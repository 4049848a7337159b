/* asyncrt: time, sleeps and intervals.
 *
 * Timers live in a hierarchical timing wheel (6 levels of 250 us ticks)
 * owned by the runtime's reactor thread, which sleeps until the earliest
 * exact deadline (the timers of a tick are ordered by their nanoseconds,
 * and the reactor asks the kernel for no timer slack). A timer never fires
 * early: a sleep of d ns that starts at t completes at some time >= t + d;
 * it is late by the kernel's and the reactor's wake-up latency, and, when
 * many timers fall due together, by up to 50 us more, which the reactor
 * waits after a turn that fired several to fire the next in one batch.
 *
 * A sleep is an operation (see future.h): init, RT_POLL until RT_READY,
 * RT_DROP if abandoned. Timeouts and deadlines around any operation are in
 * combine.h. Abort safety: dropping an unfinished sleep or interval cancels
 * its timer; nothing else is lost. Never polled, a sleep or an interval
 * holds nothing (its timer is armed by the first poll that waits): it
 * needs no drop, and dropping it or initialising it again is safe. */
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

/* Durations in nanoseconds, for readability: RT_MS(250), RT_SEC(2). */
#define RT_US(n) ((int64_t)(n)*1000)
#define RT_MS(n) ((int64_t)(n)*1000000)
#define RT_SEC(n) ((int64_t)(n)*1000000000)

struct rt__timer;

/* A sleep: finishes once its deadline has passed, with result 0, or with
 * -ENOMEM (no memory for the timer) or -ESHUTDOWN (the runtime is shut
 * down, or shuts down while the sleep waits). Fields are private but for
 * the header's result. */
typedef struct rt_sleep {
    RT_FUTURE_HEADER;
    rt_runtime *rt;          /* whose reactor keeps the timer */
    int64_t deadline_ns;     /* absolute, on rt_now_ns()'s clock */
    struct rt__timer *timer; /* armed at the first pending poll; NULL before */
} rt_sleep;

/* Prepares a sleep of `duration_ns` from now (<= 0: already due).
 * rt: the runtime whose reactor times it; NULL means rt_current().
 * Returns 0, or -EINVAL (s NULL, no runtime). Any thread. */
int rt_sleep_init(rt_sleep *s, rt_runtime *rt, int64_t duration_ns);

/* The same with an absolute deadline on rt_now_ns()'s clock. Errors as
 * rt_sleep_init. */
int rt_sleep_until_init(rt_sleep *s, rt_runtime *rt, int64_t deadline_ns);

/* A periodic tick: ready once per period, at start + period, start + 2 x
 * period, ... Unlike other operations it does not finish: after a poll that
 * returned RT_READY (result 0, or a timer error as for rt_sleep), the next
 * poll waits for the next tick. When the poller falls behind by more than a
 * period, the missed ticks are skipped (the next one is the first future
 * multiple), so a slow consumer does not get a burst. Between ticks it holds
 * nothing. Dropped (RT_DROP) while it waits for a tick, it cancels that wait
 * (result -ECANCELED) and stays usable: the next poll waits for the same
 * tick, so an interval that loses a select every round keeps its phase. */
typedef struct rt_interval {
    RT_FUTURE_HEADER;
    rt_sleep sleep;    /* the next tick */
    int64_t period_ns; /* > 0 */
} rt_interval;

/* Prepares an interval whose first tick is one period from now (rt NULL:
 * rt_current()). Returns 0, or -EINVAL (iv NULL, period_ns <= 0, no
 * runtime). */
int rt_interval_init(rt_interval *iv, rt_runtime *rt, int64_t period_ns);

#ifdef __cplusplus
}
#endif
#endif
