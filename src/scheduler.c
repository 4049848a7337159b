/* The scheduler: where tasks go when they become runnable, the worker loop
 * that finds and polls them, work stealing, and the idle coordinator that
 * decides which sleeping worker to wake.
 *
 * Finding work, in order (the worker loop):
 *   1. every check_interval-th look for work: a batch from the injector (so
 *      injected work never starves behind local work), after noting
 *      whether the own deque's oldest tasks have waited RT__STARVATION_NS.
 *      check_interval is rt_config.injector_interval while polls are
 *      short, fewer while they are long ("The injector's interval");
 *   2. while a rescue lasts, the own deque's top: the tasks that have
 *      waited that long, oldest first ("Starving tasks");
 *   3. the LIFO slot (the task scheduled last on this worker), then the own
 *      deque's bottom (the next newest);
 *   4. the deferred list (tasks woken during their own poll, yields), FIFO;
 *   5. a batch from the injector;
 *   6. searching: steal one task from random victims, spin_rounds times;
 *   7. park.
 * Local (pinned) tasks are taken right after the injector in step 1 and
 * right after the own deque in step 3 (pop_pinned).
 * Fairness therefore has three bounds: a yielded task runs after everything
 * runnable on its worker, and tasks that keep waking each other through the
 * LIFO slot get at most RT__LIFO_STREAK_MAX polls in a row ahead of it; a
 * deque task waits at most about twice RT__STARVATION_NS (plus a check
 * interval, plus one look per older starved task) behind newer work;
 * injected work at most injector_interval polls, and about
 * RT__INJECTOR_CHECK_NS of polling once the worker has measured its polls.
 *
 * Idle coordination (after Tokio's): one word counts searching and unparked
 * workers. At most half the workers search at once. Whoever makes work
 * available wakes a parked worker only when nobody is searching; a searcher
 * that finds work and was the last searcher wakes another worker if more
 * work is visible. Both sides of each hand-off follow "write, StoreLoad
 * fence, read the other side's state":
 *   producer: push the task; fence; read idle_state (searching, unparked);
 *   parker:   RMW idle_state under sleepers_lock; re-check every queue.
 *   last searcher: RMW idle_state (searching - 1); re-check every queue.
 * Whichever runs second sees the other's write, so a task is never left
 * behind with every worker asleep. The RMWs are full barriers; the producer's
 * deque push is followed by rt__fence_store_load(), its injector push by the
 * exchange inside cds_wfcq_enqueue (a full barrier). A task scheduled into
 * the LIFO slot needs no announcement: its worker is awake and runs it next.
 * The parker's re-check looks at the injector's tail, which a producer moves
 * with its exchange, so no worker parks while a node is half-enqueued.
 * docs/internals.md, "Idle coordination", lists every pair. */
#include <assert.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>

#include "atomic.h"
#include "budget.h"
#include "runtime.h"
#include "spawn.h"

/* Largest injector batch a worker takes at once. */
#define RT_INJECTOR_BATCH 64

static inline rt_task *task_of_node(struct cds_wfcq_node *node)
{
    return caa_container_of(node, rt_task, node);
}

/* ---- Idle coordinator ---------------------------------------------------- */

static inline uint32_t idle_searching(uint64_t s)
{
    return (uint32_t)(s & 0xffffffffu);
}

static inline uint32_t idle_unparked(uint64_t s)
{
    return (uint32_t)(s >> 32);
}

bool rt__every_worker_unparked(rt_runtime *rt)
{
    /* Seq_cst: the second half of the reactor's Dekker pair with parking
     * workers (reactor.c, "Naps"). */
    return idle_unparked(rt__load_seq_cst_u64(&rt->idle_state)) == rt->nworkers;
}

/* True when some queue of the runtime holds a task (a snapshot). */
static bool work_visible(rt_runtime *rt)
{
    if (!rt__injector_is_empty(&rt->wakes) || !rt__injector_is_empty(&rt->injector))
        return true;
    for (unsigned i = 0; i < rt->nworkers; i++)
        if (rt__deque_len_any(&rt->workers[i].deque) > 0)
            return true;
    return false;
}

/* Wakes one parked worker, as a searcher, unless one is searching already or
 * none is parked. The caller has made work visible and fenced (see top). */
static void notify_parked(rt_runtime *rt)
{
    uint64_t s = rt__load_seq_cst_u64(&rt->idle_state);
    if (idle_searching(s) != 0 || idle_unparked(s) >= rt->nworkers)
        return;
    pthread_mutex_lock(&rt->sleepers_lock);
    s = rt__load_relaxed_u64(&rt->idle_state);
    if (idle_searching(s) != 0 || rt->nsleepers == 0) {
        pthread_mutex_unlock(&rt->sleepers_lock);
        return;
    }
    unsigned idx = rt->sleepers[--rt->nsleepers];
    rt__worker *w = &rt->workers[idx];
    w->sleeping = false;
    rt__faa_u64(&rt->idle_state, RT__IDLE_SEARCHING_ONE + RT__IDLE_UNPARKED_ONE);
    pthread_mutex_unlock(&rt->sleepers_lock);
    rt__parker_unpark(&w->parker);
}

static bool transition_to_searching(rt__worker *w)
{
    if (w->searching)
        return true;
    rt_runtime *rt = w->rt;
    uint64_t s = rt__load_acquire_u64(&rt->idle_state);
    /* At most half the workers search: more only burn CPU on each other's
     * cache lines. A single worker may always search. */
    if (2 * idle_searching(s) >= rt->nworkers)
        return false;
    rt__faa_u64(&rt->idle_state, RT__IDLE_SEARCHING_ONE);
    w->searching = true;
    return true;
}

/* The worker found a task while searching. */
static void transition_from_searching(rt__worker *w)
{
    if (!w->searching)
        return;
    w->searching = false;
    rt_runtime *rt = w->rt;
    uint64_t prev = rt__faa_u64(&rt->idle_state, (uint64_t)0 - RT__IDLE_SEARCHING_ONE);
    /* The last searcher hands the search on when there is more to find. */
    if (idle_searching(prev) == 1 && work_visible(rt))
        notify_parked(rt);
}

/* Announces the worker as parked. */
static void transition_to_parked(rt__worker *w)
{
    rt_runtime *rt = w->rt;
    pthread_mutex_lock(&rt->sleepers_lock);
    uint64_t dec = RT__IDLE_UNPARKED_ONE + (w->searching ? RT__IDLE_SEARCHING_ONE : 0);
    rt__faa_u64(&rt->idle_state, (uint64_t)0 - dec);
    w->searching = false;
    w->sleeping = true;
    rt->sleepers[rt->nsleepers++] = w->index;
    pthread_mutex_unlock(&rt->sleepers_lock);
}

/* Takes a sleeping worker off the sleepers stack, counting it unparked (and
 * searching, when `searching`). Returns false when it was not sleeping (a
 * notifier took it already). Under sleepers_lock. */
static bool remove_sleeper_locked(rt__worker *w, bool searching)
{
    rt_runtime *rt = w->rt;
    if (!w->sleeping)
        return false;
    for (unsigned i = 0; i < rt->nsleepers; i++) {
        if (rt->sleepers[i] == w->index) {
            rt->sleepers[i] = rt->sleepers[--rt->nsleepers];
            break;
        }
    }
    w->sleeping = false;
    rt__faa_u64(&rt->idle_state, RT__IDLE_UNPARKED_ONE + (searching ? RT__IDLE_SEARCHING_ONE : 0));
    return true;
}

/* Takes the worker back out of the sleepers if nobody did yet. Returns false
 * when a notifier already woke it (it is then a searcher). */
static bool cancel_park(rt__worker *w)
{
    pthread_mutex_lock(&w->rt->sleepers_lock);
    bool removed = remove_sleeper_locked(w, false);
    pthread_mutex_unlock(&w->rt->sleepers_lock);
    return removed;
}

static bool still_sleeping(rt__worker *w)
{
    pthread_mutex_lock(&w->rt->sleepers_lock);
    bool sleeping = w->sleeping;
    pthread_mutex_unlock(&w->rt->sleepers_lock);
    return sleeping;
}

/* Returns idle memory to the kernel: the worker's magazines go back to the
 * block pool, which then decommits its wholly free slabs down to a couple.
 * Foreign shards keep theirs (two magazines each). */
static void trim_caches(rt__worker *w)
{
    rt__block_cache_clear(&w->cache);
    rt__block_pool_trim(RT__POOL_KEEP_SLABS);
}

/* Whether an idle worker should wake up once to give memory back. */
static bool holds_idle_memory(rt__worker *w)
{
    return rt__block_cache_count(&w->cache) > 0 ||
           rt__block_pool_spare_slabs() > RT__POOL_KEEP_SLABS;
}

static void park_worker(rt__worker *w)
{
    rt_runtime *rt = w->rt;
    rt__timer_batch_flush(&w->rt->reactor, &w->timer_batch); /* no timer waits on a sleeping worker */
    assert(w->deferred_head == NULL && w->lifo == NULL && w->local_head == NULL);
    rt__registry_sweep_idle(w);
    transition_to_parked(w);
    /* A napping reactor bet that busy workers need no new events yet; this
     * one is not busy any more. The announcement's RMW was the barrier that
     * pairs with the reactor's (reactor.c, "Naps"). */
    rt__reactor_end_nap(&rt->reactor);
    RT__DEBUG_YIELD(); /* a producer may push right here */
    /* The RMW above was a full barrier: now re-check what producers may have
     * pushed before they could see us parked. */
    if (work_visible(rt) || !rt__injector_is_empty(&w->inbox)) {
        if (!cancel_park(w))
            w->searching = true;
        return;
    }
    rt__stat_add(&w->stats.parks, 1);
    for (;;) {
        /* A worker holding many cached task blocks wakes once after a long
         * idle moment to give them back (see trim_caches); otherwise it
         * sleeps until woken: an idle runtime uses no CPU. */
        bool trim = holds_idle_memory(w);
        bool woken = rt__parker_park(&w->parker, trim ? RT__BLOCK_CACHE_IDLE_NS : -1);
        if (rt__load_acquire_u32(&rt->closing))
            return;
        if (!woken) {
            trim_caches(w);
            continue;
        }
        if (!still_sleeping(w)) {
            /* A notifier popped us and counted us as searching. */
            w->searching = true;
            rt__stat_add(&w->stats.unparks, 1);
            return;
        }
        /* A stale token from an earlier notify: sleep again. */
    }
}

/* ---- Pushing work -------------------------------------------------------- */

/* Moves the older half of a full deque to the injector. */
static void spill_half(rt__worker *w)
{
    void *items[RT_DEQUE_CAPACITY / 2];
    size_t n = rt__deque_spill_owner(&w->deque, items, RT_DEQUE_CAPACITY / 2);
    if (n == 0)
        return; /* thieves made room meanwhile */
    struct cds_wfcq_node *nodes[RT_DEQUE_CAPACITY / 2];
    for (size_t i = 0; i < n; i++)
        nodes[i] = &((rt_task *)items[i])->node;
    rt__injector_push_batch(&w->rt->injector, nodes, n);
    rt__stat_add(&w->stats.spills, 1);
    /* The injector's exchange was the full barrier before this check. */
    notify_parked(w->rt);
}

/* Pushes onto the own deque, spilling half of it to the injector when full. */
static void push_local(rt__worker *w, rt_task *t)
{
    while (!rt__deque_push_owner(&w->deque, t))
        spill_half(w);
    uint64_t len = rt__deque_len_any(&w->deque);
    if (len > rt__load_relaxed_u64(&w->stats.deque_high_water))
        rt__store_relaxed_u64(&w->stats.deque_high_water, len);
}

/* Announces surplus work on the own deque to the sleepers. */
static void announce_local_work(rt__worker *w)
{
    if (w->rt->nworkers == 1)
        return; /* nobody else could take it */
    rt__fence_store_load();
    notify_parked(w->rt);
}

/* Wakes worker `w` if it is parked (a local task of its own arrived in its
 * inbox). The caller's push into the inbox was a full barrier (the
 * exchange); the worker's park takes sleepers_lock before its re-check of
 * the inbox, so either we find it sleeping here or its re-check finds the
 * task. */
static void unpark_worker(rt__worker *w)
{
    /* It wakes as a searcher, like a worker a notifier picked. */
    pthread_mutex_lock(&w->rt->sleepers_lock);
    bool parked = remove_sleeper_locked(w, true);
    pthread_mutex_unlock(&w->rt->sleepers_lock);
    if (parked)
        rt__parker_unpark(&w->parker);
}

/* Appends a local task to its own worker's private FIFO (owner only). */
static void push_pinned_local(rt__worker *w, rt_task *t)
{
    rt__task_fifo_append(&w->local_head, &w->local_tail, t);
}

/* Schedules a local task: onto its worker's private FIFO when that worker is
 * the caller, else into the worker's inbox, waking it. Never onto a deque,
 * the LIFO slot or the injector, where another worker could take it. */
static void schedule_pinned(rt_task *t, int pinned)
{
    rt__worker *target = &t->rt->workers[pinned];
    if (rt__worker_current() == target) {
        push_pinned_local(target, t);
        return;
    }
    rt__injector_push(&target->inbox, &t->node);
    RT__DEBUG_YIELD(); /* the worker may be parking right here */
    unpark_worker(target);
}

void rt__schedule(rt_task *t)
{
    rt__worker *w = rt__worker_current();
    rt_runtime *rt = t->rt;
    int pinned = rt__task_pinned(t);
    if (rt__unlikely(pinned >= 0)) {
        schedule_pinned(t, pinned);
        return;
    }
    if (w != NULL && w->rt == rt) {
        /* The task scheduled last runs next, from the worker's LIFO slot: no
         * deque traffic and no fence for the spawn-then-finish and
         * wake-then-wait patterns (chained spawns, request/response pairs).
         * Waking a sleeper for it would only make the sleeper find nothing.
         * The task it displaces is surplus: it goes to the deque, where
         * thieves can take it, and is announced, from inside a poll only once
         * when the poll returns (a task spawning a thousand children pays one
         * StoreLoad fence, not a thousand). A full deque spills to the
         * injector and notifies at once (spill_half), so a long poll still
         * gets help with a large burst. */
        rt_task *displaced = w->lifo;
        w->lifo = t;
        if (displaced == NULL)
            return;
        push_local(w, displaced);
        if (w->current != NULL)
            w->announce_after_poll = true;
        else
            announce_local_work(w);
        return;
    }
    rt__injector_push(&rt->injector, &t->node);
    RT__DEBUG_YIELD(); /* the last worker may be parking right here */
    notify_parked(rt);
}

void rt__schedule_woken(rt_runtime *rt, rt_task **tasks, unsigned n)
{
    /* A local task goes to its own worker's inbox, never the shared queue. */
    unsigned shared = 0;
    for (unsigned i = 0; i < n; i++) {
        int pinned = rt__task_pinned(tasks[i]);
        if (rt__unlikely(pinned >= 0))
            schedule_pinned(tasks[i], pinned);
        else
            tasks[shared++] = tasks[i];
    }
    n = shared;
    if (n == 0)
        return;
    struct cds_wfcq_node *nodes[RT__WAKE_BATCH];
    for (unsigned done = 0; done < n;) {
        unsigned k = n - done < RT__WAKE_BATCH ? n - done : RT__WAKE_BATCH;
        for (unsigned i = 0; i < k; i++)
            nodes[i] = &tasks[done + i]->node;
        rt__injector_push_batch(&rt->wakes, nodes, k);
        done += k;
    }
    rt__store_relaxed_u64(&rt->wakes_batch, n);
    /* The splice's exchange was the StoreLoad barrier. Wake as many parked
     * workers as there are tasks, at most: each takes a share. */
    pthread_mutex_lock(&rt->sleepers_lock);
    unsigned woken[RT__WAKE_BATCH];
    unsigned k = 0;
    while (k < n && k < RT__WAKE_BATCH && rt->nsleepers > 0) {
        unsigned idx = rt->sleepers[--rt->nsleepers];
        rt->workers[idx].sleeping = false;
        woken[k++] = idx;
    }
    if (k > 0)
        rt__faa_u64(&rt->idle_state, k * (RT__IDLE_SEARCHING_ONE + RT__IDLE_UNPARKED_ONE));
    pthread_mutex_unlock(&rt->sleepers_lock);
    for (unsigned i = 0; i < k; i++)
        rt__parker_unpark(&rt->workers[woken[i]].parker);
}

void rt__defer(rt__worker *w, rt_task *t)
{
    if (rt__task_pinned(t) >= 0)
        w->deferred_pinned++;
    rt__task_fifo_append(&w->deferred_head, &w->deferred_tail, t);
    w->deferred_len++;
}

/* ---- Finding work --------------------------------------------------------- */

/* Takes a batch from an injector queue: returns the first task and pushes
 * the rest onto the own deque. */
static rt_task *take_batch(rt__worker *w, rt__injector *inj, size_t share)
{
    size_t room = RT_DEQUE_CAPACITY - rt__deque_len_any(&w->deque);
    size_t max = room / 2;
    if (max > RT_INJECTOR_BATCH)
        max = RT_INJECTOR_BATCH;
    if (share != 0 && max > share)
        max = share;
    if (max == 0)
        max = 1;
    struct cds_wfcq_node *nodes[RT_INJECTOR_BATCH];
    bool would_block;
    size_t n = rt__injector_pop_batch(inj, nodes, max, &would_block);
    /* Remembered for the worker loop: a producer preempted mid-enqueue (or
     * another consumer) makes the injector look busy though it yields
     * nothing; spinning on it would compete with that producer for CPU. */
    w->injector_would_block = would_block;
    if (n == 0)
        return NULL;
    rt__stat_add(&w->stats.injector_batches, 1);
    for (size_t i = 1; i < n; i++)
        push_local(w, task_of_node(nodes[i]));
    if (n > 1)
        announce_local_work(w);
    return task_of_node(nodes[0]);
}

/* Work from outside the worker: first what the reactor woke (a timer or a
 * descriptor became ready: latency matters), then spawned and remote work.
 * A backlog of a hundred thousand spawned tasks must not make a timer that
 * fired wait behind all of them. */
static rt_task *take_from_injector(rt__worker *w)
{
    /* A fair share of the reactor's last batch, so the other workers it
     * woke take theirs from the queue rather than steal them one by one. */
    rt_runtime *rt = w->rt;
    size_t share = rt__load_relaxed_u64(&rt->wakes_batch) / rt->nworkers + 1;
    rt_task *t = take_batch(w, &rt->wakes, share);
    bool wakes_busy = w->injector_would_block;
    if (t == NULL)
        t = take_batch(w, &rt->injector, 0);
    w->injector_would_block |= wakes_busy;
    return t;
}

static uint32_t next_random(rt__worker *w)
{
    uint32_t x = w->rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    w->rng = x;
    return x;
}

static rt_task *steal_from_others(rt__worker *w)
{
    rt_runtime *rt = w->rt;
    unsigned n = rt->nworkers;
    if (n < 2)
        return NULL;
    unsigned start = next_random(w) % n;
    for (unsigned i = 0; i < n; i++) {
        unsigned victim = (start + i) % n;
        if (victim == w->index)
            continue;
        rt__deque *d = &rt->workers[victim].deque;
        for (int tries = 0; tries < 4; tries++) {
            rt__stat_add(&w->stats.steal_attempts, 1);
            void *item = rt__deque_steal_any(d);
            if (item == NULL)
                break;
            if (item != RT_DEQUE_LOST) {
                rt__stat_add(&w->stats.steals, 1);
                return item;
            }
        }
    }
    return NULL;
}

/* Starving tasks.
 *
 * The owner pops its deque's bottom, which is what makes fork-join run
 * depth-first in little memory, and batches from the injector are pushed
 * there too. So the oldest tasks, at the top, wait while newer ones keep
 * arriving below them: a task that keeps waking a partner (or respawning
 * itself), or a steady backlog in the injector, would hold them forever.
 * Nobody steals them while every worker is busy.
 *
 * At every look at the injector the worker watches its deque, with the
 * clock reading that look took anyway. A watch begins with the tasks then
 * in the deque: the indices from the top up to the bottom. The top only
 * grows (steals, spills, the last task taken), and the owner's pops lower
 * `watched_low`, the lowest the bottom has been since the watch began,
 * because a push after a pop reuses an index with a new task. So [top, watched_low) always
 * holds tasks that were there when the watch began. Once they have waited
 * RT__STARVATION_NS, the worker takes them from the top in order, one per
 * look, before anything else but the check look itself (rescue_end).
 * A watch ends when none of its tasks is left; a task pushed just after a
 * watch began is covered by the next one, so it waits at most about twice
 * RT__STARVATION_NS, plus a check interval. Taking only one task per
 * RT__STARVATION_NS would let the hundredth buried task wait a second. */
static void watch_for_starving_top(rt__worker *w, int64_t now)
{
    uint64_t top = rt__deque_top_owner(&w->deque);
    if ((int64_t)(w->watched_low - top) <= 0) {
        /* None of this watch's tasks is left (an empty deque included). */
        w->watched_since = now;
        w->watched_low = rt__deque_bottom_owner(&w->deque);
        return;
    }
    if (now - w->watched_since < RT__STARVATION_NS)
        return;
    w->rescue_end = w->watched_low;
    w->watched_since = now;
}

/* The next starved task from the own deque's top, or NULL when the rescue
 * is over (or lost a race with a thief, which took the task instead). */
static rt_task *take_starved_top(rt__worker *w)
{
    uint64_t top = rt__deque_top_owner(&w->deque);
    /* rescue_end never exceeds the bottom (note_deque_low), so this also
     * ends a rescue whose tasks thieves have taken. */
    if ((int64_t)(w->rescue_end - top) <= 0) {
        w->rescue_end = 0;
        return NULL;
    }
    void *item = rt__deque_steal_any(&w->deque);
    return item != RT_DEQUE_LOST ? item : NULL;
}

/* Notes how low the own deque's bottom went (see "Starving tasks"): the
 * indices at and above it will hold new tasks, which a watch or a rescue
 * begun earlier must not count as old. */
static inline void note_deque_low(rt__worker *w)
{
    uint64_t bottom = rt__deque_bottom_owner(&w->deque);
    if ((int64_t)(bottom - w->watched_low) < 0)
        w->watched_low = bottom;
    if (w->rescue_end != 0 && (int64_t)(bottom - w->rescue_end) < 0)
        w->rescue_end = bottom;
}

/* Moves the older half of the deferred list (at most half the deque's free
 * room) onto the deque, where thieves can take it, and says so. Local tasks
 * stay on the list, in their order: no other worker may run them. */
static void share_deferred(rt__worker *w)
{
    /* Only local tasks wait: nothing to share (and no list walk). */
    size_t n = w->deferred_len - w->deferred_pinned;
    size_t room = (RT_DEQUE_CAPACITY - rt__deque_len_any(&w->deque)) / 2;
    size_t share = n / 2 < room ? n / 2 : room;
    if (share == 0)
        return;
    rt_task *kept_head = NULL, *kept_tail = NULL;
    size_t moved = 0;
    for (size_t i = 0; i < share && w->deferred_head != NULL; i++) {
        rt_task *t = w->deferred_head;
        w->deferred_head = (rt_task *)t->node.next;
        if (rt__task_pinned(t) >= 0) {
            rt__task_fifo_append(&kept_head, &kept_tail, t);
            continue;
        }
        push_local(w, t);
        moved++;
    }
    if (kept_head != NULL) {
        kept_tail->node.next = (struct cds_wfcq_node *)w->deferred_head;
        if (w->deferred_head == NULL)
            w->deferred_tail = kept_tail;
        w->deferred_head = kept_head;
    } else if (w->deferred_head == NULL) {
        w->deferred_tail = NULL;
    }
    w->deferred_len -= moved;
    if (moved > 0)
        announce_local_work(w);
}

/* Takes the oldest deferred (yielded) task. Deferred tasks run from this
 * private FIFO without any atomic operation; they are shared through the
 * deque only when another worker is idle or searching and could use them.
 * That is a matter of speed, not of liveness: this worker runs them all
 * anyway before it parks. */
static rt_task *pop_deferred(rt__worker *w)
{
    rt_task *t = w->deferred_head;
    if (t == NULL)
        return NULL;
    w->deferred_head = (rt_task *)t->node.next;
    w->deferred_len--;
    if (rt__task_pinned(t) >= 0)
        w->deferred_pinned--;
    if (w->deferred_head == NULL) {
        w->deferred_tail = NULL;
        return t;
    }
    rt_runtime *rt = w->rt;
    uint64_t idle = rt__load_relaxed_u64(&rt->idle_state);
    if (rt->nworkers > 1 && (idle_unparked(idle) < rt->nworkers || idle_searching(idle) > 0))
        share_deferred(w);
    return t;
}

/* The oldest woken local task of this worker: from the private FIFO, else a
 * batch from the inbox (the first is returned, the rest queued privately). */
static rt_task *pop_pinned(rt__worker *w)
{
    rt_task *t = w->local_head;
    if (t != NULL) {
        w->local_head = (rt_task *)t->node.next;
        if (w->local_head == NULL)
            w->local_tail = NULL;
        return t;
    }
    if (rt__injector_is_empty(&w->inbox))
        return NULL;
    struct cds_wfcq_node *nodes[RT_INJECTOR_BATCH];
    bool would_block;
    size_t n = rt__injector_pop_batch(&w->inbox, nodes, RT_INJECTOR_BATCH, &would_block);
    for (size_t i = 1; i < n; i++)
        push_pinned_local(w, task_of_node(nodes[i]));
    return n > 0 ? task_of_node(nodes[0]) : NULL;
}

/* ---- The injector's interval ----------------------------------------------
 *
 * A busy worker looks at the injector (where the reactor's wakes go) every
 * check_interval looks for work. A fixed count is a fixed wait only while
 * polls are short: at 61 polls of 1 ms, a task woken by the reactor could
 * wait 61 ms behind a busy task on its worker (test_timer,
 * sleeps_batched_beside_a_busy_task_are_armed_within_a_few_polls). So the
 * count follows the measured time per poll, aiming at RT__INJECTOR_CHECK_NS
 * between looks, from 2 (1 if so configured) up to
 * rt_config.injector_interval. It shrinks fast (the newest window weighs a
 * quarter of the average: polls going from 3 to 150 us give windows of 61,
 * 5, then 2) but at most doubles per window, and a worker starts again from
 * RT__INJECTOR_CHECK_FIRST whenever it parks: work that arrives after an
 * idle moment is measured within a few polls. What is left unbounded in
 * time is a worker whose polls turn from short to long without it ever
 * parking: one window of the old count, and a few shrinking ones after it.
 * A window's time includes what the worker did besides polling (yields to
 * an overdue reactor, searching). The clock is read once per look at the
 * injector, where the overdue check needs it anyway, and once per park. */

/* Begins a window of looks for work: at the worker's start and after each
 * park, whose window measured sleep, not polls. */
static void restart_check_window(rt__worker *w)
{
    w->check_interval = RT__INJECTOR_CHECK_FIRST < w->rt->config.injector_interval
                            ? RT__INJECTOR_CHECK_FIRST
                            : w->rt->config.injector_interval;
    w->until_check = w->check_interval;
    w->last_check_ns = rt__now_ns();
}

/* Ends a window at `now`: measures it and sets the next one's count. */
static void retune_check_interval(rt__worker *w, int64_t now)
{
    int64_t per_poll = (now - w->last_check_ns) / (int64_t)w->check_interval;
    w->poll_ns_avg = w->poll_ns_avg == 0 ? per_poll : (3 * w->poll_ns_avg + per_poll) / 4;
    int64_t fit = RT__INJECTOR_CHECK_NS / (w->poll_ns_avg > 0 ? w->poll_ns_avg : 1);
    int64_t most = w->rt->config.injector_interval;
    /* At 1 every look would take injected work before local work, and a
     * steady stream of it would starve the LIFO slot, the deque and the
     * local tasks (Tokio's floor is 2 for the same reason); a configured 1
     * stays 1. */
    int64_t least = most < 2 ? most : 2;
    if (most > 2 * (int64_t)w->check_interval)
        most = 2 * (int64_t)w->check_interval;
    if (fit > most)
        fit = most;
    w->check_interval = (unsigned)(fit > least ? fit : least);
    w->last_check_ns = now;
}

static rt_task *find_local_work(rt__worker *w)
{
    rt_runtime *rt = w->rt;
    rt_task *t;
    if (--w->until_check == 0) {
        int64_t now = rt__now_ns();
        retune_check_interval(w, now);
        w->until_check = w->check_interval;
        /* A reactor overdue by half a millisecond is waiting for a CPU that
         * busy workers hold (reactor.h): this one gives its own, once per
         * interval at most. */
        if (rt__reactor_overdue(&rt->reactor, now)) {
            rt__stat_add(&w->stats.reactor_yields, 1);
            sched_yield();
        }
        /* Before the injector: its batches are what may be burying them. */
        watch_for_starving_top(w, now);
        t = take_from_injector(w);
        if (t != NULL)
            return t;
        /* Local tasks wait at most this long behind a busy deque too. */
        t = pop_pinned(w);
        if (t != NULL)
            return t;
    }
    if (rt__unlikely(w->rescue_end != 0)) {
        t = take_starved_top(w);
        if (t != NULL)
            return t;
    }
    t = w->lifo;
    if (t != NULL) {
        w->lifo = NULL;
        /* Tasks that keep waking each other through the LIFO slot would
         * otherwise hold the worker forever while yielded tasks wait: after
         * a short streak, the LIFO task queues behind them (Tokio caps its
         * LIFO slot the same way). Without yielded tasks waiting nobody is
         * passed over, and fork-join and chains keep their depth-first,
         * cache-warm order. */
        if (w->lifo_streak < RT__LIFO_STREAK_MAX || w->deferred_head == NULL) {
            w->lifo_streak++;
            return t;
        }
        rt__defer(w, t);
    }
    w->lifo_streak = 0;
    t = rt__deque_take_owner(&w->deque);
    if (t != NULL) {
        note_deque_low(w);
        return t;
    }
    t = pop_pinned(w);
    if (t != NULL)
        return t;
    t = pop_deferred(w);
    if (t != NULL)
        return t;
    return take_from_injector(w);
}

/* ---- Running tasks --------------------------------------------------------- */

/* The worker owns RUNNING and saw CANCELLED: drop instead of polling. */
static void cancel_running(rt__worker *w, rt_task *t)
{
    /* The drop runs as the task (rt_task_current_id works in it); a wake of
     * its own waker from there is harmless, the task completes next. */
    w->current = t;
    rt__task_drop_future(t);
    w->current = NULL;
    t->u.output = NULL;
    rt__stat_add(&w->cancelled, 1);
    rt__task_complete(t, true, 1); /* and the run queue's reference */
}

/* Polls `t`, popped from a run queue with the queue's reference: claims it,
 * polls it with the worker's budget, and completes, requeues or idles it by
 * what the poll returned and what happened meanwhile. */
static void run_task(rt__worker *w, rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    if (s & RT__TASK_RUNNING) {
        /* Queued already claimed (spawned, woken by a worker, or requeued
         * by a yield): ours without a read-modify-write. An abort may have
         * come meanwhile, or a wake (NOTIFIED), which this poll consumes as
         * the claim of a NOTIFIED task would. */
        if (rt__unlikely(s & (RT__TASK_CANCELLED | RT__TASK_NOTIFIED))) {
            if (s & RT__TASK_CANCELLED) {
                cancel_running(w, t);
                return;
            }
            rt__task_state_consume_notified(t);
        }
    } else {
        /* Shutdown completes tasks only after every worker has exited. */
        uint64_t prev = rt__task_state_claim(t);
        assert((prev & (RT__TASK_NOTIFIED | RT__TASK_RUNNING | RT__TASK_COMPLETE)) ==
               RT__TASK_NOTIFIED);
        if (rt__unlikely(prev & RT__TASK_CANCELLED)) {
            cancel_running(w, t);
            return;
        }
    }

    rt_context cx = {{&rt__task_waker_vtable, t}};
    void *out = NULL;
    /* Counted here, not when popped: a cancelled task is dropped unpolled. */
    rt__stat_add(&w->stats.polls, 1);
    w->current = t;
    w->current_notified = false;
    rt__budget_open(w->budget_limit);
    rt_poll r = t->u.poll(t->future_state, &cx, &out);
    rt__budget_close();

    if (r == RT_READY) {
        t->u.output = out;
        rt__task_drop_future(t);
        w->current = NULL;
        rt__stat_add(&w->completed, 1);
        rt__task_complete(t, false, 1); /* and the run queue's reference */
        return;
    }
    w->current = NULL;

    if (w->current_notified) {
        /* A yield: requeue behind the other runnable tasks, keeping RUNNING
         * and the queue reference. An abort that came during the poll is
         * honoured now rather than at the next pop. */
        if (rt__load_acquire_u64(&t->state) & RT__TASK_CANCELLED)
            cancel_running(w, t);
        else
            rt__defer(w, t);
        return;
    }

    /* Pending: back to idle, unless woken or aborted during the poll. */
    switch (rt__task_state_pending(t)) {
    case RT__TASK_CANCEL_IT:
        cancel_running(w, t);
        break;
    case RT__TASK_REQUEUE:
        rt__defer(w, t);
        break;
    case RT__TASK_IDLE:
        break;
    }
}

static rt_task *search(rt__worker *w)
{
    rt_runtime *rt = w->rt;
    for (unsigned round = 0; round < rt->config.spin_rounds; round++) {
        if (!transition_to_searching(w))
            return NULL;
        rt_task *t = steal_from_others(w);
        if (t == NULL)
            t = take_from_injector(w);
        if (t != NULL)
            return t;
        rt__cpu_relax();
    }
    return NULL;
}

void *rt__worker_main(void *arg)
{
    rt__worker *w = arg;
    rt_runtime *rt = w->rt;
    rt__set_current_worker(w);
    restart_check_window(w);
    while (!rt__load_acquire_u32(&rt->closing)) {
        rt_task *t = find_local_work(w);
        if (t == NULL)
            t = search(w);
        if (t != NULL) {
            /* A worker woken as a searcher stops counting as one as soon as
             * it has work, wherever it found it. */
            transition_from_searching(w);
            uint64_t readings = rt__tls_clock.count;
            run_task(w, t);
            /* The batch's age is checked after every poll while a batch
             * waits, so a batched sleep waits RT__TIMER_BATCH_WAIT_NS plus
             * about two polls at most (reactor.h). A poll that read the
             * clock (every sleep arming itself does) lends its reading, at
             * most that poll old; only a poll that did not costs a reading. */
            if (w->timer_batch.len > 0) {
                int64_t now = rt__tls_clock.count != readings ? rt__tls_clock.last : rt__now_ns();
                if (now - w->timer_batch.since >= RT__TIMER_BATCH_WAIT_NS)
                    rt__timer_batch_flush(&w->rt->reactor, &w->timer_batch);
            }
            if (w->announce_after_poll) {
                w->announce_after_poll = false;
                announce_local_work(w);
            }
            continue;
        }
        if (w->injector_would_block || !rt__injector_is_empty(&w->inbox)) {
            /* Work is in flight in the injector (or the inbox): give its
             * producer the CPU instead of parking (the re-check would refuse
             * to) or spinning. */
            w->injector_would_block = false;
            sched_yield();
            continue;
        }
        park_worker(w);
        restart_check_window(w);
    }
    rt__timer_batch_flush(&w->rt->reactor, &w->timer_batch);
    rt__set_current_worker(NULL);
    return NULL;
}

/* Drops the queue reference of every task still sitting in a run queue. By
 * now each of them is COMPLETE (shutdown cancelled it), so that is all. */
void rt__scheduler_drain(rt_runtime *rt)
{
    for (unsigned i = 0; i < rt->nworkers; i++) {
        rt__worker *w = &rt->workers[i];
        rt_task *t;
        if (w->lifo != NULL) {
            rt__task_unref(w->lifo, 1);
            w->lifo = NULL;
        }
        while ((t = rt__deque_take_owner(&w->deque)) != NULL)
            rt__task_unref(t, 1);
        rt_task *lists[2] = {w->deferred_head, w->local_head};
        for (int l = 0; l < 2; l++) {
            t = lists[l];
            while (t != NULL) {
                rt_task *next = (rt_task *)t->node.next;
                rt__task_unref(t, 1);
                t = next;
            }
        }
        w->deferred_head = w->deferred_tail = NULL;
        w->deferred_len = 0;
        w->deferred_pinned = 0;
        w->local_head = w->local_tail = NULL;
        struct cds_wfcq_node *local_nodes[64];
        bool local_would_block;
        for (;;) {
            size_t n = rt__injector_pop_batch(&w->inbox, local_nodes, 64, &local_would_block);
            for (size_t i = 0; i < n; i++)
                rt__task_unref(caa_container_of(local_nodes[i], rt_task, node), 1);
            if (n == 0 && !local_would_block)
                break;
        }
    }
    struct cds_wfcq_node *nodes[64];
    bool would_block;
    rt__injector *queues[2] = {&rt->injector, &rt->wakes};
    for (int q = 0; q < 2; q++) {
        for (;;) {
            size_t n = rt__injector_pop_batch(queues[q], nodes, 64, &would_block);
            for (size_t i = 0; i < n; i++)
                rt__task_unref(caa_container_of(nodes[i], rt_task, node), 1);
            if (n == 0 && !would_block)
                break;
        }
    }
}
