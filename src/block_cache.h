/* Task block caching: equal-sized blocks (RT__TASK_SMALL_BLOCK bytes) reused
 * without malloc, as a magazine allocator (Bonwick and Adams, "Magazines and
 * Vmem", USENIX 2001).
 *
 * Each worker, and each foreign registry shard, has a cache of two
 * magazines: linked lists of up to RT__MAGAZINE_SIZE free blocks. Frees and
 * allocations use the loaded magazine; when it is full (or empty) it is
 * swapped with the spare, and only when both are full (or empty) does the
 * cache give a full magazine to, or take one from, the runtime's depot: one
 * mutex acquisition per 256 blocks. Blocks therefore flow from the worker
 * that frees them to the one that allocates, whichever those are.
 *
 * Profiling a burst of 100,000 spawns showed malloc growing and trimming the
 * worker's heap on every burst (sysmalloc, mprotect and page faults were half
 * the time); the depot keeps up to RT__DEPOT_MAX magazines (16 MiB) while the
 * runtime is busy, and idle workers give them back after a second.
 *
 * The blocks are ordinary malloc blocks: free() releases any of them. A cache
 * is used by one thread at a time (its worker, or the holder of its shard's
 * lock); the depot has its own lock. */
#ifndef RT_SRC_BLOCK_CACHE_H
#define RT_SRC_BLOCK_CACHE_H

#include <pthread.h>
#include <stdint.h>

#define RT__MAGAZINE_SIZE 256u
/* Full magazines the depot keeps at most: 512 x 256 x 128 bytes = 16 MiB. */
#define RT__DEPOT_MAX 512u
/* What the depot keeps once the runtime has been idle for a second. */
#define RT__DEPOT_KEEP 2u
#define RT__BLOCK_CACHE_IDLE_NS 1000000000ll

/* The runtime-wide store of full magazines. */
typedef struct rt__depot {
    pthread_mutex_t lock;
    void *magazines; /* full magazines, linked through their first block */
    uint32_t count;  /* how many (written under the lock, read as a hint) */
} rt__depot;

/* A free list of at most RT__MAGAZINE_SIZE blocks. */
typedef struct rt__magazine {
    void *head;   /* blocks, linked through their first word */
    uint32_t len; /* how many */
} rt__magazine;

typedef struct rt__block_cache {
    rt__magazine loaded; /* where blocks come from and go to */
    rt__magazine spare;  /* the previous loaded magazine */
    rt__depot *depot;    /* shared overflow and refill */
} rt__block_cache;

int rt__depot_init(rt__depot *d);
/* Frees every block in the depot. */
void rt__depot_destroy(rt__depot *d);
/* Keeps at most `keep` magazines. Returns without waiting if the lock is busy. */
void rt__depot_trim(rt__depot *d, uint32_t keep);

void rt__block_cache_init(rt__block_cache *c, rt__depot *depot);
/* Frees both magazines. */
void rt__block_cache_clear(rt__block_cache *c);

/* Slow paths, out of line. */
void *rt__block_cache_refill_and_pop(rt__block_cache *c);
void rt__block_cache_rotate_and_push(rt__block_cache *c, void *b);

/* A free block, or NULL (the caller then mallocs). */
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
        __builtin_prefetch((char *)next + 127, 1);
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

#endif
