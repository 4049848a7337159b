/* Task block caching: equal-sized blocks (RT__TASK_SMALL_BLOCK bytes) reused
 * without a lock, as a magazine allocator (Bonwick and Adams, "Magazines and
 * Vmem", USENIX 2001).
 *
 * Each worker, and each foreign registry shard, has a cache of two
 * magazines: linked lists of up to RT__MAGAZINE_SIZE free blocks. Frees and
 * allocations use the loaded magazine; when it is full (or empty) it is
 * swapped with the spare, and only when both are full (or empty) does the
 * cache give a full magazine back to the block pool (block_pool.h), or take
 * a new one from it: one mutex acquisition per 256 blocks. Blocks therefore
 * flow from the worker that frees them to the one that allocates, whichever
 * those are, and each magazine taken from the pool is in address order.
 *
 * Profiling a burst of 100,000 spawns showed malloc growing and trimming the
 * worker's heap on every burst (sysmalloc, mprotect and page faults were half
 * the time); the pool keeps free slabs while the runtime is busy, and idle
 * workers give them back after a second.
 *
 * Every block belongs to the pool: it goes back with rt__block_cache_push or
 * rt__block_pool_free, never with free(). A cache is used by one thread at a
 * time (its worker, or the holder of its shard's lock). */
#ifndef RT_SRC_BLOCK_CACHE_H
#define RT_SRC_BLOCK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "block_pool.h"

#define RT__MAGAZINE_SIZE 256u
#define RT__BLOCK_CACHE_IDLE_NS 1000000000ll

/* A free list of at most RT__MAGAZINE_SIZE blocks. */
typedef struct rt__magazine {
    void *head;   /* blocks, linked through their first word */
    uint32_t len; /* how many */
} rt__magazine;

typedef struct rt__block_cache {
    rt__magazine loaded; /* where blocks come from and go to */
    rt__magazine spare;  /* the previous loaded magazine */
} rt__block_cache;

void rt__block_cache_init(rt__block_cache *c);
/* Gives both magazines back to the pool. */
void rt__block_cache_clear(rt__block_cache *c);

/* Slow paths, out of line. */
void *rt__block_cache_refill_and_pop(rt__block_cache *c);
void rt__block_cache_rotate_and_push(rt__block_cache *c, void *b);

/* A free block, or NULL when memory is exhausted. */
static inline void *rt__block_cache_pop(rt__block_cache *c)
{
    void *b = c->loaded.head;
    if (b == NULL)
        return rt__block_cache_refill_and_pop(c);
    void *next = *(void **)b;
    c->loaded.head = next;
    c->loaded.len--;
    if (next != NULL) {
        __builtin_prefetch(next, 1);
        __builtin_prefetch((char *)next + 64, 1);
    }
    return b;
}

/* Takes a block back. */
static inline void rt__block_cache_push(rt__block_cache *c, void *b)
{
    if (c->loaded.len == RT__MAGAZINE_SIZE) {
        rt__block_cache_rotate_and_push(c, b);
        return;
    }
    *(void **)b = c->loaded.head;
    c->loaded.head = b;
    c->loaded.len++;
}

/* A block from `c`, or straight from the pool when `c` is NULL (a thread
 * without a cache). NULL when memory is exhausted. */
static inline void *rt__block_alloc(rt__block_cache *c)
{
    return c != NULL ? rt__block_cache_pop(c) : rt__block_pool_alloc();
}

/* Gives a block back to `c`, or straight to the pool when `c` is NULL. */
static inline void rt__block_free(rt__block_cache *c, void *b)
{
    if (c != NULL)
        rt__block_cache_push(c, b);
    else
        rt__block_pool_free(b);
}

#endif
