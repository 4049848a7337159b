/* Task block caching: equal-sized blocks (RT__TASK_SMALL_BLOCK bytes) reused
 * without a lock, as a magazine allocator (Bonwick and Adams, "Magazines and
 * Vmem", USENIX 2001).
 *
 * Each worker, and each foreign registry shard, has a cache of two
 * magazines: arrays of up to RT__MAGAZINE_SIZE free blocks. Frees and
 * allocations use the loaded magazine; when it is full (or empty) it is
 * swapped with the spare, and only when both are full (or empty) does the
 * cache give a full magazine back to the block pool (block_pool.h), or take
 * a new one from it: one mutex acquisition per 256 blocks. Blocks therefore
 * flow from the worker that frees them to the one that allocates, whichever
 * those are, and each magazine taken from the pool is in address order.
 *
 * A magazine is an array, not a list through the blocks: handing a block
 * out, or a magazine back, never reads a block that may have left the
 * cache (see block_pool.h for what walking lists cost).
 *
 * Left to malloc, a burst of 100,000 spawns grows and trims the worker's
 * heap on every burst (sysmalloc, mprotect and page faults take about half
 * the time); the pool keeps free slabs while the runtime is busy, and idle
 * workers give them back after a second (RT__BLOCK_CACHE_IDLE_NS).
 *
 * Every block belongs to the pool: it goes back with rt__block_free, never
 * with free(). A cache is used by one thread at a time (its worker, or the
 * holder of its shard's lock). */
#ifndef RT_SRC_BLOCK_CACHE_H
#define RT_SRC_BLOCK_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "block_pool.h"
#include "fault.h"

#define RT__MAGAZINE_SIZE 256u
#define RT__BLOCK_CACHE_IDLE_NS 1000000000ll

/* At most RT__MAGAZINE_SIZE free blocks; the next one out is the last. */
typedef struct rt__magazine {
    uint32_t count;                  /* blocks in `rounds` */
    void *rounds[RT__MAGAZINE_SIZE]; /* the blocks, handed out from the end */
} rt__magazine;

typedef struct rt__block_cache {
    rt__magazine *loaded; /* where blocks come from and go to: one of `mags` */
    rt__magazine *spare;  /* the previous loaded magazine: the other one */
    rt__magazine mags[2]; /* storage for both */
} rt__block_cache;

void rt__block_cache_init(rt__block_cache *c);
/* Gives both magazines back to the pool. A zeroed, never initialised cache
 * is accepted and holds nothing. */
void rt__block_cache_clear(rt__block_cache *c);
/* Blocks the cache holds. */
static inline uint32_t rt__block_cache_count(const rt__block_cache *c)
{
    return c->loaded->count + c->spare->count;
}

/* The calling thread's cache: the one its owner (a worker, or the reactor
 * thread) installed with rt__block_cache_set_current, NULL on any other
 * thread, which then uses the block pool directly. */
extern __thread rt__block_cache *rt__tls_block_cache __attribute__((tls_model("initial-exec")));

static inline rt__block_cache *rt__current_block_cache(void)
{
    return rt__tls_block_cache;
}

/* Installs `c` as the calling thread's cache (NULL: none). */
void rt__block_cache_set_current(rt__block_cache *c);

/* Slow paths, out of line. */
void *rt__block_cache_refill_and_pop(rt__block_cache *c);
void rt__block_cache_rotate_and_push(rt__block_cache *c, void *b);

/* A free block, or NULL when memory is exhausted. */
static inline void *rt__block_cache_pop(rt__block_cache *c)
{
    rt__magazine *m = c->loaded;
    if (m->count == 0)
        return rt__block_cache_refill_and_pop(c);
    void *b = m->rounds[--m->count];
    if (m->count > 0) {
        /* The next block out: both of its lines are written soon. */
        char *next = m->rounds[m->count - 1];
        __builtin_prefetch(next, 1);
        __builtin_prefetch(next + 64, 1);
    }
    RT__BLOCK_UNPOISON(b);
    return b;
}

/* Takes a block back. */
static inline void rt__block_cache_push(rt__block_cache *c, void *b)
{
    rt__magazine *m = c->loaded;
    if (m->count == RT__MAGAZINE_SIZE) {
        rt__block_cache_rotate_and_push(c, b);
        return;
    }
    RT__BLOCK_POISON(b);
    m->rounds[m->count++] = b;
}

/* A block from `c`, or straight from the pool when `c` is NULL (a thread
 * without a cache). NULL when memory is exhausted. */
static inline void *rt__block_alloc(rt__block_cache *c)
{
    if (RT__FAULT(RT__FAULT_ALLOC) != 0)
        return NULL;
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
