/* A LIFO free list of equal-sized task blocks (RT__TASK_SMALL_BLOCK bytes),
 * kept by each worker and each foreign registry shard so that spawning and
 * freeing tasks rarely reaches malloc. The blocks are ordinary malloc blocks:
 * any cache may take any block, and free() releases them. A cache is used by
 * one thread at a time (its worker, or whoever holds its shard's lock). */
#ifndef RT_SRC_BLOCK_CACHE_H
#define RT_SRC_BLOCK_CACHE_H

#include <stdint.h>
#include <stdlib.h>

/* Most blocks a cache holds (16 MiB of 128-byte blocks): enough to absorb a
 * burst of a hundred thousand short tasks without malloc growing and trimming
 * its heap on every burst (profiled: sysmalloc and page faults were half the
 * time of such bursts). Given back after a second of idleness. */
#define RT__BLOCK_CACHE_MAX 131072u
/* What an idle worker keeps after RT__BLOCK_CACHE_IDLE_NS of sleep. */
#define RT__BLOCK_CACHE_KEEP 512u
#define RT__BLOCK_CACHE_IDLE_NS 1000000000ll

typedef struct rt__block_cache {
    void *head;   /* free blocks, linked through their first word */
    uint32_t len; /* how many */
} rt__block_cache;

/* A block, or NULL when the cache is empty. */
static inline void *rt__block_cache_pop(rt__block_cache *c)
{
    void *b = c->head;
    if (b != NULL) {
        c->head = *(void **)b;
        c->len--;
    }
    return b;
}

/* Keeps `b`, or frees it when the cache is full. */
static inline void rt__block_cache_push(rt__block_cache *c, void *b)
{
    if (c->len >= RT__BLOCK_CACHE_MAX) {
        free(b);
        return;
    }
    *(void **)b = c->head;
    c->head = b;
    c->len++;
}

/* Frees blocks until at most `keep` remain. */
static inline void rt__block_cache_trim(rt__block_cache *c, uint32_t keep)
{
    while (c->len > keep)
        free(rt__block_cache_pop(c));
}

#endif
