/* The cooperative budget: how many leaf operations one poll of a task may
 * complete before they return RT_PENDING with the task woken, so that a task
 * whose data is always ready still lets its worker's other tasks run
 * (rt_config.budget; Tokio's scheme). The budget is the calling thread's:
 * a worker opens one for each poll and closes it after, and on any other
 * thread, or outside a poll, every operation may proceed. So the leaves
 * (joins, I/O, sync, channels, groups) use it without knowing workers.
 * Internal, not installed. */
#ifndef RT_SRC_BUDGET_H
#define RT_SRC_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

#include <asyncrt/future.h>

typedef struct rt__budget {
    uint32_t left;   /* operations the current poll may still complete */
    uint32_t active; /* 1 while a poll with a budget runs on this thread */
} rt__budget;

/* The calling thread's budget (budget.c); only that thread touches it. Its
 * fields are named directly, never through a pointer to it: GCC 12 with
 * -fsanitize=undefined tests such a pointer for NULL with stale flags and
 * reports a null member access that did not happen. */
extern __thread rt__budget rt__tls_budget __attribute__((tls_model("initial-exec")));

/* A worker, before a poll: `limit` operations (0: no budget). */
static inline void rt__budget_open(uint32_t limit)
{
    rt__tls_budget.left = limit;
    rt__tls_budget.active = limit != 0;
}

/* A worker, after the poll. */
static inline void rt__budget_close(void)
{
    rt__tls_budget.active = 0;
}

/* rt_coop_proceed for the library's own leaves (inline: it runs on every
 * join, channel, lock and socket operation). */
static inline bool rt__coop_proceed(rt_context *cx)
{
    if (!rt__tls_budget.active)
        return true;
    if (rt__tls_budget.left == 0) {
        /* Out of budget: the task goes behind the others (a self-wake is a
         * yield) and the caller returns RT_PENDING having consumed nothing. */
        rt_waker_wake_by_ref(rt_context_waker(cx));
        return false;
    }
    rt__tls_budget.left--;
    return true;
}

/* Gives back the unit a successful rt__coop_proceed took, for a leaf that
 * then found it must wait: only completed operations spend budget. */
static inline void rt__coop_refund(void)
{
    if (rt__tls_budget.active)
        rt__tls_budget.left++;
}

#endif
