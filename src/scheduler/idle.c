/* The idle coordinator: which worker sleeps, which one a producer wakes.
 *
 * After Tokio's: one word counts searching and unparked workers. At most
 * half the workers search at once. Whoever makes work
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

#include "scheduler.h"

bool rt__every_worker_unparked(rt_runtime *rt)
{
    /* Seq_cst: the second half of the reactor's Dekker pair with parking
     * workers (reactor.c, "Naps"). */
    return rt__idle_unparked(rt__load_seq_cst_u64(&rt->idle_state)) == rt->nworkers;
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

unsigned rt__unpark_workers(rt_runtime *rt, unsigned max, bool unless_searching)
{
    unsigned woken[RT__WAKE_BATCH];
    if (max > RT__WAKE_BATCH)
        max = RT__WAKE_BATCH;
    unsigned k = 0;
    pthread_mutex_lock(&rt->sleepers_lock);
    /* Relaxed: the sleepers' own changes of the word are made under this
     * lock, and a searcher that starts meanwhile only makes this wake-up
     * unnecessary, never a missing one (see top). */
    if (!unless_searching || rt__idle_searching(rt__load_relaxed_u64(&rt->idle_state)) == 0) {
        while (k < max && rt->nsleepers > 0) {
            unsigned idx = rt->sleepers[--rt->nsleepers];
            rt->workers[idx].sleeping = false;
            woken[k++] = idx;
        }
        /* Each one is counted unparked and searching before its unpark, so
         * that no second producer wakes another for the same work. */
        if (k > 0)
            rt__faa_u64(&rt->idle_state, k * (RT__IDLE_SEARCHING_ONE + RT__IDLE_UNPARKED_ONE));
    }
    pthread_mutex_unlock(&rt->sleepers_lock);
    for (unsigned i = 0; i < k; i++)
        rt__parker_unpark(&rt->workers[woken[i]].parker);
    return k;
}

/* Wakes one parked worker, as a searcher, unless one is searching already or
 * none is parked. The caller has made work visible and fenced (see top). */
void rt__notify_parked(rt_runtime *rt)
{
    /* The lock-free look first: on a busy runtime somebody is searching or
     * nobody is parked, and the lock is not taken. */
    uint64_t s = rt__load_seq_cst_u64(&rt->idle_state);
    if (rt__idle_searching(s) != 0 || rt__idle_unparked(s) >= rt->nworkers)
        return;
    rt__unpark_workers(rt, 1, true);
}

bool rt__transition_to_searching(rt__worker *w)
{
    if (w->own.searching)
        return true;
    rt_runtime *rt = w->rt;
    uint64_t s = rt__load_acquire_u64(&rt->idle_state);
    /* At most half the workers search: more only burn CPU on each other's
     * cache lines. A single worker may always search. */
    if (2 * rt__idle_searching(s) >= rt->nworkers)
        return false;
    rt__faa_u64(&rt->idle_state, RT__IDLE_SEARCHING_ONE);
    w->own.searching = true;
    return true;
}

void rt__stop_searching(rt__worker *w)
{
    w->own.searching = false;
    rt_runtime *rt = w->rt;
    uint64_t prev = rt__faa_u64(&rt->idle_state, (uint64_t)0 - RT__IDLE_SEARCHING_ONE);
    /* The last searcher hands the search on when there is more to find. */
    if (rt__idle_searching(prev) == 1 && work_visible(rt))
        rt__notify_parked(rt);
}

/* Announces the worker as parked. */
static void transition_to_parked(rt__worker *w)
{
    rt_runtime *rt = w->rt;
    pthread_mutex_lock(&rt->sleepers_lock);
    uint64_t dec = RT__IDLE_UNPARKED_ONE + (w->own.searching ? RT__IDLE_SEARCHING_ONE : 0);
    rt__faa_u64(&rt->idle_state, (uint64_t)0 - dec);
    w->own.searching = false;
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
    rt__block_cache_clear(&w->own.cache);
    rt__block_pool_trim(RT__POOL_KEEP_SLABS);
}

/* Whether an idle worker should wake up once to give memory back. */
static bool holds_idle_memory(rt__worker *w)
{
    return rt__block_cache_count(&w->own.cache) > 0 ||
           rt__block_pool_spare_slabs() > RT__POOL_KEEP_SLABS;
}

void rt__park_worker(rt__worker *w)
{
    rt_runtime *rt = w->rt;
    /* No timer waits on a sleeping worker. */
    rt__timer_batch_flush(&rt->reactor, &w->own.timer_batch);
    assert(w->own.deferred_head == NULL && w->own.lifo == NULL && w->own.local_head == NULL);
    rt__lost_wakeup_sweep(w);
    /* A lost wake-up report holds each task it names for a look; one
     * aborted meanwhile was queued here when the look ended. */
    if (w->own.lifo != NULL || w->own.local_head != NULL || w->own.deferred_head != NULL)
        return;
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
            w->own.searching = true;
        return;
    }
    rt__stat_add(&w->stats.parks, 1);
    RT__EV_PARK(w->index);
    for (;;) {
        /* A worker holding many cached task blocks wakes once after a long
         * idle moment to give them back (see trim_caches); otherwise it
         * sleeps until woken: an idle runtime uses no CPU. */
        bool trim = holds_idle_memory(w);
        bool woken = rt__parker_park(&w->parker, trim ? RT__BLOCK_CACHE_IDLE_NS : -1);
        if (rt__load_acquire_u32(&rt->closing)) {
            RT__EV_UNPARK(w->index);
            return;
        }
        if (!woken) {
            trim_caches(w);
            continue;
        }
        if (!still_sleeping(w)) {
            /* A notifier popped us and counted us as searching. */
            w->own.searching = true;
            rt__stat_add(&w->stats.unparks, 1);
            RT__EV_UNPARK(w->index);
            return;
        }
        /* A stale token from an earlier notify: sleep again. */
    }
}

/* The caller's push into the inbox was a full barrier (the
 * exchange); the worker's park takes sleepers_lock before its re-check of
 * the inbox, so either we find it sleeping here or its re-check finds the
 * task. */
void rt__unpark_worker(rt__worker *w)
{
    /* It wakes as a searcher, like a worker a notifier picked. */
    pthread_mutex_lock(&w->rt->sleepers_lock);
    bool parked = remove_sleeper_locked(w, true);
    pthread_mutex_unlock(&w->rt->sleepers_lock);
    if (parked)
        rt__parker_unpark(&w->parker);
}
