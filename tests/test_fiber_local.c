/* Black-box tests of fiber-local storage (asyncrt/fiber.h): a value per
 * fiber and key that stays with the fiber across awaits while it moves
 * between workers (where a thread-local would not), destructors run once
 * per value when the fiber returns, cancelled or not, and the errors the
 * header promises. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(fiber_local, .timeout = 120, .fini = fail_on_leaks);

static rt_fiber_key key;
static atomic_int destroyed;

static void count_destroyed(void *value)
{
    (void)value;
    atomic_fetch_add(&destroyed, 1);
}

/* Sets its own value, then checks after each await that it still reads it
 * back, and counts the awaits that resumed on another worker. */
static void *keeps_its_value(void *arg)
{
    uintptr_t mine = (uintptr_t)arg;
    cr_assert_null(rt_fiber_local_get(&key), "no value before the first set");
    cr_assert_eq(rt_fiber_local_set(&key, (void *)mine), 0);
    uintptr_t moved = 0;
    for (int i = 0; i < 50; i++) {
        int before = rt_current_worker();
        if (i % 2 == 0)
            cr_assert_eq(rt_fiber_yield(), 0);
        else
            cr_assert_eq(rt_sleep_await(100000), 0);
        if (rt_current_worker() != before)
            moved++;
        cr_assert_eq((uintptr_t)rt_fiber_local_get(&key), mine, "await %d", i);
    }
    return (void *)moved;
}

Test(fiber_local, a_value_follows_its_fiber_across_workers)
{
    cr_assert_eq(rt_fiber_key_init(&key, count_destroyed), 0);
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.fiber_migrate = true; /* every await moves the fiber to another worker */
    rt_runtime *rt = new_runtime_config(&cfg);
    rt_task *t[4];
    for (uintptr_t i = 0; i < 4; i++)
        cr_assert_eq(rt_fiber_spawn(rt, keeps_its_value, (void *)(0x1000 + i), &t[i]), 0);
    uintptr_t moved = 0;
    for (int i = 0; i < 4; i++) {
        void *value;
        cr_assert_eq(task_wait_status(t[i], WAIT_DEADLINE_NS, &value), 0);
        moved += (uintptr_t)value;
    }
    cr_assert_gt(moved, 0, "the fibers never changed threads");
    cr_assert_eq(atomic_load(&destroyed), 4, "one destructor call per fiber's value");
    finish_runtime(rt, 0);
}

static rt_fiber_key second;
static atomic_int reset_rounds;

/* A destructor that sets a value again once: called a second time. */
static void sets_again(void *value)
{
    atomic_fetch_add(&reset_rounds, 1);
    if ((uintptr_t)value == 1)
        cr_assert_eq(rt_fiber_local_set(&second, (void *)2), 0);
}

static void *sets_and_returns(void *arg)
{
    (void)arg;
    cr_assert_eq(rt_fiber_local_set(&key, (void *)7), 0);
    cr_assert_eq(rt_fiber_local_set(&key, NULL), 0); /* cleared: no destructor */
    cr_assert_eq(rt_fiber_local_set(&second, (void *)1), 0);
    return NULL;
}

Test(fiber_local, destructors_run_for_values_left_and_again_for_values_they_set)
{
    cr_assert_eq(rt_fiber_key_init(&key, count_destroyed), 0);
    cr_assert_eq(rt_fiber_key_init(&second, sets_again), 0);
    rt_runtime *rt = new_runtime(1);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, sets_and_returns, NULL, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(atomic_load(&destroyed), 0, "a cleared value has no destructor call");
    cr_assert_eq(atomic_load(&reset_rounds), 2);
    finish_runtime(rt, 0);
}

static struct event waiting;

static void *waits_with_a_value(void *arg)
{
    cr_assert_eq(rt_fiber_local_set(&key, (void *)9), 0);
    event_signal(&waiting);
    void *v;
    int e = rt_chan_recv_await(arg, &v); /* cancelled before or while it waits */
    cr_assert_eq(e, -ECANCELED);
    cr_assert_eq((uintptr_t)rt_fiber_local_get(&key), 9, "values stay until it returns");
    return NULL;
}

Test(fiber_local, a_cancelled_fiber_still_runs_its_destructors)
{
    cr_assert_eq(rt_fiber_key_init(&key, count_destroyed), 0);
    waiting = (struct event)EVENT_INIT;
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, waits_with_a_value, ch, &t), 0);
    cr_assert(event_wait_for_s(&waiting, 1, EVENT_DEADLINE_S));
    rt_task_cancel(t);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&destroyed), 1);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

static void *checks_errors(void *arg)
{
    (void)arg;
    rt_fiber_key never = {0};
    cr_assert_eq(rt_fiber_local_set(&never, (void *)1), -EINVAL);
    cr_assert_eq(rt_fiber_local_set(NULL, (void *)1), -EINVAL);
    cr_assert_null(rt_fiber_local_get(&never));
    cr_assert_null(rt_fiber_local_get(NULL));
    return NULL;
}

Test(fiber_local, errors_outside_a_fiber_and_for_keys_never_made)
{
    cr_assert_eq(rt_fiber_key_init(NULL, NULL), -EINVAL);
    cr_assert_eq(rt_fiber_key_init(&key, NULL), 0);
    cr_assert_eq(rt_fiber_local_set(&key, (void *)1), -EPERM);
    cr_assert_null(rt_fiber_local_get(&key));
    rt_runtime *rt = new_runtime(1);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, checks_errors, NULL, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
}

Test(fiber_local, keys_run_out_at_the_documented_maximum)
{
    /* Each test runs in a process of its own: no other key exists here. */
    rt_fiber_key keys[RT_FIBER_KEYS_MAX + 1];
    for (int i = 0; i < RT_FIBER_KEYS_MAX; i++)
        cr_assert_eq(rt_fiber_key_init(&keys[i], NULL), 0, "key %d", i);
    cr_assert_eq(rt_fiber_key_init(&keys[RT_FIBER_KEYS_MAX], NULL), -EAGAIN);
}
