/* The registry of live tasks (see runtime.h): what shutdown walks to cancel
 * every unfinished task, and where the task counts come from. */
#include <errno.h>
#include <stdlib.h>

#include "atomic.h"
#include "runtime.h"

/* Foreign threads pick a shard by a hash of their thread-local storage
 * address, which differs per thread and costs no system call. */
static unsigned foreign_shard(const rt_runtime *rt)
{
    static __thread char marker;
    uintptr_t h = (uintptr_t)&marker;
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15ull;
    unsigned nforeign = rt->nshards - rt->nworkers;
    return rt->nworkers + (unsigned)((h >> 32) % nforeign);
}

int rt__registry_insert(rt_runtime *rt, rt__worker *w, rt_task *t)
{
    unsigned idx = w != NULL ? w->index : foreign_shard(rt);
    rt__registry_shard *sh = &rt->shards[idx];
    pthread_mutex_lock(&sh->lock);
    /* Checked under the lock: shutdown closes each shard under it, so a task
     * is either inserted before shutdown walks the shard or refused. */
    if (sh->closed) {
        pthread_mutex_unlock(&sh->lock);
        return -ESHUTDOWN;
    }
    if (sh->len == sh->cap) {
        uint32_t cap = sh->cap != 0 ? sh->cap * 2 : 256;
        rt_task **grown = realloc(sh->tasks, cap * sizeof(*grown));
        if (grown == NULL) {
            pthread_mutex_unlock(&sh->lock);
            return -ENOMEM;
        }
        sh->tasks = grown;
        sh->cap = cap;
    }
    t->registry_shard = idx;
    t->registry_index = sh->len;
    sh->tasks[sh->len++] = t;
    rt__store_relaxed_u64(&sh->inserted, sh->inserted + 1);
    pthread_mutex_unlock(&sh->lock);
    return 0;
}

void rt__registry_remove(rt_runtime *rt, rt_task *t, bool cancelled)
{
    rt__registry_shard *sh = &rt->shards[t->registry_shard];
    pthread_mutex_lock(&sh->lock);
    /* Swap the last entry into the hole. */
    rt_task *last = sh->tasks[--sh->len];
    sh->tasks[t->registry_index] = last;
    last->registry_index = t->registry_index;
    if (cancelled)
        rt__store_relaxed_u64(&sh->cancelled, sh->cancelled + 1);
    else
        rt__store_relaxed_u64(&sh->completed, sh->completed + 1);
    pthread_mutex_unlock(&sh->lock);
}
