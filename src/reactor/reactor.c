/* The reactor thread: edge-triggered epoll, the timer wheel, batched wakes.
 * See reactor.h for what it owns.
 *
 * One turn:
 *   1. free the registrations of descriptors closed before this turn began:
 *      any event naming one came from an epoll_wait that returned before the
 *      close, and was processed in an earlier turn (Tokio's scheme: a
 *      registration is never freed while the reactor may still hold an
 *      event naming it);
 *   2. take the timer commands (armed or cancelled timers), at most
 *      RT_REACTOR_COMMAND_BUDGET of them, so a backlog cannot hold back the
 *      timers already due: the rest are taken next turn, without sleeping;
 *   3. advance the wheel to now, gathering the wakes of timers that fired;
 *   4. flush the wakes: one injector splice, min(woken, parked) unparks;
 *   5. publish the time it will sleep until, re-check the command queue
 *      (a Dekker pair with rt__reactor_kick_before: whoever comes second
 *      sees the other), and epoll_pwait2 until then (ns precision), or only
 *      briefly while a producer's enqueue is unfinished (see sleep_spec);
 *   6. record the events: readiness bits and ticks, gathering the wakers;
 *   7. nap, if every worker is busy (see "Naps" below); the next turn's wait
 *      then only collects what arrived meanwhile, without sleeping.
 * An idle reactor sleeps in epoll with no timeout: 0% CPU. */
#include "reactor.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <asyncrt/timer.h>

#include "atomic.h"
#include "events.h"
#include "fault.h"
#include "readiness.h"
#include "park.h"
#include "task_internal.h"
#include "timer_internal.h"
#include "waker.h"

#define RT_REACTOR_EVENTS 256

/* data.ptr of the eventfd's registration: never a valid rt_io. */
static char wakefd_marker;

/* Set once by the first ENOSYS from epoll_pwait2 (see reactor_wait); read
 * relaxed: it only ever goes from 0 to 1. */
static uint32_t no_pwait2;

/* ---- Exact deadlines ---------------------------------------------------------
 *
 * The wheel counts 250 us ticks, and a timer whose deadline is rounded up to
 * a tick fires 125 us late on average, before any other delay. So the
 * reactor files each timer in the tick its deadline falls in (rounded down),
 * with the nanoseconds past that tick's start as the entry's key. When the
 * wheel reaches the tick (at its start, never after the deadline), a timer
 * whose exact deadline has come fires, and the others go into `soon`: the
 * current tick cut into RT__SOON_BUCKETS buckets by key, each a list with
 * the lowest key in it. Each turn fires the buckets that have passed whole
 * and, in the bucket the clock is in, the timers due. The reactor sleeps
 * until the earlier of the first bucket's lowest deadline and the wheel's
 * next deadline, which for a tick of the current level-0 range is exact too
 * (the wheel keeps the lowest key of each of those slots). So a lone timer
 * wakes the reactor once, at its deadline, and each timer of a busy tick is
 * touched once to file it into its bucket and once to fire it (a heap
 * ordered by deadline cost several cache misses per timer instead, and made
 * the 100,000-timer benchmark's p99 lateness twice as long).
 *
 * Many timers due close together would wake the reactor for each of them,
 * and each wake costs a system call and a context switch (on a 2-vCPU
 * machine, 16 us ticks made that benchmark's median lateness ten times
 * worse): after a turn that fired two or more timers the next sleep lasts
 * at least RT__REACTOR_COALESCE_NS, so dense timers are fired in batches at
 * most that late, while a timer after a quiet spell is exact.
 *
 * An entry in a bucket is unfiled as far as the wheel knows, linked through
 * its link's `next`. A cancel command finds it unfiled and leaves it there;
 * its fire finds the timer cancelled and only gives back the wheel's
 * reference, as for a timer cancelled at the moment it fires
 * (timer_internal.h). */

/* The shortest sleep after a turn that fired two or more timers. */
#define RT__REACTOR_COALESCE_NS 50000

/* The width of a bucket of `soon`, in nanoseconds of a tick. */
#define RT__SOON_WIDTH (RT__TIMER_TICK_NS / RT__SOON_BUCKETS)
_Static_assert(RT__TIMER_TICK_NS % RT__SOON_BUCKETS == 0, "buckets cut the tick evenly");

void rt__reactor_file_deadline(const rt__reactor *r, int64_t deadline_ns, rt__timer_entry *entry)
{
    int64_t rel = deadline_ns - r->epoch_ns;
    if (rel <= 0) {
        entry->deadline = 0;
        entry->key = 0;
        return;
    }
    entry->deadline = (uint64_t)rel / RT__TIMER_TICK_NS;
    entry->key = (uint32_t)((uint64_t)rel % RT__TIMER_TICK_NS);
}

/* An entry's exact deadline, in nanoseconds from the epoch. */
static inline uint64_t exact_deadline(const rt__timer_entry *e)
{
    return e->deadline * RT__TIMER_TICK_NS + e->key;
}

/* The bucket links: an entry's `link.next` points to the next entry's link
 * (the entry is found again from its offset). */
static inline rt__timer_entry *soon_of(rt__timer_link *l)
{
    return l != NULL ? (rt__timer_entry *)((char *)l - offsetof(rt__timer_entry, link)) : NULL;
}

/* Files an entry of the current tick, not yet due, into its bucket. */
static void soon_push(rt__reactor *r, rt__timer_entry *e)
{
    unsigned b = e->key / RT__SOON_WIDTH;
    r->soon_tick = e->deadline;
    e->link.next = r->soon[b] != NULL ? &r->soon[b]->link : NULL;
    r->soon[b] = e;
    if (e->key < r->soon_min[b])
        r->soon_min[b] = e->key;
    if (b < r->soon_first)
        r->soon_first = b;
}

/* What the wheel's callback needs: where fired timers' wakes go, the time
 * of this advance, in nanoseconds from the epoch, and how many timers woke
 * someone (a cancelled one, found at its deadline, does not count towards
 * coalescing: it woke nobody). */
typedef struct due_ctx {
    rt__reactor *r;
    rt__wake_batch *batch;
    uint64_t now;
    size_t fired;
} due_ctx;

/* The wheel's callback: the timer's tick has begun. */
static void timer_due(rt__timer_entry *entry, void *arg)
{
    due_ctx *d = arg;
    if (exact_deadline(entry) <= d->now) {
        d->fired += rt__timer_fire(entry, d->batch);
    } else {
        soon_push(d->r, entry);
    }
}

/* Fires the timers of `soon` whose deadline has come: the buckets before
 * the clock's whole (all of them once the clock has left their tick), and
 * in the clock's own bucket those due, keeping the rest. */
static void fire_soon(due_ctx *d)
{
    rt__reactor *r = d->r;
    unsigned last = RT__SOON_BUCKETS; /* the bucket the clock is in, if this tick */
    if (d->now / RT__TIMER_TICK_NS == r->soon_tick)
        last = (unsigned)(d->now % RT__TIMER_TICK_NS) / RT__SOON_WIDTH;
    for (unsigned b = r->soon_first; b < RT__SOON_BUCKETS && b <= last; b++) {
        rt__timer_entry *e = r->soon[b];
        r->soon[b] = NULL;
        r->soon_min[b] = UINT32_MAX;
        while (e != NULL) {
            rt__timer_entry *next = soon_of(e->link.next);
            if (b < last || exact_deadline(e) <= d->now) {
                d->fired += rt__timer_fire(e, d->batch);
            } else {
                soon_push(r, e); /* the clock's bucket, not yet due */
            }
            e = next;
        }
    }
    unsigned first = r->soon_first;
    while (first < RT__SOON_BUCKETS && r->soon[first] == NULL)
        first++;
    r->soon_first = first;
}

/* Advances the wheel to now and fires every timer due. */
static void fire_timers(rt__reactor *r, rt__wake_batch *batch)
{
    int64_t now = rt__now_ns();
    int64_t rel = now - r->epoch_ns;
    due_ctx d = {r, batch, rel <= 0 ? 0 : (uint64_t)rel, 0};
    /* What is left of the last tick is all due once the clock has left it:
     * fired before the wheel files the next tick's timers into `soon`. */
    fire_soon(&d);
    /* The wheel's time never runs ahead of the clock (rounded down). */
    rt__timer_wheel_advance(&r->wheel, d.now / RT__TIMER_TICK_NS, timer_due, &d);
    if (d.fired >= 2)
        r->last_fire_ns = now;
}

/* The earliest exact deadline of a timer (nanoseconds from the epoch), or
 * UINT64_MAX. For a deadline beyond the current level-0 range it is the
 * start of the slot that holds it, where the wheel moves it down. */
static uint64_t next_timer(const rt__reactor *r)
{
    uint64_t next = UINT64_MAX;
    uint64_t tick = rt__timer_wheel_next_deadline(&r->wheel);
    if (tick != UINT64_MAX) {
        uint32_t key = rt__timer_wheel_key_bound(&r->wheel, tick);
        next = tick * RT__TIMER_TICK_NS + (key < RT__TIMER_TICK_NS ? key : 0);
    }
    if (r->soon_first < RT__SOON_BUCKETS) {
        uint64_t first = r->soon_tick * RT__TIMER_TICK_NS + r->soon_min[r->soon_first];
        if (first < next)
            next = first;
    }
    return next;
}

/* ---- Commands from other threads ---------------------------------------- */

/* Writes the eventfd unless a kick is already on its way (kick_pending). */
static void kick(rt__reactor *r)
{
    if (rt__fas_u32(&r->kick_pending, 1) != 0)
        return;
    uint64_t one = 1;
    /* EAGAIN (counter full) still leaves it readable: the wake happens. */
    ssize_t n = write(r->wakefd, &one, sizeof one);
    (void)n;
}

void rt__reactor_kick_before(rt__reactor *r, uint64_t deadline_ns)
{
    /* The caller's queue push was a full barrier (the enqueue's exchange):
     * this load cannot see a sleep published before it that missed the push. */
    if (deadline_ns >= rt__load_seq_cst_u64(&r->sleeping_until_ns))
        return;
    RT__DEBUG_YIELD(); /* the reactor may wake and read the eventfd here */
    kick(r);
}

void rt__reactor_end_nap(rt__reactor *r)
{
    /* Seq_cst: the worker's half of the Dekker pair in nap() (see "Naps"). */
    if (!rt__load_seq_cst_u32(&r->napping))
        return;
    rt__store_relaxed_u32(&r->nap_ended_by_park, 1);
    /* Any kick in flight ends the nap as well as ours would (see "Naps"). */
    kick(r);
}

bool rt__reactor_overdue(const rt__reactor *r, int64_t now_ns)
{
    /* Relaxed: a hint (reactor.h). 0 while the reactor runs, UINT64_MAX
     * while it sleeps with no deadline: never overdue then. */
    uint64_t until = rt__load_relaxed_u64(&r->sleeping_until_ns);
    if (until == 0 || until == UINT64_MAX)
        return false;
    int64_t wake_ns = (int64_t)until;
    /* Without epoll_pwait2 the timeout is rounded up to a whole
     * millisecond, so the reactor may rightly sleep that much longer. */
    int64_t allowance = rt__load_relaxed_u32(&no_pwait2) ? 1000000 : 0;
    return now_ns - wake_ns >= RT__REACTOR_OVERDUE_NS + allowance;
}

bool rt__reactor_submit_timer(rt__reactor *r, rt__timer_batch *batch, rt__timer *t,
                              uint64_t kick_ns, int64_t slack_ns)
{
    /* A stopped reactor takes no commands: its stop releases what is left
     * in its wheel, and the caller keeps the reference it offered. The
     * runtime's own workers are joined before the reactor stops, so for them
     * the flag is enough. Any other thread passes the gate, which
     * rt__reactor_stop closes and then waits to see empty before its last
     * take_commands and before it closes the eventfd: without it, a command
     * enqueued just after that last take would never be taken (its timer
     * leaked, its waker never woken) and the kick could write to a closed
     * descriptor. The gate's RMWs are full barriers: a submitter that got in
     * before the close is waited for; one that comes after sees bit 0. */
    bool own_worker = batch != NULL;
    if (own_worker) {
        if (rt__load_acquire_u32(&r->stopping))
            return false;
    } else if (rt__faa_u32(&r->submit_gate, RT__SUBMIT_GATE_ONE) & RT__SUBMIT_GATE_CLOSED) {
        rt__faa_u32(&r->submit_gate, -RT__SUBMIT_GATE_ONE);
        return false;
    }
    RT__DEBUG_WINDOW("timer.submit"); /* the reactor may be stopping right here */
    cds_wfcq_node_init(&t->node);
    rt__tsan_release(&t->node);
    if (own_worker) {
        if (batch->len == 0) {
            batch->since = rt__now_ns();
            batch->min_ns = kick_ns;
        } else if (kick_ns < batch->min_ns) {
            batch->min_ns = kick_ns;
        }
        batch->timers[batch->len++] = t;
        if (slack_ns < RT__TIMER_BATCH_SLACK_NS || batch->len == RT__TIMER_BATCH)
            rt__timer_batch_flush(r, batch);
        return true;
    }
    cds_wfcq_enqueue(&r->cmd_head, &r->cmd_tail, &t->node);
    rt__reactor_kick_before(r, kick_ns);
    rt__faa_u32(&r->submit_gate, -RT__SUBMIT_GATE_ONE);
    return true;
}

void rt__timer_batch_flush(rt__reactor *r, rt__timer_batch *batch)
{
    unsigned n = batch->len;
    if (n == 0)
        return;
    batch->len = 0;
    /* Linked privately, then spliced in with one exchange on the shared
     * tail (a full barrier, as a single enqueue's is, for the kick check
     * below). The private queue has no concurrent user, so the "blocking"
     * splice never waits. */
    struct __cds_wfcq_head head;
    struct cds_wfcq_tail tail;
    __cds_wfcq_init(&head, &tail);
    for (unsigned i = 0; i < n; i++)
        cds_wfcq_enqueue(&head, &tail, &batch->timers[i]->node);
    __cds_wfcq_splice_blocking(&r->cmd_head, &r->cmd_tail, &head, &tail);
    rt__reactor_kick_before(r, batch->min_ns);
}

int rt__reactor_watch(rt__reactor *r, int fd, uint32_t events, void *ptr)
{
    struct epoll_event ev = {.events = events, .data.ptr = ptr};
    return rt__epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

void rt__reactor_unwatch(rt__reactor *r, int fd)
{
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL);
}

void rt__reactor_release_io(rt__reactor *r, rt_io *io)
{
    if (!r->running) {
        free(io);
        return;
    }
    pthread_mutex_lock(&r->release_lock);
    io->release_next = r->release_list;
    r->release_list = io;
    pthread_mutex_unlock(&r->release_lock);
}

void rt__reactor_look_begin(rt__reactor *r)
{
    rt__faa_u32(&r->looks, 1);
}

void rt__reactor_look_end(rt__reactor *r)
{
    rt__faa_u32(&r->looks, (uint32_t)-1);
}

static void free_released(rt__reactor *r, bool stopping)
{
    /* A look in progress may read a registration on the list (see
     * rt__reactor_look_begin): keep them until a turn without one. At the
     * stop none can be: shutdown excludes looks, and the workers are gone. */
    if (!stopping && rt__load_seq_cst_u32(&r->looks) != 0)
        return;
    pthread_mutex_lock(&r->release_lock);
    rt_io *io = r->release_list;
    r->release_list = NULL;
    pthread_mutex_unlock(&r->release_lock);
    while (io != NULL) {
        rt_io *next = io->release_next;
        free(io);
        io = next;
    }
}

/* What take_commands left in the queue. */
enum commands_left {
    COMMANDS_NONE,    /* the queue was empty */
    COMMANDS_MORE,    /* the turn's budget ran out first */
    COMMANDS_BLOCKED, /* a producer is between its exchange and its link store */
};

/* Commands filed per turn at most. A reactor that waited for a CPU may find
 * tens of thousands queued: filing them all first, at about 100 ns each,
 * would hold back the timers already due by milliseconds. Between two
 * budgets the turn fires those. */
#define RT_REACTOR_COMMAND_BUDGET 1024

static enum commands_left take_commands(rt__reactor *r)
{
    /* Single consumer: no dequeue lock needed. */
    for (unsigned n = 0; n < RT_REACTOR_COMMAND_BUDGET; n++) {
        struct cds_wfcq_node *node = __cds_wfcq_dequeue_nonblocking(&r->cmd_head, &r->cmd_tail);
        if (node == NULL)
            return COMMANDS_NONE;
        if (node == CDS_WFCQ_WOULDBLOCK)
            return COMMANDS_BLOCKED;
        rt__tsan_acquire(node);
        rt__timer_command(r, caa_container_of(node, rt__timer, node));
    }
    return COMMANDS_MORE;
}

/* ---- Descriptor events ------------------------------------------------------ */

/* The reactor's half of the readiness protocol (readiness.h; io.c has the
 * task's half): records `dirs` ready (and `sticky_dirs` sticky) with a new
 * tick, then takes the wakers registered for those directions. */
static void record_event(rt_io *io, unsigned dirs, unsigned sticky_dirs, rt_waker *reader,
                         rt_waker *writer)
{
    uint64_t add = dirs | ((uint64_t)sticky_dirs << RT__IO_STICKY_SHIFT);
    uint64_t s = rt__load_acquire_u64(&io->readiness);
    while (!rt__cas_u64(&io->readiness, &s, (s | add) + RT__IO_TICK_ONE))
        ;
    rt__spin_lock(&io->lock);
    if (dirs & RT__IO_READ) {
        *reader = io->reader;
        io->reader = rt__waker_noop();
    }
    if (dirs & RT__IO_WRITE) {
        *writer = io->writer;
        io->writer = rt__waker_noop();
    }
    rt__spin_unlock(&io->lock);
}

/* ---- The thread ------------------------------------------------------------ */

/* How long the reactor sleeps at most while a producer it cannot see past
 * finishes its enqueue. */
#define RT_REACTOR_BLOCKED_WAIT_NS 50000

/* How long to sleep: until the next timer deadline (no sooner than
 * RT__REACTOR_COALESCE_NS after a turn that fired several: see "Exact
 * deadlines"); 0 if commands wait;
 * at most RT_REACTOR_BLOCKED_WAIT_NS if the queue is blocked by a producer
 * caught between its exchange and its link store ("would block").
 *
 * That producer is a runnable thread, usually preempted, and may be waiting
 * for this very CPU. Polling epoll with a zero timeout would keep it off the
 * CPU while commands pile up behind the unfinished one and no timer fires.
 * It cannot sleep until the next deadline either: the producer may
 * have read `sleeping_until_ns` before our store below and decided not to
 * kick (its link store may still sit in its store buffer when it reads). A
 * short sleep gives the CPU away and bounds that delay. */
static bool sleep_spec(rt__reactor *r, struct timespec *ts, enum commands_left left_over)
{
    uint64_t next = next_timer(r);
    uint64_t until = next == UINT64_MAX ? UINT64_MAX : (uint64_t)r->epoch_ns + next;
    /* Publish, then re-check the queue: pairs with rt__reactor_kick_before.
     * The deadline itself, not the coalesced wake: a timer armed before it
     * kicks, one due between the two is fired by the coalesced wake. */
    rt__store_seq_cst_u64(&r->sleeping_until_ns, until);
    int64_t limit = INT64_MAX;
    if (left_over == COMMANDS_BLOCKED)
        limit = RT_REACTOR_BLOCKED_WAIT_NS;
    else if (!cds_wfcq_empty(&r->cmd_head, &r->cmd_tail))
        limit = 0;
    if (next == UINT64_MAX && limit == INT64_MAX)
        return false; /* nothing to wait for but events */
    int64_t left = limit;
    if (next != UINT64_MAX) {
        int64_t wake_ns = (int64_t)until;
        if (wake_ns < r->last_fire_ns + RT__REACTOR_COALESCE_NS)
            wake_ns = r->last_fire_ns + RT__REACTOR_COALESCE_NS;
        int64_t until_deadline = wake_ns - rt__now_ns();
        if (until_deadline < left)
            left = until_deadline;
    }
    if (left < 0)
        left = 0;
    ts->tv_sec = (time_t)(left / 1000000000);
    ts->tv_nsec = (long)(left % 1000000000);
    return true;
}

/* Waits for events until *ts from now (NULL: no limit). epoll_pwait2 (Linux
 * 5.11) has nanosecond timeouts; on an older kernel it fails with ENOSYS,
 * and we fall back for good to epoll_wait, rounding the timeout up to whole
 * milliseconds (a timer must never fire early). Without the fallback the
 * reactor would spin on the error. */
static int reactor_wait(int epfd, struct epoll_event *events, int max_events,
                        const struct timespec *ts)
{
    if (!rt__load_relaxed_u32(&no_pwait2)) {
        int n = epoll_pwait2(epfd, events, max_events, ts, NULL);
        if (n >= 0 || errno != ENOSYS)
            return n;
        rt__store_relaxed_u32(&no_pwait2, 1);
    }
    int timeout_ms = -1;
    if (ts != NULL) {
        int64_t ms = (int64_t)ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000;
        timeout_ms = ms > INT32_MAX ? INT32_MAX : (int)ms;
    }
    return epoll_wait(epfd, events, max_events, timeout_ms);
}

/* Takes a kick: reads the eventfd's counter, then lets kicks through again.
 * The other order would lose wake-ups: a kicker that had read
 * `sleeping_until_ns` while we slept could set kick_pending between our
 * clear and our read and write the eventfd; the read would consume its
 * write, so the edge it raised would be reported with nothing to read (and
 * dropped), and kick_pending would stay 1 with no kick on its way: every
 * later kick skipped, and the reactor asleep for good with commands queued.
 * The clear is a seq_cst store: a kicker whose exchange saw 1 (and so
 * skipped its write) enqueued its command before that exchange, and the
 * command is visible to the loads that follow (the next take_commands and
 * sleep_spec's re-check). */
static void take_kick(rt__reactor *r)
{
    uint64_t count;
    ssize_t got = read(r->wakefd, &count, sizeof count);
    (void)got;
    RT__DEBUG_YIELD(); /* a kicker may exchange right here */
    rt__store_seq_cst_u32(&r->kick_pending, 0);
}

/* ---- Naps -------------------------------------------------------------------
 *
 * Waiting in epoll, the reactor is woken by the first event that arrives,
 * one wake per few events when the runtime serves many busy connections.
 * On a machine with fewer cores than busy threads each wake takes a CPU from
 * a worker (or from the peer's threads on the same machine), and a busy
 * echo server wakes its reactor once per handful of events. Tokio has no
 * such thread: its workers poll epoll themselves, when idle or every 61
 * polls.
 *
 * So after a turn that collected 2 or more descriptor events while every
 * worker is busy, the reactor naps instead: it waits on `napfd`, an epoll
 * instance holding only the eventfd, so that events pile up in the kernel
 * without waking anyone, and collects them next turn with a zero timeout.
 * The nap ends at the first of:
 *   - a worker parking: it has run out of work, so new events are wanted
 *     now (rt__reactor_end_nap, called from park_worker);
 *   - a kick: a timer due before the nap's end, or shutdown (the eventfd
 *     wakes napfd as it wakes epfd: one write raises an edge in both);
 *   - the next timer deadline, or the nap's length (r->nap_ns, see below).
 * A single event per turn (a lightly loaded server) never starts a nap, so
 * it costs nothing where the wakes are cheap.
 *
 * A nap that runs to its end found every worker busy all along, with work
 * that is not the events: CPU-bound tasks that never let a worker park. The
 * events then only waited: beside 4 tasks that poll 50 us at a time, full
 * 500 us naps made echo round trips several times slower (p50 about 600 us
 * against 100-160 us with naps off). So
 * each nap that runs to its end halves the next one, down to
 * RT_REACTOR_NAP_FLOOR_NS, and a nap a parking worker ends restores the full
 * rt_config.reactor_nap_ns (`nap_ended_by_park`, a relaxed hint: a stale
 * one only restores the length early). A nap cut short by a timer kick,
 * by shutdown or by the next deadline leaves the length as it was: it says
 * nothing about the workers. In an echo server nearly every nap is ended by
 * a parking worker, so the full length stays.
 * docs/internals.md, "Reactor naps", has the protocol in one place.
 *
 * State of `napping`:
 *
 *        reactor: store 1, then sees every worker unparked
 *     0 ------------------------------------------------------> 1 (napping)
 *     ^  reactor: store 1, then sees a worker parked: back to 0   |
 *     |                                                            |
 *     +---------- reactor: the nap's wait returned: store 0 ------+
 *
 * Only the reactor writes it; workers read it. The Dekker pair: the reactor
 * stores 1 (seq_cst) and then loads the idle word (seq_cst); a parking
 * worker announces itself in the idle word (an RMW, a full barrier) and then
 * loads `napping` (seq_cst). At least one sees the other: either the
 * reactor sees the worker parked and does not nap, or the worker sees the
 * nap and kicks. A worker that finds kick_pending already 1 skips its
 * write: either a write is outstanding (unread, so napfd is ready and the
 * nap returns at once), or the reactor is between reading the eventfd and
 * clearing the flag, awake and out of any nap; before its next nap it loads
 * the idle word again and sees the worker parked.
 *
 * A kick taken by the main wait leaves its edge queued in napfd. Linux
 * polls a queued item again before it reports it and drops it when the
 * eventfd is not readable, so the next nap goes on undisturbed. */

/* A turn must collect at least this many descriptor events to nap after it. */
#define RT_REACTOR_NAP_MIN_EVENTS 2
/* The shortest a nap gets by halving: still long enough to gather the
 * events of a few round trips, and naps keep being tried, so that the full
 * length comes back once workers park again. */
#define RT_REACTOR_NAP_FLOOR_NS 25000

/* Naps if every worker is busy; returns whether it did. */
static bool nap(rt__reactor *r)
{
    int64_t limit = r->nap_ns;
    if (limit <= 0)
        return false;
    rt__store_seq_cst_u32(&r->napping, 1);
    RT__DEBUG_YIELD(); /* a worker may park right here */
    if (!r->hooks.every_worker_unparked(r->hooks.rt)) {
        rt__store_relaxed_u32(&r->napping, 0);
        return false;
    }
    /* Publishes the deadline, so earlier timers kick as during a sleep. */
    struct timespec ts;
    bool own_length = true; /* the nap is as long as r->nap_ns, not cut by a deadline */
    if (sleep_spec(r, &ts, COMMANDS_NONE)) {
        int64_t left = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        if (left < limit) {
            limit = left;
            own_length = false;
        }
    }
    /* No nap when commands wait (limit 0), nor once stopping: its workers
     * gone, nobody would end it. The seq_cst load pairs with the seq_cst
     * stores of rt__reactor_stop: a stop whose kick saw the reactor awake
     * (`sleeping_until_ns` 0, before the publication above) is seen
     * here; a later stop sees the published deadline and kicks. */
    if (limit == 0 || rt__load_seq_cst_u32(&r->stopping)) {
        rt__store_relaxed_u32(&r->napping, 0);
        return false;
    }
    if (own_length) {
        /* The nap ends before the deadline sleep_spec published: publish
         * its end instead. Workers then see a reactor
         * that waits for a CPU after its nap as overdue and yield to it
         * (rt__reactor_overdue), and a timer due after the nap's end needs
         * no kick: the reactor takes its command when the nap ends. Only a
         * kick is spared by the lower value, never a command lost. */
        rt__store_seq_cst_u64(&r->sleeping_until_ns, (uint64_t)(rt__now_ns() + limit));
    }
    ts.tv_sec = (time_t)(limit / 1000000000);
    ts.tv_nsec = (long)(limit % 1000000000);
    /* Counted as it begins: a test may watch for a nap still in progress. */
    rt__store_relaxed_u64(&r->naps, r->naps + 1);
    struct epoll_event ev;
    int n = reactor_wait(r->napfd, &ev, 1, &ts);
    /* A test may hold the reactor here, as a reactor waiting for a CPU after
     * its nap is held: it must look overdue (rt__reactor_overdue). */
    RT__DEBUG_WINDOW("reactor.nap_over");
    rt__store_seq_cst_u64(&r->sleeping_until_ns, 0);
    rt__store_relaxed_u32(&r->napping, 0);
    bool by_park = rt__fas_u32(&r->nap_ended_by_park, 0) != 0;
    if (n > 0)
        take_kick(r);
    if (by_park) {
        r->nap_ns = r->nap_max_ns;
    } else if (n == 0 && own_length) {
        int64_t half = r->nap_ns / 2;
        r->nap_ns = half > RT_REACTOR_NAP_FLOOR_NS ? half : RT_REACTOR_NAP_FLOOR_NS;
        if (r->nap_ns > r->nap_max_ns)
            r->nap_ns = r->nap_max_ns;
    }
    return true;
}

#ifdef RT_DEBUG_YIELD
/* The debug window a test sees as the reactor wakes: whether it slept
 * towards a timer deadline (0 after a nap: it did not sleep). */
static const char *woke_window(const rt__reactor *r)
{
    uint64_t until = rt__load_relaxed_u64(&r->sleeping_until_ns);
    return until != 0 && until != UINT64_MAX ? "reactor.woke_for_deadline" : "reactor.woke";
}
#endif

/* The reactor runs under the default policy, SCHED_OTHER, so that an event
 * lets it preempt a busy worker: under SCHED_BATCH it would wait for the end
 * of a time slice before every batch while the workers run CPU-bound tasks
 * (docs/design.md, "Tried and rejected"). */
static void *reactor_main(void *arg)
{
    rt__reactor *r = arg;
    struct epoll_event events[RT_REACTOR_EVENTS];
    /* Made by rt__reactor_start: the thread needs nothing it could fail to get. */
    rt__wake_batch *batch = r->batch;
    rt__block_cache_set_current(&r->cache);
    /* The kernel may end a thread's timed wait up to its timer slack late
     * (50 us by default) to batch wake-ups: every timer would pay that on
     * top of the wheel's tick. A bare 1 ms epoll_pwait2 measured 123 us late
     * at the median with the default slack and 71 us with 1 ns (a 2-vCPU
     * VM), so the reactor asks for none. It never fails for the calling
     * thread's own slack. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    bool napped = false; /* the last turn ended in a nap */

    for (;;) {
        RT__DEBUG_WINDOW("reactor.turn"); /* a test may hold the turn to let commands pile up */
        free_released(r, false);
        enum commands_left left_over = take_commands(r);
        fire_timers(r, batch);
        rt__wake_batch_flush(batch);
        if (rt__load_acquire_u32(&r->stopping))
            break;

        struct timespec ts;
        bool bounded;
        if (napped) {
            /* Collect what arrived during the nap, without sleeping; the
             * reactor is awake, so `sleeping_until_ns` stays 0. */
            bounded = true;
            ts.tv_sec = 0;
            ts.tv_nsec = 0;
        } else {
            bounded = sleep_spec(r, &ts, left_over);
        }
        int n = reactor_wait(r->epfd, events, RT_REACTOR_EVENTS, bounded ? &ts : NULL);
        /* A test may hold the reactor here, woken but not yet running, as
         * a reactor waiting for a CPU is (see rt__reactor_overdue). */
        RT__DEBUG_WINDOW(woke_window(r));
        rt__store_seq_cst_u64(&r->sleeping_until_ns, 0);
        napped = false;
        if (n < 0)
            continue; /* EINTR; nothing else can fail with valid arguments */
        unsigned io_events = 0;
        for (int i = 0; i < n; i++) {
            void *ptr = events[i].data.ptr;
            if (ptr == &wakefd_marker) {
                take_kick(r);
                continue;
            }
            io_events++;
            rt__tsan_acquire(ptr); /* pairs with rt__io_adopt's release */
            uint32_t ev = events[i].events;
            unsigned dirs = 0, sticky_dirs = 0;
            if (ev & (EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                dirs |= RT__IO_READ;
            if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR))
                dirs |= RT__IO_WRITE;
            /* After these a short transfer proves nothing, for good
             * (readiness.h, "Short transfers"). */
            if (ev & (EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                sticky_dirs |= RT__IO_READ;
            if (ev & (EPOLLHUP | EPOLLERR))
                sticky_dirs |= RT__IO_WRITE;
            rt_waker reader = rt_waker_noop(), writer = rt_waker_noop();
            record_event(ptr, dirs, sticky_dirs, &reader, &writer);
            rt__wake_batch_add(batch, &reader);
            rt__wake_batch_add(batch, &writer);
        }
        rt__wake_batch_flush(batch);
        RT__EV_REACTOR_TURN(io_events);
        rt__store_relaxed_u64(&r->turns, r->turns + 1);
        rt__store_relaxed_u64(&r->io_events, r->io_events + io_events);
        if (io_events >= RT_REACTOR_NAP_MIN_EVENTS && left_over == COMMANDS_NONE)
            napped = nap(r);
        /* No yield here before the next epoll_wait: a reactor that stays
         * runnable is scheduled against the workers and preempts them more
         * often than its saved sleeps are worth (docs/design.md, "Tried and
         * rejected"). */
    }
    rt__block_cache_set_current(NULL);
    rt__block_cache_clear(&r->cache);
    return NULL;
}

/* Frees what rt__reactor_start made (the wake batch, the descriptors, the
 * release lock): after a failed start, or once the thread has been joined. */
static void release_resources(rt__reactor *r)
{
    free(r->batch);
    r->batch = NULL;
    if (r->napfd >= 0)
        close(r->napfd);
    if (r->wakefd >= 0)
        close(r->wakefd);
    if (r->epfd >= 0)
        close(r->epfd);
    r->epfd = r->wakefd = r->napfd = -1;
    pthread_mutex_destroy(&r->release_lock);
}

int rt__reactor_start(rt__reactor *r, int64_t nap_max_ns, const rt__reactor_hooks *hooks)
{
    memset(r, 0, sizeof(*r));
    r->epfd = r->wakefd = r->napfd = -1;
    r->epoch_ns = rt__now_ns();
    r->nap_max_ns = nap_max_ns;
    r->nap_ns = nap_max_ns;
    r->hooks = *hooks;
    r->sleeping_until_ns = 0;
    rt__timer_wheel_init(&r->wheel, 0);
    for (unsigned b = 0; b < RT__SOON_BUCKETS; b++) {
        r->soon[b] = NULL;
        r->soon_min[b] = UINT32_MAX;
    }
    r->soon_first = RT__SOON_BUCKETS;
    r->last_fire_ns = INT64_MIN / 2;
    rt__block_cache_init(&r->cache);
    __cds_wfcq_init(&r->cmd_head, &r->cmd_tail);
    int err = -rt__pthread_mutex_init(&r->release_lock, NULL);
    if (err < 0)
        return err;
    r->epfd = rt__epoll_create1(EPOLL_CLOEXEC);
    if (r->epfd < 0)
        goto fail_errno;
    r->wakefd = rt__eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->wakefd < 0)
        goto fail_errno;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = &wakefd_marker};
    if (rt__epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->wakefd, &ev) < 0)
        goto fail_errno;
    r->napfd = rt__epoll_create1(EPOLL_CLOEXEC);
    if (r->napfd < 0)
        goto fail_errno;
    if (rt__epoll_ctl(r->napfd, EPOLL_CTL_ADD, r->wakefd, &ev) < 0)
        goto fail_errno;
    /* Everything the thread uses is made here, so that a failure is this
     * call's error and the thread, once started, cannot fail. */
    r->batch = rt__malloc(sizeof(*r->batch));
    if (r->batch == NULL) {
        err = -ENOMEM;
        goto fail;
    }
    r->batch->hooks = &r->hooks;
    r->batch->n = 0;
    r->batch->lag_first = 0;
    r->batch->lag_count = 0;
    err = -rt__pthread_create(&r->thread, NULL, reactor_main, r);
    if (err < 0)
        goto fail;
    pthread_setname_np(r->thread, "asyncrt-reactor");
    r->running = true;
    return 0;

fail_errno:
    err = -errno;
fail:
    release_resources(r);
    return err;
}

void rt__reactor_stop(rt__reactor *r)
{
    if (r->running) {
        /* Seq_cst, for nap()'s check: see there. */
        rt__store_seq_cst_u32(&r->stopping, 1);
        RT__DEBUG_WINDOW("reactor.stopping"); /* a held turn may go on now */
        rt__store_seq_cst_u64(&r->sleeping_until_ns, UINT64_MAX);
        rt__store_release_u32(&r->kick_pending, 0);
        rt__reactor_kick_before(r, 0);
        pthread_join(r->thread, NULL);
        r->running = false;
    }
    /* Close the gate (see rt__reactor_submit_timer) and wait for the
     * submitters already inside to finish their enqueue and kick: after
     * that nobody adds a command, and none is half-linked. */
    rt__store_release_u32(&r->stopping, 1);
    rt__faa_u32(&r->submit_gate, RT__SUBMIT_GATE_CLOSED);
    while (rt__load_acquire_u32(&r->submit_gate) != RT__SUBMIT_GATE_CLOSED)
        sched_yield();
    /* Tasks' futures have all been dropped by now (shutdown cancelled the
     * tasks); sleeps polled by hand may still hold their timers, which
     * rt__timer_release_at_stop leaves to them after waking their wakers. */
    enum commands_left left;
    while ((left = take_commands(r)) == COMMANDS_MORE)
        ;
    /* The gate is closed and empty: no producer is half way. */
    assert(left == COMMANDS_NONE);
    (void)left;
    rt__timer_wheel_advance(&r->wheel, UINT64_MAX / 2, rt__timer_release_at_stop, NULL);
    for (unsigned b = 0; b < RT__SOON_BUCKETS; b++) {
        for (rt__timer_entry *e = r->soon[b], *next; e != NULL; e = next) {
            next = soon_of(e->link.next);
            rt__timer_release_at_stop(e, NULL);
        }
        r->soon[b] = NULL;
    }
    free_released(r, true);
    release_resources(r);
}
