/* What the timer suites (test_timer_sleep.c, test_timer_many.c,
 * test_timer_timeout.c, test_timer_reactor.c) share: the bound on a late
 * timer, a task that sleeps, and a finish that measures shutdown.
 * support_timer.c has the functions. */
#ifndef RT_TESTS_SUPPORT_TIMER_H
#define RT_TESTS_SUPPORT_TIMER_H

#include "support.h"

/* A whole test process can stall for tens of milliseconds when sanitizer
 * builds of several suites share two cores, so the many-sample test allows
 * a few outliers (5%) up to this, and single-shot measurements use it as
 * their bound: it still catches a timer that fires only when something else
 * happens to wake the reactor. */
#define OUTLIER_BOUND_NS (500LL * MS)

/* finish_runtime (support.h), returning how long shutdown + free took. */
int64_t finish_runtime_timed(rt_runtime *rt, int expected_cancelled);

/* A task that sleeps `duration` (the sleep initialised in its first poll)
 * and finishes with the sleep's result; its drop drops a sleep still armed
 * (dropping one that finished, or was never initialised, does nothing). */
struct plain_sleep {
    rt_coro co;
    int64_t duration;
    int err;
    rt_sleep s;
};

rt_poll plain_sleep_poll(void *state, rt_context *cx, void **out);
void plain_sleep_drop(void *state);

#endif
