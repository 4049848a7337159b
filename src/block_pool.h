/* The block pool: where the 128-byte blocks of small tasks and timers come
 * from and, once no worker's block cache (block_cache.h) keeps them, go back
 * to.
 *
 * Blocks are carved from slabs of 64 KiB aligned to 64 KiB. The first block
 * of each slab is its header: a bitmap of the slab's free blocks. A block's
 * slab is its address with the low 16 bits cleared, so returning a block
 * sets one bit, wherever the block comes from. Taking blocks scans the
 * bitmap upwards, so they come out in address order, whatever order they
 * were returned in.
 *
 * Why the order matters: a burst of sleeps ends in deadline order, so a LIFO
 * free list hands the blocks of the next burst out scattered over the whole
 * heap, one page apart. In the timers benchmark (100,000 sleeps, 2 workers),
 * sorting the recycled blocks by address before each repetition took the
 * median total from 112-115 ms to 85-90 ms (four alternating rounds of
 * `--reps 5`, a scratch copy): the next block is then in the page, and
 * usually the cache line, that the hardware already fetched.
 *
 * The pool is process-wide, not per runtime: a task can outlive its runtime
 * (a waker held by user code), and its block must still have somewhere to
 * go. While any runtime lives, the pool keeps up to RT__POOL_SPARE_SLABS
 * wholly free slabs (16 MiB) for the next burst; idle workers trim it down to
 * RT__POOL_KEEP_SLABS, and once no runtime is left a slab is released as
 * soon as its last block comes back.
 *
 * Every function may be called from any thread. One mutex guards the pool;
 * block caches reach it once per magazine (256 blocks), and the mutex is
 * never held while blocks themselves are read or written: only slab headers
 * are touched under it. */
#ifndef RT_SRC_BLOCK_POOL_H
#define RT_SRC_BLOCK_POOL_H

#include <stdint.h>

#define RT__BLOCK_SIZE 128u
#define RT__SLAB_SIZE 65536u
/* Blocks per slab, the header included. */
#define RT__SLAB_BLOCKS (RT__SLAB_SIZE / RT__BLOCK_SIZE)
/* Wholly free slabs kept while a runtime lives: 256 x 64 KiB = 16 MiB. */
#define RT__POOL_SPARE_SLABS 256u
/* Wholly free slabs an idle runtime keeps. */
#define RT__POOL_KEEP_SLABS 2u

/* One free block, 128-byte aligned, or NULL when memory is exhausted. */
void *rt__block_pool_alloc(void);

/* Returns one block taken from the pool. */
void rt__block_pool_free(void *block);

/* Takes up to `max` (at most 512) blocks in ascending address order, linked
 * through their first word with NULL after the last, into *head. Returns how
 * many; fewer than `max` only when memory is exhausted (then possibly 0 with
 * *head NULL). */
uint32_t rt__block_pool_take(void **head, uint32_t max);

/* Returns a NULL-terminated list of at most 512 blocks linked through their
 * first word. */
void rt__block_pool_give(void *head);

/* Releases wholly free slabs until at most `keep` remain. */
void rt__block_pool_trim(uint32_t keep);

/* Wholly free slabs the pool holds (a relaxed read: a hint). */
uint32_t rt__block_pool_spare_slabs(void);

/* A runtime starts or stops using the pool: with none left, every wholly
 * free slab is released at once. */
void rt__block_pool_attach(void);
void rt__block_pool_detach(void);

#endif
