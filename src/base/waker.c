/* The waker helpers and the no-op waker. Each helper is one indirect call:
 * the vtable decides what waking means. */
#include <asyncrt/future.h>

#include "common.h"
#include "waker.h"

static rt_waker noop_clone(const void *data);
static void noop_fn(const void *data)
{
    (void)data;
}

const rt_waker_vtable rt__noop_waker_vtable = {noop_clone, noop_fn, noop_fn, noop_fn};

static rt_waker noop_clone(const void *data)
{
    rt_waker w = {&rt__noop_waker_vtable, data};
    return w;
}

RT_EXPORT rt_waker rt_waker_noop(void)
{
    rt_waker w = {&rt__noop_waker_vtable, NULL};
    return w;
}

RT_EXPORT bool rt_waker_is_noop(const rt_waker *waker)
{
    return waker == NULL || waker->vtable == &rt__noop_waker_vtable;
}

RT_EXPORT rt_waker rt_waker_clone(const rt_waker *waker)
{
    if (rt__unlikely(waker == NULL))
        return rt_waker_noop();
    return waker->vtable->clone(waker->data);
}

RT_EXPORT void rt_waker_wake(rt_waker *waker)
{
    if (rt__unlikely(waker == NULL))
        return;
    rt_waker w = *waker;
    *waker = rt_waker_noop();
    w.vtable->wake(w.data);
}

RT_EXPORT void rt_waker_wake_by_ref(const rt_waker *waker)
{
    if (rt__unlikely(waker == NULL))
        return;
    waker->vtable->wake_by_ref(waker->data);
}

RT_EXPORT void rt_waker_drop(rt_waker *waker)
{
    if (rt__unlikely(waker == NULL))
        return;
    rt_waker w = *waker;
    *waker = rt_waker_noop();
    w.vtable->drop(w.data);
}

RT_EXPORT bool rt_waker_will_wake(const rt_waker *a, const rt_waker *b)
{
    if (rt__unlikely(a == NULL || b == NULL))
        return false;
    return a->vtable == b->vtable && a->data == b->data;
}
