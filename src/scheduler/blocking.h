/* The blocking pool behind rt_spawn_blocking (blocking.c). Internal. */
#ifndef RT_SRC_BLOCKING_H
#define RT_SRC_BLOCKING_H

#include <stdint.h>

#include <asyncrt/runtime.h>

typedef struct rt__blocking_pool rt__blocking_pool;

/* Creates a pool with no thread yet. 0 or a negative errno. */
int rt__blocking_pool_new(const rt_config *cfg, rt__blocking_pool **out);

/* Refuses new jobs, cancels those not started, wakes idle threads so they
 * exit, and waits up to timeout_ns (< 0: for ever) for running jobs.
 * Returns how many were still running (abandoned: their threads finish
 * them on their own). The pool stays allocated for racing spawns, which
 * get -ESHUTDOWN, until rt__blocking_pool_release. */
unsigned rt__blocking_pool_shutdown(rt__blocking_pool *p, int64_t timeout_ns);

/* Gives up the runtime's reference (rt_runtime_free); the last abandoned
 * thread frees the pool if it is still running. */
void rt__blocking_pool_release(rt__blocking_pool *p);

/* An aborted job (CANCELLED already set) that is still queued is taken out
 * and completed as cancelled at once, instead of when a thread reaches it. */
struct rt_task;
void rt__blocking_pool_abort(rt__blocking_pool *p, struct rt_task *t);

/* Threads alive and jobs accepted so far. */
void rt__blocking_pool_stats(rt__blocking_pool *p, uint64_t *threads, uint64_t *jobs);

#endif
