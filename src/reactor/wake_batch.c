/* The reactor's batch of wakes (reactor.h, rt__wake_batch): what a turn's
 * fired timers and ready descriptors wake, gathered and handed to the
 * scheduler in one call. The reactor loop and the timer commands
 * (timer_reactor.c) both add to it. */
#include "reactor.h"

#include "events.h"
#include "task_internal.h"
#include "waker.h"

/* The wake proper: the task's state changes here (see rt__wake_batch). */
static void wake_now(rt__wake_batch *b, rt_waker *w)
{
    const rt__reactor_hooks *h = b->hooks;
    rt_task *t = rt__task_wake_for_batch(w, h->task_vtable, h->rt);
    if (t == NULL)
        return; /* woken directly, or nothing to schedule */
    RT__EV_WAKE(t->id, RT__EV_REACTOR);
    if (b->n == RT__WAKE_BATCH) {
        h->schedule_woken(h->rt, b->tasks, b->n);
        b->n = 0;
    }
    b->tasks[b->n++] = t;
}

void rt__wake_batch_add(rt__wake_batch *b, rt_waker *w)
{
    if (rt_waker_is_noop(w))
        return;
    /* A prefetch cannot fault, but only a task waker's data is known to be
     * worth fetching. */
    if (w->vtable == b->hooks->task_vtable)
        __builtin_prefetch(w->data, 1);
    unsigned slot = b->lag_first;
    if (b->lag_count == RT__WAKE_LAG) {
        /* The oldest has waited long enough: wake it, and its slot is ours. */
        wake_now(b, &b->lagging[slot]);
        b->lag_first = (slot + 1) % RT__WAKE_LAG;
    } else {
        slot = (slot + b->lag_count) % RT__WAKE_LAG;
        b->lag_count++;
    }
    b->lagging[slot] = *w;
    *w = rt_waker_noop();
}

void rt__wake_batch_flush(rt__wake_batch *b)
{
    for (; b->lag_count > 0; b->lag_count--) {
        wake_now(b, &b->lagging[b->lag_first]);
        b->lag_first = (b->lag_first + 1) % RT__WAKE_LAG;
    }
    if (b->n == 0)
        return;
    b->hooks->schedule_woken(b->hooks->rt, b->tasks, b->n);
    b->n = 0;
}
