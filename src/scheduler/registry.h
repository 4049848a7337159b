/* The registry of live tasks, through which shutdown reaches every
 * unfinished task (registry.c). Internal, not installed. */
#ifndef RT_SRC_REGISTRY_H
#define RT_SRC_REGISTRY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "atomic.h"
#include "block_cache.h"
#include "spinlock.h"
#include "task_internal.h"

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
 * most tasks on the thread that allocated them, which malloc likes.
 *
 * Each entry also keeps where the task was spawned, for task dumps
 * (dump.c), which read a registry from any thread: the owner appends
 * without a lock (it writes the entry, then publishes `len` with a release
 * store that the dump's acquire load pairs with), and takes `lock` only to
 * sweep or grow, which move entries or the array; a dump holds `lock`
 * while it copies the entries [0, len). The owner never waits for a sweep:
 * it skips one while a dump copies. */
typedef struct rt__registry_entry {
    uintptr_t task;   /* the registered rt_task *, | RT__REGISTRY_REPORTED */
    const char *site; /* "file:line" of its spawn, or NULL */
} rt__registry_entry;

/* The smallest registry array, and how often (in inserts) an insert looks
 * whether an early sweep is worth it (registry.c). */
#define RT__REGISTRY_MIN_CAP 256

/* Low bit of an entry's task: reported as a lost wake-up already. */
#define RT__REGISTRY_REPORTED ((uintptr_t)1)

static inline rt_task *rt__registry_task(const rt__registry_entry *e)
{
    return (rt_task *)(e->task & ~RT__REGISTRY_REPORTED);
}

/* Whether a task's state word says it waits while no waker for it exists:
 * idle (neither queued, running, finished nor cancelled) and referenced
 * only by the registry, its join handle if it has one, and `extra` more
 * references the caller itself holds. Nothing can then ever wake it: only
 * a waker clone takes a reference without holding one already. */
static inline bool rt__task_lost(uint64_t s, uint64_t extra)
{
    const uint64_t busy =
        RT__TASK_RUNNING | RT__TASK_NOTIFIED | RT__TASK_COMPLETE | RT__TASK_CANCELLED;
    uint64_t runtime_refs = 1 + ((s & RT__TASK_JOIN_INTEREST) ? 1 : 0) + extra;
    return !(s & busy) && rt__task_refcount(s) == runtime_refs;
}

typedef struct rt__registry {
    rt__registry_entry *entries; /* registered tasks, unordered */
    uint32_t len;                /* entries in use (release-stored by the owner) */
    uint32_t cap;                /* entries allocated */
    uint32_t sweep_at;           /* sweep when len reaches this */
    uint64_t finished_at_sweep;  /* the runtime's finished tasks then (a hint) */
    uint64_t spawned;            /* tasks ever registered (relaxed; read by metrics) */
    uint64_t polls_at_sweep;     /* the sweeper's poll count at the last sweep */
    rt__spinlock lock;           /* moves of the entries vs a dump's copy (above) */
} rt__registry;

/* What an insert does when a sweep may be due or the array is full: sweeps
 * if due, grows if full. -ENOMEM when it cannot grow (registry.c). */
int rt__registry_make_room(rt_runtime *rt, rt__registry *r, rt__block_cache *cache);

/* Registers `t` (taking over one of its references), spawned at `site`.
 * Sweeps or grows when full. -ENOMEM when it cannot grow. Caller: the
 * owner / the shard lock. Inline: every spawn; the common case (no sweep
 * due, room left; registry.c says when a sweep is due) is an append. */
static inline int rt__registry_insert(rt_runtime *rt, rt__registry *r, rt_task *t, const char *site,
                                      rt__block_cache *cache)
{
    uint32_t len = r->len;
    if (rt__unlikely(len >= r->sweep_at || len == r->cap || len % RT__REGISTRY_MIN_CAP == 0)) {
        int err = rt__registry_make_room(rt, r, cache);
        if (err < 0)
            return err;
        len = r->len;
    }
    r->entries[len].task = (uintptr_t)t;
    r->entries[len].site = site;
    /* Release: a dump that reads the new length (acquire) reads the entry. */
    rt__store_release_u32(&r->len, len + 1);
    rt__store_relaxed_u64(&r->spawned, r->spawned + 1);
    return 0;
}

/* Drops the references of the COMPLETE tasks; blocks freed go to `cache`.
 * Tasks found waiting with no waker left (lost wake-ups) are reported once
 * through rt->config.report when `lost` is not NULL: up to `lost_cap` of
 * them are stored there, each with a reference, for the caller to report
 * (rt__report_lost) once it holds no lock; returns how many. Skipped (-1)
 * while a dump copies the entries. Caller: owner / shard lock. */
int rt__registry_sweep(rt__registry *r, rt__block_cache *cache, rt__registry_entry *lost,
                       unsigned lost_cap);
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

#endif
