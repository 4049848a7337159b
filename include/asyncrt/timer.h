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
 * A sleep is an operation (see future.h): init, RT_POLL_OP until RT_READY,
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
 * rt: the runtime whose reactor times it; NULL means rt_current_runtime().
 * Returns 0, or -EINVAL (s NULL, no runtime). Any thread. */
int rt_sleep_init(rt_sleep *s, rt_runtime *rt, int64_t duration_ns);

/* The same with an absolute deadline on rt_now_ns()'s clock. Errors as
 * rt_sleep_init. */
int rt_sleep_until_init(rt_sleep *s, rt_runtime *rt, int64_t deadline_ns);

/* A periodic clock: it ticks at start + period, start + 2 x period, ...,
 * start being when it was initialised. It is not an operation: it holds no
 * timer and no memory, and needs no end (drop it by forgetting it). Each
 * tick is awaited with an rt_interval_tick operation, one at a time. When
 * the waiter falls behind by more than a period, the missed ticks are
 * skipped (the next one is the first future multiple), so a slow consumer
 * does not get a burst. Fields are private. */
typedef struct rt_interval {
    rt_runtime *rt;    /* whose reactor times the ticks */
    int64_t next_ns;   /* the next tick, on rt_now_ns()'s clock */
    int64_t period_ns; /* > 0 */
} rt_interval;

/* Starts an interval whose first tick is one period from now (rt NULL:
 * rt_current_runtime()). Returns 0, or -EINVAL (iv NULL, period_ns <= 0, no
 * runtime). Any thread. */
int rt_interval_init(rt_interval *iv, rt_runtime *rt, int64_t period_ns);

/* Waiting for an interval's next tick: finishes with result 0 at the tick,
 * and the interval moves on to the following one; or with a timer error as
 * rt_sleep (the interval then stays on the same tick). Dropped (RT_DROP)
 * before the tick, it cancels its timer and the interval is unchanged: the
 * next rt_interval_tick waits for the same tick, so an interval whose tick
 * loses a select every round keeps its phase. The interval must outlive the
 * operation. Fields are private but for the header's result. */
typedef struct rt_interval_tick {
    RT_FUTURE_HEADER;
    rt_interval *interval;
    rt_sleep sleep; /* until interval->next_ns */
} rt_interval_tick;

/* Prepares the wait for iv's next tick. Returns 0, or -EINVAL (op or iv
 * NULL; a refused operation is finished with that result). Any thread. */
int rt_interval_tick_init(rt_interval_tick *op, rt_interval *iv);

#ifdef __cplusplus
}
#endif
#endif
