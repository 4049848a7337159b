/* Black-box tests that a fiber awaits every kind of operation of the
 * library through the one generic call, rt_fiber_await (asyncrt/fiber.h),
 * on the same operation structs a coroutine gives RT_AWAIT: no operation
 * needs a fiber-specific copy. Each test awaits its operations from inside
 * fibers, with stackless tasks or the test thread on the other side, makes
 * them really wait where it can (a waiting fiber is switched out and its
 * task parked), and checks their results and values. This file covers
 * timers, joins in both directions, the sync primitives, channels, groups,
 * the combinators, child processes and signals; test_fiber_ops_io.c covers
 * sockets, descriptors, buffered I/O, files and name resolution. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

TestSuite(fiber_ops, .timeout = 120, .fini = fail_on_leaks);

/* Spawns fn(arg) as a fiber of rt and waits for it: it must finish with
 * status 0. Returns its result. */
static void *run_fiber(rt_runtime *rt, rt_fiber_fn fn, void *arg)
{
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, fn, arg, &t), 0);
    void *v = NULL;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), 0);
    return v;
}

/* Returns once the fiber t has signalled `ready` (right before its await)
 * and, in a build with diagnostics, once it is parked in that await, so
 * that what the test does next wakes a waiting fiber rather than one that
 * would find its operation ready at the first poll. */
static void wait_until_parked(rt_runtime *rt, rt_task *t, struct event *ready, unsigned long n)
{
    cr_assert(event_wait_for(ready, n));
    (void)wait_task_waiting(rt, rt_task_id(t));
}

/* ---- timers and joins --------------------------------------------------- */

static void *sleeps_and_ticks(void *arg)
{
    (void)arg;
    int64_t start = rt_now_ns();
    rt_sleep s;
    cr_assert_eq(rt_sleep_init(&s, NULL, 2 * MS), 0);
    cr_assert_eq(rt_fiber_await(&s.future), 0);
    cr_assert_geq(rt_now_ns() - start, 2 * MS, "a sleep never ends early");
    /* The interval starts after `start`, so its i-th tick is at least i
     * periods after it. */
    start = rt_now_ns();
    rt_interval iv;
    cr_assert_eq(rt_interval_init(&iv, NULL, MS), 0);
    for (int i = 1; i <= 3; i++) {
        rt_interval_tick tick;
        cr_assert_eq(rt_interval_tick_init(&tick, &iv), 0);
        cr_assert_eq(rt_fiber_await(&tick.future), 0);
        cr_assert_geq(rt_now_ns() - start, i * MS, "tick %d came early", i);
    }
    return NULL;
}

Test(fiber_ops, a_sleep_and_interval_ticks)
{
    rt_runtime *rt = new_runtime(2);
    run_fiber(rt, sleeps_and_ticks, NULL);
    finish_runtime(rt, 0);
}

/* A stackless task that naps, so that whoever joins it really waits, and
 * then finishes with the result and status it was given. */
struct napper {
    rt_coro co;
    int64_t nap_ns; /* < 0: an hour, which only a cancel ends */
    uintptr_t value;
    int status;
    rt_sleep nap;
};

static rt_poll napper_poll(void *state, rt_context *cx, void **out)
{
    struct napper *n = state;
    RT_CORO_BEGIN(&n->co);
    rt_sleep_init(&n->nap, NULL, n->nap_ns < 0 ? 3600 * SEC : n->nap_ns);
    RT_AWAIT(&n->co, cx, &n->nap);
    RT_RETURN_STATUS(&n->co, out, n->value, n->status);
    RT_CORO_END(&n->co, out);
}

static rt_task *spawn_napper(int64_t nap_ns, uintptr_t value, int status)
{
    struct napper n = {.nap_ns = nap_ns, .value = value, .status = status};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(NULL, napper_poll, rt_coro_drop, &n, &t), 0);
    return t;
}

static void *joins_stackless_tasks(void *arg)
{
    (void)arg;
    rt_task_join ok, failed;
    cr_assert_eq(rt_task_join_init(&ok, spawn_napper(MS, 7, 0)), 0);
    cr_assert_eq(rt_task_join_init(&failed, spawn_napper(MS, 0, -EPROTO)), 0);
    cr_assert_eq(rt_fiber_await(&ok.future), 0);
    cr_assert_eq((uintptr_t)ok.value, 7);
    cr_assert_eq(rt_fiber_await(&failed.future), -EPROTO, "the task's own status comes through");
    return NULL;
}

static void *naps_then_adds_one(void *arg)
{
    cr_assert_eq(rt_sleep_await(MS), 0);
    if (arg == NULL)
        rt_fiber_set_status(-EPROTO);
    return arg == NULL ? NULL : (void *)((uintptr_t)arg + 1);
}

/* A stackless task that spawns two fibers and joins each with RT_AWAIT:
 * one that fails, then one whose result it returns. */
struct fiber_joiner {
    rt_coro co;
    rt_task_join join;
};

static rt_poll fiber_joiner_poll(void *state, rt_context *cx, void **out)
{
    struct fiber_joiner *j = state;
    rt_task *t;
    RT_CORO_BEGIN(&j->co);
    cr_assert_eq(rt_fiber_spawn(NULL, naps_then_adds_one, NULL, &t), 0);
    rt_task_join_init(&j->join, t);
    RT_AWAIT(&j->co, cx, &j->join);
    cr_assert_eq(j->join.result, -EPROTO, "the fiber's status comes through");
    cr_assert_eq(rt_fiber_spawn(NULL, naps_then_adds_one, (void *)41, &t), 0);
    rt_task_join_init(&j->join, t);
    RT_AWAIT(&j->co, cx, &j->join);
    cr_assert_eq(j->join.result, 0);
    RT_RETURN(&j->co, out, j->join.value);
    RT_CORO_END(&j->co, out);
}

Test(fiber_ops, a_fiber_joins_stackless_tasks_and_a_stackless_task_joins_fibers)
{
    rt_runtime *rt = new_runtime(2);
    run_fiber(rt, joins_stackless_tasks, NULL);
    struct fiber_joiner j = {0};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, fiber_joiner_poll, rt_coro_drop, &j, &t), 0);
    void *v = NULL;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq((uintptr_t)v, 42);
    finish_runtime(rt, 0);
}

/* ---- sync.h -------------------------------------------------------------- */

#define LOCK_ROUNDS 100

/* A counter that fibers and stackless tasks increment under one async
 * mutex, yielding while they hold it, so that a lost exclusion shows as a
 * second holder inside or as a lost update. */
struct counter {
    rt_mutex *m;
    uint64_t value;
    bool inside;
};

static void *counts_in_a_fiber(void *arg)
{
    struct counter *c = arg;
    for (int i = 0; i < LOCK_ROUNDS; i++) {
        rt_mutex_lock lock;
        cr_assert_eq(rt_mutex_lock_init(&lock, c->m), 0);
        cr_assert_eq(rt_fiber_await(&lock.future), 0);
        cr_assert(!c->inside, "two holders of one mutex");
        c->inside = true;
        uint64_t v = c->value;
        cr_assert_eq(rt_fiber_yield(), 0);
        c->value = v + 1;
        c->inside = false;
        rt_mutex_unlock(c->m);
    }
    return NULL;
}

struct task_counter {
    rt_coro co;
    struct counter *c;
    int round;
    uint64_t seen;
    rt_mutex_lock lock;
};

static rt_poll task_counter_poll(void *state, rt_context *cx, void **out)
{
    struct task_counter *s = state;
    RT_CORO_BEGIN(&s->co);
    for (s->round = 0; s->round < LOCK_ROUNDS; s->round++) {
        rt_mutex_lock_init(&s->lock, s->c->m);
        RT_AWAIT_HOLD(&s->co, cx, &s->lock);
        cr_assert_eq(s->lock.result, 0);
        cr_assert(!s->c->inside, "two holders of one mutex");
        s->c->inside = true;
        s->seen = s->c->value;
        RT_CORO_YIELD(&s->co, cx);
        s->c->value = s->seen + 1;
        s->c->inside = false;
        RT_RELEASE(&s->co, &s->lock);
    }
    RT_CORO_END(&s->co, out);
}

Test(fiber_ops, a_mutex_is_shared_by_fibers_and_stackless_tasks)
{
    rt_runtime *rt = new_runtime(2);
    struct counter c = {0};
    cr_assert_eq(rt_mutex_new(&c.m), 0);
    rt_task *t[4];
    struct task_counter tc = {.c = &c};
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(rt_fiber_spawn(rt, counts_in_a_fiber, &c, &t[2 * i]), 0);
        cr_assert_eq(RT_SPAWN_STATE(rt, task_counter_poll, rt_coro_drop, &tc, &t[2 * i + 1]), 0);
    }
    for (int i = 0; i < 4; i++)
        cr_assert_eq(task_wait_status(t[i], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(c.value, 4 * LOCK_ROUNDS);
    cr_assert_eq(rt_mutex_try_lock(c.m), 0, "the last holder unlocked it");
    rt_mutex_unlock(c.m);
    rt_mutex_drop(c.m);
    finish_runtime(rt, 0);
}

struct permits {
    rt_semaphore *sem;
    struct event ready;
};

static void *takes_two_permits(void *arg)
{
    struct permits *p = arg;
    rt_semaphore_acquire acquire;
    cr_assert_eq(rt_semaphore_acquire_init(&acquire, p->sem, 2), 0);
    event_signal(&p->ready);
    cr_assert_eq(rt_fiber_await(&acquire.future), 0);
    cr_assert_eq(rt_semaphore_available(p->sem), 0, "both permits are the fiber's");
    cr_assert_eq(rt_semaphore_release(p->sem, 2), 0);
    return NULL;
}

Test(fiber_ops, a_semaphore_acquire_waits_until_every_permit_asked_for_is_released)
{
    rt_runtime *rt = new_runtime(2);
    struct permits p = {.ready = EVENT_INIT};
    cr_assert_eq(rt_semaphore_new(0, &p.sem), 0);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, takes_two_permits, &p, &t), 0);
    wait_until_parked(rt, t, &p.ready, 1);
    cr_assert_eq(rt_semaphore_release(p.sem, 1), 0);
    cr_assert(!rt_task_is_finished(t), "one permit of the two asked for is not enough");
    cr_assert_eq(rt_semaphore_release(p.sem, 1), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_semaphore_try_acquire(p.sem, 2), 0, "the fiber gave both back");
    rt_semaphore_drop(p.sem);
    finish_runtime(rt, 0);
}

struct bell {
    rt_notify *n;
    struct event ready;
};

static void *waits_for_the_bell(void *arg)
{
    struct bell *b = arg;
    /* Woken by rt_notify_one, then by rt_notify_all (which wakes a wait
     * initialised before it, polled yet or not). */
    for (int round = 0; round < 2; round++) {
        rt_notified wait;
        cr_assert_eq(rt_notified_init(&wait, b->n), 0);
        event_signal(&b->ready);
        cr_assert_eq(rt_fiber_await(&wait.future), 0, "round %d", round);
    }
    /* A notify_one with nobody waiting leaves a permit that the next wait
     * takes at once. */
    rt_notify_one(b->n);
    rt_notified wait;
    cr_assert_eq(rt_notified_init(&wait, b->n), 0);
    cr_assert_eq(rt_fiber_await(&wait.future), 0);
    return NULL;
}

Test(fiber_ops, a_notify_wakes_a_waiting_fiber)
{
    rt_runtime *rt = new_runtime(2);
    struct bell b = {.ready = EVENT_INIT};
    cr_assert_eq(rt_notify_new(&b.n), 0);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, waits_for_the_bell, &b, &t), 0);
    wait_until_parked(rt, t, &b.ready, 1);
    rt_notify_one(b.n);
    wait_until_parked(rt, t, &b.ready, 2);
    rt_notify_all(b.n);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    rt_notify_drop(b.n);
    finish_runtime(rt, 0);
}

/* ---- channel.h ----------------------------------------------------------- */

struct point {
    int32_t x, y;
};

/* A stackless task that receives points from a sized channel until its end
 * of stream and sends back, for each, the sum of its coordinates. It owns
 * the receiver side of `points` and the sender side of `sums`. */
struct point_adder {
    rt_coro co;
    rt_chan *points, *sums;
    struct point p;
    rt_chan_recv recv;
    rt_chan_send send;
};

static void point_adder_drop(void *state)
{
    struct point_adder *s = state;
    rt_coro_cleanup(&s->co);
    rt_chan_receiver_drop(s->points, NULL, NULL);
    rt_chan_sender_drop(s->sums);
}

static rt_poll point_adder_poll(void *state, rt_context *cx, void **out)
{
    struct point_adder *s = state;
    RT_CORO_BEGIN(&s->co);
    for (;;) {
        rt_chan_recv_into_init(&s->recv, s->points, &s->p);
        RT_AWAIT(&s->co, cx, &s->recv);
        if (s->recv.result == -EPIPE)
            break;
        cr_assert_eq(s->recv.result, 0);
        rt_chan_send_init(&s->send, s->sums, (void *)(intptr_t)(s->p.x + s->p.y));
        RT_AWAIT(&s->co, cx, &s->send);
        cr_assert_eq(s->send.result, 0);
    }
    RT_CORO_END(&s->co, out);
}

static void *talks_to_a_stackless_task(void *arg)
{
    (void)arg;
    rt_chan *points, *sums;
    cr_assert_eq(rt_chan_new_sized(1, sizeof(struct point), &points), 0);
    cr_assert_eq(rt_chan_new(1, &sums), 0);
    struct point_adder adder = {.points = points, .sums = sums};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(NULL, point_adder_poll, point_adder_drop, &adder, &t), 0);
    /* Two points before each two sums: with room for one value each way,
     * the second send waits for the task to take the first, and the task's
     * second sum waits for the fiber to take the first. */
    for (int32_t i = 0; i < 40; i += 2) {
        for (int32_t k = i; k < i + 2; k++) {
            struct point p = {k, 2 * k};
            rt_chan_send send;
            cr_assert_eq(rt_chan_send_copy_init(&send, points, &p), 0);
            cr_assert_eq(rt_fiber_await(&send.future), 0);
        }
        for (int32_t k = i; k < i + 2; k++) {
            rt_chan_recv recv;
            cr_assert_eq(rt_chan_recv_init(&recv, sums), 0);
            cr_assert_eq(rt_fiber_await(&recv.future), 0);
            cr_assert_eq((intptr_t)recv.value, 3 * k);
        }
    }
    rt_chan_sender_drop(points);
    rt_chan_recv end;
    cr_assert_eq(rt_chan_recv_init(&end, sums), 0);
    cr_assert_eq(rt_fiber_await(&end.future), -EPIPE, "the task dropped its sender as it ended");
    cr_assert_null(end.value);
    rt_task_join join;
    cr_assert_eq(rt_task_join_init(&join, t), 0);
    cr_assert_eq(rt_fiber_await(&join.future), 0);
    rt_chan_receiver_drop(sums, NULL, NULL);
    return NULL;
}

Test(fiber_ops, a_fiber_and_a_stackless_task_on_the_two_sides_of_channels)
{
    rt_runtime *rt = new_runtime(2);
    run_fiber(rt, talks_to_a_stackless_task, NULL);
    finish_runtime(rt, 0);
}

/* A stackless task that naps, then sends `value` on its oneshot, or drops
 * the sending side without sending when value is NULL. */
struct oneshot_sender {
    rt_coro co;
    rt_oneshot *o;
    void *value;
    bool released;
    rt_sleep nap;
};

static void oneshot_sender_drop(void *state)
{
    struct oneshot_sender *s = state;
    rt_coro_cleanup(&s->co);
    if (!s->released)
        rt_oneshot_sender_drop(s->o);
}

static rt_poll oneshot_sender_poll(void *state, rt_context *cx, void **out)
{
    struct oneshot_sender *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_sleep_init(&s->nap, NULL, MS);
    RT_AWAIT(&s->co, cx, &s->nap);
    if (s->value != NULL)
        cr_assert_eq(rt_oneshot_send(s->o, s->value), 0);
    else
        rt_oneshot_sender_drop(s->o);
    s->released = true;
    RT_CORO_END(&s->co, out);
}

static void *receives_oneshots(void *arg)
{
    (void)arg;
    void *const values[] = {(void *)0x5eed, NULL};
    for (int i = 0; i < 2; i++) {
        rt_oneshot *o;
        cr_assert_eq(rt_oneshot_new(&o), 0);
        struct oneshot_sender s = {.o = o, .value = values[i]};
        rt_task *t;
        cr_assert_eq(RT_SPAWN_STATE(NULL, oneshot_sender_poll, oneshot_sender_drop, &s, &t), 0);
        rt_oneshot_recv recv;
        cr_assert_eq(rt_oneshot_recv_init(&recv, o), 0);
        int64_t r = rt_fiber_await(&recv.future);
        cr_assert_eq(r, values[i] != NULL ? 0 : -EPIPE);
        cr_assert_eq(recv.value, values[i]);
        rt_task_join join;
        cr_assert_eq(rt_task_join_init(&join, t), 0);
        cr_assert_eq(rt_fiber_await(&join.future), 0);
        cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0, "nothing was left unreceived");
    }
    return NULL;
}

Test(fiber_ops, a_fiber_receives_a_oneshot_from_a_stackless_task)
{
    rt_runtime *rt = new_runtime(2);
    run_fiber(rt, receives_oneshots, NULL);
    finish_runtime(rt, 0);
}

/* ---- group.h ------------------------------------------------------------- */

static void spawn_child(rt_group *g, int64_t nap_ns, uintptr_t value, int status, uint64_t *id)
{
    struct napper n = {.nap_ns = nap_ns, .value = value, .status = status};
    cr_assert_eq(rt_group_spawn(g, NULL, napper_poll, rt_coro_drop, &n, sizeof n, id), 0);
}

static void *sleeps_an_hour(void *arg)
{
    (void)arg;
    cr_assert_eq(rt_sleep_await(3600 * SEC), -ECANCELED);
    return NULL;
}

/* Spawns fn(arg) as a fiber child of g (fiber.h: rt_fiber_options.group). */
static void spawn_fiber_child(rt_group *g, rt_fiber_fn fn, void *arg)
{
    rt_fiber_options o;
    rt_fiber_options_init(&o);
    o.group = g;
    cr_assert_eq(rt_fiber_spawn_ex(NULL, &o, fn, arg, NULL), 0);
}

static void *owns_a_group(void *arg)
{
    (void)arg;
    rt_group *g;
    cr_assert_eq(rt_group_new(NULL, NULL, NULL, &g), 0);
    /* Three stackless children and a fiber child (which returns 13),
     * collected one by one as they finish. */
    uint64_t ids[3];
    for (int i = 0; i < 3; i++)
        spawn_child(g, (3 - i) * MS, 10 + (uintptr_t)i, 0, &ids[i]);
    spawn_fiber_child(g, naps_then_adds_one, (void *)12);
    unsigned seen = 0;
    for (int i = 0; i < 4; i++) {
        rt_group_next next;
        cr_assert_eq(rt_group_next_init(&next, g), 0);
        cr_assert_eq(rt_fiber_await(&next.future), 0);
        cr_assert_eq(next.child.status, 0);
        int k = (int)((uintptr_t)next.child.value - 10);
        cr_assert(k >= 0 && k < 4 && (k == 3 || next.child.id == ids[k]), "child %d", k);
        seen |= 1u << k;
    }
    cr_assert_eq(seen, 15u, "each child was collected once");
    cr_assert_eq(rt_group_len(g), 0);
    /* join_all waits for children that finish by themselves, one failing. */
    spawn_child(g, MS, 1, 0, NULL);
    spawn_child(g, 2 * MS, 0, -EIO, NULL);
    rt_group_join join;
    cr_assert_eq(rt_group_join_all_init(&join, g), 0);
    cr_assert_eq(rt_fiber_await(&join.future), 0);
    cr_assert_eq(join.failed, 1);
    cr_assert_eq(join.cancelled, 0);
    cr_assert_eq(rt_group_len(g), 0);
    /* close cancels two children that would sleep for an hour. */
    spawn_child(g, -1, 0, 0, NULL);
    spawn_fiber_child(g, sleeps_an_hour, NULL);
    cr_assert_eq(rt_group_close_init(&join, g), 0);
    cr_assert_eq(rt_fiber_await(&join.future), 0);
    cr_assert_eq(join.failed, 0);
    cr_assert_eq(join.cancelled, 2);
    struct napper n = {0};
    cr_assert_eq(rt_group_spawn(g, NULL, napper_poll, rt_coro_drop, &n, sizeof n, NULL), -EPIPE,
                 "a closing group takes no child");
    rt_group_next next;
    cr_assert_eq(rt_group_next_init(&next, g), 0);
    cr_assert_eq(rt_fiber_await(&next.future), -ECHILD);
    rt_group_free(g);
    return NULL;
}

Test(fiber_ops, a_fiber_collects_joins_and_closes_a_group_of_children)
{
    rt_runtime *rt = new_runtime(2);
    run_fiber(rt, owns_a_group, NULL);
    finish_runtime(rt, 0);
}

/* ---- combine.h ----------------------------------------------------------- */

/* A stackless task that naps, then sends `value` on a channel of `void *`,
 * whose sender reference it owns. */
struct late_sender {
    rt_coro co;
    rt_chan *ch;
    void *value;
    int64_t nap_ns;
    rt_sleep nap;
    rt_chan_send send;
};

static void late_sender_drop(void *state)
{
    struct late_sender *s = state;
    rt_coro_cleanup(&s->co);
    rt_chan_sender_drop(s->ch);
}

static rt_poll late_sender_poll(void *state, rt_context *cx, void **out)
{
    struct late_sender *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_sleep_init(&s->nap, NULL, s->nap_ns);
    RT_AWAIT(&s->co, cx, &s->nap);
    rt_chan_send_init(&s->send, s->ch, s->value);
    RT_AWAIT(&s->co, cx, &s->send);
    cr_assert_eq(s->send.result, 0);
    RT_CORO_END(&s->co, out);
}

/* Starts a late sender on ch, giving it a sender reference of its own. */
static void send_later(rt_chan *ch, int64_t nap_ns, void *value)
{
    cr_assert_eq(rt_chan_sender_clone(ch), 0);
    struct late_sender s = {.ch = ch, .value = value, .nap_ns = nap_ns};
    cr_assert_eq(RT_SPAWN_STATE(NULL, late_sender_poll, late_sender_drop, &s, NULL), 0);
}

static void *selects(void *arg)
{
    (void)arg;
    rt_chan *quiet, *busy;
    cr_assert_eq(rt_chan_new(1, &quiet), 0);
    cr_assert_eq(rt_chan_new(1, &busy), 0);
    send_later(busy, MS, (void *)0xb05e);
    rt_chan_recv a, b;
    cr_assert_eq(rt_chan_recv_init(&a, quiet), 0);
    cr_assert_eq(rt_chan_recv_init(&b, busy), 0);
    rt_select sel;
    cr_assert_eq(rt_select_init(&sel, RT_FUTURES(&a.future, &b.future)), 0);
    cr_assert_eq(rt_fiber_await(&sel.future), 0);
    cr_assert_eq(sel.index, 1);
    cr_assert_eq(b.value, (void *)0xb05e);
    cr_assert_eq(a.result, -ECANCELED, "the losing arm was dropped");
    /* The dropped receive left the quiet channel as it was. */
    cr_assert_eq(rt_chan_try_send(quiet, (void *)1), 0);
    void *v;
    cr_assert_eq(rt_chan_recv_await(quiet, &v), 0);
    cr_assert_eq(v, (void *)1);
    rt_chan_sender_drop(quiet);
    rt_chan_receiver_drop(quiet, NULL, NULL);
    rt_chan_sender_drop(busy);
    rt_chan_receiver_drop(busy, NULL, NULL);
    return NULL;
}

Test(fiber_ops, a_select_reports_the_arm_that_finished_first)
{
    rt_runtime *rt = new_runtime(2);
    run_fiber(rt, selects, NULL);
    finish_runtime(rt, 0);
}

static void *joins_all(void *arg)
{
    (void)arg;
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    send_later(ch, MS, (void *)0xa11);
    int64_t start = rt_now_ns();
    rt_sleep nap;
    rt_chan_recv recv;
    rt_task_join join;
    cr_assert_eq(rt_sleep_init(&nap, NULL, 3 * MS), 0);
    cr_assert_eq(rt_chan_recv_init(&recv, ch), 0);
    cr_assert_eq(rt_task_join_init(&join, spawn_napper(2 * MS, 5, 0)), 0);
    rt_join_all all;
    cr_assert_eq(rt_join_all_init(&all, RT_FUTURES(&nap.future, &recv.future, &join.future), 0), 0);
    cr_assert_eq(rt_fiber_await(&all.future), 0);
    cr_assert_geq(rt_now_ns() - start, 3 * MS, "it waited for the longest");
    cr_assert_eq(all.failed, 3);
    cr_assert_eq(nap.result, 0);
    cr_assert_eq(recv.value, (void *)0xa11);
    cr_assert_eq((uintptr_t)join.value, 5);
    /* The first error ends it and drops the rest, with
     * RT_JOIN_CANCEL_ON_ERROR: the channel's end of stream here. */
    rt_chan_sender_drop(ch);
    cr_assert_eq(rt_sleep_init(&nap, NULL, 3600 * SEC), 0);
    cr_assert_eq(rt_chan_recv_init(&recv, ch), 0);
    cr_assert_eq(
        rt_join_all_init(&all, RT_FUTURES(&nap.future, &recv.future), RT_JOIN_CANCEL_ON_ERROR), 0);
    cr_assert_eq(rt_fiber_await(&all.future), -EPIPE);
    cr_assert_eq(all.failed, 1);
    cr_assert_eq(nap.result, -ECANCELED);
    rt_chan_receiver_drop(ch, NULL, NULL);
    return NULL;
}

Test(fiber_ops, join_all_waits_for_every_operation_or_the_first_error)
{
    rt_runtime *rt = new_runtime(2);
    run_fiber(rt, joins_all, NULL);
    finish_runtime(rt, 0);
}

static void *times_out(void *arg)
{
    (void)arg;
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    int64_t start = rt_now_ns();
    rt_chan_recv recv;
    rt_timeout limit;
    cr_assert_eq(rt_chan_recv_init(&recv, ch), 0);
    cr_assert_eq(rt_timeout_init(&limit, NULL, &recv.future, 5 * MS), 0);
    cr_assert_eq(rt_fiber_await(&limit.future), -ETIMEDOUT, "nothing was sent");
    cr_assert_geq(rt_now_ns() - start, 5 * MS);
    cr_assert_eq(recv.result, -ECANCELED, "the receive was dropped");
    /* A value sent afterwards, within the limit, is received through it. */
    send_later(ch, MS, (void *)0x1a7e);
    cr_assert_eq(rt_chan_recv_init(&recv, ch), 0);
    cr_assert_eq(rt_timeout_init(&limit, NULL, &recv.future, 30 * SEC), 0);
    cr_assert_eq(rt_fiber_await(&limit.future), 0);
    cr_assert_eq(recv.value, (void *)0x1a7e);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    return NULL;
}

Test(fiber_ops, a_timeout_expires_around_a_receive_that_never_comes)
{
    rt_runtime *rt = new_runtime(2);
    run_fiber(rt, times_out, NULL);
    finish_runtime(rt, 0);
}

/* ---- process.h ------------------------------------------------------------ */

/* How a child ended. */
struct child_exit {
    int code, signal;
};

/* Runs `sh -c script` with its standard output on a pipe when `output` is
 * not NULL (read to its end into output, at most size - 1 bytes), and
 * awaits its exit. */
static struct child_exit run_child(const char *script, char *output, size_t size)
{
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = (const char *const[]){"/bin/sh", "-c", script, NULL};
    o.stdout_mode = output != NULL ? RT_STDIO_PIPE : RT_STDIO_INHERIT;
    rt_process *p;
    cr_assert_eq(rt_process_spawn(NULL, &o, &p), 0, "%s", script);
    if (output != NULL) {
        rt_io *out = rt_process_stdio(p, 1);
        size_t got = 0;
        for (;;) {
            rt_io_read rd;
            cr_assert_eq(rt_io_read_init(&rd, out, output + got, size - 1 - got), 0);
            int64_t n = rt_fiber_await(&rd.future);
            cr_assert_geq(n, 0);
            if (n == 0)
                break;
            got += (size_t)n;
        }
        output[got] = '\0';
    }
    rt_process_exited exited;
    cr_assert_eq(rt_process_exited_init(&exited, p), 0);
    cr_assert_eq(rt_fiber_await(&exited.future), 0, "%s", script);
    rt_process_free(p);
    return (struct child_exit){exited.code, exited.signal};
}

static void *runs_children(void *arg)
{
    (void)arg;
    struct child_exit e = run_child("exit 3", NULL, 0);
    cr_assert_eq(e.code, 3);
    cr_assert_eq(e.signal, 0);
    char out[64];
    e = run_child("printf 'from the child'", out, sizeof out);
    cr_assert_eq(e.code, 0);
    cr_assert_str_eq(out, "from the child");
    e = run_child("kill -TERM $$", NULL, 0);
    cr_assert_eq(e.signal, SIGTERM);
    return NULL;
}

Test(fiber_ops, a_fiber_awaits_the_exit_of_real_children)
{
    rt_runtime *rt = new_runtime(2);
    run_fiber(rt, runs_children, NULL);
    finish_runtime(rt, 0);
}

/* ---- signal.h ------------------------------------------------------------- */

struct listener {
    struct event ready;
};

static void *receives_a_signal(void *arg)
{
    struct listener *l = arg;
    rt_signal *s;
    cr_assert_eq(rt_signal_new(NULL, SIGUSR1, &s), 0);
    rt_signal_recv recv;
    cr_assert_eq(rt_signal_recv_init(&recv, s), 0);
    event_signal(&l->ready);
    int64_t n = rt_fiber_await(&recv.future);
    rt_signal_free(s);
    return (void *)(intptr_t)n;
}

Test(fiber_ops, a_fiber_receives_a_signal_sent_to_the_process)
{
    /* Blocked in every thread, as test_signal.c does and signal.h advises
     * under ThreadSanitizer (which holds a handler back until its thread
     * enters an intercepted call): the runtime's threads inherit the mask
     * from this one, and the listener's signalfd takes the signal. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    cr_assert_eq(pthread_sigmask(SIG_BLOCK, &set, &old), 0);
    rt_runtime *rt = new_runtime(2);
    struct listener l = {.ready = EVENT_INIT};
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, receives_a_signal, &l, &t), 0);
    wait_until_parked(rt, t, &l.ready, 1);
    cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    void *n = NULL;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &n), 0);
    cr_assert_geq((intptr_t)n, 1, "the receive reports the arrival");
    sigset_t pending;
    cr_assert_eq(sigpending(&pending), 0);
    cr_assert_not(sigismember(&pending, SIGUSR1), "the listener took it");
    finish_runtime(rt, 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}
