/* The registry of live tasks, through which shutdown reaches every
 * unfinished task (registry.c). Internal, not installed. */
#ifndef RT_SRC_REGISTRY_H
#define RT_SRC_REGISTRY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common.h"
#include "block_cache.h"
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

#endif
