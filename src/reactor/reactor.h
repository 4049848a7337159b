/* The reactor: one thread per runtime running edge-triggered epoll and the
 * timer wheel, waking tasks through their wakers. Internal, not installed.
 *
 * What it owns: the epoll descriptor, an eventfd other threads write to wake
 * it, the timer wheel, a command queue of timers that workers armed or
 * cancelled, and a list of closed descriptors' registrations waiting to be
 * freed. Wakes gathered during one turn are flushed together: the runtime's
 * own tasks go onto its wakes queue (an injector that workers take from
 * before the main one) in one splice, with min(woken, parked) workers
 * unparked. */
#ifndef RT_SRC_REACTOR_H
#define RT_SRC_REACTOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu/wfcqueue.h>

#include <asyncrt/future.h>
#include <asyncrt/runtime.h>

#include "block_cache.h"
#include "common.h"
#include "spinlock.h"
#include "timer_wheel.h"

struct rt_io;
struct rt_task;
struct rt__timer;
struct rt__wake_batch;

/* What the reactor knows of the scheduler that runs the tasks it wakes:
 * which wakers are its tasks', one entry point that schedules a batch of
 * them, and one question for the nap. The runtime fills it in at start; the
 * reactor never calls the scheduler any other way. */
typedef struct rt__reactor_hooks {
    /* The runtime whose tasks the reactor's wakes schedule in batches; the
     * reactor wakes any other waker directly. */
    rt_runtime *rt;
    /* The waker vtable of rt's tasks. */
    const rt_waker_vtable *task_vtable;
    /* Schedules n tasks of rt that the reactor woke: each NOTIFIED, with its
     * run queue reference (rt__task_wake_for_batch). */
    void (*schedule_woken)(rt_runtime *rt, struct rt_task **tasks, unsigned n);
    /* Whether no worker of rt is parked or announcing its park, as a
     * seq_cst read: the reactor's half of the nap's Dekker pair. */
    bool (*every_worker_unparked)(rt_runtime *rt);
} rt__reactor_hooks;

/* The submit gate's closed bit, and one submitter in flight. */
#define RT__SUBMIT_GATE_CLOSED 1u
#define RT__SUBMIT_GATE_ONE 2u

/* The buckets the current tick's timers are sorted into (reactor.c,
 * "Exact deadlines"): 16 of 15.625 us. */
#define RT__SOON_BUCKETS 16

typedef struct rt__reactor {
    int epfd;              /* the epoll instance */
    int wakefd;            /* eventfd: a write wakes the reactor */
    int napfd;             /* a second epoll instance, holding only wakefd: naps wait on it */
    pthread_t thread;      /* the reactor thread */
    bool running;          /* the thread was started and not joined yet */
    int64_t epoch_ns;      /* rt__now_ns() at start: tick 0 of the wheel */
    int64_t nap_max_ns;    /* rt_config.reactor_nap_ns */
    rt__timer_wheel wheel; /* reactor thread only */
    /* Timers whose tick has begun but whose exact deadline has not come
     * (reactor.c, "Exact deadlines"): the tick, cut into buckets by the
     * deadline's nanoseconds, each a list and its lowest key, and the first
     * bucket not empty (RT__SOON_BUCKETS: none). Then when the reactor last
     * fired two or more timers in a turn. Reactor thread only. */
    uint64_t soon_tick;
    rt__timer_entry *soon[RT__SOON_BUCKETS];
    uint32_t soon_min[RT__SOON_BUCKETS];
    unsigned soon_first;
    int64_t last_fire_ns;
    /* The thread's wake batch, made before it starts. */
    struct rt__wake_batch *batch;
    /* The next nap's length, at most nap_max_ns (reactor.c, "Naps"). */
    int64_t nap_ns;
    /* The scheduler, as far as the reactor knows it. */
    rt__reactor_hooks hooks;

    /* Timers armed or cancelled by other threads (MPSC; the reactor is the
     * only consumer, so it dequeues without a lock). */
    RT_ALIGNED_CACHELINE struct __cds_wfcq_head cmd_head;
    struct cds_wfcq_tail cmd_tail;

    /* The earliest timer deadline (rt__now_ns() time) the reactor sleeps
     * towards, UINT64_MAX for no timeout, 0 while it is awake and will look
     * at the commands anyway. A thread that arms an earlier timer kicks it
     * (see timer.c). */
    RT_ALIGNED_CACHELINE uint64_t sleeping_until_ns;
    /* 1 while an eventfd write is pending: kicks are not repeated. */
    uint32_t kick_pending;
    /* 1 while the reactor naps, or is about to (see "Naps" in reactor.c):
     * a worker that parks then kicks it. */
    uint32_t napping;
    /* Set (relaxed) by a parking worker that ends a nap, read and cleared by
     * the reactor after the nap: a hint that decides the next nap's length,
     * nothing else. */
    uint32_t nap_ended_by_park;
    /* Set by rt__reactor_stop. */
    uint32_t stopping;
    /* Threads other than the runtime's workers inside
     * rt__reactor_submit_timer, RT__SUBMIT_GATE_ONE each, plus
     * RT__SUBMIT_GATE_CLOSED once rt__reactor_stop has closed it. */
    uint32_t submit_gate;

    /* Blocks of the timers (and tasks) whose last reference the reactor
     * thread drops, for example every cancelled timeout: without it each
     * went to the block pool under its mutex, which cost the reactor as
     * much as the cancel command itself. Reactor thread only. */
    rt__block_cache cache;

    /* Registrations of closed descriptors, freed at the top of the next turn
     * (the reactor may hold an event naming one from epoll_wait), or of a
     * later one while a look at tasks is in progress (`looks`). */
    pthread_mutex_t release_lock;
    struct rt_io *release_list;
    /* Looks at tasks in progress (task dumps, lost wake-up reports): a
     * look may describe an operation of a task it holds, which reads the
     * rt_io the operation refers to, and an rt_io may be closed while a
     * task waits on it (io.h). See rt__reactor_look_begin. */
    uint32_t looks;

    /* Counters for rt_metrics_read: stored by the reactor thread only,
     * relaxed (a snapshot may be a turn behind). */
    uint64_t turns;     /* epoll waits returned from */
    uint64_t io_events; /* descriptor events (not kicks) they reported */
    uint64_t naps;      /* naps taken */
} rt__reactor;

/* Starts the reactor (epoll, eventfd, thread), waking tasks through `hooks`
 * and napping at most `nap_max_ns` (rt_config.reactor_nap_ns). Returns 0 or
 * -errno, with nothing left started. */
int rt__reactor_start(rt__reactor *r, int64_t nap_max_ns, const rt__reactor_hooks *hooks);
/* Stops and joins the thread, frees queued timers and released
 * registrations, closes its descriptors. */
void rt__reactor_stop(rt__reactor *r);

/* Wakes the reactor if it sleeps past `deadline_ns` (rt__now_ns() time). */
void rt__reactor_kick_before(rt__reactor *r, uint64_t deadline_ns);

/* Ends the reactor's nap, if it naps. Called by a worker of the runtime
 * right after it announced itself parked (a full barrier; see "Naps" in
 * reactor.c for the pairing). */
void rt__reactor_end_nap(rt__reactor *r);

/* Whether the reactor should have woken up at least RT__REACTOR_OVERDUE_NS
 * before `now_ns` (rt__now_ns()) and has not run since: then it is waiting
 * for a CPU, and a worker that sees this yields its own (worker.c).
 *
 * On a machine with fewer cores than busy threads, a reactor that asked to
 * sleep 50 us may run again only milliseconds later, and every timer due
 * meanwhile waits with it. A hint read without ordering: a stale value
 * costs one needless yield or one missed. */
#define RT__REACTOR_OVERDUE_NS 500000
bool rt__reactor_overdue(const rt__reactor *r, int64_t now_ns);
/* Timer commands a worker collects before handing them to the reactor in
 * one splice: arming a hundred thousand sleeps from two workers otherwise
 * makes both exchange the command queue's tail cache line once per timer.
 * A batched command waits at most RT__TIMER_BATCH_WAIT_NS plus the rest of
 * the poll in progress and the whole next one (the age check may reuse a
 * clock reading taken early in a poll), and only commands due no sooner than
 * RT__TIMER_BATCH_SLACK_NS wait at all, so batching makes no timer late
 * while polls take under 1.25 ms. */
#define RT__TIMER_BATCH 64
#define RT__TIMER_BATCH_WAIT_NS 500000
#define RT__TIMER_BATCH_SLACK_NS 3000000

/* One worker's batch (a field of its worker struct; that worker alone
 * touches it). */
typedef struct rt__timer_batch {
    struct rt__timer *timers[RT__TIMER_BATCH]; /* commands not yet handed over */
    unsigned len;                              /* entries in use */
    uint64_t min_ns;                           /* the earliest deadline among them */
    int64_t since;                             /* when the first came (rt_now_ns) */
} rt__timer_batch;

/* Queues a timer command (timer_internal.h), handing the reactor one
 * reference to the timer. `batch`: the calling worker's batch when the
 * caller is a worker of the reactor's runtime, else NULL. `kick_ns`: the
 * timer's deadline (rt__now_ns() time), to wake the reactor if it sleeps
 * past it (UINT64_MAX: never, for a cancellation). `slack_ns`: how long before the
 * timer is due (INT64_MAX: a cancellation, never urgent). With a batch, a
 * command with at least RT__TIMER_BATCH_SLACK_NS of slack joins it (see
 * rt__timer_batch_flush); any other is queued at once, with the batch
 * before it. Returns false, queuing nothing and keeping the reference with
 * the caller, once the reactor is stopping. */
bool rt__reactor_submit_timer(rt__reactor *r, rt__timer_batch *batch, struct rt__timer *t,
                              uint64_t kick_ns, int64_t slack_ns);

/* Hands a worker's batch to the reactor (one splice, one kick check). The
 * worker itself: after a poll when the batch is old enough, before it parks,
 * and when it exits. */
void rt__timer_batch_flush(rt__reactor *r, rt__timer_batch *batch);

/* The I/O layer's interface to the reactor: io.c knows the reactor only
 * through these three. watch adds fd to the epoll instance with `events`
 * (EPOLL* bits), reporting `ptr` with each event; returns 0 or -errno (the
 * errors of epoll_ctl ADD). unwatch removes it (before close(2): epoll keys
 * on the open file description, which survives close when the descriptor
 * was duplicated). release_io hands a closed descriptor's rt_io over for
 * freeing once the reactor can no longer hold an event naming it: at the
 * top of its next turn, or at once when the reactor is not running. Any
 * thread. */
int rt__reactor_watch(rt__reactor *r, int fd, uint32_t events, void *ptr);
void rt__reactor_unwatch(rt__reactor *r, int fd);
void rt__reactor_release_io(rt__reactor *r, struct rt_io *io);

/* A look at tasks begins / ends (around everything it reads). Closed
 * rt_io registrations are not freed while one is in progress. Why that is
 * enough: a look reads an rt_io only through the operation of a task it
 * holds, and it can hold a task only while the task is idle. A close wakes
 * the tasks waiting on the rt_io, so a task that is idle and awaits an
 * operation on a closed rt_io was held before the close's wake: the
 * look's begin (seq_cst fetch-add) precedes its hold, the hold precedes
 * the wake on the task's state word, the wake precedes the release of the
 * registration, and that precedes the reactor's seq_cst load of `looks` in
 * free_released, which therefore sees the look (tasks polled after the
 * wake must not use the operation again: io.h). */
void rt__reactor_look_begin(rt__reactor *r);
void rt__reactor_look_end(rt__reactor *r);

/* The wheel's tick: 250 us (timer_wheel.h says why not 1 ms). Timers
 * still fire at their exact deadline: the wheel holds each in the tick its
 * deadline falls in, and the reactor orders the timers of a tick that has
 * begun by their exact deadlines (reactor.c, "Exact deadlines"). */
#define RT__TIMER_TICK_NS 250000

/* Sets a timer entry's deadline for the reactor's wheel: the tick the
 * deadline falls in (rounded down) and, as its key, the nanoseconds past
 * that tick's start. */
void rt__reactor_file_deadline(const rt__reactor *r, int64_t deadline_ns, rt__timer_entry *entry);

/* Collects wakes made on the reactor thread, flushed after the turn's timers
 * and again after its descriptor events.
 *
 * A wake reads and then changes its task's state word, a line the task's
 * worker wrote last: on the reactor thread nearly every wake is a cache
 * miss, and the atomic update waits for it. So a waker is held back for
 * RT__WAKE_LAG further wakes after its task's line is prefetched, and the
 * misses of consecutive wakes overlap instead of queuing one behind the
 * other. */
#define RT__WAKE_BATCH 512
#define RT__WAKE_LAG 8
typedef struct rt__wake_batch {
    const rt__reactor_hooks *hooks; /* the reactor's */
    unsigned n;                     /* tasks gathered */
    unsigned lag_first;             /* index in `lagging` of the oldest held-back waker */
    unsigned lag_count;             /* held-back wakers, from lag_first on (modulo RT__WAKE_LAG) */
    rt_waker lagging[RT__WAKE_LAG];
    struct rt_task *tasks[RT__WAKE_BATCH];
} rt__wake_batch;

/* Wakes (consumes) `w` by the next flush: the runtime's own tasks are
 * gathered into the batch, other wakers are woken at once once their turn in
 * the lag comes. */
void rt__wake_batch_add(rt__wake_batch *b, rt_waker *w);
/* Wakes everything added so far and schedules the gathered tasks. */
void rt__wake_batch_flush(rt__wake_batch *b);

#endif
