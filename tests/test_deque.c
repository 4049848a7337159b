/* The Chase-Lev deque (white box): owner push/take/spill against thieves.
 * The property: every item pushed is obtained exactly once, by the owner's
 * take, by its spill, or by a thief, across many wrap-arounds of the ring. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "deque.h"

#define THIEVES 3
#define ITEMS 2000000u

static rt__deque deque;
static atomic_uchar taken[ITEMS + 1];
static atomic_bool owner_done;
/* Keeps the thieves off while the owner's first burst fills the ring. */
static atomic_bool thieves_hold;
static atomic_ulong stolen_total;

/* Items are ids shifted left, like aligned pointers: (void *)1 is the
 * deque's RT_DEQUE_LOST sentinel and must never be a real item. */
#define ITEM(id) ((void *)((uintptr_t)(id) << 4))

static void record(void *item)
{
    uintptr_t id = (uintptr_t)item >> 4;
    cr_assert_eq((uintptr_t)item & 15, 0, "garbage item %p", item);
    cr_assert(id >= 1 && id <= ITEMS, "garbage item %lu", (unsigned long)id);
    unsigned char before = atomic_fetch_add(&taken[id], 1);
    cr_assert_eq(before, 0, "item %lu obtained twice", (unsigned long)id);
}

/* A private generator: the TSan build interposes rand_r (tsan_support.c). */
static unsigned next_random(unsigned *state)
{
    unsigned x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *state = x;
}

static void *thief(void *arg)
{
    (void)arg;
    unsigned long mine = 0;
    for (;;) {
        if (atomic_load(&thieves_hold)) {
            sched_yield();
            continue;
        }
        void *item = rt__deque_steal_any(&deque);
        if (item == RT_DEQUE_LOST)
            continue;
        if (item == NULL) {
            if (atomic_load(&owner_done) && rt__deque_len_any(&deque) == 0)
                break;
            continue;
        }
        record(item);
        mine++;
    }
    atomic_fetch_add(&stolen_total, mine);
    return NULL;
}

Test(deque, every_item_taken_exactly_once_against_three_thieves, .timeout = 120)
{
    rt__deque_init(&deque);
    for (size_t i = 0; i <= ITEMS; i++)
        atomic_store(&taken[i], 0);
    atomic_store(&owner_done, false);
    atomic_store(&stolen_total, 0);
    atomic_store(&thieves_hold, true);

    pthread_t thieves[THIEVES];
    for (int i = 0; i < THIEVES; i++)
        cr_assert_eq(pthread_create(&thieves[i], NULL, thief, NULL), 0);

    /* The owner pushes in bursts and takes some back, so the deque keeps
     * being nearly empty (the last-item race) and sometimes full (spill).
     * The first burst overfills the ring while the thieves are held off, so
     * that at least one spill happens however the threads are scheduled (a
     * debug-yield run once had the thieves keep the ring from ever filling). */
    unsigned seed = 12345;
    unsigned long spilled = 0, owner_taken = 0;
    for (uintptr_t next = 1; next <= ITEMS;) {
        unsigned burst = next == 1 ? RT_DEQUE_CAPACITY + 1 : (unsigned)(next_random(&seed) % 600);
        for (unsigned i = 0; i < burst && next <= ITEMS; i++) {
            while (!rt__deque_push_owner(&deque, ITEM(next))) {
                void *out[RT_DEQUE_CAPACITY / 2];
                size_t n = rt__deque_spill_owner(&deque, out, RT_DEQUE_CAPACITY / 2);
                for (size_t k = 0; k < n; k++)
                    record(out[k]);
                spilled += n;
            }
            next++;
        }
        atomic_store(&thieves_hold, false);
        unsigned takes = (unsigned)(next_random(&seed) % 400);
        for (unsigned i = 0; i < takes; i++) {
            void *item = rt__deque_take_owner(&deque);
            if (item == NULL)
                break;
            record(item);
            owner_taken++;
        }
    }
    void *item;
    while ((item = rt__deque_take_owner(&deque)) != NULL) {
        record(item);
        owner_taken++;
    }
    atomic_store(&owner_done, true);
    for (int i = 0; i < THIEVES; i++)
        pthread_join(thieves[i], NULL);

    cr_assert_eq(owner_taken + spilled + atomic_load(&stolen_total), ITEMS, "items lost");
    for (uintptr_t id = 1; id <= ITEMS; id++)
        cr_assert_eq(atomic_load(&taken[id]), 1, "item %lu obtained %d times", (unsigned long)id,
                     atomic_load(&taken[id]));
    /* The run must actually have exercised all three ways out. */
    cr_assert_gt(spilled, 0, "the ring never filled up");
    cr_assert_gt(atomic_load(&stolen_total), 0, "no thief ever won");
}

Test(deque, empty_deque_returns_null_and_stays_consistent)
{
    rt__deque_init(&deque);
    cr_assert_null(rt__deque_take_owner(&deque));
    cr_assert_null(rt__deque_steal_any(&deque));
    cr_assert_eq(rt__deque_len_any(&deque), 0);
    cr_assert(rt__deque_push_owner(&deque, ITEM(7)));
    cr_assert_eq(rt__deque_len_any(&deque), 1);
    cr_assert_eq(rt__deque_take_owner(&deque), ITEM(7));
    cr_assert_null(rt__deque_take_owner(&deque));
    cr_assert_eq(rt__deque_len_any(&deque), 0);
}

Test(deque, owner_is_lifo_thieves_are_fifo_and_full_ring_refuses)
{
    rt__deque_init(&deque);
    for (uintptr_t i = 1; i <= RT_DEQUE_CAPACITY; i++)
        cr_assert(rt__deque_push_owner(&deque, ITEM(i)));
    cr_assert_not(rt__deque_push_owner(&deque, ITEM(999)), "a full ring accepted a push");
    cr_assert_eq(rt__deque_steal_any(&deque), ITEM(1));
    cr_assert_eq(rt__deque_take_owner(&deque), ITEM(RT_DEQUE_CAPACITY));
    void *out[4];
    cr_assert_eq(rt__deque_spill_owner(&deque, out, 4), 4);
    for (uintptr_t i = 0; i < 4; i++)
        cr_assert_eq(out[i], ITEM(i + 2), "spill must hand out the oldest items in order");
    cr_assert_eq(rt__deque_len_any(&deque), RT_DEQUE_CAPACITY - 6);
    /* A spill never takes the last items out from under the owner. */
    while (rt__deque_take_owner(&deque) != NULL)
        ;
    cr_assert(rt__deque_push_owner(&deque, ITEM(1)));
    cr_assert_eq(rt__deque_spill_owner(&deque, out, 1), 0);
    cr_assert_eq(rt__deque_take_owner(&deque), ITEM(1));
}
