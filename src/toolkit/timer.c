/* Timers: the object a sleep hands to the reactor (timer_internal.h has its
 * state diagram and reference rules), and the sleep and interval operations
 * built on it. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <asyncrt/diag.h>
#include <asyncrt/timer.h>

#include "operation.h"
#include "atomic.h"
#include "budget.h"
#include "current.h"
#include "runtime_services.h"
#include "spinlock.h"
#include "timer_internal.h"
#include "waker.h"

RT_EXPORT int64_t rt_now_ns(void)
{
    return rt__now_ns();
}

/* ---- The future's side ------------------------------------------------------- */

/* A new timer, not yet published, holding the future's reference and the
 * arm command's, with a clone of the context's waker. */
static rt__timer *timer_new(rt__reactor *r, int64_t deadline_ns, rt_context *cx)
{
    rt__timer *t = rt__timer_alloc();
    if (t == NULL)
        return NULL;
    rt__timer_entry_init(&t->entry);
    rt__reactor_file_deadline(r, deadline_ns, &t->entry);
    t->waker = rt_waker_clone(rt_context_waker(cx));
    t->refs = 2;
    t->state = RT__TIMER_QUEUED;
    return t;
}

static rt_poll sleep_vpoll(rt_future *f, rt_context *cx);
static void sleep_vdrop(rt_future *f);
static void sleep_vdescribe(const rt_future *f, rt_wait_info *info);
static const rt_future_vtable sleep_vtable = {sleep_vpoll, sleep_vdrop, sleep_vdescribe};

RT_EXPORT int rt_sleep_until_init(rt_sleep *s, rt_runtime *rt, int64_t deadline_ns)
{
    if (rt == NULL)
        rt = rt_current_runtime();
    if (s == NULL)
        return -EINVAL;
    s->rt = rt;
    s->deadline_ns = deadline_ns;
    s->timer = NULL;
    s->future.vtable = &sleep_vtable;
    s->result = 0;
    if (rt == NULL) {
        rt__future_finish(&s->future, -EINVAL);
        return -EINVAL;
    }
    return 0;
}

RT_EXPORT int rt_sleep_init(rt_sleep *s, rt_runtime *rt, int64_t duration_ns)
{
    int64_t now = rt_now_ns();
    int64_t deadline = duration_ns > INT64_MAX - now ? INT64_MAX : now + duration_ns;
    return rt_sleep_until_init(s, rt, deadline);
}

/* One poll of the sleep's timer: RT_READY with *err 0 once the deadline has
 * passed, or with a timer error; the timer is still held either way. */
static rt_poll sleep_poll_timer(rt_sleep *s, rt_context *cx, int *err)
{
    *err = 0;
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    rt__timer *t = s->timer;
    rt__reactor *r = rt__runtime_reactor(s->rt);
    if (t == NULL) {
        /* Never early: ready only once the clock has passed the deadline. */
        int64_t now = rt_now_ns();
        if (now >= s->deadline_ns)
            return RT_READY;
        int e = 0;
        if (rt__runtime_closing(s->rt))
            e = -ESHUTDOWN;
        else if ((t = timer_new(r, s->deadline_ns, cx)) == NULL)
            e = -ENOMEM;
        else if (!rt__reactor_submit_timer(r, rt__current_timer_batch(s->rt), t,
                                           (uint64_t)s->deadline_ns, s->deadline_ns - now)) {
            rt__timer_unref(t, 2); /* never published */
            e = -ESHUTDOWN;
        }
        if (e < 0) {
            *err = e;
            return RT_READY;
        }
        s->timer = t;
        rt__coop_refund(); /* only completed operations spend budget */
        return RT_PENDING;
    }
    if ((rt__load_acquire_u32(&t->state) & RT__TIMER_PHASE) == RT__TIMER_FIRED)
        return RT_READY;
    /* Polled again before it fired: keep the waker current. Under the lock,
     * either the reactor has not fired yet and will take this waker, or it
     * has, and the phase says so. */
    RT__DEBUG_WINDOW("timer.repoll"); /* the reactor may fire or stop right here */
    uint32_t phase = rt__timer_lock(t, RT__TIMER_FILED);
    if (phase == RT__TIMER_FIRED) {
        rt__timer_unlock(t, phase);
        return RT_READY;
    }
    /* Shut down under us: the timer will never fire. Checked under the
     * lock because rt__timer_release_at_stop takes the waker under it after
     * `stopping` was set: either it has run (and the lock's acquire shows us
     * the flag) or it will take the waker we store. */
    if (rt__load_acquire_u32(&r->stopping)) {
        rt__timer_unlock(t, phase);
        *err = -ESHUTDOWN;
        return RT_READY;
    }
    rt_waker old = rt__waker_store(&t->waker, rt_context_waker(cx));
    rt__timer_unlock(t, phase);
    rt__waker_drop(&old);
    rt__coop_refund();
    return RT_PENDING;
}

/* Gives back the sleep's timer, cancelling it if it has not fired. */
static void sleep_release(rt_sleep *s)
{
    rt__timer *t = s->timer;
    if (t == NULL)
        return;
    s->timer = NULL;
    uint32_t phase = rt__timer_lock(t, RT__TIMER_FIRED);
    rt_waker w = t->waker;
    t->waker = rt__waker_noop();
    if (phase == RT__TIMER_QUEUED || phase == RT__TIMER_FILED) {
        rt__timer_unlock(t, RT__TIMER_CANCELLED);
        /* A filed timer is unfiled soon rather than at its deadline (no
         * hurry, and no kick: a cancelled timer that fires is dropped). One
         * still queued needs nothing: the reactor will find it cancelled. */
        if (phase == RT__TIMER_FILED) {
            rt__faa_u32(&t->refs, 1); /* the cancel command's */
            if (!rt__reactor_submit_timer(rt__runtime_reactor(s->rt),
                                          rt__current_timer_batch(s->rt), t, UINT64_MAX, INT64_MAX))
                rt__faa_u32(&t->refs, (uint32_t)-1); /* the future still holds one */
        }
    } else {
        rt__timer_unlock(t, phase);
    }
    rt__waker_drop(&w);
    rt__timer_unref(t, 1); /* the future's */
}

static rt_poll sleep_vpoll(rt_future *f, rt_context *cx)
{
    rt_sleep *s = (rt_sleep *)f;
    int err;
    if (sleep_poll_timer(s, cx, &err) == RT_PENDING)
        return RT_PENDING;
    sleep_release(s);
    return rt__future_finish(f, err);
}

static void sleep_vdrop(rt_future *f)
{
    sleep_release((rt_sleep *)f);
}

/* The deadline is the sleep's own, fixed at init; the timer's state is the
 * reactor's and is not looked at. */
static void sleep_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_sleep *s = (const rt_sleep *)f;
    info->kind = RT_WAIT_SLEEP;
    info->deadline_ns = s->deadline_ns;
    rt__wait_printf(info, "sleep until ");
    rt__wait_from_now(info, s->deadline_ns);
}

/* ---- Interval ----------------------------------------------------------------- */

RT_EXPORT int rt_interval_init(rt_interval *iv, rt_runtime *rt, int64_t period_ns)
{
    if (iv == NULL)
        return -EINVAL;
    memset(iv, 0, sizeof(*iv));
    if (rt == NULL)
        rt = rt_current_runtime();
    if (rt == NULL || period_ns <= 0)
        return -EINVAL;
    int64_t now = rt_now_ns();
    iv->rt = rt;
    iv->period_ns = period_ns;
    iv->next_ns = period_ns > INT64_MAX - now ? INT64_MAX : now + period_ns;
    return 0;
}

/* At the tick the interval moves on, skipping the ticks already missed. */
static rt_poll tick_vpoll(rt_future *f, rt_context *cx)
{
    rt_interval_tick *op = (rt_interval_tick *)f;
    int err;
    if (sleep_poll_timer(&op->sleep, cx, &err) == RT_PENDING)
        return RT_PENDING;
    sleep_release(&op->sleep);
    rt_interval *iv = op->interval;
    if (err == 0) {
        int64_t next = iv->next_ns + iv->period_ns;
        int64_t now = rt_now_ns();
        if (next <= now)
            next += ((now - next) / iv->period_ns + 1) * iv->period_ns;
        iv->next_ns = next;
    }
    return rt__future_finish(f, err);
}

static void tick_vdrop(rt_future *f)
{
    sleep_release(&((rt_interval_tick *)f)->sleep);
}

static void tick_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_interval_tick *op = (const rt_interval_tick *)f;
    info->kind = RT_WAIT_SLEEP;
    info->deadline_ns = op->sleep.deadline_ns;
    rt__wait_printf(info, "interval tick until ");
    rt__wait_from_now(info, op->sleep.deadline_ns);
    rt__wait_printf(info, " (every ");
    rt__wait_seconds(info, op->interval->period_ns, false);
    rt__wait_printf(info, ")");
}

static const rt_future_vtable tick_vtable = {tick_vpoll, tick_vdrop, tick_vdescribe};

RT_EXPORT int rt_interval_tick_init(rt_interval_tick *op, rt_interval *iv)
{
    if (op == NULL)
        return -EINVAL;
    op->interval = iv;
    op->sleep.timer = NULL;
    op->future.vtable = &tick_vtable;
    op->result = 0;
    int err = iv == NULL || iv->rt == NULL ? -EINVAL
                                           : rt_sleep_until_init(&op->sleep, iv->rt, iv->next_ns);
    if (err < 0) {
        op->sleep.timer = NULL;
        rt__future_finish(&op->future, err);
    }
    return err;
}
