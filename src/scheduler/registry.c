/* The registry of live tasks (see registry.h): what shutdown walks to cancel
 * every unfinished task. Completed tasks are released lazily by sweeps. */
#include <errno.h>
#include <stdlib.h>

#include "atomic.h"
#include "fault.h"
#include "runtime_object.h"

int rt__registry_sweep(rt__registry *r, rt__block_cache *cache, rt__registry_entry *lost,
                       unsigned lost_cap)
{
    /* A dump is copying the entries: this sweep can wait for the next. */
    if (!rt__spin_trylock(&r->lock))
        return -1;
    unsigned nlost = 0;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < r->len; i++) {
        rt__registry_entry e = r->entries[i];
        rt_task *t = rt__registry_task(&e);
        /* Acquire pairs with the completer's release of COMPLETE: its last
         * accesses to the task happen before our unref may free it. */
        uint64_t st = rt__load_acquire_u64(&t->state);
        if (st & RT__TASK_COMPLETE) {
            /* Sole owner of a finished task: nobody can take a new reference
             * without holding one, so no atomic is needed to free it. */
            if (rt__task_refcount(st) == 1)
                rt__task_recycle(cache, t);
            else
                rt__task_unref(t, 1);
            continue;
        }
        if (lost != NULL && nlost < lost_cap && !(e.task & RT__REGISTRY_REPORTED) &&
            rt__task_lost(st, 0)) {
            /* Lost for good (see rt__task_lost): reported once. The
             * reference lets the caller look at it after the unlock. */
            e.task |= RT__REGISTRY_REPORTED;
            rt__task_state_ref(t);
            lost[nlost].task = (uintptr_t)t;
            lost[nlost].site = e.site;
            nlost++;
        }
        r->entries[kept++] = e;
    }
    rt__store_release_u32(&r->len, kept);
    rt__spin_unlock(&r->lock);
    return (int)nlost;
}

/* Tasks of the runtime that have finished so far (relaxed sum of the
 * workers' counters: a hint). */
static uint64_t finished_so_far(rt_runtime *rt)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < rt->nworkers; i++)
        n += rt__load_relaxed_u64(&rt->workers[i].completed) +
             rt__load_relaxed_u64(&rt->workers[i].cancelled);
    return n;
}

int rt__registry_make_room(rt_runtime *rt, rt__registry *r, rt__block_cache *cache)
{
    /* Sweep once as many tasks were registered as were alive after the last
     * sweep (at least RT__REGISTRY_MIN_CAP): each sweep's scan is paid for by
     * the inserts since the previous one. And every RT__REGISTRY_MIN_CAP
     * inserts, sweep early if the runtime has finished at least half as many
     * tasks as are registered here since the last sweep: after a burst, the
     * burst's blocks then come back before the next burst asks for new
     * memory (otherwise every burst costs sysmalloc calls and page
     * faults). */
    bool sweep = r->len >= r->sweep_at;
    if (!sweep && r->len % RT__REGISTRY_MIN_CAP == 0 && r->len > 0)
        sweep = finished_so_far(rt) - r->finished_at_sweep >= r->len / 2;
    if (sweep) {
        r->finished_at_sweep = finished_so_far(rt);
        rt__registry_sweep(r, cache, NULL, 0);
        r->sweep_at = 2 * r->len > RT__REGISTRY_MIN_CAP ? 2 * r->len : RT__REGISTRY_MIN_CAP;
    }
    if (r->len == r->cap) {
        uint32_t cap = r->cap != 0 ? r->cap * 2 : RT__REGISTRY_MIN_CAP;
        /* The array moves: not while a dump copies it. */
        rt__spin_lock(&r->lock);
        rt__registry_entry *grown = rt__realloc(r->entries, (size_t)cap * sizeof(*grown));
        if (grown != NULL) {
            r->entries = grown;
            r->cap = cap;
        }
        rt__spin_unlock(&r->lock);
        if (grown == NULL)
            return -ENOMEM;
    }
    return 0;
}

unsigned rt__registry_cancel_all(rt__registry *r)
{
    unsigned cancelled = 0;
    for (uint32_t i = 0; i < r->len; i++) {
        rt_task *t = rt__registry_task(&r->entries[i]);
        if (!(rt__load_acquire_u64(&t->state) & RT__TASK_COMPLETE)) {
            rt__task_cancel_at_shutdown(t);
            cancelled++;
        }
        rt__task_unref(t, 1);
    }
    free(r->entries);
    r->entries = NULL;
    r->len = r->cap = 0;
    return cancelled;
}

/* Foreign threads pick a shard by a hash of a thread-local address, which
 * differs per thread and costs no system call. */
rt__foreign_shard *rt__foreign_shard_of_thread(rt_runtime *rt)
{
    uint64_t h = (uintptr_t)rt__thread_marker();
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    return &rt->foreign[(h >> 32) % rt->nforeign];
}
