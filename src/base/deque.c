/* Chase-Lev work-stealing deque on the atomics layer (ck_pr).
 *
 * Algorithm and orderings follow Lê, Pop, Cohen, Zappa Nardelli, "Correct and
 * Efficient Work-Stealing for Weak Memory Models" (PPoPP 2013), with a fixed
 * ring instead of a growing array.
 *
 * Index state (64-bit, monotonic; `size = bottom - top` as a signed value):
 *
 *        thieves CAS top+1 ──►        ◄── owner push: bottom+1
 *    [ top ......... items ......... bottom )
 *                                     ◄── owner take: bottom-1, then
 *                                         CAS top+1 if it was the last item
 *
 * Ordering arguments, each pairing named:
 * (P) push writes the slot, then stores bottom with release. A thief's acquire
 *     load of bottom pairs with it, so a thief that sees the new bottom also
 *     sees the slot's content (and the task state written before the push).
 * (T) take stores the decremented bottom, then needs a StoreLoad fence before
 *     it reads top: otherwise the owner and a thief can each see the other's
 *     old index and both return the last item (the classic lost/duplicated
 *     task). rt__store_seq_cst_u64 carries that fence (an mfence on x86).
 * (S) a thief loads top, fences (rt__fence_thief: pairs with (T)'s fence in the
 *     paper's proof; a load-load barrier suffices on TSO), loads bottom with
 *     acquire (pairs with (P)), reads the slot, and claims it with a CAS on top.
 *     The CAS is a full barrier, and it is the only way top moves, so at most
 *     one thread wins each index.
 * (L) the last item (top == bottom-1 after the decrement) is contended by the
 *     owner through the same CAS on top, which settles who gets it.
 * Indices never wrap, so comparisons use signed differences: an empty deque
 * with bottom == top is "size 0", not a huge unsigned size. */
#include "deque.h"

#include "atomic.h"

#define RT_DEQUE_MASK ((uint64_t)RT_DEQUE_CAPACITY - 1)

void rt__deque_init(rt__deque *d)
{
    d->top = 0;
    d->bottom = 0;
    for (size_t i = 0; i < RT_DEQUE_CAPACITY; i++)
        d->slots[i] = NULL;
}

bool rt__deque_push_owner(rt__deque *d, void *item)
{
    uint64_t b = rt__load_relaxed_u64(&d->bottom);
    /* Acquire pairs with the thieves' CAS on top: a slot a thief has claimed
     * is only reused after we see its CAS, so its read of the slot is done. */
    uint64_t t = rt__load_acquire_u64(&d->top);
    if ((int64_t)(b - t) >= (int64_t)RT_DEQUE_CAPACITY)
        return false;
    rt__store_relaxed_ptr(&d->slots[b & RT_DEQUE_MASK], item);
    RT__DEBUG_YIELD();
    /* (P): release publishes the slot to thieves that acquire bottom. */
    rt__store_release_u64(&d->bottom, b + 1);
    return true;
}

void *rt__deque_take_owner(rt__deque *d)
{
    /* Fast empty check without the fence: top only grows, so a stale top
     * can only overstate the size. If even that says empty, it is. */
    uint64_t b0 = rt__load_relaxed_u64(&d->bottom);
    if ((int64_t)(b0 - rt__load_relaxed_u64(&d->top)) <= 0)
        return NULL;
    uint64_t b = b0 - 1;
    /* (T): the decrement must be visible before top is read. */
    rt__store_seq_cst_u64(&d->bottom, b);
    RT__DEBUG_YIELD();
    uint64_t t = rt__load_seq_cst_u64(&d->top);
    int64_t size = (int64_t)(b - t);
    if (size < 0) {
        /* Empty: undo the decrement. */
        rt__store_relaxed_u64(&d->bottom, b + 1);
        return NULL;
    }
    void *item = rt__load_relaxed_ptr(&d->slots[b & RT_DEQUE_MASK]);
    if (size > 0)
        return item; /* Not the last item: no thief can reach index b. */
    /* (L): the last item; race the thieves for it through top. */
    if (!rt__cas_u64(&d->top, &t, t + 1))
        item = NULL;
    rt__store_relaxed_u64(&d->bottom, b + 1);
    return item;
}

size_t rt__deque_spill_owner(rt__deque *d, void **out, size_t n)
{
    uint64_t t = rt__load_acquire_u64(&d->top);
    uint64_t b = rt__load_relaxed_u64(&d->bottom);
    /* Spill only from a deque with items left over: it is called when the
     * ring is full, and keeping one back costs nothing. */
    if ((int64_t)(b - t) <= (int64_t)n)
        return 0;
    /* Only the owner writes slots, so reading them before or after the CAS is
     * the same; reading first keeps the code shaped like a steal. */
    for (size_t i = 0; i < n; i++)
        out[i] = rt__load_relaxed_ptr(&d->slots[(t + i) & RT_DEQUE_MASK]);
    /* The claim of (S) for n indices at once: the CAS from t to t + n
     * succeeds only if no thief has claimed index t (or, since top only
     * moves by CAS from its current value, any index after it) in the
     * meantime, so every index in [t, t + n) is ours alone. Takes cannot
     * interfere: they run on this same thread. */
    if (!rt__cas_u64(&d->top, &t, t + n))
        return 0;
    return n;
}

void *rt__deque_steal_any(rt__deque *d)
{
    uint64_t t = rt__load_seq_cst_u64(&d->top);
    rt__fence_thief();
    /* (P): acquire pairs with the owner's release store of bottom. */
    uint64_t b = rt__load_seq_cst_u64(&d->bottom);
    if ((int64_t)(b - t) <= 0)
        return NULL;
    void *item = rt__load_relaxed_ptr(&d->slots[t & RT_DEQUE_MASK]);
    RT__DEBUG_YIELD();
    /* (S): the CAS decides; on failure the slot may have been reused, and the
     * value read is discarded. */
    if (!rt__cas_u64(&d->top, &t, t + 1))
        return RT_DEQUE_LOST;
    return item;
}

size_t rt__deque_len_any(rt__deque *d)
{
    uint64_t t = rt__load_acquire_u64(&d->top);
    uint64_t b = rt__load_acquire_u64(&d->bottom);
    int64_t size = (int64_t)(b - t);
    return size > 0 ? (size_t)size : 0;
}
