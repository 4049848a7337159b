/* A worker's local run queue: a fixed-capacity Chase-Lev work-stealing deque.
 *
 * The owning worker pushes and takes at the bottom (LIFO: the task it just
 * spawned or woke runs next, while its data is still in cache); any other
 * thread steals one item at a time from the top (FIFO: the oldest work moves).
 * The capacity is fixed (RT_DEQUE_CAPACITY, a power of two): when the ring is
 * full the owner moves the older half out with rt__deque_spill_owner() and
 * hands it to the global injector, as Go and Tokio do, so no array is ever
 * reallocated and nothing needs safe memory reclamation.
 *
 * Contract in the names: `_owner` functions are called only by the owning
 * thread; `_any` functions by any thread, concurrently with everything. */
#ifndef RT_SRC_DEQUE_H
#define RT_SRC_DEQUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "atomic.h"

#ifndef RT_DEQUE_CAPACITY
#define RT_DEQUE_CAPACITY 256
#endif
_Static_assert((RT_DEQUE_CAPACITY & (RT_DEQUE_CAPACITY - 1)) == 0,
               "RT_DEQUE_CAPACITY must be a power of two");

/* Returned by rt__deque_steal_any when it lost a race for the top item (the
 * deque may still hold work: try again or elsewhere). */
#define RT_DEQUE_LOST ((void *)1)

typedef struct rt__deque {
    /* Index of the oldest item. Advanced by a successful CAS from thieves, from
     * the owner taking the last item, and from the owner spilling. Monotonic
     * 64-bit, so it never wraps in practice; compared as signed differences. */
    RT_ALIGNED_CACHELINE uint64_t top;
    /* One past the newest item. Written only by the owner. */
    RT_ALIGNED_CACHELINE uint64_t bottom;
    /* The ring; slot i holds index i mod capacity. Slots are accessed
     * atomically because a thief may read a slot the owner is overwriting
     * (its CAS on top then fails and the value is discarded). */
    RT_ALIGNED_CACHELINE void *slots[RT_DEQUE_CAPACITY];
} rt__deque;

void rt__deque_init(rt__deque *d);

/* Pushes `item` (not NULL) at the bottom. Returns false, changing nothing,
 * when the ring is full: the caller spills and pushes again. */
bool rt__deque_push_owner(rt__deque *d, void *item);

/* Takes the newest item, or NULL when empty. */
void *rt__deque_take_owner(rt__deque *d);

/* Claims the `n` oldest items with one CAS on top and copies them to `out` in
 * age order. Returns how many it claimed: n, or 0 when no more than n items
 * are present or a thief moved top first (the caller re-checks and retries). */
size_t rt__deque_spill_owner(rt__deque *d, void **out, size_t n);

/* Steals the oldest item. Returns it, NULL when the deque looked empty, or
 * RT_DEQUE_LOST when another thread took that item first. */
void *rt__deque_steal_any(rt__deque *d);

/* Number of items at the moment of the call; exact for the owner, a hint for
 * anyone else. */
size_t rt__deque_len_any(rt__deque *d);

/* The indices of the oldest item and of one past the newest, for the owner's
 * own bookkeeping of which items are old (the scheduler's starvation watch):
 * relaxed reads, a snapshot that thieves may have moved `top` past since. */
static inline uint64_t rt__deque_top_owner(const rt__deque *d)
{
    return rt__load_relaxed_u64(&d->top);
}

static inline uint64_t rt__deque_bottom_owner(const rt__deque *d)
{
    return rt__load_relaxed_u64(&d->bottom);
}

#endif
