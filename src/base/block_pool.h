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
 * heap, one page apart. Handed out in address order, the next block is in
 * the page, and usually the cache line, that the hardware already fetched:
 * in the timers benchmark (100,000 sleeps, 2 workers) that takes about a
 * quarter off the total time.
 *
 * The pool is process-wide, not per runtime: a task can outlive its runtime
 * (a waker held by user code), and its block must still have somewhere to
 * go. While any runtime lives, the pool keeps up to RT__POOL_SPARE_SLABS
 * wholly free slabs (16 MiB) for the next burst; idle workers trim it down to
 * RT__POOL_KEEP_SLABS, and once no runtime is left a slab is released as
 * soon as its last block comes back. Released means decommitted: the slab's
 * pages but the first go back to the kernel (MADV_DONTNEED), and the
 * address range stays mapped for the next slab the pool needs, so the
 * pool's address space never shrinks below its peak.
 *
 * Blocks move in and out as arrays of pointers, never as lists linked
 * through the blocks: a magazine's blocks have usually left the cache by
 * the time it comes back, and walking such a list costs a cache miss per
 * block, each waiting for the one before it.
 *
 * Every function may be called from any thread. One mutex guards the pool;
 * block caches reach it once per magazine (256 blocks), and the pool never
 * reads or writes a block itself: only slab headers, under the mutex.
 *
 * In AddressSanitizer builds a block is poisoned while the pool or a block
 * cache holds it (RT__BLOCK_POISON), so a use after the last free is
 * reported even though the memory never goes back to malloc. */
#ifndef RT_SRC_BLOCK_POOL_H
#define RT_SRC_BLOCK_POOL_H

#include <stdint.h>

#if defined(__SANITIZE_ADDRESS__)
#define RT__BLOCK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RT__BLOCK_ASAN 1
#endif
#endif
#ifdef RT__BLOCK_ASAN
#include <sanitizer/asan_interface.h>
#define RT__BLOCK_POISON(b) ASAN_POISON_MEMORY_REGION((b), RT__BLOCK_SIZE)
#define RT__BLOCK_UNPOISON(b) ASAN_UNPOISON_MEMORY_REGION((b), RT__BLOCK_SIZE)
#else
#define RT__BLOCK_POISON(b) ((void)(b))
#define RT__BLOCK_UNPOISON(b) ((void)(b))
#endif

#define RT__BLOCK_SIZE 128u
#define RT__SLAB_SIZE 65536u
/* Blocks per slab, the header included. */
#define RT__SLAB_BLOCKS (RT__SLAB_SIZE / RT__BLOCK_SIZE)
/* Wholly free slabs kept while a runtime lives: 256 x 64 KiB = 16 MiB. */
#define RT__POOL_SPARE_SLABS 256u
/* Wholly free slabs an idle runtime keeps. */
#define RT__POOL_KEEP_SLABS 2u

/* One free block, 128-byte aligned and unpoisoned, or NULL when memory is
 * exhausted. */
void *rt__block_pool_alloc(void);

/* Returns one block taken from the pool. */
void rt__block_pool_free(void *block);

/* Takes up to `max` blocks into out[0..n) and returns n; fewer than `max`
 * only when memory is exhausted (then possibly 0). The blocks stay poisoned
 * (ASan builds) and are in descending address order, so that a magazine
 * handing them out from its end hands them out in ascending order. */
uint32_t rt__block_pool_take(void **out, uint32_t max);

/* Returns `n` blocks, poisoned or not. */
void rt__block_pool_give(void *const *blocks, uint32_t n);

/* Releases (decommits) wholly free slabs until at most `keep` remain. */
void rt__block_pool_trim(uint32_t keep);

/* Wholly free slabs the pool holds (a relaxed read: a hint). */
uint32_t rt__block_pool_spare_slabs(void);

/* A runtime starts or stops using the pool: with none left, every wholly
 * free slab is released at once. The first attach also registers fork
 * handlers, so that a child never inherits the pool's mutex locked. */
void rt__block_pool_attach(void);
void rt__block_pool_detach(void);

#endif
