/* Stress tests of the scheduler's core promises, each built to fail when the
 * promise breaks: a million tasks from foreign threads and workers each run
 * exactly once, a task woken from eight threads is never polled
 * concurrently with itself nor after it finished, no wake-up is lost while
 * workers park and unpark, and tasks woken by workers, foreign threads and
 * aborts at once are polled one at a time. */
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
#define STRESS_WAIT_NS (120LL * SEC)
#define stress_wait_for(e, target) event_wait_for_s((e), (target), STRESS_DEADLINE_S)

TestSuite(scheduler, .timeout = 280, .fini = fail_on_leaks);

/* ---- (a) every task runs exactly once ---------------------------------- */

#define SPAWNER_THREADS 4
#define ROOTS_PER_THREAD 50000
#define CHILDREN_PER_ROOT 4
#define ROOTS (SPAWNER_THREADS * ROOTS_PER_THREAD)
#define TOTAL_TASKS (ROOTS * (1 + CHILDREN_PER_ROOT)) /* 1,000,000 */

/* How many times each task id ran; one byte each keeps the array at 1 MB. */
static atomic_uchar runs[TOTAL_TASKS];
static atomic_long unfinished = TOTAL_TASKS;
static atomic_int spawn_failures;
static struct event all_ran = EVENT_INIT;

static void task_ran(uint32_t id)
{
    atomic_fetch_add_explicit(&runs[id], 1, memory_order_relaxed);
    if (atomic_fetch_sub(&unfinished, 1) == 1)
        event_signal(&all_ran);
}

static rt_poll child_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    task_ran(*(uint32_t *)state);
    *out = NULL;
    return RT_READY;
}

/* Runs, then spawns its children from the worker (half of them through an
 * explicit runtime, half through rt == NULL). */
static rt_poll root_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    uint32_t id = *(uint32_t *)state;
    for (uint32_t k = 0; k < CHILDREN_PER_ROOT; k++) {
        uint32_t child = ROOTS + id * CHILDREN_PER_ROOT + k;
        rt_runtime *rt = (k % 2 == 0) ? rt_current_runtime() : NULL;
        if (rt_spawn(rt, child_poll, NULL, &child, sizeof child, NULL) != 0)
            atomic_fetch_add(&spawn_failures, 1);
    }
    /* Counted after the spawns, so "all ran" implies every spawn is done. */
    task_ran(id);
    *out = NULL;
    return RT_READY;
}

struct spawner {
    rt_runtime *rt;
    uint32_t first_root;
};

static void *spawner_main(void *arg)
{
    struct spawner *s = arg;
    for (uint32_t i = 0; i < ROOTS_PER_THREAD; i++) {
        uint32_t id = s->first_root + i;
        if (rt_spawn(s->rt, root_poll, NULL, &id, sizeof id, NULL) != 0)
            atomic_fetch_add(&spawn_failures, 1);
    }
    return NULL;
}

Test(scheduler, a_million_tasks_from_foreign_threads_and_workers_each_run_exactly_once)
{
    rt_runtime *rt = new_runtime(2);
    pthread_t threads[SPAWNER_THREADS];
    struct spawner spawners[SPAWNER_THREADS];
    for (int t = 0; t < SPAWNER_THREADS; t++) {
        spawners[t] = (struct spawner){rt, (uint32_t)t * ROOTS_PER_THREAD};
        cr_assert_eq(pthread_create(&threads[t], NULL, spawner_main, &spawners[t]), 0);
    }
    for (int t = 0; t < SPAWNER_THREADS; t++)
        pthread_join(threads[t], NULL);
    cr_assert_eq(atomic_load(&spawn_failures), 0);

    bool done = stress_wait_for(&all_ran, 1);
    cr_assert(done, "%ld of %d tasks never ran", atomic_load(&unfinished), TOTAL_TASKS);

    /* The last task counted itself inside its final poll, which shutdown
     * lets finish, so nothing is left to cancel. */
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&spawn_failures), 0);
    cr_assert_eq(m.spawned, TOTAL_TASKS);
    cr_assert_eq(m.completed, TOTAL_TASKS);
    cr_assert_eq(m.cancelled, 0);
    for (uint32_t id = 0; id < TOTAL_TASKS; id++)
        if (atomic_load_explicit(&runs[id], memory_order_relaxed) != 1)
            cr_assert_fail("task %u ran %d times", id,
                           atomic_load_explicit(&runs[id], memory_order_relaxed));
}

/* ---- (b) one task hammered by wakes from many threads -------------------- */

#define STORM_THREADS 8
#define STORM_TARGET_POLLS 20000
#define WAKES_AFTER_FINISH 1000

static atomic_int in_poll;
static atomic_int overlapping_polls;
static atomic_int polls_after_ready;
static atomic_int storm_polls;
static atomic_bool storm_finished;
static atomic_int storm_drops;
static atomic_uint poll_work;
static rt_waker storm_wakers[STORM_THREADS];
static struct event storm_armed = EVENT_INIT;

/* Sets an "in poll" flag for its whole duration (failing if it was already
 * set), notes any poll after it returned RT_READY, and finishes after
 * STORM_TARGET_POLLS polls. Every seventh poll it also wakes itself. */
static rt_poll storm_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    if (atomic_load(&storm_finished))
        atomic_fetch_add(&polls_after_ready, 1);
    if (atomic_exchange(&in_poll, 1) != 0)
        atomic_fetch_add(&overlapping_polls, 1);
    int n = atomic_fetch_add(&storm_polls, 1) + 1;
    if (n == 1) {
        for (int i = 0; i < STORM_THREADS; i++)
            storm_wakers[i] = rt_waker_clone(rt_context_waker(cx));
        event_signal(&storm_armed);
    }
    /* A little work widens the window in which a second poll could overlap. */
    for (int i = 0; i < 64; i++)
        atomic_fetch_add_explicit(&poll_work, 1, memory_order_relaxed);
    if (n % 7 == 0)
        rt_waker_wake_by_ref(rt_context_waker(cx));
    if (n >= STORM_TARGET_POLLS) {
        atomic_store(&storm_finished, true);
        atomic_store(&in_poll, 0);
        *out = (void *)(intptr_t)n;
        return RT_READY;
    }
    atomic_store(&in_poll, 0);
    return RT_PENDING;
}

static void storm_drop(void *state)
{
    (void)state;
    if (atomic_load(&in_poll) != 0)
        atomic_fetch_add(&overlapping_polls, 1);
    atomic_fetch_add(&storm_drops, 1);
}

/* Wakes the target through its own clone until the target finishes, with a
 * mix of wake_by_ref and clone-then-wake, then some more, then drops it. */
static void *storm_thread(void *arg)
{
    rt_waker *mine = arg;
    unsigned i = 0;
    while (!atomic_load(&storm_finished)) {
        if (i % 4 == 0) {
            rt_waker copy = rt_waker_clone(mine);
            rt_waker_wake(&copy);
        } else {
            rt_waker_wake_by_ref(mine);
        }
        /* Leave the two cores to the workers now and then. */
        if (++i % 16 == 0)
            sched_yield();
    }
    for (int k = 0; k < WAKES_AFTER_FINISH; k++)
        rt_waker_wake_by_ref(mine);
    rt_waker_drop(mine);
    return NULL;
}

Test(scheduler, a_task_woken_from_eight_threads_is_never_polled_concurrently_or_after_ready)
{
    rt_runtime *rt = new_runtime(4);
    rt_task *target = NULL;
    cr_assert_eq(rt_spawn(rt, storm_poll, storm_drop, NULL, 0, &target), 0);
    cr_assert(stress_wait_for(&storm_armed, 1));

    pthread_t threads[STORM_THREADS];
    for (int i = 0; i < STORM_THREADS; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, storm_thread, &storm_wakers[i]), 0);
    void *value = NULL;
    int rc = task_wait_status(target, STRESS_WAIT_NS, &value);
    if (rc != 0)
        atomic_store(&storm_finished, true); /* stop the threads before failing */
    for (int i = 0; i < STORM_THREADS; i++)
        pthread_join(threads[i], NULL);
    cr_assert_eq(rc, 0, "the target never finished: %s", rt_strerror(rc));
    cr_assert_eq(value, (void *)(intptr_t)STORM_TARGET_POLLS);

    /* Wakes after the finish had every chance to schedule a stray poll. */
    for (int i = 0; i < 8; i++) {
        rt_task *probe = NULL;
        cr_assert_eq(rt_spawn(rt, trivial_poll, NULL, NULL, 0, &probe), 0);
        cr_assert_eq(task_wait_status(probe, STRESS_WAIT_NS, NULL), 0);
    }

    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&overlapping_polls), 0, "%d polls overlapped another poll or drop",
                 atomic_load(&overlapping_polls));
    cr_assert_eq(atomic_load(&polls_after_ready), 0, "polled %d times after RT_READY",
                 atomic_load(&polls_after_ready));
    cr_assert_eq(atomic_load(&storm_polls), STORM_TARGET_POLLS);
    cr_assert_eq(atomic_load(&storm_drops), 1);
}

/* ---- (f) no lost wake-ups while workers park and unpark ----------------- */

/* Four workers on a two-core machine park and wake all the time here: a
 * foreign thread spawns one task at a time and blocks until it finished, and
 * inside the runtime two tasks hand a baton back and forth through wakers
 * stored in a shared slot, so every hand-off wakes a task that may sit on a
 * worker that is just going to sleep. A wake-up lost anywhere in the
 * searching/parking protocol leaves a task runnable with every worker asleep,
 * and the bounded wait below fails instead of hanging. */

#define CHURN_ROUNDS 20000
#define BATON_PASSES 20000

struct baton {
    pthread_mutex_t mu;
    rt_waker parked[2];     /* each player's waker while it waits */
    unsigned long turn;     /* pass number; player (turn % 2) holds the baton */
    unsigned long polls[2]; /* polls of each player, to show the test ran */
};

static struct baton baton = {PTHREAD_MUTEX_INITIALIZER, {{0}, {0}}, 0, {0, 0}};

struct player {
    unsigned me; /* 0 or 1 */
};

/* Waits for its turn, passes the baton, and wakes the other player; finishes
 * once BATON_PASSES passes have been made. */
static rt_poll player_poll(void *state, rt_context *cx, void **out)
{
    struct player *p = state;
    rt_waker to_wake = rt_waker_noop();
    rt_poll result = RT_PENDING;
    pthread_mutex_lock(&baton.mu);
    baton.polls[p->me]++;
    if (baton.turn >= BATON_PASSES) {
        result = RT_READY;
    } else if (baton.turn % 2 == p->me) {
        baton.turn++;
        to_wake = baton.parked[1 - p->me];
        baton.parked[1 - p->me] = rt_waker_noop();
        if (baton.turn >= BATON_PASSES)
            result = RT_READY;
    }
    if (result == RT_PENDING) {
        rt_waker_drop(&baton.parked[p->me]);
        baton.parked[p->me] = rt_waker_clone(rt_context_waker(cx));
    }
    pthread_mutex_unlock(&baton.mu);
    rt_waker_wake(&to_wake); /* outside the lock; the no-op waker is fine */
    *out = NULL;
    return result;
}

Test(scheduler, no_wake_up_is_lost_while_workers_park_and_unpark)
{
    rt_runtime *rt = new_runtime(4);
    baton.parked[0] = baton.parked[1] = rt_waker_noop();

    rt_task *players[2];
    for (unsigned i = 0; i < 2; i++) {
        struct player p = {i};
        cr_assert_eq(RT_SPAWN_STATE(rt, player_poll, NULL, &p, &players[i]), 0);
    }
    for (int round = 0; round < CHURN_ROUNDS; round++) {
        rt_task *t;
        cr_assert_eq(rt_spawn(rt, trivial_poll, NULL, NULL, 0, &t), 0);
        int rc = task_wait_status(t, STRESS_WAIT_NS, NULL);
        cr_assert_eq(rc, 0, "round %d: a spawned task never ran (%s)", round, rt_strerror(rc));
    }
    for (unsigned i = 0; i < 2; i++) {
        int rc = task_wait_status(players[i], STRESS_WAIT_NS, NULL);
        cr_assert_eq(rc, 0, "player %u never finished: a baton wake was lost (%s)", i,
                     rt_strerror(rc));
    }
    cr_assert_eq(baton.turn, BATON_PASSES);
    cr_assert_geq(baton.polls[0] + baton.polls[1], BATON_PASSES);
    rt_waker_drop(&baton.parked[0]);
    rt_waker_drop(&baton.parked[1]);
    finish_runtime(rt, 0);
}

/* ---- Wakes from workers, foreign threads and aborts, all at once ------------
 *
 * A task woken by a worker of its runtime is queued already claimed
 * (RUNNING), so its next poll starts without a read-modify-write; a wake or
 * an abort that reaches it while it sits in a queue must then be honoured
 * exactly as for a running task. Here MESH_TASKS tasks wake one another from
 * inside their polls (worker wakes), foreign threads wake them at random too,
 * and one thread aborts every seventh task while all that goes on. No task
 * may be polled by two workers at once or after it finished, every drop runs
 * exactly once, and every task that was not aborted polls to its target. */

#define MESH_TASKS 256
#define MESH_TARGET 2000
#define MESH_WAKER_THREADS 2

/* Each task's own waker, cloned at its first poll and published by `ready`
 * (release there, acquire before every use). */
static rt_waker mesh_wakers[MESH_TASKS];
static atomic_bool mesh_ready[MESH_TASKS];
static atomic_int mesh_in_poll[MESH_TASKS];
static atomic_int mesh_done[MESH_TASKS];
static atomic_int mesh_drops[MESH_TASKS];
static atomic_int mesh_overlaps;
static atomic_int mesh_after_done;
static atomic_bool mesh_stop;

static void mesh_wake(uint32_t i)
{
    if (atomic_load_explicit(&mesh_ready[i], memory_order_acquire))
        rt_waker_wake_by_ref(&mesh_wakers[i]);
}

struct mesh_task {
    uint32_t index;
    uint32_t polls;
    uint32_t rng;
};

static rt_poll mesh_poll(void *state, rt_context *cx, void **out)
{
    struct mesh_task *m = state;
    if (atomic_exchange(&mesh_in_poll[m->index], 1) != 0)
        atomic_fetch_add(&mesh_overlaps, 1);
    if (atomic_load(&mesh_done[m->index]))
        atomic_fetch_add(&mesh_after_done, 1);
    if (m->polls++ == 0) {
        mesh_wakers[m->index] = rt_waker_clone(rt_context_waker(cx));
        atomic_store_explicit(&mesh_ready[m->index], true, memory_order_release);
    }
    /* Wake two others from this worker: they are queued claimed. */
    for (int k = 0; k < 2; k++) {
        m->rng = m->rng * 1103515245u + 12345u;
        mesh_wake((m->rng >> 8) % MESH_TASKS);
    }
    bool finished = m->polls >= MESH_TARGET;
    if (finished)
        atomic_store(&mesh_done[m->index], 1);
    atomic_store(&mesh_in_poll[m->index], 0);
    if (finished) {
        *out = (void *)(uintptr_t)m->polls;
        return RT_READY;
    }
    /* Sometimes go on through a yield, sometimes wait for someone's wake. */
    if (m->rng & 0x10000)
        return rt_yield(cx);
    return RT_PENDING;
}

static void mesh_drop(void *state)
{
    struct mesh_task *m = state;
    atomic_fetch_add(&mesh_drops[m->index], 1);
    atomic_store(&mesh_done[m->index], 1);
}

static void *mesh_waker_thread(void *arg)
{
    uint32_t rng = (uint32_t)(uintptr_t)arg * 2654435761u + 1;
    while (!atomic_load(&mesh_stop)) {
        rng = rng * 1103515245u + 12345u;
        mesh_wake((rng >> 8) % MESH_TASKS);
    }
    return NULL;
}

Test(scheduler, tasks_woken_by_workers_threads_and_aborts_at_once_are_polled_one_at_a_time)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 4;
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), 0);
    pthread_t threads[MESH_WAKER_THREADS];
    for (uintptr_t t = 0; t < MESH_WAKER_THREADS; t++)
        cr_assert_eq(pthread_create(&threads[t], NULL, mesh_waker_thread, (void *)t), 0);
    static rt_task *handles[MESH_TASKS];
    for (uint32_t i = 0; i < MESH_TASKS; i++) {
        struct mesh_task m = {i, 0, i * 7919u + 1};
        cr_assert_eq(RT_SPAWN_STATE(rt, mesh_poll, mesh_drop, &m, &handles[i]), 0);
    }
    /* Abort every seventh task while the storm goes on. */
    for (uint32_t i = 0; i < MESH_TASKS; i += 7)
        rt_task_cancel(handles[i]);
    /* Tasks waiting for a wake are woken by the others and the threads; a
     * task whose partners all finished is woken by the threads. */
    int completed = 0, cancelled = 0;
    for (uint32_t i = 0; i < MESH_TASKS; i++) {
        void *value = NULL;
        int rc = task_wait_status(handles[i], STRESS_WAIT_NS, &value);
        if (rc == 0) {
            cr_assert_eq((uintptr_t)value, MESH_TARGET, "task %u finished after %lu polls", i,
                         (unsigned long)(uintptr_t)value);
            completed++;
        } else {
            cr_assert_eq(rc, -ECANCELED, "task %u: %s", i, rt_strerror(rc));
            cr_assert_eq(i % 7, 0, "task %u was cancelled but never aborted", i);
            cancelled++;
        }
    }
    atomic_store(&mesh_stop, true);
    for (int t = 0; t < MESH_WAKER_THREADS; t++)
        pthread_join(threads[t], NULL);
    cr_log_info("mesh: %d completed, %d aborted in time", completed, cancelled);
    /* Aborted right after the spawn, a task 2,000 polls from its end is
     * all but certain to be cancelled: none at all means aborts of queued
     * claimed tasks were ignored. */
    cr_assert_gt(cancelled, 0, "no aborted task was cancelled");
    cr_assert_eq(atomic_load(&mesh_overlaps), 0, "a task was polled by two workers at once");
    cr_assert_eq(atomic_load(&mesh_after_done), 0, "a task was polled after it finished");
    for (uint32_t i = 0; i < MESH_TASKS; i++)
        cr_assert_eq(atomic_load(&mesh_drops[i]), 1, "task %u dropped %d times", i,
                     atomic_load(&mesh_drops[i]));
    finish_runtime(rt, 0);
    /* The wakers outlive the runtime safely; release them now. */
    for (uint32_t i = 0; i < MESH_TASKS; i++)
        if (atomic_load(&mesh_ready[i]))
            rt_waker_drop(&mesh_wakers[i]);
}
