/* A worker thread's data and the thread-local that says which worker the
 * calling thread is. Internal, not installed. */
#ifndef RT_SRC_WORKER_H
#define RT_SRC_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <asyncrt/metrics.h>

#include "common.h"
#include "block_cache.h"
#include "deque.h"
#include "injector.h"
#include "park.h"
#include "reactor.h"
#include "registry.h"
#include "task_internal.h"

/* ---- Workers -------------------------------------------------------------*/

/* What only the worker's own thread touches, so none of it needs atomics or
 * a lock. (At shutdown, runtime.c drains and frees it after the thread has
 * exited.) */
typedef struct rt__worker_own {
    /* The task being polled, or NULL. Written with relaxed stores, since a
     * task dump and the stall watchdog read it from other threads. */
    struct rt_task *current;
    /* The current task woke itself during this poll (see the task word). */
    bool current_notified;
    /* ... and asked to move to another worker (rt__yield_elsewhere). */
    bool yield_elsewhere;
    /* The status the current poll gave its task (rt_task_set_status): 0
     * before each poll. */
    int32_t poll_status;
    /* The current poll pushed surplus work: notify a sleeper after it. */
    bool announce_after_poll;
    /* The last injector pop found a producer mid-enqueue or the lock taken. */
    bool injector_would_block;
    /* Counted in the idle coordinator's num_searching. */
    bool searching;
    /* The task scheduled last on this worker, run next; not stealable (it
     * holds a queue reference like a deque entry). */
    struct rt_task *lifo;
    /* Polls in a row taken from the LIFO slot. */
    unsigned lifo_streak;
    /* Looks for work left before the next look at the injector (and at the
     * own deque's top before the bottom); then check_interval again. */
    unsigned until_check;
    /* Looks for work between two looks at the injector: at most
     * rt_config.injector_interval, fewer while polls are long, and at least
     * 2 unless that is configured lower (fairness.c, "The injector's
     * interval"). */
    unsigned check_interval;
    /* xorshift state for picking steal victims. */
    uint32_t rng;
    /* When the current window of looks began (rt__now_ns): the last look
     * at the injector, or the worker's start or last park. */
    int64_t last_check_ns;
    /* A moving average of the time per look for work over recent windows
     * (ns; 0: none measured yet). */
    int64_t poll_ns_avg;
    /* The starvation guard's watch over the own deque (fairness.c,
     * "Starving tasks"): when it began (or last started a rescue), and the
     * lowest the bottom has been since it began. Every index from the top
     * up to watched_low holds a task that was there when it began. */
    int64_t watched_since;
    uint64_t watched_low;
    /* 0, or the index the top is taken up to, one task per look, because
     * every task below it has starved (fairness.c, "Starving tasks"). */
    uint64_t rescue_end;
    /* Tasks woken during their own poll (yields), in FIFO order, linked
     * through task->node: they run again only after the deque drains. */
    struct rt_task *deferred_head;
    struct rt_task *deferred_tail;
    size_t deferred_len;
    size_t deferred_pinned; /* local tasks among them (never shared) */
    /* Local tasks pinned to this worker, woken here, in FIFO order (linked
     * through task->node). */
    struct rt_task *local_head;
    struct rt_task *local_tail;
    /* Timer commands not yet handed to the reactor (reactor.h). */
    rt__timer_batch timer_batch;
    /* Free small task blocks: the thread's block cache (block_cache.h). */
    rt__block_cache cache;
} rt__worker_own;

/* A worker: the part other threads touch first, each group on its own cache
 * lines, then the owner's part. */
typedef struct rt__worker {
    /* The Chase-Lev deque: the owner pushes and pops at the bottom, thieves
     * take from the top. First, so it starts on its own cache lines. */
    rt__deque deque;
    /* Where the worker sleeps when idle: notifiers unpark it. */
    RT_ALIGNED_CACHELINE rt__parker parker;
    /* Local tasks of this worker woken or spawned by other threads, who
     * push; only this worker pops. */
    rt__injector inbox;
    /* Listed in the coordinator's sleepers (under the runtime's
     * sleepers_lock, which notifiers take). */
    bool sleeping;
    /* Set before the thread starts, read-only after: */
    bool inbox_ready; /* inbox initialised (for cleanup) */
    unsigned index;
    rt_runtime *rt;
    pthread_t thread;
    /* The operations each poll may complete (rt_config.budget; 0: no
     * budget): budget.h. */
    uint32_t budget_limit;
    /* The stall watchdog runs (rt_config.stall_ns): note where each
     * coroutine poll starts from. */
    bool watched;
    /* watched, or rt_config.poll_timing: one test per poll for both. */
    bool instrumented;
    /* rt__task_worker_bits(index), which the end of a poll stores in the
     * task's state word. */
    uint64_t worker_bits;
    /* Written by the owner alone (relaxed), read by anyone: statistics and
     * the registry of the tasks spawned here (whose `spawned` count the
     * metrics read; everything else in it is the owner's). */
    RT_ALIGNED_CACHELINE rt_worker_metrics stats;
    uint64_t completed; /* tasks that returned RT_READY here */
    uint64_t cancelled; /* tasks dropped unfinished here */
    /* Where the poll in progress started from, when `watched`: a
     * coroutine's line and site (relaxed: the watchdog reads them). */
    uint32_t poll_origin_line;
    const struct rt_coro_site *poll_origin_site;
    rt__registry registry;
    /* The owner's alone. */
    RT_ALIGNED_CACHELINE rt__worker_own own;
} rt__worker;

/* How long the oldest task of a deque may wait while newer ones run from
 * the bottom before the worker takes it out of turn: Go's time slice. */
#define RT__STARVATION_NS 10000000

/* Polls in a row the LIFO slot may take ahead of waiting yielded tasks. */
#define RT__LIFO_STREAK_MAX 3

/* About how much polling a task the reactor woke may wait behind a busy
 * worker's local work (Tokio tunes its global queue interval to the same
 * 200 us). */
#define RT__INJECTOR_CHECK_NS 200000
/* The interval a worker starts with and resumes with after each park, before
 * it has measured its polls; it may double per window from there. */
#define RT__INJECTOR_CHECK_FIRST 4u

/* Puts a task woken during its own poll at the end of the worker's deferred
 * list (the queue reference comes with it). */
void rt__defer(rt__worker *w, rt_task *t);
/* Requeues a yielding task (still claimed) on the next worker. */
void rt__requeue_elsewhere(rt__worker *w, rt_task *t);

/* The worker thread's main loop. */
void *rt__worker_main(void *arg);

/* A worker about to park sweeps its own registry and the foreign shards when
 * enough has run since the last sweep for that to be worth the scan, and
 * hands the lost wake-ups it finds to the diagnostics' report
 * (lost_wakeups.c). */
void rt__lost_wakeup_sweep(rt__worker *w);

/* Most lost wake-ups one idle sweep reports (the others wait for the next). */
#define RT__LOST_PER_SWEEP 16

#endif
