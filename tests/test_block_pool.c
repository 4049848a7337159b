/* The block pool (white box): blocks come out in address order whatever
 * order they went back in, a block is never handed to two holders at once,
 * and wholly free slabs are kept only while a runtime lives. Each test runs
 * in its own process (Criterion forks), so each starts with an empty pool. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "block_pool.h"

/* Takes `n` blocks into `out` in the order a magazine hands them out: from
 * the end of what the pool filled in. */
static void take_into(void **out, uint32_t n)
{
    void **filled = malloc(n * sizeof *filled);
    cr_assert_not_null(filled);
    cr_assert_eq(rt__block_pool_take(filled, n), n);
    for (uint32_t i = 0; i < n; i++)
        out[i] = filled[n - 1 - i];
    free(filled);
}

static void shuffle(void **v, uint32_t n, unsigned *seed)
{
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = (uint32_t)rand_r(seed) % i;
        void *t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

Test(block_pool, blocks_are_aligned_and_never_the_slab_header)
{
    void *b[300];
    take_into(b, 300);
    for (int i = 0; i < 300; i++) {
        uintptr_t a = (uintptr_t)b[i];
        cr_assert_eq(a % RT__BLOCK_SIZE, 0, "block %d at %#lx is not aligned", i, (unsigned long)a);
        cr_assert_neq(a % RT__SLAB_SIZE, 0, "block %d is a slab's header", i);
    }
    rt__block_pool_give(b, 300);
}

Test(block_pool, blocks_given_back_in_any_order_come_out_in_address_order)
{
    enum { N = 400 };
    void *first[N], *again[N];
    unsigned seed = 7;
    take_into(first, N);
    for (int round = 0; round < 20; round++) {
        /* Back in a scrambled order, half as one list and half one by one. */
        shuffle(first, N, &seed);
        rt__block_pool_give(first, N / 2);
        for (int i = N / 2; i < N; i++)
            rt__block_pool_free(first[i]);
        take_into(again, N);
        for (int i = 1; i < N; i++)
            cr_assert_lt((uintptr_t)again[i - 1], (uintptr_t)again[i],
                         "round %d: block %d came out below the one before it", round, i);
        for (int i = 0; i < N; i++)
            first[i] = again[i];
    }
    rt__block_pool_give(first, N);
}

Test(block_pool, without_a_runtime_a_slab_is_released_when_its_last_block_returns)
{
    void *b[511];
    take_into(b, 511); /* one whole slab (the pool was empty) */
    cr_assert_eq(rt__block_pool_spare_slabs(), 0);
    rt__block_pool_give(b, 511);
    cr_assert_eq(rt__block_pool_spare_slabs(), 0, "a wholly free slab was kept with no runtime");
}

Test(block_pool, a_released_slab_returns_its_memory_and_is_reused_first)
{
    void *b[511];
    take_into(b, 511); /* one whole slab, every page written below */
    for (int i = 0; i < 511; i++) {
        RT__BLOCK_UNPOISON(b[i]);
        memset(b[i], 0xab, RT__BLOCK_SIZE);
    }
    char *slab = (char *)((uintptr_t)b[0] & ~(uintptr_t)(RT__SLAB_SIZE - 1));
    long page = sysconf(_SC_PAGESIZE);
    size_t pages = RT__SLAB_SIZE / (size_t)page;
    unsigned char resident[RT__SLAB_SIZE / 4096];
    cr_assert_eq(mincore(slab, RT__SLAB_SIZE, resident), 0);
    for (size_t p = 0; p < pages; p++)
        cr_assert(resident[p] & 1, "page %zu of a written slab is not resident", p);
    rt__block_pool_give(b, 511); /* no runtime: released at once */
    cr_assert_eq(mincore(slab, RT__SLAB_SIZE, resident), 0);
    /* The first page keeps the header; the rest went back to the kernel. */
    for (size_t p = 1; p < pages; p++)
        cr_assert(!(resident[p] & 1), "page %zu of a released slab is still resident", p);
    void *again[511];
    take_into(again, 511);
    cr_assert_eq((char *)((uintptr_t)again[0] & ~(uintptr_t)(RT__SLAB_SIZE - 1)), slab,
                 "a new slab was carved while a released one was waiting");
    rt__block_pool_give(again, 511);
}

Test(block_pool, a_runtime_keeps_spare_slabs_until_trimmed)
{
    enum { SLABS = 4 };
    void *b[SLABS][511];
    rt__block_pool_attach();
    for (int s = 0; s < SLABS; s++)
        take_into(b[s], 511);
    for (int s = 0; s < SLABS; s++)
        rt__block_pool_give(b[s], 511);
    cr_assert_eq(rt__block_pool_spare_slabs(), SLABS);
    /* Reused, not allocated anew: the blocks come from one of those slabs. */
    void *again[511];
    take_into(again, 511);
    cr_assert_eq(rt__block_pool_spare_slabs(), SLABS - 1);
    uintptr_t slab = (uintptr_t)again[0] & ~(uintptr_t)(RT__SLAB_SIZE - 1);
    bool known = false;
    for (int s = 0; s < SLABS; s++)
        known |= ((uintptr_t)b[s][0] & ~(uintptr_t)(RT__SLAB_SIZE - 1)) == slab;
    cr_assert(known, "a new slab was allocated while four wholly free ones were kept");
    rt__block_pool_give(again, 511);
    rt__block_pool_trim(1);
    cr_assert_eq(rt__block_pool_spare_slabs(), 1);
    rt__block_pool_detach();
    cr_assert_eq(rt__block_pool_spare_slabs(), 0, "the last runtime's detach keeps slabs");
}

/* ---- stress: several threads take and give concurrently ------------------ */

#define STRESS_THREADS 4
#define STRESS_ROUNDS 3000

struct holder {
    _Atomic(uintptr_t) owner; /* the first word: who holds the block now */
};

static atomic_int stress_violations;

static void *stress_main(void *arg)
{
    uintptr_t me = (uintptr_t)arg;
    unsigned seed = (unsigned)me * 2654435761u;
    void *held[256];
    for (int round = 0; round < STRESS_ROUNDS; round++) {
        uint32_t n = 1 + (uint32_t)rand_r(&seed) % 256;
        uint32_t got = rt__block_pool_take(held, n);
        if (got != n)
            atomic_fetch_add(&stress_violations, 1);
        for (uint32_t i = 0; i < got; i++) {
            RT__BLOCK_UNPOISON(held[i]);
            struct holder *h = held[i];
            atomic_store(&h->owner, me);
        }
        if (round % 16 == 0)
            sched_yield(); /* let the others take and give meanwhile */
        /* Nobody else wrote over a block while we held it. */
        for (uint32_t i = 0; i < got; i++) {
            struct holder *h = held[i];
            if (atomic_exchange(&h->owner, 0) != me)
                atomic_fetch_add(&stress_violations, 1);
        }
        if (got == 0)
            continue;
        if (round % 3 == 0) {
            for (uint32_t i = 0; i < got; i++)
                rt__block_pool_free(held[i]);
        } else {
            rt__block_pool_give(held, got);
        }
    }
    return NULL;
}

Test(block_pool, concurrent_takers_never_share_a_block)
{
    rt__block_pool_attach();
    pthread_t t[STRESS_THREADS];
    for (uintptr_t i = 0; i < STRESS_THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, stress_main, (void *)(i + 1)), 0);
    for (int i = 0; i < STRESS_THREADS; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(atomic_load(&stress_violations), 0,
                 "%d blocks were held by two threads at once, or a take came up short",
                 atomic_load(&stress_violations));
    rt__block_pool_detach();
    cr_assert_eq(rt__block_pool_spare_slabs(), 0);
}
