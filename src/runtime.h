/* The runtime's internal structures: tasks, workers, the idle coordinator and
 * the registry of live tasks. Internal, not installed. */
#ifndef RT_SRC_RUNTIME_H
#define RT_SRC_RUNTIME_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urcu/wfcqueue.h>

#include <asyncrt/metrics.h>
#include <asyncrt/runtime.h>
#include <asyncrt/task.h>

#include "common.h"
#include "atomic.h"
#include "block_cache.h"
#include "blocking.h"
#include "deque.h"
#include "injector.h"
#include "park.h"
#include "reactor.h"

/* ---- Task ------------------------------------------------------------------
 *
 * The task state word: eight flag bits and a reference count above them
 * (docs/internals.md, "Task state word and reference count").
 *
 *   bit 0 RUNNING        a worker (or shutdown) owns the future right now
 *   bit 1 COMPLETE       the future is gone: its result or -ECANCELED is final
 *   bit 2 NOTIFIED       the task is in a run queue, or must be requeued after
 *                        the poll in progress; that queue entry owns 1 ref
 *   bit 3 CANCELLED      abort was requested / the result is -ECANCELED
 *   bit 4 JOIN_INTEREST  a join handle exists
 *   bit 5 JOIN_WAKER     join_waker holds a waker the completer may use
 *   bit 6 SMALL          the allocation is a cacheable small block (set at
 *                        spawn, never changed)
 *   bit 7 EXTENDED       an rt__task_ext precedes the header in the allocation
 *                        (a name, a pinned worker; set at spawn, never changed)
 *   bits 8..63           reference count (handles, wakers, queue entry, registry)
 *
 * A queued task is either NOTIFIED (the claim is the popping worker's
 * fetch-add that swaps NOTIFIED for RUNNING) or queued already claimed:
 * RUNNING, as if its poll had not ended, so the popping worker knows it owns
 * it without a read-modify-write. Tasks are queued claimed when that is
 * safe and saves an atomic on the hot path:
 * - a new task (spawn sets RUNNING; no one else knows it yet);
 * - a task woken by a worker of its runtime (the wake's CAS sets RUNNING
 *   instead of NOTIFIED; the task goes on that worker's own queues);
 * - a task that woke itself during its own poll (a yield), which the worker
 *   notes in `current_notified` without touching the word at all.
 * The reactor and foreign threads queue NOTIFIED tasks. While a claimed task
 * is queued, external wakes and aborts behave as for a running one (they set
 * NOTIFIED / CANCELLED); the popping worker honours CANCELLED before the poll
 * and clears a NOTIFIED that came in the meantime, which that poll consumes.
 *
 * Lifecycle (flags only):
 *
 *   spawn ──────────────────► RUNNING (queued, claimed) ──pop──┐
 *   wake by a worker (idle) ──►                                 │
 *                                                               ▼
 *   wake (idle) ──► NOTIFIED ──pop──► RUNNING ──RT_READY──────► COMPLETE
 *   from reactor     ▲                 │  │                        ▲
 *   or foreign       │                 │  └─wake during poll:      │
 *                    │ requeue         │     +NOTIFIED, requeued   │
 *                  idle ◄──RT_PENDING──┘     after the poll        │
 *                    └── abort: +CANCELLED+NOTIFIED ──pop──► drop ─┘
 *
 * Every transition is one CAS or fetch-add on the word; each is a full barrier
 * (acq_rel at least), which is what orders the data around it:
 * - the worker writes `output` and runs `drop` before its CAS that sets
 *   COMPLETE (release); a joiner's load that sees COMPLETE (acquire) then
 *   reads `output`;
 * - a joiner writes join_waker, then sets JOIN_WAKER by CAS (release); the
 *   completer's CAS that sets COMPLETE reads JOIN_WAKER (acquire) and only
 *   then reads join_waker;
 * - whoever sets NOTIFIED on an idle task owns the push of the task onto a run
 *   queue; the queue's own release/acquire hands the task to the worker.
 * Ownership of join_waker: the handle side while JOIN_WAKER is clear and the
 * task is not COMPLETE; the completer while JOIN_WAKER is set; after the
 * completer clears JOIN_WAKER, the handle side again, or, if the handle is
 * already gone, the completer, which drops it. */
#define RT__TASK_RUNNING (1ull << 0)
#define RT__TASK_COMPLETE (1ull << 1)
#define RT__TASK_NOTIFIED (1ull << 2)
#define RT__TASK_CANCELLED (1ull << 3)
#define RT__TASK_JOIN_INTEREST (1ull << 4)
#define RT__TASK_JOIN_WAKER (1ull << 5)
#define RT__TASK_SMALL (1ull << 6)
#define RT__TASK_EXTENDED (1ull << 7)
#define RT__TASK_REF_SHIFT 8
#define RT__TASK_REF_ONE (1ull << RT__TASK_REF_SHIFT)
#define RT__TASK_FLAGS (RT__TASK_REF_ONE - 1)

struct rt_task {
    /* The state word above. */
    uint64_t state;
    /* The poll function until the task completes, then its result. The worker
     * holding RUNNING is the only one touching it before COMPLETE. */
    union {
        rt_poll_fn poll;
        void *output;
    } u;
    /* Releases the state; NULL when there is nothing to release. */
    rt_drop_fn drop;
    /* The runtime the task belongs to; never dereferenced once COMPLETE, so a
     * task may outlive its runtime. */
    rt_runtime *rt;
    /* Who to wake when the task completes; see the ownership rules above. */
    rt_waker join_waker;
    /* Link in the injector or in the owner worker's deferred list. */
    struct cds_wfcq_node node;
    /* Unique in the process, never 0 (rt_task_id). */
    uint64_t id;
    /* The future's state follows, aligned for any type. */
    _Alignas(16) unsigned char future_state[];
};

_Static_assert(sizeof(struct rt_task) <= RT_CACHELINE,
               "the task header must fit in one cache line");

/* What a task spawned with options keeps, just before its header in the
 * same allocation (so the header stays one cache line for every task). */
typedef struct rt__task_ext {
    const char *name; /* a copy at the end of the allocation, or NULL */
    int32_t pinned;   /* the worker index of a local task, -1, or
                         RT__TASK_PINNED_JOB for a blocking job */
    uint32_t unused;  /* keeps the header 16-byte aligned */
} rt__task_ext;

_Static_assert(sizeof(rt__task_ext) == 16, "the prefix keeps the header aligned");

/* rt__task_ext.pinned of a blocking-pool job (which no worker runs). */
#define RT__TASK_PINNED_JOB (-2)

static inline rt__task_ext *rt__task_ext_of(rt_task *t)
{
    return (rt__task_ext *)((char *)t - sizeof(rt__task_ext));
}

/* The worker a local task is pinned to; -1 for an ordinary task, or
 * RT__TASK_PINNED_JOB. The flags read are set before the task is published
 * and never change, so a relaxed load suffices. */
static inline int rt__task_pinned(rt_task *t)
{
    if (rt__likely(!(rt__load_relaxed_u64(&t->state) & RT__TASK_EXTENDED)))
        return -1;
    return rt__task_ext_of(t)->pinned;
}

/* The waker of a runtime task: data is the task. */
extern const rt_waker_vtable rt__task_waker_vtable;

/* Polls the task (which the caller popped from a run queue, with the queue's
 * reference) on worker `w`. */
struct rt__worker;
void rt__task_run(struct rt__worker *w, rt_task *t);

/* Tasks whose header and state fit this many bytes are allocated as blocks
 * of exactly this size from a block cache (block_cache.h): spawning and
 * freeing tasks is the hot path of every spawn-heavy program, and a private
 * LIFO magazine of equal blocks beats malloc's bins there. */
#define RT__TASK_SMALL_BLOCK 128
_Static_assert(RT__TASK_SMALL_BLOCK == RT__BLOCK_SIZE, "small tasks are pool blocks");

/* Frees the task's memory (the last reference is gone) into `cache` (NULL:
 * straight to the block pool, or to malloc for a task that is no block). */
void rt__task_recycle(rt__block_cache *cache, rt_task *t);

/* Drops `n` references; frees the task when they were the last. */
void rt__task_unref(rt_task *t, uint64_t n);

/* Shutdown's cancellation of an unfinished task: runs its drop and completes
 * it with -ECANCELED. Only after every worker has exited. */
void rt__task_cancel_at_shutdown(rt_task *t);
/* rt_task_wait with a thread waker the caller made (and still owns), so that
 * rt_block_on can have everything it needs before it spawns. */
int rt__task_wait_with(rt_task *task, rt__thread_waker *tw, int64_t timeout_ns, void **value);

/* ---- Registry of live tasks ----------------------------------------------
 *
 * Shutdown must reach every unfinished task, including one that waits on a
 * waker held by user code, so every task is recorded where it was spawned:
 * in its worker's registry (touched only by that worker: no lock), or, when
 * spawned by a foreign thread, in a mutex-protected foreign shard.
 * Completion does not touch the registry at all. The registry holds one
 * reference to each task and drops it when a sweep finds the task COMPLETE;
 * the owner sweeps when its array is full and before it parks. Besides
 * keeping locks and shared cache lines off the completion path, this frees
 * most tasks on the thread that allocated them, which malloc likes. */
typedef struct rt__registry {
    rt_task **tasks;            /* registered tasks, unordered */
    uint32_t len;               /* entries in use */
    uint32_t cap;               /* entries allocated */
    uint32_t sweep_at;          /* sweep when len reaches this */
    uint64_t finished_at_sweep; /* the runtime's finished tasks then (a hint) */
    uint64_t spawned;           /* tasks ever registered (relaxed; read by metrics) */
    uint64_t polls_at_sweep;    /* the sweeper's poll count at the last sweep */
} rt__registry;

/* Registers `t` (taking over one of its references). Sweeps or grows when
 * full. -ENOMEM when it cannot grow. Caller: the owner / the shard lock. */
int rt__registry_insert(rt_runtime *rt, rt__registry *r, rt_task *t, rt__block_cache *cache);
/* Drops the references of the COMPLETE tasks; blocks freed go to `cache`.
 * Caller: owner / shard lock. */
void rt__registry_sweep(rt__registry *r, rt__block_cache *cache);
/* Shutdown: cancels every unfinished task (its drop runs), then releases all
 * references and the array. Returns how many were cancelled. Only after every
 * worker has exited. */
unsigned rt__registry_cancel_all(rt__registry *r);

typedef struct rt__foreign_shard {
    RT_ALIGNED_CACHELINE pthread_mutex_t lock;
    rt__registry registry;
    rt__block_cache cache; /* blocks for foreign spawns */
    bool closed;           /* set at shutdown: no more inserts */
} rt__foreign_shard;

/* The foreign shard the calling (foreign) thread uses. */
rt__foreign_shard *rt__foreign_shard_of_thread(rt_runtime *rt);

/* ---- Workers -------------------------------------------------------------*/

typedef struct rt__worker {
    /* The Chase-Lev deque: first, so it starts on its own cache lines. */
    rt__deque deque;
    /* Where the worker sleeps when idle. */
    RT_ALIGNED_CACHELINE rt__parker parker;
    rt_runtime *rt;
    unsigned index;
    pthread_t thread;
    /* Looks for work left before the next look at the injector (and at the
     * own deque's top before the bottom); then check_interval again. */
    unsigned until_check;
    /* Looks for work between two looks at the injector: at most
     * rt_config.injector_interval, fewer while polls are long, and at least
     * 2 unless that is configured lower (scheduler.c, "The injector's
     * interval"). */
    unsigned check_interval;
    /* When the current window of looks began (rt__now_ns): the last look
     * at the injector, or the worker's start or last park. */
    int64_t last_check_ns;
    /* A moving average of the time per look for work over recent windows
     * (ns; 0: none measured yet). */
    int64_t poll_ns_avg;
    /* The starvation guard's watch over the own deque (scheduler.c,
     * "Starving tasks"): when it began (or last started a rescue), and the
     * lowest the bottom has been since it began. Every index from the top
     * up to watched_low holds a task that was there when it began. */
    int64_t watched_since;
    uint64_t watched_low;
    /* 0, or the index the top is taken up to, one task per look, because
     * every task below it has starved (scheduler.c, "Starving tasks"). */
    uint64_t rescue_end;
    /* xorshift state for picking steal victims. */
    uint32_t rng;
    /* Counted in the idle coordinator's num_searching. */
    bool searching;
    /* Listed in the coordinator's sleepers (under sleepers_lock). */
    bool sleeping;
    /* The task scheduled last on this worker, run next; not stealable (it
     * holds a queue reference like a deque entry). */
    rt_task *lifo;
    /* Polls in a row taken from the LIFO slot. */
    unsigned lifo_streak;
    /* The task being polled, or NULL. */
    rt_task *current;
    /* The current task woke itself during this poll (see the task word). */
    bool current_notified;
    /* The current poll pushed surplus work: notify a sleeper after it. */
    bool announce_after_poll;
    /* The last injector pop found a producer mid-enqueue or the lock taken. */
    bool injector_would_block;
    /* Tasks woken during their own poll (yields), in FIFO order, linked
     * through task->node: they run again only after the deque drains. */
    rt_task *deferred_head;
    rt_task *deferred_tail;
    size_t deferred_len;
    size_t deferred_pinned; /* local tasks among them (never shared) */
    /* Local tasks pinned to this worker, woken here, in FIFO order (owner
     * only, linked through task->node). */
    rt_task *local_head;
    rt_task *local_tail;
    /* Local tasks of this worker woken or spawned by other threads: only
     * this worker dequeues. */
    rt__injector inbox;
    bool inbox_ready; /* inbox initialised (for cleanup) */
    /* Operations the current poll may still complete (rt_coop_proceed). */
    uint32_t budget;
    /* The block of task ids this worker hands out: next_id up to id_limit. */
    uint64_t next_id;
    uint64_t id_limit;
    /* Timer commands not yet handed to the reactor (reactor.h), the
     * earliest deadline among them (wheel ticks), and when the first came. */
    struct rt__timer *timer_batch[RT__TIMER_BATCH];
    unsigned timer_batch_len;
    uint64_t timer_batch_min_tick;
    int64_t timer_batch_since;
    /* The tasks spawned on this worker (owner only). */
    rt__registry registry;
    /* Free small task blocks (owner only). */
    rt__block_cache cache;
    /* Statistics, written only by this worker (relaxed), read by anyone. */
    rt_worker_metrics stats;
    uint64_t completed; /* tasks that returned RT_READY here */
    uint64_t cancelled; /* tasks dropped unfinished here */
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

/* The worker the calling thread is, or NULL (set by the worker's loop). */
extern __thread rt__worker *rt__tls_worker __attribute__((tls_model("initial-exec")));

static inline rt__worker *rt__worker_current(void)
{
    return rt__tls_worker;
}

/* The reactor thread's block cache while it runs, else NULL (reactor.c). */
extern __thread rt__block_cache *rt__tls_reactor_cache __attribute__((tls_model("initial-exec")));

/* The block cache of the calling thread: its worker's, the reactor's, or
 * NULL for any other thread (which then uses the block pool directly). */
static inline rt__block_cache *rt__current_block_cache(void)
{
    rt__worker *w = rt__worker_current();
    return w != NULL ? &w->cache : rt__tls_reactor_cache;
}

/* ---- Runtime ------------------------------------------------------------*/

/* The idle coordinator's word: workers searching for work in the low 32 bits,
 * workers not parked in the high 32 bits. */
#define RT__IDLE_SEARCHING_ONE 1ull
#define RT__IDLE_UNPARKED_ONE (1ull << 32)

struct rt_runtime {
    rt_config config;
    unsigned nworkers;
    rt__worker *workers; /* nworkers entries, cache-line aligned */

    /* Tasks spawned or woken off-worker, and spills of full deques. */
    rt__injector injector;
    /* Tasks the reactor woke (timers fired, descriptors ready): taken before
     * the injector, so they do not wait behind a spawn backlog. */
    rt__injector wakes;
    /* Size of the reactor's last batch of wakes (a hint for fair shares). */
    uint64_t wakes_batch;

    /* Idle coordination (scheduler.c). */
    RT_ALIGNED_CACHELINE uint64_t idle_state;
    pthread_mutex_t sleepers_lock;
    unsigned *sleepers; /* stack of parked worker indices */
    unsigned nsleepers;

    /* Set once by shutdown; workers and spawns check it. */
    RT_ALIGNED_CACHELINE uint32_t closing;

    /* Registries of tasks spawned by foreign threads. */
    unsigned nforeign;
    rt__foreign_shard *foreign;
    /* Tasks cancelled by shutdown (written by the shutdown thread only). */
    uint64_t shutdown_cancelled;

    /* The reactor thread: epoll, timers. */
    rt__reactor reactor;
    /* Open rt_io objects, closed by shutdown if the user has not. */
    pthread_mutex_t io_lock;
    struct rt_io *io_list;
    bool io_closed; /* shutdown closed the list: rt_io_open fails */

    /* The blocking pool (rt_spawn_blocking), and what shutdown found. */
    rt__blocking_pool *blocking;
    uint64_t blocking_abandoned;

    /* Serializes rt_runtime_shutdown callers. */
    pthread_mutex_t lifecycle_lock;
    bool shut_down;
    unsigned threads_started;
};

/* rt_coop_proceed for the library's own leaves (inline: it runs on every
 * channel, lock and socket operation). */
static inline bool rt__coop_proceed(rt_context *cx)
{
    rt__worker *w = rt__tls_worker;
    if (w == NULL || w->current == NULL || w->rt->config.budget == 0)
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
    if (w != NULL && w->current != NULL && w->rt->config.budget != 0)
        w->budget++;
}

/* Schedules a task whose NOTIFIED bit the caller just set, with the queue
 * reference the caller owns: onto the calling worker's deque when it is a
 * worker of the task's runtime, else onto the injector. */
void rt__schedule(rt_task *t);

/* Schedules n such tasks of `rt` from a thread that is not its worker (the
 * reactor): one splice into the wakes queue, then up to min(n, parked)
 * workers woken. */
void rt__schedule_batch(rt_runtime *rt, rt_task **tasks, unsigned n);

/* Whether no worker of `rt` is parked or announcing its park (a seq_cst
 * snapshot of the idle word; the reactor's nap check). */
bool rt__every_worker_unparked(rt_runtime *rt);

/* Wakes (consumes) *w. When it is the waker of a task of `rt` that must be
 * scheduled, returns the task (with its queue reference) for the caller to
 * schedule in a batch; otherwise wakes it the ordinary way and returns NULL. */
rt_task *rt__task_wake_for_batch(rt_waker *w, rt_runtime *rt);

/* rt_spawn_ex with the task's id chosen by the caller (from
 * rt__task_new_id; 0: a new one), so that the caller knows it without
 * touching the task, which may be finished and freed by the time the spawn
 * returns. */
int rt__spawn(rt_runtime *rt, const rt_spawn_options *opts, rt_poll_fn poll, rt_drop_fn drop,
              const void *state, size_t size, rt_task **handle, uint64_t id);

/* Blocking-pool jobs (task.c): a task that no worker polls. new: NULL when
 * out of memory; the pool's queue holds one reference, the handle another.
 * run: claims the job, runs it unless it was aborted, completes it, and
 * drops the queue's reference. cancel: the same without running it.
 * discard: frees a job that was never queued. */
rt_task *rt__task_new_job(rt_runtime *rt, rt_blocking_fn fn, void *arg, bool handle);
void rt__task_run_job(rt_task *t);
void rt__task_cancel_job(rt_task *t);
void rt__task_discard_job(rt_task *t);

/* Appends `t` to a private FIFO of tasks linked through task->node (the
 * deferred and local lists of a worker, the blocking pool's queue), which
 * its owner (or the holder of its lock) alone touches. */
static inline void rt__task_fifo_append(rt_task **head, rt_task **tail, rt_task *t)
{
    t->node.next = NULL;
    if (*tail != NULL)
        (*tail)->node.next = (struct cds_wfcq_node *)t;
    else
        *head = t;
    *tail = t;
}

/* A new task id (see task.c). */
uint64_t rt__task_new_id(void);

/* Puts a task woken during its own poll at the end of the worker's deferred
 * list (the queue reference comes with it). */
void rt__defer(rt__worker *w, rt_task *t);

/* The worker thread's main loop. */
void *rt__worker_main(void *arg);

/* A worker about to park sweeps its own registry and one foreign shard when
 * enough has run since the last sweep for that to be worth the scan. */
void rt__registry_sweep_idle(rt__worker *w);

/* True while this thread runs rt_runtime_shutdown's cancellation (inside a
 * drop function called by it). */
bool rt__thread_in_shutdown(void);

#endif
