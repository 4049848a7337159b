/* asyncrt: runtime metrics.
 *
 * Counters are kept per worker by the worker itself (no shared cache line is
 * written on the hot path) and summed when a snapshot is taken, so a snapshot
 * taken while the runtime runs is a close approximation, not an atomic cut:
 * totals can be a few operations apart. Once the runtime is shut down the
 * figures are exact.
 *
 * Versioning: the caller passes sizeof the struct it was compiled with. Fields
 * are only ever appended; the library fills the fields both sides know and
 * zeroes the rest of the caller's struct. */
#ifndef ASYNCRT_METRICS_H
#define ASYNCRT_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Buckets of the latency histograms: bucket 0 counts durations under
 * 1024 ns, bucket i (1 <= i < RT_HIST_BUCKETS - 1) those in
 * [2^(9+i), 2^(10+i)) ns, and the last one everything from 2^32 ns (4.3 s). */
#define RT_HIST_BUCKETS 24

/* The lowest duration (ns) bucket i counts: 0, 1024, 2048, 4096, ... */
static inline uint64_t rt_hist_bucket_floor_ns(unsigned i)
{
    return i == 0 ? 0 : (uint64_t)1 << (9 + i);
}

/* What one worker has done since the runtime started. */
typedef struct rt_worker_metrics {
    uint64_t polls;            /* task polls (including the final one) */
    uint64_t steals;           /* tasks taken from another worker's deque */
    uint64_t steal_attempts;   /* steal calls made on another worker's deque */
    uint64_t injector_batches; /* non-empty batches taken from the injector */
    uint64_t parks;            /* times the worker went to sleep */
    uint64_t unparks;          /* times it was woken up from sleep */
    uint64_t deque_high_water; /* most tasks ever in its deque at once */
    uint64_t spills;           /* times its full deque moved half to the injector */
    uint64_t reactor_yields;   /* times it gave its CPU to a reactor overdue by 0.5 ms
                                  (a sign the machine has fewer cores than busy threads) */
    uint64_t lost_wakeups;     /* lost wake-ups its registry sweeps found (diag.h) */
    /* With rt_config.poll_timing (all zero otherwise): how long its polls
     * took, and how long tasks waited from being queued (spawned, woken,
     * or requeued after a yield) to the start of their poll here, in log2
     * buckets: see rt_hist_bucket_floor_ns. */
    uint64_t poll_ns_hist[RT_HIST_BUCKETS];
    uint64_t sched_delay_hist[RT_HIST_BUCKETS];
} rt_worker_metrics;

/* Runtime totals. */
typedef struct rt_metrics {
    uint64_t workers;   /* worker threads */
    uint64_t spawned;   /* tasks spawned, from any thread */
    uint64_t completed; /* tasks whose future returned RT_READY */
    uint64_t cancelled; /* tasks dropped unfinished (abort or shutdown) */
    uint64_t alive;     /* spawned - completed - cancelled: not finished yet */
    /* The blocking pool (rt_spawn_blocking); its jobs are not counted above. */
    uint64_t blocking_threads;   /* pool threads alive now */
    uint64_t blocking_jobs;      /* jobs accepted so far */
    uint64_t blocking_abandoned; /* jobs shutdown gave up waiting for */
    /* The reactor thread. */
    uint64_t reactor_turns;     /* epoll waits it returned from */
    uint64_t reactor_io_events; /* descriptor events those waits reported */
    uint64_t reactor_naps;      /* times it napped (rt_config.reactor_nap_ns) */
    /* Diagnostics (diag.h). */
    uint64_t lost_wakeups; /* waiting tasks found with no waker left */
    uint64_t stalls;       /* polls reported as running too long */
    /* Fibers shutdown gave up waiting for (fiber.h, "Cancellation"). */
    uint64_t fibers_abandoned;
    /* The deepest a finished fiber's stack was in use, in bytes from its top,
     * as seen at its switches (rt_task_info.stack_depth): size stacks from
     * it, with room for the calls between awaits it cannot see. */
    uint64_t fiber_stack_deepest;
} rt_metrics;

/* Fills *m (of `size` bytes: pass sizeof(rt_metrics)). Any thread, any time
 * before rt_runtime_free. Errors: -EINVAL (rt or m NULL). */
int rt_metrics_read(rt_runtime *rt, rt_metrics *m, size_t size);

/* Fills *m for worker `index` (0 <= index < rt_runtime_workers(rt)).
 * Any thread, any time before rt_runtime_free. Errors: -EINVAL (rt or m
 * NULL, index out of range). */
int rt_worker_metrics_read(rt_runtime *rt, unsigned index, rt_worker_metrics *m, size_t size);

/* Writes the totals and one line per worker to `out`, readably.
 * Errors: -EINVAL (rt or out NULL), -EIO (the stream reported an error). */
int rt_metrics_print(rt_runtime *rt, FILE *out);

#ifdef __cplusplus
}
#endif
#endif
