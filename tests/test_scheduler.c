/* Stress tests of the scheduler's core promises, each built to fail when the
 * promise breaks: every spawned task runs exactly once, a task is never
 * polled concurrently with itself nor after it finished, and shutdown cancels
 * (drops exactly once) everything that has not finished. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#define TEST_OWN_FINISH_RUNTIME /* this suite has its own, below */
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
#define EVENT_DEADLINE_S 120
#define WAIT_DEADLINE_NS (120LL * 1000000000LL)

TestSuite(scheduler, .timeout = 280, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* Every test ends here: shuts the runtime down, checks how many tasks
 * shutdown cancelled and that none is alive, returns the final (exact)
 * totals and frees the runtime. */
static rt_metrics finish_runtime(rt_runtime *rt, int expected_cancelled)
{
    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_geq(cancelled, 0, "rt_runtime_shutdown failed: %s", rt_strerror(cancelled));
    cr_assert_eq(cancelled, expected_cancelled, "shutdown cancelled %d tasks, expected %d",
                 cancelled, expected_cancelled);
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.alive, 0, "%llu tasks still alive after shutdown", (unsigned long long)m.alive);
    cr_assert_eq(rt_runtime_free(rt), 0);
    return m;
}

static rt_poll trivial_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = NULL;
    return RT_READY;
}

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
        rt_runtime *rt = (k % 2 == 0) ? rt_current() : NULL;
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

    bool done = event_wait_for(&all_ran, 1);
    cr_assert(done, "%ld of %d tasks never ran", atomic_load(&unfinished), TOTAL_TASKS);

    /* The last task counted itself inside its final poll, which shutdown
     * lets finish, so nothing is left to cancel. */
    rt_metrics m = finish_runtime(rt, 0);
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
    cr_assert(event_wait_for(&storm_armed, 1));

    pthread_t threads[STORM_THREADS];
    for (int i = 0; i < STORM_THREADS; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, storm_thread, &storm_wakers[i]), 0);
    void *value = NULL;
    int rc = rt_task_wait(target, WAIT_DEADLINE_NS, &value);
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
        cr_assert_eq(rt_task_wait(probe, WAIT_DEADLINE_NS, NULL), 0);
    }

    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&overlapping_polls), 0, "%d polls overlapped another poll or drop",
                 atomic_load(&overlapping_polls));
    cr_assert_eq(atomic_load(&polls_after_ready), 0, "polled %d times after RT_READY",
                 atomic_load(&polls_after_ready));
    cr_assert_eq(atomic_load(&storm_polls), STORM_TARGET_POLLS);
    cr_assert_eq(atomic_load(&storm_drops), 1);
}

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
    cr_assert(event_wait_for(&all_parents_polled, 1), "only %d parents were polled",
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
        cr_assert_eq(rt_task_wait(handles[i], -1, NULL), -ECANCELED);
    rt_metrics m = finish_runtime(rt, 0);
    cr_assert_eq(m.spawned, PENDING_TOTAL);
    cr_assert_eq(m.cancelled, PENDING_TOTAL);
    cr_assert_eq(m.completed, 0);
    for (int i = KEPT_HANDLES / 2; i < KEPT_HANDLES; i++)
        cr_assert_eq(rt_task_wait(handles[i], 0, NULL), -ECANCELED);
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
    cr_assert(event_wait_for(&racing_started, RACING_SPAWNERS));
    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_geq(cancelled, 0, "%s", rt_strerror(cancelled));
    for (int t = 0; t < RACING_SPAWNERS; t++)
        pthread_join(threads[t], NULL);

    /* rt_runtime_free must not race rt_spawn: the spawners are joined. */
    rt_metrics m = finish_runtime(rt, 0);
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
        cr_assert(event_wait_for(&racing_target_armed, (unsigned long)round + 1));
        pthread_t threads[RACING_WAKERS];
        for (int i = 0; i < RACING_WAKERS; i++)
            cr_assert_eq(pthread_create(&threads[i], NULL, racing_waker_main, &racing_wakers[i]),
                         0);
        cr_assert(
            event_wait_for(&racing_wakers_running, (unsigned long)(round + 1) * RACING_WAKERS));

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
        cr_assert_eq(RT_SPAWN(rt, player_poll, NULL, &p, &players[i]), 0);
    }
    for (int round = 0; round < CHURN_ROUNDS; round++) {
        rt_task *t;
        cr_assert_eq(rt_spawn(rt, trivial_poll, NULL, NULL, 0, &t), 0);
        int rc = rt_task_wait(t, WAIT_DEADLINE_NS, NULL);
        cr_assert_eq(rc, 0, "round %d: a spawned task never ran (%s)", round, rt_strerror(rc));
    }
    for (unsigned i = 0; i < 2; i++) {
        int rc = rt_task_wait(players[i], WAIT_DEADLINE_NS, NULL);
        cr_assert_eq(rc, 0, "player %u never finished: a baton wake was lost (%s)", i,
                     rt_strerror(rc));
    }
    cr_assert_eq(baton.turn, BATON_PASSES);
    cr_assert_geq(baton.polls[0] + baton.polls[1], BATON_PASSES);
    rt_waker_drop(&baton.parked[0]);
    rt_waker_drop(&baton.parked[1]);
    finish_runtime(rt, 0);
}

/* ---- (g) the join-waker hand-over under races --------------------------- */

/* A joiner stores its waker in the task (JOIN_WAKER) while the task may be
 * completing on a worker, and may give up its handle at any moment. The
 * ownership rules say exactly one side drops each stored waker. Here a
 * foreign thread polls rt_task_join by hand with counted wakers against tasks
 * that finish at once, re-registers with a different waker, and detaches some
 * handles right after registering; at the end every clone must have been
 * dropped exactly once (live count 0, never negative) and every completed
 * join must have the task's value. */

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
        rt_context cx1 = rt_context_from_waker(first);
        void *value = NULL;
        int status = 1;
        if (rt_task_join(t, &cx1, &value, &status) == RT_READY) {
            cr_assert_eq(status, 0);
            cr_assert_eq((uintptr_t)value, (uintptr_t)i + 1);
            joined++;
            continue;
        }
        if (i % 3 == 0) {
            /* Give the handle up while the task may be completing. */
            rt_task_detach(t);
            detached++;
            continue;
        }
        /* Replace the stored waker (the task may complete meanwhile), then
         * wait for the result by polling. */
        rt_context cx2 = rt_context_from_waker(i % 3 == 1 ? second : first);
        while (rt_task_join(t, &cx2, &value, &status) != RT_READY)
            sched_yield();
        cr_assert_eq(status, 0);
        cr_assert_eq((uintptr_t)value, (uintptr_t)i + 1);
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
        cr_assert_eq(RT_SPAWN(rt, mesh_poll, mesh_drop, &m, &handles[i]), 0);
    }
    /* Abort every seventh task while the storm goes on. */
    for (uint32_t i = 0; i < MESH_TASKS; i += 7)
        rt_task_abort(handles[i]);
    /* Tasks waiting for a wake are woken by the others and the threads; a
     * task whose partners all finished is woken by the threads. */
    int completed = 0, cancelled = 0;
    for (uint32_t i = 0; i < MESH_TASKS; i++) {
        void *value = NULL;
        int rc = rt_task_wait(handles[i], WAIT_DEADLINE_NS, &value);
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
