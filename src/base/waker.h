/* The no-op waker, inline for the library's own hot paths (an empty waker
 * slot is written on every wake). Internal, not installed. */
#ifndef RT_SRC_WAKER_H
#define RT_SRC_WAKER_H

#include <asyncrt/future.h>

extern const rt_waker_vtable rt__noop_waker_vtable;

static inline rt_waker rt__waker_noop(void)
{
    rt_waker w = {&rt__noop_waker_vtable, NULL};
    return w;
}

/* rt_waker_wake / rt_waker_drop / rt_waker_will_wake without a call when
 * there is nothing to do: the library's slots are empty (no-op) most of the
 * time, and these sit on every channel and lock operation. */
static inline void rt__waker_wake(rt_waker *w)
{
    if (w->vtable != &rt__noop_waker_vtable)
        rt_waker_wake(w);
}

static inline void rt__waker_drop(rt_waker *w)
{
    if (w->vtable != &rt__noop_waker_vtable)
        rt_waker_drop(w);
}

static inline bool rt__waker_will_wake(const rt_waker *a, const rt_waker *b)
{
    return a->vtable == b->vtable && a->data == b->data;
}

/* Stores a clone of *w in the waker slot *slot, unless the slot already
 * wakes the same target (the common case of a task polled again). Returns
 * what the slot held before, for the caller to drop once it has released
 * the lock guarding the slot (the no-op waker when nothing changed). */
static inline rt_waker rt__waker_store(rt_waker *slot, const rt_waker *w)
{
    if (rt__waker_will_wake(slot, w))
        return rt__waker_noop();
    rt_waker old = *slot;
    *slot = rt_waker_clone(w);
    return old;
}

#endif
