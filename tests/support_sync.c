/* The waiter tasks of support_sync.h, shared by the sync.h suites. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_sync.h"

atomic_int rank_next;
int rank_order[MAX_RANKS];

void record_rank(int index)
{
    int r = atomic_fetch_add(&rank_next, 1);
    if (r >= 0 && r < MAX_RANKS)
        rank_order[r] = index;
}

rt_poll sem_waiter_poll(void *state, rt_context *cx, void **out)
{
    struct sem_waiter *w = state;
    RT_CORO_BEGIN(&w->co);
    if (rt_semaphore_acquire_init(&w->op, w->sem, w->want) != 0)
        RT_RETURN(&w->co, out, (intptr_t)-1);
    RT_AWAIT_POLL(&w->co, announce(RT_POLL_OP(&w->op, cx), &w->announced, w->queued));
    if (w->op.result != 0)
        RT_RETURN(&w->co, out, (intptr_t)w->op.result);
    record_rank(w->index);
    if (w->release_after)
        rt_semaphore_release(w->sem, w->want);
    if (w->acquired != NULL)
        event_signal(w->acquired);
    RT_RETURN(&w->co, out, (intptr_t)1);
    RT_CORO_END(&w->co, out);
}

void sem_waiter_drop(void *state)
{
    struct sem_waiter *w = state;
    RT_DROP(&w->op);
    if (w->dropped != NULL)
        event_signal(w->dropped);
}

rt_task *spawn_sem_waiter(rt_runtime *rt, struct sem_waiter *w)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, sem_waiter_poll, sem_waiter_drop, w, &task), 0);
    return task;
}

rt_poll mutex_waiter_poll(void *state, rt_context *cx, void **out)
{
    struct mutex_waiter *w = state;
    RT_CORO_BEGIN(&w->co);
    if (rt_mutex_lock_init(&w->op, w->m) != 0)
        RT_RETURN(&w->co, out, (intptr_t)-1);
    RT_AWAIT_POLL(&w->co, announce(RT_POLL_OP(&w->op, cx), &w->announced, w->queued));
    if (w->op.result != 0)
        RT_RETURN(&w->co, out, (intptr_t)w->op.result);
    record_rank(w->index);
    if (w->unlock_after)
        rt_mutex_unlock(w->m);
    if (w->acquired != NULL)
        event_signal(w->acquired);
    RT_RETURN(&w->co, out, (intptr_t)1);
    RT_CORO_END(&w->co, out);
}

void mutex_waiter_drop(void *state)
{
    struct mutex_waiter *w = state;
    RT_DROP(&w->op);
    if (w->dropped != NULL)
        event_signal(w->dropped);
}
