/* The process-wide pool of 128-byte blocks in address-ordered slabs; see
 * block_pool.h. */
#include "block_pool.h"
#include "fault.h"

#include "atomic.h"

#include <assert.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef RT__BLOCK_ASAN
#include <sanitizer/lsan_interface.h>
#endif

#define WORDS (RT__SLAB_BLOCKS / 64)
/* Free blocks of a wholly free slab: all but the header. */
#define USABLE (RT__SLAB_BLOCKS - 1)

/* Slabs are carved from regions mapped with mmap, 32 slabs at a time, and
 * never unmapped: a slab the pool releases is decommitted instead (its pages
 * but the first go back to the kernel with MADV_DONTNEED) and reused before
 * a new one is carved. Unmapping single slabs would split the region's
 * mapping, and a fragmented heap could then reach the kernel's limit on
 * mappings (vm.max_map_count, 65,530 by default). Nor do slabs come from
 * aligned_alloc: freed to glibc, they make it trim the threads' heaps and
 * unmap memory after every few slabs, and each unmap interrupts the other
 * CPUs to flush their TLBs (docs/design.md, "Tried and rejected"). */
#define REGION_SIZE (2u << 20)

/* The header, in a slab's first block, which stays resident while the slab
 * is decommitted. Every field is guarded by the pool's lock. */
typedef struct rt__slab {
    uint64_t free_bits[WORDS];    /* bit i set: block i is in the pool (bit 0, the header: never) */
    struct rt__slab *prev, *next; /* neighbours in the list of slabs with a free block, or
                                     `next` in the stack of decommitted slabs */
    uint32_t free_count;          /* bits set */
} rt__slab;

_Static_assert(sizeof(rt__slab) <= RT__BLOCK_SIZE, "the header fits the first block");
_Static_assert(RT__SLAB_BLOCKS % 64 == 0, "the bitmap is whole words");

static struct {
    pthread_mutex_t lock;
    rt__slab *listed;        /* slabs with a free block, most recently listed first */
    uint32_t spare;          /* listed slabs whose every block is free (relaxed reads: a hint) */
    uint32_t runtimes;       /* runtimes alive: with none, wholly free slabs are released */
    rt__slab *decommitted;   /* released slabs, reused first */
    char *carve, *carve_end; /* the part of the newest region not yet carved into slabs */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static inline rt__slab *slab_of(void *block)
{
    return (rt__slab *)((uintptr_t)block & ~(uintptr_t)(RT__SLAB_SIZE - 1));
}

static inline unsigned index_in_slab(void *block)
{
    return (unsigned)(((uintptr_t)block & (RT__SLAB_SIZE - 1)) / RT__BLOCK_SIZE);
}

/* ---- The list of slabs with a free block (under the lock) ------------------ */

static void list_push(rt__slab *s)
{
    s->prev = NULL;
    s->next = pool.listed;
    if (pool.listed != NULL)
        pool.listed->prev = s;
    pool.listed = s;
}

static void list_remove(rt__slab *s)
{
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        pool.listed = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
}

static void set_spare(uint32_t n)
{
    /* Relaxed: the count orders nothing; readers outside the lock use it
     * only to decide whether a trim is worth a wake-up. */
    rt__store_relaxed_u32(&pool.spare, n);
}

/* ---- Slabs ------------------------------------------------------------------ */

/* Maps a new region aligned to the slab size. Under the lock (once per 32
 * slabs). Returns false when the kernel refuses. */
static bool map_region(void)
{
    size_t len = REGION_SIZE + RT__SLAB_SIZE;
    char *p = rt__mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return false;
    /* Trim to an aligned REGION_SIZE: the pages around it were never touched. */
    char *start = (char *)(((uintptr_t)p + RT__SLAB_SIZE - 1) & ~(uintptr_t)(RT__SLAB_SIZE - 1));
    if (start > p)
        munmap(p, (size_t)(start - p));
    char *end = start + REGION_SIZE;
    if (p + len > end)
        munmap(end, (size_t)(p + len - end));
#ifdef RT__BLOCK_ASAN
    /* Tasks in these blocks may hold the only pointer to malloc'd memory. */
    __lsan_register_root_region(start, REGION_SIZE);
#endif
    pool.carve = start;
    pool.carve_end = end;
    return true;
}

/* A wholly free slab: a decommitted one, else a new one carved from the
 * newest region. Under the lock. */
static rt__slab *slab_new_locked(void)
{
    rt__slab *s = pool.decommitted;
    if (s != NULL) {
        pool.decommitted = s->next;
    } else {
        if (pool.carve == pool.carve_end && !map_region())
            return NULL;
        s = (rt__slab *)pool.carve;
        pool.carve += RT__SLAB_SIZE;
    }
    for (unsigned w = 0; w < WORDS; w++)
        s->free_bits[w] = ~(uint64_t)0;
    s->free_bits[0] &= ~(uint64_t)1; /* the header */
    s->free_count = USABLE;
    for (unsigned i = 1; i < RT__SLAB_BLOCKS; i++)
        RT__BLOCK_POISON((char *)s + (size_t)i * RT__BLOCK_SIZE);
    return s;
}

/* Decommits a chain of slabs linked through `next` (already unlisted), then
 * stacks them for reuse. The madvise runs outside the lock. */
static void release_chain(rt__slab *s)
{
    if (s == NULL)
        return;
    /* The header's page stays: it holds the link. With pages of half a slab
     * or more (64 KiB pages) nothing can go back, and the slab just waits. */
    long page = sysconf(_SC_PAGESIZE);
    bool decommit = page > 0 && (unsigned long)page <= RT__SLAB_SIZE / 2;
    rt__slab *last = s;
    for (rt__slab *t = s; t != NULL; t = t->next) {
        /* The blocks stay poisoned until the slab is reused. */
        if (decommit)
            madvise((char *)t + page, RT__SLAB_SIZE - (size_t)page, MADV_DONTNEED);
        last = t;
    }
    pthread_mutex_lock(&pool.lock);
    last->next = pool.decommitted;
    pool.decommitted = s;
    pthread_mutex_unlock(&pool.lock);
}

/* How many wholly free slabs the pool keeps at most right now. */
static uint32_t spare_limit(void)
{
    return pool.runtimes > 0 ? RT__POOL_SPARE_SLABS : 0;
}

/* ---- Taking ------------------------------------------------------------------ */

/* Collects up to `max` free blocks from the listed slabs into `out`, in
 * ascending order within each slab. Under the lock; touches headers only. */
static uint32_t take_locked(void **out, uint32_t max)
{
    uint32_t n = 0;
    while (n < max && pool.listed != NULL) {
        rt__slab *s = pool.listed;
        if (s->free_count == USABLE)
            set_spare(pool.spare - 1); /* at least one block is taken below */
        for (unsigned w = 0; w < WORDS && n < max; w++) {
            uint64_t bits = s->free_bits[w];
            while (bits != 0 && n < max) {
                unsigned bit = (unsigned)__builtin_ctzll(bits);
                bits &= bits - 1;
                out[n++] = (char *)s + (size_t)(w * 64 + bit) * RT__BLOCK_SIZE;
                s->free_count--;
            }
            s->free_bits[w] = bits;
        }
        if (s->free_count == 0)
            list_remove(s);
    }
    return n;
}

uint32_t rt__block_pool_take(void **out, uint32_t max)
{
    uint32_t n = 0;
    while (n < max) {
        pthread_mutex_lock(&pool.lock);
        n += take_locked(out + n, max - n);
        pthread_mutex_unlock(&pool.lock);
        if (n == max)
            break;
        /* The pool ran dry: a new slab (whose header's first write faults
         * its page in under the lock: one fault per 511 blocks). */
        pthread_mutex_lock(&pool.lock);
        rt__slab *s = slab_new_locked();
        if (s != NULL) {
            list_push(s);
            set_spare(pool.spare + 1);
        }
        pthread_mutex_unlock(&pool.lock);
        if (s == NULL)
            break;
    }
    /* Taken in ascending order; the taker hands them out from the end. */
    for (uint32_t i = 0; i < n / 2; i++) {
        void *t = out[i];
        out[i] = out[n - 1 - i];
        out[n - 1 - i] = t;
    }
    return n;
}

void *rt__block_pool_alloc(void)
{
    void *b;
    if (rt__block_pool_take(&b, 1) != 1)
        return NULL;
    RT__BLOCK_UNPOISON(b);
    return b;
}

/* ---- Giving back --------------------------------------------------------------- */

/* Marks `n` blocks free. Returns the slabs that must be released, linked
 * through `next`. Under the lock; touches headers only. */
static rt__slab *give_locked(void *const *blocks, uint32_t n)
{
    rt__slab *released = NULL;
    uint32_t limit = spare_limit();
    for (uint32_t i = 0; i < n; i++) {
        rt__slab *s = slab_of(blocks[i]);
        unsigned idx = index_in_slab(blocks[i]);
        uint64_t bit = (uint64_t)1 << (idx % 64);
        assert(idx != 0 && (s->free_bits[idx / 64] & bit) == 0 && "a block freed twice");
        s->free_bits[idx / 64] |= bit;
        if (++s->free_count == 1)
            list_push(s);
        if (s->free_count == USABLE) {
            if (pool.spare < limit) {
                set_spare(pool.spare + 1);
            } else {
                list_remove(s);
                s->next = released;
                released = s;
            }
        }
    }
    return released;
}

void rt__block_pool_give(void *const *blocks, uint32_t n)
{
    /* Poisoned before the lock: the blocks are still ours until their bits
     * are set. */
    for (uint32_t i = 0; i < n; i++)
        RT__BLOCK_POISON(blocks[i]);
    pthread_mutex_lock(&pool.lock);
    rt__slab *released = give_locked(blocks, n);
    pthread_mutex_unlock(&pool.lock);
    release_chain(released);
}

void rt__block_pool_free(void *block)
{
    rt__block_pool_give(&block, 1);
}

/* ---- Trimming ------------------------------------------------------------------ */

void rt__block_pool_trim(uint32_t keep)
{
    rt__slab *released = NULL;
    pthread_mutex_lock(&pool.lock);
    for (rt__slab *s = pool.listed, *next; s != NULL && pool.spare > keep; s = next) {
        next = s->next;
        if (s->free_count == USABLE) {
            list_remove(s);
            set_spare(pool.spare - 1);
            s->next = released;
            released = s;
        }
    }
    pthread_mutex_unlock(&pool.lock);
    release_chain(released);
}

uint32_t rt__block_pool_spare_slabs(void)
{
    return rt__load_relaxed_u32(&pool.spare);
}

/* fork() copies the pool's mutex as it is: if a worker of the parent held
 * it at that instant, the child's first runtime would wait on it for ever.
 * The forking thread takes it before the fork and both processes release
 * it after, as malloc does with its own locks. */
static void lock_for_fork(void)
{
    pthread_mutex_lock(&pool.lock);
}

static void unlock_after_fork(void)
{
    pthread_mutex_unlock(&pool.lock);
}

static pthread_once_t fork_handlers_once = PTHREAD_ONCE_INIT;

static void register_fork_handlers(void)
{
    /* Fails only without memory; then a fork at the wrong instant can hang
     * the child (its copy of the mutex stays locked). */
    (void)pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
}

void rt__block_pool_attach(void)
{
    pthread_once(&fork_handlers_once, register_fork_handlers);
    pthread_mutex_lock(&pool.lock);
    pool.runtimes++;
    pthread_mutex_unlock(&pool.lock);
}

void rt__block_pool_detach(void)
{
    pthread_mutex_lock(&pool.lock);
    bool last = --pool.runtimes == 0;
    pthread_mutex_unlock(&pool.lock);
    if (last)
        rt__block_pool_trim(0);
}
