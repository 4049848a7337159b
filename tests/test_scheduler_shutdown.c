/* Stress tests of the scheduler's promises around a task's end, each built
 * to fail when the promise breaks: shutdown with a hundred thousand pending
 * tasks drops each exactly once, spawns and wakes racing shutdown are either
 * refused or dropped exactly once, and join wakers are dropped exactly once
 * when joins race completion. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Stress runs get a longer bound before a missing event counts as a hang:
 * sanitizer builds are several times slower. */
#define STRESS_DEADLINE_S 120
#define stress_wait_for(e, target) event_wait_for_s((e), (target), STRESS_DEADLINE_S)

TestSuite(scheduler, .timeout = 280, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* Spawns that failed inside a task, checked by the test thread. */
static atomic_int spawn_failures;

/* ---- (c) shutdown with many pending tasks -------------------------------- */

#define PENDING_PARENTS 50000
#define PENDING_TOTAL (2 * PENDING_PARENTS) /* each parent spawns one child */
#define KEPT_HANDLE_EVERY 50
#define KEPT_HANDLES (PENDING_PARENTS / KEPT_HANDLE_EVERY)

static atomic_uchar pending_polls[PENDING_TOTAL];
static atomic_uchar pending_drops[PENDING_TOTAL];
static atomic_int parents_polled;
static struct event all_parents_polled = EVENT_INIT;

static void pending_drop(void *state)
{
    atomic_fetch_add(&pending_drops[*(uint32_t *)state], 1);
}

/* Never finishes and stores no waker. */
static rt_poll pending_child_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    (void)out;
    atomic_fetch_add(&pending_polls[*(uint32_t *)state], 1);
    return RT_PENDING;
}

/* Spawns its child from the worker on its first poll, then never finishes. */
static rt_poll pending_parent_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    (void)out;
    uint32_t id = *(uint32_t *)state;
    if (atomic_fetch_add(&pending_polls[id], 1) == 0) {
        uint32_t child = PENDING_PARENTS + id;
        if (rt_spawn(NULL, pending_child_poll, pending_drop, &child, sizeof child, NULL) != 0)
            atomic_fetch_add(&spawn_failures, 1);
        if (atomic_fetch_add(&parents_polled, 1) + 1 == PENDING_PARENTS)
            event_signal(&all_parents_polled);
    }
    return RT_PENDING;
}

Test(scheduler, shutdown_with_a_hundred_thousand_pending_tasks_drops_each_exactly_once)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *handles[KEPT_HANDLES];
    for (uint32_t id = 0; id < PENDING_PARENTS; id++) {
        rt_task **handle = id % KEPT_HANDLE_EVERY == 0 ? &handles[id / KEPT_HANDLE_EVERY] : NULL;
        cr_assert_eq(rt_spawn(rt, pending_parent_poll, pending_drop, &id, sizeof id, handle), 0);
    }
    /* Once every parent has been polled, all 100,000 tasks exist: the
     * parents idle, the children idle or still queued. */
    cr_assert(stress_wait_for(&all_parents_polled, 1), "only %d parents were polled",
              atomic_load(&parents_polled));

    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_eq(cancelled, PENDING_TOTAL, "shutdown cancelled %d of %d pending tasks", cancelled,
                 PENDING_TOTAL);
    cr_assert_eq(atomic_load(&spawn_failures), 0);
    for (uint32_t id = 0; id < PENDING_TOTAL; id++) {
        if (atomic_load(&pending_drops[id]) != 1)
            cr_assert_fail("task %u was dropped %d times", id, atomic_load(&pending_drops[id]));
        /* No waker was ever stored, so nothing could poll a task twice. */
        if (atomic_load(&pending_polls[id]) > 1)
            cr_assert_fail("task %u was polled %d times", id, atomic_load(&pending_polls[id]));
    }
    for (uint32_t id = 0; id < PENDING_PARENTS; id++)
        cr_assert_eq(atomic_load(&pending_polls[id]), 1);

    /* Half the handles are waited on before the runtime is freed, half
     * after: both report the cancellation. */
    for (int i = 0; i < KEPT_HANDLES / 2; i++)
        cr_assert_eq(task_wait_status(handles[i], -1, NULL), -ECANCELED);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.spawned, PENDING_TOTAL);
    cr_assert_eq(m.cancelled, PENDING_TOTAL);
    cr_assert_eq(m.completed, 0);
    for (int i = KEPT_HANDLES / 2; i < KEPT_HANDLES; i++)
        cr_assert_eq(task_wait_status(handles[i], 0, NULL), -ECANCELED);
    /* Shutdown ran every drop; nothing may run one again later. */
    for (uint32_t id = 0; id < PENDING_TOTAL; id++)
        if (atomic_load(&pending_drops[id]) != 1)
            cr_assert_fail("task %u was dropped %d times", id, atomic_load(&pending_drops[id]));
}

/* ---- (d) spawns and wakes racing shutdown -------------------------------- */

#define RACING_SPAWNERS 4
#define RACING_SPAWNS_PER_THREAD 50000
#define RACING_TOTAL (RACING_SPAWNERS * RACING_SPAWNS_PER_THREAD)

static atomic_uchar racing_drops[RACING_TOTAL];
static atomic_uchar racing_accepted[RACING_TOTAL];
static atomic_int racing_bad_errors;
static atomic_int racing_spawned_after_refusal;
static struct event racing_started = EVENT_INIT;

static void racing_drop(void *state)
{
    atomic_fetch_add(&racing_drops[*(uint32_t *)state], 1);
}

/* Half the racing tasks finish at once, half never finish (and store no
 * waker), so shutdown has both kinds to deal with. */
static rt_poll racing_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    if (*(uint32_t *)state % 2 == 0)
        return RT_PENDING;
    *out = NULL;
    return RT_READY;
}

struct racing_spawner {
    rt_runtime *rt;
    uint32_t first;
};

/* Spawns until the runtime refuses; once refused, every later spawn must be
 * refused too. */
static void *racing_spawner_main(void *arg)
{
    struct racing_spawner *s = arg;
    bool refused = false;
    for (uint32_t i = 0; i < RACING_SPAWNS_PER_THREAD; i++) {
        uint32_t id = s->first + i;
        int rc = rt_spawn(s->rt, racing_poll, racing_drop, &id, sizeof id, NULL);
        if (rc == 0) {
            atomic_store(&racing_accepted[id], 1);
            if (refused)
                atomic_fetch_add(&racing_spawned_after_refusal, 1);
        } else if (rc == -ESHUTDOWN) {
            refused = true;
        } else {
            atomic_fetch_add(&racing_bad_errors, 1);
        }
        if (i == 1000)
            event_signal(&racing_started);
    }
    return NULL;
}

Test(scheduler, spawns_racing_shutdown_are_either_refused_or_dropped_exactly_once)
{
    rt_runtime *rt = new_runtime(2);
    pthread_t threads[RACING_SPAWNERS];
    struct racing_spawner spawners[RACING_SPAWNERS];
    for (int t = 0; t < RACING_SPAWNERS; t++) {
        spawners[t] = (struct racing_spawner){rt, (uint32_t)t * RACING_SPAWNS_PER_THREAD};
        cr_assert_eq(pthread_create(&threads[t], NULL, racing_spawner_main, &spawners[t]), 0);
    }
    /* Shut down while every spawner is in the middle of its loop. */
    cr_assert(stress_wait_for(&racing_started, RACING_SPAWNERS));
    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_geq(cancelled, 0, "%s", rt_strerror(cancelled));
    for (int t = 0; t < RACING_SPAWNERS; t++)
        pthread_join(threads[t], NULL);

    /* rt_runtime_free must not race rt_spawn: the spawners are joined. */
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&racing_bad_errors), 0, "a spawn failed with another error");
    cr_assert_eq(atomic_load(&racing_spawned_after_refusal), 0,
                 "a spawn succeeded after the runtime had refused one");
    uint64_t accepted = 0;
    for (uint32_t id = 0; id < RACING_TOTAL; id++) {
        int expected = atomic_load(&racing_accepted[id]);
        accepted += (uint64_t)expected;
        if (atomic_load(&racing_drops[id]) != expected)
            cr_assert_fail("task %u (%s) was dropped %d times", id,
                           expected ? "accepted" : "refused", atomic_load(&racing_drops[id]));
    }
    cr_assert_eq(m.spawned, accepted);
    cr_assert_eq(m.completed + m.cancelled, accepted);
    cr_assert_eq(m.cancelled, (uint64_t)cancelled,
                 "only shutdown cancelled tasks here: %llu cancelled, shutdown said %d",
                 (unsigned long long)m.cancelled, cancelled);
}

#define RACING_WAKERS 4

static rt_waker racing_wakers[RACING_WAKERS];
static atomic_int racing_target_polls;
static atomic_int racing_target_drops;
static atomic_bool racing_stop;
static struct event racing_target_armed = EVENT_INIT;
static struct event racing_wakers_running = EVENT_INIT;

/* Never finishes; its first poll hands out one waker per waking thread. */
static rt_poll racing_target_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)out;
    if (atomic_fetch_add(&racing_target_polls, 1) == 0) {
        for (int i = 0; i < RACING_WAKERS; i++)
            racing_wakers[i] = rt_waker_clone(rt_context_waker(cx));
        event_signal(&racing_target_armed);
    }
    return RT_PENDING;
}

static void racing_target_drop(void *state)
{
    (void)state;
    atomic_fetch_add(&racing_target_drops, 1);
}

static void *racing_waker_main(void *arg)
{
    rt_waker *mine = arg;
    event_signal(&racing_wakers_running);
    unsigned i = 0;
    while (!atomic_load(&racing_stop)) {
        rt_waker_wake_by_ref(mine);
        if (++i % 16 == 0)
            sched_yield();
    }
    rt_waker_drop(mine);
    return NULL;
}

Test(scheduler, wakes_racing_shutdown_leave_the_task_dropped_exactly_once)
{
    for (int round = 0; round < 20; round++) {
        atomic_store(&racing_stop, false);
        rt_runtime *rt = new_runtime(2);
        cr_assert_eq(rt_spawn(rt, racing_target_poll, racing_target_drop, NULL, 0, NULL), 0);
        cr_assert(stress_wait_for(&racing_target_armed, (unsigned long)round + 1));
        pthread_t threads[RACING_WAKERS];
        for (int i = 0; i < RACING_WAKERS; i++)
            cr_assert_eq(pthread_create(&threads[i], NULL, racing_waker_main, &racing_wakers[i]),
                         0);
        cr_assert(
            stress_wait_for(&racing_wakers_running, (unsigned long)(round + 1) * RACING_WAKERS));

        /* Wakes may run concurrently with shutdown; only free must wait. */
        int cancelled = rt_runtime_shutdown(rt);
        atomic_store(&racing_stop, true);
        for (int i = 0; i < RACING_WAKERS; i++)
            pthread_join(threads[i], NULL);
        cr_assert_eq(cancelled, 1, "round %d: shutdown cancelled %d tasks", round, cancelled);
        cr_assert_eq(atomic_load(&racing_target_drops), round + 1,
                     "round %d: the target was dropped %d times in all", round,
                     atomic_load(&racing_target_drops));
        finish_runtime(rt, 0);
        atomic_store(&racing_target_polls, 0);
    }
}

/* ---- (g) the join-waker hand-over under races --------------------------- */

/* A joiner stores its waker in the task (JOIN_WAKER) while the task may be
 * completing on a worker, and may give up its handle at any moment. The
 * ownership rules say exactly one side drops each stored waker. Here a
 * foreign thread polls rt_task_join operations by hand with counted wakers
 * against tasks that finish at once, re-registers with a different waker, and
 * drops some joins (which detaches their handles) right after registering; at
 * the end every clone must have been dropped exactly once (live count 0,
 * never negative) and every completed join must have the task's value. */

#define JOIN_RACES 100000

static atomic_long counted_live;  /* clones not yet dropped or woken by value */
static atomic_long counted_wakes; /* wakes received */
static atomic_bool counted_went_negative;

static void counted_release(void)
{
    if (atomic_fetch_sub(&counted_live, 1) <= 0)
        atomic_store(&counted_went_negative, true);
}

static rt_waker counted_clone(const void *data);
static void counted_wake(const void *data)
{
    (void)data;
    atomic_fetch_add(&counted_wakes, 1);
    counted_release();
}
static void counted_wake_by_ref(const void *data)
{
    (void)data;
    atomic_fetch_add(&counted_wakes, 1);
}
static void counted_drop(const void *data)
{
    (void)data;
    counted_release();
}
static const rt_waker_vtable counted_vtable = {counted_clone, counted_wake, counted_wake_by_ref,
                                               counted_drop};
static rt_waker counted_clone(const void *data)
{
    atomic_fetch_add(&counted_live, 1);
    rt_waker w = {&counted_vtable, data};
    return w;
}

static rt_poll value_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    *out = (void *)(uintptr_t)(*(uint32_t *)state + 1);
    return RT_READY;
}

Test(scheduler, join_wakers_are_dropped_exactly_once_when_joins_race_completion)
{
    rt_runtime *rt = new_runtime(2);
    atomic_store(&counted_live, 0);
    atomic_store(&counted_wakes, 0);
    atomic_store(&counted_went_negative, false);
    /* Two distinct wakers (different data), so a re-registration replaces. */
    static const char first_tag, second_tag;
    rt_waker first = {&counted_vtable, &first_tag};
    rt_waker second = {&counted_vtable, &second_tag};

    unsigned long joined = 0, detached = 0;
    for (uint32_t i = 0; i < JOIN_RACES; i++) {
        rt_task *t;
        cr_assert_eq(rt_spawn(rt, value_poll, NULL, &i, sizeof i, &t), 0);
        rt_task_join join;
        cr_assert_eq(rt_task_join_init(&join, t), 0);
        rt_context cx1 = rt_context_from_waker(first);
        if (RT_POLL_OP(&join, &cx1) == RT_READY) {
            cr_assert_eq(join.result, 0);
            cr_assert_eq((uintptr_t)join.value, (uintptr_t)i + 1);
            joined++;
            continue;
        }
        if (i % 3 == 0) {
            /* Give the handle up while the task may be completing: a join
             * dropped unfinished detaches it. */
            RT_DROP(&join);
            detached++;
            continue;
        }
        /* Replace the stored waker (the task may complete meanwhile), then
         * wait for the result by polling. */
        rt_context cx2 = rt_context_from_waker(i % 3 == 1 ? second : first);
        while (RT_POLL_OP(&join, &cx2) != RT_READY)
            sched_yield();
        cr_assert_eq(join.result, 0);
        cr_assert_eq((uintptr_t)join.value, (uintptr_t)i + 1);
        joined++;
    }
    /* A detached task may not have run yet: shutdown cancels it, which is
     * fine; a joined one has finished. */
    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_geq(cancelled, 0);
    cr_assert_leq((unsigned long)cancelled, detached);
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.alive, 0);
    cr_assert_eq(m.spawned, m.completed + m.cancelled);
    cr_assert_eq(rt_runtime_free(rt), 0);
    cr_assert_eq(joined + detached, JOIN_RACES);
    cr_assert_not(atomic_load(&counted_went_negative), "a join waker was dropped twice");
    cr_assert_eq(atomic_load(&counted_live), 0, "%ld join wakers were never dropped",
                 atomic_load(&counted_live));
}
