/* Timers: the object a sleep hands to the reactor (timer_internal.h has its
 * state diagram and reference rules), and the public sleep, timeout and
 * interval futures built on it. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include <asyncrt/timer.h>

#include "atomic.h"
#include "runtime.h"
#include "timer_internal.h"
#include "waker.h"

RT_EXPORT int64_t rt_now_ns(void)
{
    return rt__now_ns();
}

void rt__timer_unref(rt__timer *t)
{
    /* Full barrier: every use of the timer happens before its free. */
    if (rt__faa_u32(&t->refs, (uint32_t)-1) == 1) {
        rt_waker_drop(&t->waker);
        free(t);
    }
}

/* ---- The reactor's side ---------------------------------------------------- */

void rt__timer_command(rt__reactor *r, rt__timer *t)
{
    /* Clear `queued` before reading the state (both full barriers): a state
     * change after this read submits the timer again. */
    rt__fas_u32(&t->queued, 0);
    uint32_t state = rt__load_seq_cst_u32(&t->state);
    bool filed = rt__timer_entry_is_filed(&t->entry);
    if (state == RT__TIMER_ARMED && !filed) {
        rt__faa_u32(&t->refs, 1); /* the wheel's reference */
        rt__timer_wheel_insert(&r->wheel, &t->entry, t->deadline_tick);
    } else if (state == RT__TIMER_CANCELLED && filed) {
        rt__timer_wheel_cancel(&r->wheel, &t->entry);
        rt__timer_unref(t); /* the wheel's reference */
    }
    rt__timer_unref(t); /* the queue's reference */
}

void rt__timer_fire(rt__timer_entry *entry, void *arg)
{
    rt__wake_batch *batch = arg;
    rt__timer *t = caa_container_of(entry, rt__timer, entry);
    uint32_t expected = RT__TIMER_ARMED;
    if (rt__cas_u32(&t->state, &expected, RT__TIMER_FIRED)) {
        rt__spin_lock(&t->lock);
        rt_waker w = t->waker;
        t->waker = rt_waker_noop();
        rt__spin_unlock(&t->lock);
        rt__wake_batch_add(batch, &w);
    }
    rt__timer_unref(t); /* the wheel's reference */
}

/* ---- The future's side ------------------------------------------------------- */

static rt__timer *timer_arm(rt_runtime *rt, int64_t deadline_ns, int *err)
{
    if (rt__load_acquire_u32(&rt->closing)) {
        *err = -ESHUTDOWN;
        return NULL;
    }
    rt__timer *t = malloc(sizeof(*t));
    if (t == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    rt__timer_entry_init(&t->entry);
    t->reactor = &rt->reactor;
    t->deadline_tick = rt__reactor_deadline_tick(&rt->reactor, deadline_ns);
    t->state = RT__TIMER_ARMED;
    t->queued = 0;
    t->refs = 1; /* the future's */
    t->lock.held = 0;
    t->waker = rt_waker_noop();
    return t;
}

/* Stores the context's waker unless it already wakes the same target. */
static void timer_set_waker(rt__timer *t, rt_context *cx)
{
    const rt_waker *w = rt_context_waker(cx);
    rt__spin_lock(&t->lock);
    rt_waker old = rt__waker_store(&t->waker, w);
    rt__spin_unlock(&t->lock);
    rt__waker_drop(&old);
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
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    rt__timer *t = s->timer;
    if (t == NULL) {
        /* Never early: ready only once the clock has passed the deadline. */
        int64_t now = rt_now_ns();
        if (now >= s->deadline_ns)
            return RT_READY;
        int e = 0;
        t = timer_arm(s->rt, s->deadline_ns, &e);
        if (t == NULL) {
            if (err != NULL)
                *err = e;
            return RT_READY;
        }
        s->timer = t;
        /* The waker goes in before the reactor can see the timer. */
        timer_set_waker(t, cx);
        rt__reactor_submit_timer(t->reactor, t, s->deadline_ns - now);
        rt__coop_refund(); /* only completed operations spend budget */
        return RT_PENDING;
    }
    if (rt__load_acquire_u32(&t->state) == RT__TIMER_FIRED)
        return RT_READY;
    if (rt__load_acquire_u32(&t->reactor->stopping)) {
        /* Shut down under us: the timer will never fire. */
        if (err != NULL)
            *err = -ESHUTDOWN;
        return RT_READY;
    }
    timer_set_waker(t, cx);
    /* Fired while we were storing the waker: the reactor took the old one. */
    if (rt__load_acquire_u32(&t->state) == RT__TIMER_FIRED)
        return RT_READY;
    rt__coop_refund();
    return RT_PENDING;
}

RT_EXPORT void rt_sleep_drop(rt_sleep *s)
{
    rt__timer *t = s->timer;
    if (t == NULL)
        return;
    s->timer = NULL;
    uint32_t expected = RT__TIMER_ARMED;
    if (rt__cas_u32(&t->state, &expected, RT__TIMER_CANCELLED))
        /* Unfile it soon rather than at its deadline (no hurry: a cancelled
         * timer that fires is simply dropped). */
        rt__reactor_submit_timer(t->reactor, t, INT64_MAX);
    rt__spin_lock(&t->lock);
    rt_waker w = t->waker;
    t->waker = rt_waker_noop();
    rt__spin_unlock(&t->lock);
    rt_waker_drop(&w);
    rt__timer_unref(t);
}

/* ---- Timeout ------------------------------------------------------------------ */

RT_EXPORT int rt_timeout_init(rt_timeout *t, rt_runtime *rt, int64_t duration_ns)
{
    return t == NULL ? -EINVAL : rt_sleep_init(&t->sleep, rt, duration_ns);
}

RT_EXPORT rt_poll rt_timeout_poll(rt_timeout *t, rt_context *cx, rt_poll_fn inner,
                                  void *inner_state, void **out, int *status)
{
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
    rt_sleep_drop(&iv->sleep);
}
