/* The task object: its header, its state word with every transition's
 * ordering, and the functions that create, run, wake and free tasks
 * (task.c). Knows no worker or runtime internals. Internal, not installed. */
#ifndef RT_SRC_TASK_INTERNAL_H
#define RT_SRC_TASK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urcu/wfcqueue.h>

#include <asyncrt/runtime.h>
#include <asyncrt/task.h>

#include "common.h"
#include "atomic.h"
#include "block_cache.h"
#include "park.h"

/* ---- Task ------------------------------------------------------------------
 *
 * The task state word: ten flag bits, the worker that last polled the task,
 * and a reference count above them
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
 *   bit 8 CORO           the future's state begins with an rt_coro (set once,
 *                        by the first poll that runs RT_CORO_BEGIN; never
 *                        cleared)
 *   bit 9 TIMED          an rt__task_timing precedes the rt__task_ext
 *                        (rt_config.poll_timing; set at spawn, never changed)
 *   bits 10..20 WORKER   1 + the index of the worker whose poll last left the
 *                        task waiting (0: none yet), set by the end-of-poll
 *                        CAS at no extra cost, for task dumps
 *   bits 21..63          reference count (handles, wakers, queue entry, registry)
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
#define RT__TASK_CORO (1ull << 8)
#define RT__TASK_TIMED (1ull << 9)
#define RT__TASK_WORKER_SHIFT 10
#define RT__TASK_WORKER_MASK (((1ull << 11) - 1) << RT__TASK_WORKER_SHIFT)
#define RT__TASK_REF_SHIFT 21
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
    /* Until the drop has run, what releases the state (NULL when there is
     * nothing to release); then the status the task finished with (0, or a
     * negative errno of its own; a cancelled task's is CANCELLED in the
     * word). Written by the owner of RUNNING before its release of
     * COMPLETE, read after an acquire that sees COMPLETE, as `output`. */
    union {
        rt_drop_fn drop;
        int64_t status;
    } fin;
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

/* ---- Transitions of the state word ----------------------------------------
 *
 * Every change to `state` is one of the functions below, each one CAS loop or
 * one fetch-add, named after the transition in the diagram above. Each RMW is
 * a full barrier; the comments say which data each one publishes or
 * acquires. They change the word only: waking, scheduling, dropping the
 * future and freeing are the caller's (task.c). */

_Static_assert(RT_MAX_WORKERS < (1u << 11), "WORKER holds 1 + any worker index");

/* The references the word holds. */
static inline uint64_t rt__task_refcount(uint64_t state)
{
    return state >> RT__TASK_REF_SHIFT;
}

/* The WORKER bits that name worker `index`. */
static inline uint64_t rt__task_worker_bits(unsigned index)
{
    return (uint64_t)(index + 1) << RT__TASK_WORKER_SHIFT;
}

/* The worker whose poll last left the task waiting, or -1. */
static inline int rt__task_last_worker(uint64_t state)
{
    return (int)((state & RT__TASK_WORKER_MASK) >> RT__TASK_WORKER_SHIFT) - 1;
}

/* clone: one more reference (a waker clone, a handle). */
static inline void rt__task_state_ref(rt_task *t)
{
    rt__faa_u64(&t->state, RT__TASK_REF_ONE);
}

/* unref: drops `n` references; true when they were the last, and the caller
 * frees the task. The fetch-add is a full barrier: every access a reference
 * holder made happens before the free by whoever drops the last one. */
static inline bool rt__task_state_unref(rt_task *t, uint64_t n)
{
    uint64_t prev = rt__faa_u64(&t->state, (uint64_t)0 - n * RT__TASK_REF_ONE);
    return rt__task_refcount(prev) == n;
}

/* What a wake by value did with the waker's reference. */
typedef enum rt__task_wake_result {
    RT__TASK_WAKE_DROP,     /* finished or already queued: the caller drops it */
    RT__TASK_WAKE_DONE,     /* running: NOTIFIED set, the reference went too */
    RT__TASK_WAKE_SCHEDULE, /* idle: it is now the run queue's; schedule */
} rt__task_wake_result;

/* wake (by value). An idle task becomes NOTIFIED, or RUNNING when
 * `preclaim` (queued already claimed, by a worker of its runtime), and the
 * waker's reference becomes the run queue's. A running task gets NOTIFIED,
 * and the reference goes in the same CAS (never the last: the polling worker
 * holds one); the worker requeues it after the poll. */
static inline rt__task_wake_result rt__task_state_wake(rt_task *t, bool preclaim)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        if (s & (RT__TASK_COMPLETE | RT__TASK_NOTIFIED))
            return RT__TASK_WAKE_DROP;
        if (s & RT__TASK_RUNNING) {
            if (rt__cas_u64(&t->state, &s, (s | RT__TASK_NOTIFIED) - RT__TASK_REF_ONE))
                return RT__TASK_WAKE_DONE;
            continue;
        }
        if (rt__cas_u64(&t->state, &s, s | (preclaim ? RT__TASK_RUNNING : RT__TASK_NOTIFIED)))
            return RT__TASK_WAKE_SCHEDULE;
    }
}

/* wake by reference: as a wake by value, but the run queue's reference of
 * an idle task is added. True when the caller must schedule the task. */
static inline bool rt__task_state_wake_by_ref(rt_task *t, bool preclaim)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        if (s & (RT__TASK_COMPLETE | RT__TASK_NOTIFIED))
            return false;
        bool idle = !(s & RT__TASK_RUNNING);
        uint64_t next = s | RT__TASK_NOTIFIED;
        if (idle) {
            next = s | (preclaim ? RT__TASK_RUNNING : RT__TASK_NOTIFIED);
            next += RT__TASK_REF_ONE; /* the run queue's reference */
        }
        if (rt__cas_u64(&t->state, &s, next))
            return idle;
    }
}

/* claim: a worker (or a pool thread) takes a popped NOTIFIED task. Queued
 * tasks have NOTIFIED set and RUNNING clear, so one fetch-add swaps them
 * (RUNNING - NOTIFIED, as two's complement). Returns the word before. */
static inline uint64_t rt__task_state_claim(rt_task *t)
{
    return rt__faa_u64(&t->state, RT__TASK_RUNNING - RT__TASK_NOTIFIED);
}

/* consume a wake: a task queued already claimed (RUNNING) was woken
 * meanwhile; the poll about to run consumes that NOTIFIED. */
static inline void rt__task_state_consume_notified(rt_task *t)
{
    rt__faa_u64(&t->state, (uint64_t)0 - RT__TASK_NOTIFIED);
}

/* What becomes of a task whose poll returned RT_PENDING without a yield. */
typedef enum rt__task_after_pending {
    RT__TASK_IDLE,      /* idle; the run queue's reference went in the CAS */
    RT__TASK_REQUEUE,   /* woken during the poll: requeue (RUNNING cleared) */
    RT__TASK_CANCEL_IT, /* aborted: the caller drops it (still RUNNING) */
} rt__task_after_pending;

/* pending: back to idle, unless woken or aborted during the poll. The
 * queue's reference is never the last (the registry holds one until
 * COMPLETE), so it can go in the same CAS, and so can the polling worker
 * (`worker_bits`: rt__task_worker_bits of its index), which task dumps
 * report for a waiting task. */
static inline rt__task_after_pending rt__task_state_pending(rt_task *t, uint64_t worker_bits)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        if (s & RT__TASK_CANCELLED)
            return RT__TASK_CANCEL_IT;
        uint64_t next = (s & ~(RT__TASK_RUNNING | RT__TASK_WORKER_MASK)) | worker_bits;
        bool requeue = (s & RT__TASK_NOTIFIED) != 0;
        if (!requeue)
            next -= RT__TASK_REF_ONE;
        if (rt__cas_u64(&t->state, &s, next))
            return requeue ? RT__TASK_REQUEUE : RT__TASK_IDLE;
    }
}

/* complete: the owner of RUNNING marks the task COMPLETE (and CANCELLED when
 * `cancelled`; a task that finished first keeps its result). Release: the
 * output and the drop's effects are visible to whoever sees COMPLETE. True
 * when a joiner waits (JOIN_WAKER was set): the caller wakes t->join_waker,
 * then calls rt__task_state_join_woken, and drops `drop_refs` itself.
 * Otherwise the task is not touched again and the references went in the
 * same CAS (never the last: the registry holds one until it sees COMPLETE,
 * and a blocking job's caller passes 0). */
static inline bool rt__task_state_complete(rt_task *t, bool cancelled, uint64_t drop_refs)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        uint64_t next = (s & ~(RT__TASK_RUNNING | RT__TASK_NOTIFIED)) | RT__TASK_COMPLETE;
        if (cancelled)
            next |= RT__TASK_CANCELLED;
        else
            next &= ~RT__TASK_CANCELLED;
        bool joiner = (s & RT__TASK_JOIN_INTEREST) && (s & RT__TASK_JOIN_WAKER);
        if (!joiner)
            next -= drop_refs * RT__TASK_REF_ONE;
        if (rt__cas_u64(&t->state, &s, next))
            return joiner;
    }
}

/* join woken: the completer has woken the join waker and gives the field
 * back by clearing JOIN_WAKER. True when the handle is already gone: the
 * completer then drops the waker itself. */
static inline bool rt__task_state_join_woken(rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    while (!rt__cas_u64(&t->state, &s, s & ~RT__TASK_JOIN_WAKER))
        ;
    return !(s & RT__TASK_JOIN_INTEREST);
}

/* take the join waker back: the handle side clears JOIN_WAKER to replace the
 * waker. False, changing nothing, once COMPLETE (the completer may be using
 * the field). `s` is the caller's last reading of the word. */
static inline bool rt__task_state_take_join_waker(rt_task *t, uint64_t s)
{
    for (;;) {
        if (s & RT__TASK_COMPLETE)
            return false;
        if (rt__cas_u64(&t->state, &s, s & ~RT__TASK_JOIN_WAKER))
            return true;
    }
}

/* publish the join waker: the handle side sets JOIN_WAKER (release: the
 * waker's bytes are visible to the completer, whose CAS reads the bit).
 * False, changing nothing, once COMPLETE: the field stays the handle's. */
static inline bool rt__task_state_publish_join_waker(rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        if (s & RT__TASK_COMPLETE)
            return false;
        if (rt__cas_u64(&t->state, &s, s | RT__TASK_JOIN_WAKER))
            return true;
    }
}

/* release the handle: clears JOIN_INTEREST, and JOIN_WAKER unless COMPLETE.
 * Returns the word before. When it was COMPLETE with JOIN_WAKER set, the
 * completer is using the field and drops the waker itself; otherwise the
 * caller does. The handle's reference is the caller's to drop. A word
 * without JOIN_INTEREST is returned unchanged: the handle was released
 * already (a misuse the caller reports), and nothing is changed. */
static inline uint64_t rt__task_state_release_handle(rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        if (!(s & RT__TASK_JOIN_INTEREST))
            return s;
        uint64_t next = s & ~RT__TASK_JOIN_INTEREST;
        if (!(s & RT__TASK_COMPLETE))
            next &= ~RT__TASK_JOIN_WAKER;
        if (rt__cas_u64(&t->state, &s, next))
            return s;
    }
}

/* What an abort found. */
typedef enum rt__task_abort_result {
    RT__TASK_ABORT_NONE,     /* already finished or cancelled: nothing done */
    RT__TASK_ABORT_MARKED,   /* running or queued: dropped at the next step */
    RT__TASK_ABORT_SCHEDULE, /* idle: NOTIFIED and a queue reference added */
} rt__task_abort_result;

/* abort: sets CANCELLED. A running or queued task is dropped by its worker
 * after the poll or at the pop; an idle one is made NOTIFIED with a queue
 * reference so that the caller schedules it and a worker drops it. *prev
 * receives the word before a successful change. */
static inline rt__task_abort_result rt__task_state_abort(rt_task *t, uint64_t *prev)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        if (s & (RT__TASK_COMPLETE | RT__TASK_CANCELLED))
            return RT__TASK_ABORT_NONE;
        uint64_t next = s | RT__TASK_CANCELLED;
        bool idle = !(s & (RT__TASK_RUNNING | RT__TASK_NOTIFIED));
        if (idle)
            next |= RT__TASK_NOTIFIED, next += RT__TASK_REF_ONE;
        if (rt__cas_u64(&t->state, &s, next)) {
            *prev = s;
            return idle ? RT__TASK_ABORT_SCHEDULE : RT__TASK_ABORT_MARKED;
        }
    }
}

/* cancel a claim-free task: sets CANCELLED (a queued blocking job taken
 * out of the pool's queue, then completed by the caller). */
static inline void rt__task_state_set_cancelled(rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    while (!rt__cas_u64(&t->state, &s, s | RT__TASK_CANCELLED))
        ;
}

/* shutdown's claim: with no worker alive nobody else holds RUNNING, so
 * shutdown takes it and sets CANCELLED. */
static inline void rt__task_state_claim_for_shutdown(rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    while (!rt__cas_u64(&t->state, &s, s | RT__TASK_RUNNING | RT__TASK_CANCELLED))
        ;
}

/* hold: a task dump takes an idle task for a moment, as a worker takes it
 * for a poll (RUNNING), so that it can read the future's state while no
 * worker polls or drops it. Only an idle task (not queued, running,
 * finished or cancelled) can be held. The CAS is the acquire that pairs
 * with the release of the pending CAS that ended its last poll: what that
 * poll wrote to the state is visible. Meanwhile wakes and aborts see a
 * running task and only set NOTIFIED / CANCELLED (a wake by value also
 * gives up its reference, as for a running task). */
static inline bool rt__task_state_hold(rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        if (s & (RT__TASK_RUNNING | RT__TASK_NOTIFIED | RT__TASK_COMPLETE | RT__TASK_CANCELLED))
            return false;
        if (rt__cas_u64(&t->state, &s, s | RT__TASK_RUNNING))
            return true;
    }
}

/* unhold: gives a held task back. Idle again, unless a wake or an abort
 * came during the hold: then it becomes NOTIFIED with one more reference
 * (the run queue's, which the holder adds since it holds none) and the
 * caller must schedule it, as a worker requeues a task woken during its
 * poll. The CAS releases nothing the holder wrote: it only read. */
static inline bool rt__task_state_unhold(rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        uint64_t next = s & ~RT__TASK_RUNNING;
        bool queue = (s & (RT__TASK_NOTIFIED | RT__TASK_CANCELLED)) != 0;
        if (queue)
            next = (next | RT__TASK_NOTIFIED) + RT__TASK_REF_ONE;
        if (rt__cas_u64(&t->state, &s, next))
            return queue;
    }
}

/* What a task spawned with options keeps, just before its header in the
 * same allocation (so the header stays one cache line for every task). */
/* Told how a task ended, once its drop has run and before it is COMPLETE (so
 * before any joiner can see the outcome): its result and status (0, its own
 * error, or -ECANCELED), and whether it was cancelled (aborted or cancelled
 * by shutdown: its result is then NULL; a task may also finish with
 * -ECANCELED as its own status, and a result). Runs on the thread that
 * completes the task (a worker, or the shutdown's caller), as the task: it
 * must not block. What a group child reports to its group through (group.c). */
typedef void (*rt__task_finish_fn)(void *arg, rt_task *t, void *value, int status, bool cancelled);

typedef struct rt__task_ext {
    const char *name;             /* a copy at the end of the allocation, or NULL */
    int32_t pinned;               /* the worker index of a local task, -1, or
                                     RT__TASK_PINNED_JOB for a blocking job */
    uint32_t unused;              /* keeps the header 16-byte aligned */
    rt__task_finish_fn on_finish; /* NULL, or told how the task ended */
    void *finish_arg;             /* its argument */
} rt__task_ext;

_Static_assert(sizeof(rt__task_ext) % 16 == 0, "the prefix keeps the header aligned");

/* rt__task_ext.pinned of a blocking-pool job (which no worker runs). */
#define RT__TASK_PINNED_JOB (-2)

static inline rt__task_ext *rt__task_ext_of(rt_task *t)
{
    return (rt__task_ext *)((char *)t - sizeof(rt__task_ext));
}

/* What a task of a runtime with rt_config.poll_timing keeps about its polls,
 * before its rt__task_ext. The worker polling the task writes every field
 * but woken_ns; whoever queues it writes woken_ns (the queue's hand-off
 * orders that write before the poll that reads it). A task dump reads them
 * all from another thread, so every access is a relaxed atomic: a reading
 * may be a moment old, never torn. */
typedef struct rt__task_timing {
    uint64_t polls;         /* polls so far */
    uint64_t busy_ns;       /* time spent in them */
    uint64_t woken_ns;      /* when it was last queued (spawn or wake; rt__now_ns) */
    uint64_t poll_start_ns; /* when the poll in progress (or the last) began */
    uint64_t last_end_ns;   /* when its last poll ended; 0: never polled */
    uint64_t last_worker;   /* the worker that polled it last + 1; 0: none yet */
} rt__task_timing;

static inline rt__task_timing *rt__task_timing_of(rt_task *t)
{
    return (rt__task_timing *)((char *)t - sizeof(rt__task_ext) - sizeof(rt__task_timing));
}

/* Whether the task keeps an rt__task_timing (an immutable flag). */
static inline bool rt__task_is_timed(rt_task *t)
{
    return (rt__load_relaxed_u64(&t->state) & RT__TASK_TIMED) != 0;
}

/* Notes when a timed task was queued (spawn, or a wake that scheduled it):
 * the start of its scheduling delay. Only whoever queues an idle task
 * calls it, so the field has one writer at a time. */
static inline void rt__task_note_queued(rt_task *t)
{
    if (rt__unlikely(rt__task_is_timed(t)))
        rt__store_relaxed_u64(&rt__task_timing_of(t)->woken_ns, (uint64_t)rt__now_ns());
}

/* coro: marks the task's state as beginning with an rt_coro. Only the worker
 * polling the task calls it, once; the fetch-or is a full barrier, and a
 * task dump that holds the task afterwards sees the bit and reads the
 * record as the poll left it. */
static inline void rt__task_state_set_coro(rt_task *t)
{
    rt__fao_u64(&t->state, RT__TASK_CORO);
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

/* Tasks whose header and state fit this many bytes are allocated as blocks
 * of exactly this size from a block cache (block_cache.h): spawning and
 * freeing tasks is the hot path of every spawn-heavy program, and a private
 * LIFO magazine of equal blocks beats malloc's bins there. */
#define RT__TASK_SMALL_BLOCK 128
_Static_assert(RT__TASK_SMALL_BLOCK == RT__BLOCK_SIZE, "small tasks are pool blocks");

/* What a task keeps beside its future, when it is not a plain one: a name,
 * a pinned worker, and a finish hook (rt__task_ext), and poll timing. */
typedef struct rt__task_extras {
    const char *name;             /* NULL: none */
    int pinned;                   /* -1: none */
    bool timed;                   /* rt_config.poll_timing */
    rt__task_finish_fn on_finish; /* NULL: none */
    void *finish_arg;
} rt__task_extras;

/* Allocates a task for `size` bytes of state (rt__task_alloc) when it cannot
 * be a small block: with a name, a pinned worker or a finish hook the
 * allocation starts with an rt__task_ext and ends with a copy of the name;
 * with `timed` an rt__task_timing comes first (all zero). */
rt_task *rt__task_alloc_large(size_t size, const rt__task_extras *x, uint64_t *flags);

/* Whether a task with these extras needs an rt__task_ext. */
static inline bool rt__task_extras_none(const rt__task_extras *x)
{
    return x->name == NULL && x->pinned == -1 && !x->timed && x->on_finish == NULL;
}

/* Allocates a task for `size` bytes of state: without extras, and small
 * enough, a block from `cache` (NULL: the block pool), else
 * rt__task_alloc_large. *flags receives the immutable flag bits for the
 * state word. NULL when out of memory. Inline: every spawn. */
static inline rt_task *rt__task_alloc(rt__block_cache *cache, size_t size, const rt__task_extras *x,
                                      uint64_t *flags)
{
#ifdef RT__BLOCK_ASAN
    /* Under AddressSanitizer every task comes from malloc: a block cache
     * hands a freed block to the very next spawn, where ASan's quarantine
     * keeps freed memory poisoned for long, so that a join handle used or
     * released after its task was freed is reported as the use after free
     * it is (the block pool itself is still used by timers). */
    (void)cache;
#else
    if (rt__likely(rt__task_extras_none(x) && sizeof(rt_task) + size <= RT__TASK_SMALL_BLOCK)) {
        rt_task *t = rt__block_alloc(cache);
        *flags = RT__TASK_SMALL;
        return t;
    }
#endif
    return rt__task_alloc_large(size, x, flags);
}

/* Frees the task's memory (the last reference is gone) into `cache` (NULL:
 * straight to the block pool, or to malloc for a task that is no block). */
void rt__task_recycle(rt__block_cache *cache, rt_task *t);

/* Drops `n` references; frees the task when they were the last. */
void rt__task_unref(rt_task *t, uint64_t n);

/* Shutdown's cancellation of an unfinished task: runs its drop and completes
 * it with -ECANCELED. Only after every worker has exited. */
void rt__task_cancel_at_shutdown(rt_task *t);
/* Releases a join handle: false, changing nothing, when it was released
 * already (the caller reports the misuse). Any thread. */
bool rt__task_release_handle(rt_task *t);

/* Whether a join handle is still held (JOIN_INTEREST): false once it was
 * released, while the task's memory still exists (a registry or a waker
 * keeps it). */
static inline bool rt__task_handle_held(const rt_task *t)
{
    return (rt__load_acquire_u64(&t->state) & RT__TASK_JOIN_INTEREST) != 0;
}

/* One join attempt, the core of the join operation: RT_READY with the
 * handle released and the outcome in *value (NULL when cancelled) and
 * *status (0, the task's own error, or -ECANCELED), or RT_PENDING with cx's
 * waker stored and the handle kept. */
rt_poll rt__task_join_poll(rt_task *task, rt_context *cx, void **value, int *status);

/* rt_task_wait with a thread waker the caller made (and still owns), so
 * that rt_block_on can have everything it needs before it spawns: 0 once
 * the task finished (the handle released; *value and *status, either may
 * be NULL, hold its outcome, and its state's first `size` bytes, as its
 * drop left them, are copied to copy_to unless that is NULL), or the
 * wait's own error (the handle kept). */
int rt__task_wait_with(rt_task *task, rt__thread_waker *tw, int64_t timeout_ns, void **value,
                       int *status, void *copy_to, size_t size);

/* The state transition of a wake by value (the waker's reference comes
 * with it): returns true when the task was idle and is now marked for a run
 * queue (NOTIFIED, or RUNNING when `preclaim`: queued already claimed), the
 * reference becoming the run queue's, and the caller schedules it;
 * otherwise the reference has been dealt with. Inline: every wake by value. */
static inline bool rt__task_wake_transition(rt_task *t, bool preclaim)
{
    switch (rt__task_state_wake(t, preclaim)) {
    case RT__TASK_WAKE_DROP:
        rt__task_unref(t, 1);
        return false;
    case RT__TASK_WAKE_DONE:
        return false;
    case RT__TASK_WAKE_SCHEDULE:
        break;
    }
    return true;
}

/* Wakes (consumes) *w. When it is a task waker (`task_vtable`, the
 * scheduler's) of a task of `rt` that must be scheduled, returns the task
 * with its queue reference, NOTIFIED, for the caller to schedule in a batch;
 * otherwise wakes it the ordinary way and returns NULL. */
rt_task *rt__task_wake_for_batch(rt_waker *w, const rt_waker_vtable *task_vtable, rt_runtime *rt);

/* Records how the task ended, after its drop ran and before the caller
 * completes it: `value` and `status` (0 or the task's own error), or a
 * cancellation (NULL, -ECANCELED), and tells the finish hook if it has one.
 * Inline: every task's end. */
static inline void rt__task_finish(rt_task *t, void *value, int status, bool cancelled)
{
    t->u.output = value;
    t->fin.status = status;
    if (rt__unlikely(rt__load_relaxed_u64(&t->state) & RT__TASK_EXTENDED)) {
        rt__task_ext *ext = rt__task_ext_of(t);
        if (ext->on_finish != NULL)
            ext->on_finish(ext->finish_arg, t, value, status, cancelled);
    }
}

/* Marks the task COMPLETE (cancelled or not), wakes its joiner and drops
 * `drop_refs` of the caller's references. The caller owns RUNNING. The
 * registry notices the completion at its next sweep. Inline: every task's
 * end. */
static inline void rt__task_complete(rt_task *t, bool cancelled, uint64_t drop_refs)
{
    if (!rt__task_state_complete(t, cancelled, drop_refs))
        return;
    /* JOIN_WAKER was set when we completed: the field is ours to use. */
    rt_waker_wake_by_ref(&t->join_waker);
    if (rt__task_state_join_woken(t)) {
        /* The handle went away while we were waking: we drop the waker. */
        rt_waker_drop(&t->join_waker);
    }
    if (drop_refs > 0)
        rt__task_unref(t, drop_refs);
}

/* Runs the task's drop function on its future's state, if it has one. */
static inline void rt__task_drop_future(rt_task *t)
{
    if (t->fin.drop != NULL)
        t->fin.drop(t->future_state);
}

/* Blocking-pool jobs (task.c): a task that no worker polls. new: NULL when
 * out of memory; the pool's queue holds one reference, the handle another.
 * run: claims the job, runs it unless it was aborted, completes it, and
 * drops the queue's reference. cancel: the same without running it.
 * discard: frees a job that was never queued. */
rt_task *rt__task_new_job(rt_runtime *rt, rt_blocking_fn fn, void (*release)(void *), void *arg,
                          bool handle);
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

/* The calling thread's block of task ids (task.c): next up to limit. */
#define RT__TASK_ID_BLOCK 1024
typedef struct rt__task_ids {
    uint64_t next;
    uint64_t limit;
} rt__task_ids;
extern __thread rt__task_ids rt__tls_task_ids __attribute__((tls_model("initial-exec")));

/* Takes a new block of ids and returns its first. */
uint64_t rt__task_new_id_block(void);

/* A new task id, unique in the process. Inline: every spawn. */
static inline uint64_t rt__task_new_id(void)
{
    /* The fields by name, not through a pointer: see budget.h. */
    if (rt__unlikely(rt__tls_task_ids.next == rt__tls_task_ids.limit))
        return rt__task_new_id_block();
    return rt__tls_task_ids.next++;
}

#endif
