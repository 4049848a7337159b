/* What the blocking-pool suites (test_blocking.c, test_blocking_shutdown.c)
 * share: runtimes with pool settings, a look at the metrics, and the jobs
 * with their global counters. support_blocking.c has the functions. */
#ifndef RT_TESTS_SUPPORT_BLOCKING_H
#define RT_TESTS_SUPPORT_BLOCKING_H

#include "support.h"

/* A runtime with `workers` workers and, for each setting that is not 0, the
 * given blocking_threads, blocking_idle_ns and blocking_shutdown_ns. */
rt_runtime *new_runtime_blocking(unsigned workers, unsigned blocking_threads, int64_t idle_ns,
                                 int64_t shutdown_ns);

/* The runtime's metrics now. */
rt_metrics metrics_now(rt_runtime *rt);

/* The bounded polling loop these suites allow themselves: waits (1 ms steps,
 * at most `seconds`) until the pool reports `threads` threads alive. */
bool wait_blocking_threads(rt_runtime *rt, uint64_t threads, int seconds);

#define MAX_JOBS 128

/* Job i runs, marks itself started, waits until `release` has been signalled
 * at least i + 1 times, and finishes with i * 10 + 1. The counters are
 * global; each test runs in its own process. */
extern atomic_int running;
extern atomic_int max_running;
extern atomic_int ran[MAX_JOBS];
extern atomic_int start_order[MAX_JOBS];
extern atomic_int starts;
extern atomic_int worker_threads_seen; /* jobs that ran on a worker thread */
extern _Atomic int64_t last_end_ns;
extern struct event started;
extern struct event release;
extern struct event finished;

void *held_job(void *arg);

/* Spawns held_job(i) on the pool, or the test fails. */
rt_task *spawn_held(rt_runtime *rt, int i);

/* Finishes at once with its argument plus one. */
void *quick_job(void *arg);

#endif
