/* The cooperative budget: how many leaf operations one poll of a task may
 * complete before they return RT_PENDING with the task woken, so that a task
 * whose data is always ready still lets its worker's other tasks run
 * (rt_config.budget; Tokio's scheme). Needs only the current worker, so the
 * toolkit (sync, channels, groups) uses it without the runtime's internals.
 * Internal, not installed. */
#ifndef RT_SRC_BUDGET_H
#define RT_SRC_BUDGET_H

#include <stdbool.h>

#include <asyncrt/future.h>

#include "current.h"

/* rt_coop_proceed for the library's own leaves (inline: it runs on every
 * channel, lock and socket operation). */
static inline bool rt__coop_proceed(rt_context *cx)
{
    rt__worker *w = rt__tls_worker;
    if (w == NULL || w->current == NULL || w->budget_limit == 0)
        return true;
    if (w->budget == 0) {
        /* Out of budget: the task goes behind the others (a self-wake is a
         * yield) and the caller returns RT_PENDING having consumed nothing. */
        rt_waker_wake_by_ref(rt_context_waker(cx));
        return false;
    }
    w->budget--;
    return true;
}

/* Gives back the unit a successful rt__coop_proceed took, for a leaf that
 * then found it must wait: only completed operations spend budget. */
static inline void rt__coop_refund(void)
{
    rt__worker *w = rt__tls_worker;
    if (w != NULL && w->current != NULL && w->budget_limit != 0)
        w->budget++;
}

#endif
