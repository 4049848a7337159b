/* The reactor's side of a timer (timer_internal.h has the object, its state
 * diagram and reference rules; timer.c the future's side): filing and
 * cancelling commands, firing, and what a stopping reactor leaves. */
#include "timer_internal.h"

#include "atomic.h"
#include "events.h"
#include "task_internal.h"
#include "waker.h"

void rt__timer_command(rt__reactor *r, rt__timer *t)
{
    /* Only QUEUED (an arm command) or CANCELLED (a cancel command, or an arm
     * command overtaken by the drop) can be found here: a timer is fired only
     * once filed, and filed only here. */
    uint32_t phase = rt__timer_lock(t, RT__TIMER_QUEUED);
    RT__DEBUG_YIELD(); /* widens the locked section: the future spins */
    if (phase == RT__TIMER_QUEUED) {
        rt__timer_wheel_insert(&r->wheel, &t->entry, t->entry.deadline);
        rt__timer_unlock(t, RT__TIMER_FILED);
        return; /* the command's reference is now the wheel's */
    }
    bool was_filed = rt__timer_wheel_cancel(&r->wheel, &t->entry);
    rt__timer_unlock(t, phase);
    /* The command's reference, and the wheel's if it still held one. */
    rt__timer_unref(t, was_filed ? 2 : 1);
}

bool rt__timer_fire(rt__timer_entry *entry, rt__wake_batch *batch)
{
    bool woke = false;
    rt__timer *t = caa_container_of(entry, rt__timer, entry);
    uint32_t phase = rt__timer_lock(t, RT__TIMER_FILED);
    if (phase == RT__TIMER_FILED) {
        rt_waker w = t->waker;
        t->waker = rt__waker_noop();
        RT__DEBUG_YIELD(); /* widens the locked section: the future spins */
        rt__timer_unlock(t, RT__TIMER_FIRED);
        /* The waker's reference keeps its task alive for the read of its id. */
        RT__EV_TIMER_FIRE(w.vtable == batch->hooks->task_vtable ? ((const rt_task *)w.data)->id
                                                                : 0);
        rt__wake_batch_add(batch, &w);
        woke = true;
    } else {
        rt__timer_unlock(t, phase); /* cancelled: its cancel command, if any, finds it unfiled */
    }
    rt__timer_unref(t, 1); /* the wheel's reference */
    return woke;
}

void rt__timer_release_at_stop(rt__timer_entry *entry, void *unused)
{
    (void)unused;
    rt__timer *t = caa_container_of(entry, rt__timer, entry);
    /* Whoever still waits (a sleep polled by hand) is woken, so that its
     * next poll reports -ESHUTDOWN; tasks are all finished by now, so their
     * wakes do nothing. Then the wheel's reference goes. */
    uint32_t phase = rt__timer_lock(t, RT__TIMER_FILED);
    rt_waker w = t->waker;
    t->waker = rt__waker_noop();
    rt__timer_unlock(t, phase);
    rt__waker_wake(&w);
    rt__timer_unref(t, 1);
}
