/* Timers: the object a sleep hands to the reactor (timer_internal.h has its
 * state diagram and reference rules), and the public sleep, timeout and
 * interval futures built on it. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#include <asyncrt/timer.h>

#include "atomic.h"
#include "budget.h"
#include "current.h"
#include "runtime.h"
#include "spinlock.h"
#include "timer_internal.h"
#include "waker.h"

#ifdef RT_DEBUG_YIELD
void (*volatile rt__debug_window_hook)(const char *window);
#endif

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
    t->entry.deadline = rt__reactor_deadline_tick(r, deadline_ns);
    t->waker = rt_waker_clone(rt_context_waker(cx));
    t->refs = 2;
    t->state = RT__TIMER_QUEUED;
    return t;
}

RT_EXPORT int rt_sleep_until_init(rt_sleep *s, rt_runtime *rt, int64_t deadline_ns)
{
    if (rt == NULL)
        rt = rt_current();
    if (s == NULL || rt == NULL)
        return -EINVAL;
    s->rt = rt;
    s->deadline_ns = deadline_ns;
    s->timer = NULL;
    return 0;
}

RT_EXPORT int rt_sleep_init(rt_sleep *s, rt_runtime *rt, int64_t duration_ns)
{
    int64_t now = rt_now_ns();
    int64_t deadline = duration_ns > INT64_MAX - now ? INT64_MAX : now + duration_ns;
    return rt_sleep_until_init(s, rt, deadline);
}

RT_EXPORT rt_poll rt_sleep_poll(rt_sleep *s, rt_context *cx, int *err)
{
    if (err != NULL)
        *err = 0;
    if (rt__unlikely(s == NULL || cx == NULL)) {
        if (err != NULL)
            *err = -EINVAL;
        return RT_READY;
    }
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    rt__timer *t = s->timer;
    rt__reactor *r = &s->rt->reactor;
    if (t == NULL) {
        /* Never early: ready only once the clock has passed the deadline. */
        int64_t now = rt_now_ns();
        if (now >= s->deadline_ns)
            return RT_READY;
        int e = 0;
        if (rt__load_acquire_u32(&s->rt->closing))
            e = -ESHUTDOWN;
        else if ((t = timer_new(r, s->deadline_ns, cx)) == NULL)
            e = -ENOMEM;
        else if (!rt__reactor_submit_timer(r, rt__current_timer_batch(s->rt), t, t->entry.deadline,
                                           s->deadline_ns - now)) {
            rt__timer_unref(t, 2); /* never published */
            e = -ESHUTDOWN;
        }
        if (e < 0) {
            if (err != NULL)
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
        if (err != NULL)
            *err = -ESHUTDOWN;
        return RT_READY;
    }
    rt_waker old = rt__waker_store(&t->waker, rt_context_waker(cx));
    rt__timer_unlock(t, phase);
    rt__waker_drop(&old);
    rt__coop_refund();
    return RT_PENDING;
}

RT_EXPORT void rt_sleep_drop(rt_sleep *s)
{
    if (s == NULL)
        return;
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
            if (!rt__reactor_submit_timer(&s->rt->reactor, rt__current_timer_batch(s->rt), t,
                                          UINT64_MAX, INT64_MAX))
                rt__faa_u32(&t->refs, (uint32_t)-1); /* the future still holds one */
        }
    } else {
        rt__timer_unlock(t, phase);
    }
    rt__waker_drop(&w);
    rt__timer_unref(t, 1); /* the future's */
}

/* ---- Timeout ------------------------------------------------------------------ */

RT_EXPORT int rt_timeout_init(rt_timeout *t, rt_runtime *rt, int64_t duration_ns)
{
    return t == NULL ? -EINVAL : rt_sleep_init(&t->sleep, rt, duration_ns);
}

RT_EXPORT rt_poll rt_timeout_poll(rt_timeout *t, rt_context *cx, rt_poll_fn inner,
                                  void *inner_state, void **out, int *status)
{
    if (rt__unlikely(t == NULL || cx == NULL || inner == NULL)) {
        if (status != NULL)
            *status = -EINVAL; /* the inner future was not polled */
        return RT_READY;
    }
    void *value = NULL;
    if (inner(inner_state, cx, &value) == RT_READY) {
        if (out != NULL)
            *out = value;
        if (status != NULL)
            *status = 0;
        return RT_READY;
    }
    int err = 0;
    if (rt_sleep_poll(&t->sleep, cx, &err) == RT_READY) {
        if (status != NULL)
            *status = err < 0 ? err : -ETIMEDOUT;
        return RT_READY;
    }
    return RT_PENDING;
}

RT_EXPORT void rt_timeout_drop(rt_timeout *t)
{
    if (t != NULL)
        rt_sleep_drop(&t->sleep);
}

/* ---- Interval ----------------------------------------------------------------- */

RT_EXPORT int rt_interval_init(rt_interval *iv, rt_runtime *rt, int64_t period_ns)
{
    if (iv == NULL || period_ns <= 0)
        return -EINVAL;
    iv->period_ns = period_ns;
    return rt_sleep_init(&iv->sleep, rt, period_ns);
}

RT_EXPORT rt_poll rt_interval_poll(rt_interval *iv, rt_context *cx, int *err)
{
    if (rt__unlikely(iv == NULL || cx == NULL)) {
        if (err != NULL)
            *err = -EINVAL;
        return RT_READY;
    }
    int e = 0;
    if (rt_sleep_poll(&iv->sleep, cx, &e) == RT_PENDING)
        return RT_PENDING;
    if (err != NULL)
        *err = e;
    if (e < 0)
        return RT_READY;
    /* The tick happened: arm the next one, skipping the ticks already missed. */
    int64_t next = iv->sleep.deadline_ns + iv->period_ns;
    int64_t now = rt_now_ns();
    if (next <= now)
        next += ((now - next) / iv->period_ns + 1) * iv->period_ns;
    rt_runtime *rt = iv->sleep.rt;
    rt_sleep_drop(&iv->sleep);
    rt_sleep_until_init(&iv->sleep, rt, next);
    return RT_READY;
}

RT_EXPORT void rt_interval_drop(rt_interval *iv)
{
    if (iv != NULL)
        rt_sleep_drop(&iv->sleep);
}
