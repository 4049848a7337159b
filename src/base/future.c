/* The common operation header: polling, finishing and dropping any
 * operation through its vtable, and the vtable every finished operation
 * shares. */
#include <errno.h>

#include <asyncrt/future.h>

#include "common.h"
#include "operation.h"

/* A finished (or dropped) operation reports its stored result forever and
 * has nothing left to release. Swapping the vtable is what makes a second
 * drop, or a drop after completion, a no-op without a flag in every struct. */
static rt_poll finished_poll(rt_future *f, rt_context *cx)
{
    (void)f;
    (void)cx;
    return RT_READY;
}

const rt_future_vtable rt__finished_vtable = {finished_poll, NULL};

RT_EXPORT rt_poll rt_future_poll(rt_future *f, rt_context *cx)
{
    if (rt__unlikely(f == NULL))
        return RT_READY;
    if (rt__unlikely(f->vtable == NULL || cx == NULL)) {
        if (f->vtable != &rt__finished_vtable) /* a finished one keeps its result */
            f->result = -EINVAL;
        return RT_READY;
    }
    return f->vtable->poll(f, cx);
}

RT_EXPORT void rt_future_drop(rt_future *f)
{
    if (f == NULL || f->vtable == NULL || f->vtable == &rt__finished_vtable)
        return;
    const rt_future_vtable *vtable = f->vtable;
    /* Finished before the drop runs, so a drop that reaches this operation
     * again (a combinator dropping a child that the user drops too) stops
     * above. */
    f->vtable = &rt__finished_vtable;
    f->result = -ECANCELED;
    if (vtable->drop != NULL)
        vtable->drop(f);
}

RT_EXPORT bool rt_future_is_done(const rt_future *f)
{
    return f != NULL && f->vtable == &rt__finished_vtable;
}

RT_EXPORT rt_poll rt_future_finish(rt_future *f, int64_t result)
{
    return rt__future_finish(f, result);
}
