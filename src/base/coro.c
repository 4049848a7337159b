/* What a coroutine record cleans up: the operation in flight and the guards
 * held. The record belongs to one task, so nothing here is concurrent. */
#include <stddef.h>

#include <asyncrt/coro.h>

#include "common.h"

RT_EXPORT void rt_coro_hold(rt_coro *co, rt_guard *g)
{
    if (co == NULL || g == NULL)
        return;
    g->next = co->held;
    co->held = g;
}

RT_EXPORT void rt_coro_release(rt_coro *co, rt_guard *g)
{
    if (co == NULL || g == NULL)
        return;
    for (rt_guard **link = &co->held; *link != NULL; link = &(*link)->next) {
        if (*link == g) {
            *link = g->next;
            g->next = NULL;
            g->release(g);
            return;
        }
    }
}

RT_EXPORT void rt_coro_cleanup(rt_coro *co)
{
    if (co == NULL)
        return;
    rt_future *awaiting = co->awaiting;
    co->awaiting = NULL;
    rt_future_drop(awaiting);
    while (co->held != NULL) {
        rt_guard *g = co->held;
        co->held = g->next;
        g->next = NULL;
        g->release(g);
    }
}

RT_EXPORT void rt_coro_drop(void *state)
{
    rt_coro_cleanup(state);
}
