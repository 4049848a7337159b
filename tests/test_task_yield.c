/* Black-box tests of the scheduling promises around rt_yield and wake-ups
 * (asyncrt/task.h): a yielding task lets every task spawned or woken on its
 * worker run before its next poll and does not starve injected ones, tasks
 * buried in a deque under injected batches run once they starve, a task
 * woken during its poll is polled again afterwards but never concurrently,
 * many concurrent wakes of an idle task schedule it once, and a yield is not
 * starved by two tasks waking each other. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_task.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

TestSuite(task, .timeout = 120, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* A runtime with `workers` workers and, unless it is 0, the given injector
 * interval. */
static rt_runtime *new_runtime_with(unsigned workers, unsigned injector_interval)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = workers;
    if (injector_interval != 0)
        cfg.injector_interval = injector_interval;
    return new_runtime_config(&cfg);
}

/* What the poll in progress of woken_in_poll_poll (below) records. */
static atomic_int in_poll;
static atomic_int overlapping_polls;
static struct event entered_poll = EVENT_INIT;
static struct event resume_poll = EVENT_INIT;

/* ---- rt_yield fairness ---------------------------------------------------- */

#define FAIR_ROUNDS 40
#define FAIR_CHILDREN 8
#define FAIR_TOTAL (FAIR_ROUNDS * FAIR_CHILDREN)
/* A cap so that a broken runtime ends the yielder instead of hanging. */
#define YIELDER_MAX_POLLS 200000u

static atomic_uint yielder_polls;
static atomic_int children_run;
static atomic_int spawn_failures;
/* Per child: the yielder poll during which it was made runnable, and the
 * yielder poll count it saw when it ran. */
static atomic_uint runnable_at[FAIR_TOTAL];
static atomic_uint ran_at[FAIR_TOTAL];

static rt_poll fair_child_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    int index = *(int *)state;
    atomic_store(&ran_at[index], atomic_load(&yielder_polls));
    atomic_fetch_add(&children_run, 1);
    *out = NULL;
    return RT_READY;
}

/* Spawns a batch of children onto its own worker during each of its first
 * FAIR_ROUNDS polls, then yields; stops once every child has run. */
static rt_poll spawning_yielder_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    unsigned poll = atomic_fetch_add(&yielder_polls, 1) + 1;
    if (poll <= FAIR_ROUNDS) {
        for (int c = 0; c < FAIR_CHILDREN; c++) {
            int index = (int)(poll - 1) * FAIR_CHILDREN + c;
            atomic_store(&runnable_at[index], poll);
            if (rt_spawn(NULL, fair_child_poll, NULL, &index, sizeof index, NULL) != 0)
                atomic_fetch_add(&spawn_failures, 1);
        }
    }
    if (atomic_load(&children_run) == FAIR_TOTAL || poll >= YIELDER_MAX_POLLS) {
        *out = (void *)(uintptr_t)poll;
        return RT_READY;
    }
    return rt_yield(cx);
}

Test(task, yield_lets_every_task_spawned_on_the_worker_run_before_the_next_poll)
{
    rt_runtime *rt = new_runtime(1);
    rt_task *yielder = NULL;
    cr_assert_eq(rt_spawn(rt, spawning_yielder_poll, NULL, NULL, 0, &yielder), 0);
    cr_assert_eq(task_wait_status(yielder, -1, NULL), 0);
    /* Children that never ran are cancelled here; the checks below say why. */
    finish_runtime(rt, -1);
    cr_assert_eq(atomic_load(&spawn_failures), 0);
    cr_assert_eq(atomic_load(&children_run), FAIR_TOTAL, "only %d children ran",
                 atomic_load(&children_run));
    for (int i = 0; i < FAIR_TOTAL; i++)
        cr_assert_eq(atomic_load(&ran_at[i]), atomic_load(&runnable_at[i]),
                     "child %d was runnable during yielder poll %u but ran only after poll %u: "
                     "the yielder was polled again ahead of an already runnable task",
                     i, atomic_load(&runnable_at[i]), atomic_load(&ran_at[i]));
}

#define SLEEPERS 16

static rt_waker sleeper_wakers[SLEEPERS];
static struct event sleepers_parked = EVENT_INIT;

/* Parks in its first poll (leaving its waker for the yielder), then records
 * the yielder's poll count when it runs again. */
static rt_poll sleeper_poll(void *state, rt_context *cx, void **out)
{
    int *s = state; /* [0]: index, [1]: polls so far */
    if (s[1]++ == 0) {
        sleeper_wakers[s[0]] = rt_waker_clone(rt_context_waker(cx));
        event_signal(&sleepers_parked);
        return RT_PENDING;
    }
    atomic_store(&ran_at[s[0]], atomic_load(&yielder_polls));
    atomic_fetch_add(&children_run, 1);
    *out = NULL;
    return RT_READY;
}

#define WAKE_AT_POLL 3u

/* Wakes every sleeper during its WAKE_AT_POLL-th poll, then keeps yielding
 * until they have all run. */
static rt_poll waking_yielder_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    unsigned poll = atomic_fetch_add(&yielder_polls, 1) + 1;
    if (poll == WAKE_AT_POLL) {
        for (int i = 0; i < SLEEPERS; i++) {
            atomic_store(&runnable_at[i], poll);
            rt_waker_wake(&sleeper_wakers[i]);
        }
    }
    if (atomic_load(&children_run) == SLEEPERS || poll >= YIELDER_MAX_POLLS) {
        *out = NULL;
        return RT_READY;
    }
    return rt_yield(cx);
}

Test(task, yield_lets_every_task_woken_on_the_worker_run_before_the_next_poll)
{
    rt_runtime *rt = new_runtime(1);
    for (int i = 0; i < SLEEPERS; i++) {
        int s[2] = {i, 0};
        cr_assert_eq(rt_spawn(rt, sleeper_poll, NULL, s, sizeof s, NULL), 0);
    }
    cr_assert(event_wait_for(&sleepers_parked, SLEEPERS));
    rt_task *yielder = NULL;
    cr_assert_eq(rt_spawn(rt, waking_yielder_poll, NULL, NULL, 0, &yielder), 0);
    cr_assert_eq(task_wait_status(yielder, -1, NULL), 0);
    finish_runtime(rt, -1);
    cr_assert_eq(atomic_load(&children_run), SLEEPERS, "only %d of %d woken tasks ran",
                 atomic_load(&children_run), SLEEPERS);
    for (int i = 0; i < SLEEPERS; i++)
        cr_assert_eq(atomic_load(&ran_at[i]), WAKE_AT_POLL,
                     "sleeper %d woken during yielder poll %u ran only after poll %u", i,
                     WAKE_AT_POLL, atomic_load(&ran_at[i]));
}

#define INJECTED 16

static struct event yielder_started = EVENT_INIT;

static atomic_bool injection_done;
static atomic_uint polls_after_injection;

/* Yields until all INJECTED children (spawned from the test thread) ran, or
 * until it has yielded YIELDER_MAX_POLLS times after the last injection (so a
 * descheduled test thread cannot make it give up early). */
static rt_poll lone_yielder_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    unsigned poll = atomic_fetch_add(&yielder_polls, 1) + 1;
    if (poll == 1)
        event_signal(&yielder_started);
    if (atomic_load(&children_run) == INJECTED ||
        (atomic_load(&injection_done) &&
         atomic_fetch_add(&polls_after_injection, 1) >= YIELDER_MAX_POLLS)) {
        *out = NULL;
        return RT_READY;
    }
    return rt_yield(cx);
}

Test(task, tasks_injected_from_outside_are_not_starved_by_a_yielding_task)
{
    /* With injector_interval 1 the worker looks at the injector after every
     * poll and takes at least one task each time, and yield fairness runs a
     * taken task before the yielder's next poll but one; so a task injected
     * while the yielder had made p polls runs before poll p + INJECTED + 1. */
    rt_runtime *rt = new_runtime_with(1, 1);
    rt_task *yielder = NULL;
    cr_assert_eq(rt_spawn(rt, lone_yielder_poll, NULL, NULL, 0, &yielder), 0);
    cr_assert(event_wait_for(&yielder_started, 1));
    for (int i = 0; i < INJECTED; i++) {
        cr_assert_eq(rt_spawn(rt, fair_child_poll, NULL, &i, sizeof i, NULL), 0);
        /* Read after the push, so a test thread descheduled between the two
         * cannot inflate the measured wait; the wait may read as negative. */
        atomic_store(&runnable_at[i], atomic_load(&yielder_polls));
    }
    atomic_store(&injection_done, true);
    cr_assert_eq(task_wait_status(yielder, -1, NULL), 0);
    finish_runtime(rt, -1);
    cr_assert_eq(atomic_load(&children_run), INJECTED, "injected tasks starved: %d of %d ran",
                 atomic_load(&children_run), INJECTED);
    for (int i = 0; i < INJECTED; i++) {
        long waited = (long)atomic_load(&ran_at[i]) - (long)atomic_load(&runnable_at[i]);
        cr_assert_leq(waited, INJECTED + 1L,
                      "injected task %d waited %ld yielder polls with injector_interval 1", i,
                      waited);
    }
}

/* ---- local tasks are not buried by injected ones ------------------------ */

/* The children must fit in the deque (capacity 256 by default, as low as
 * 16 with -Ddeque_capacity): a full deque spills its oldest tasks to the
 * injector's tail, behind every filler. */
#ifndef RT_DEQUE_CAPACITY
#define RT_DEQUE_CAPACITY 256
#endif
#define BURIED_CHILDREN (RT_DEQUE_CAPACITY / 4 < 100 ? RT_DEQUE_CAPACITY / 4 : 100)
#define INJECTED_FILLERS 20000
#define FILLER_SPIN_NS 4000 /* 20,000 fillers: an 80 ms backlog */

/* One tick per poll of a filler or a buried child: the single worker's
 * own order of polls. */
static atomic_uint poll_ticks;
static atomic_uint child_ticks[BURIED_CHILDREN];
static atomic_uint children_spawned_at;
static struct event burial_polls = EVENT_INIT; /* one per filler or child poll */

static rt_poll filler_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    int64_t until = rt_now_ns() + FILLER_SPIN_NS;
    while (rt_now_ns() < until)
        ;
    atomic_fetch_add(&poll_ticks, 1);
    event_signal(&burial_polls);
    *out = NULL;
    return RT_READY;
}

static rt_poll buried_child_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    int index = *(int *)state;
    atomic_store(&child_ticks[index], atomic_fetch_add(&poll_ticks, 1));
    event_signal(&burial_polls);
    *out = NULL;
    return RT_READY;
}

/* Holds the only worker until the fillers are queued in the injector, then
 * spawns its children onto that worker (its LIFO slot and deque). */
static rt_poll burying_parent_poll(void *state, rt_context *cx, void **out)
{
    struct blocker *b = *(struct blocker **)state;
    (void)cx;
    event_signal(&b->entered);
    event_wait_for(&b->release, 1);
    atomic_store(&children_spawned_at, atomic_load(&poll_ticks));
    for (int i = 0; i < BURIED_CHILDREN; i++)
        if (rt_spawn(NULL, buried_child_poll, NULL, &i, sizeof i, NULL) != 0)
            atomic_fetch_add(&spawn_failures, 1);
    *out = NULL;
    return RT_READY;
}

Test(task, tasks_on_a_deque_buried_by_injected_batches_run_once_they_starve)
{
    /* Each look at the injector pushes a batch onto the deque's bottom,
     * which the worker pops first: the children left at the top stay
     * there while the backlog lasts. Once they have waited
     * RT__STARVATION_NS (10 ms, read from a clock of 4 ms steps), they are
     * taken from the top, one per look: the last child ran within
     * 1,021-1,647 polls (measured; a filler's poll takes somewhat more
     * than its 4 us spin). Without that, one child every 10 ms left the
     * top, and only at looks that found the injector empty: the last child
     * waited for the whole backlog (20,099 polls, measured). A slower
     * build polls fewer fillers in those 10 ms, so the bound, half the
     * backlog, only gets looser there. */
    static struct blocker parent = {EVENT_INIT, EVENT_INIT};
    rt_runtime *rt = new_runtime(1);
    struct blocker *bp = &parent;
    cr_assert_eq(RT_SPAWN_STATE(rt, burying_parent_poll, NULL, &bp, NULL), 0);
    cr_assert(event_wait_for(&parent.entered, 1));
    for (int i = 0; i < INJECTED_FILLERS; i++)
        cr_assert_eq(rt_spawn(rt, filler_poll, NULL, NULL, 0, NULL), 0);
    event_signal(&parent.release);
    cr_assert(event_wait_for(&burial_polls, INJECTED_FILLERS + BURIED_CHILDREN));
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&spawn_failures), 0);
    unsigned spawned_at = atomic_load(&children_spawned_at);
    unsigned latest = 0;
    for (int i = 0; i < BURIED_CHILDREN; i++) {
        unsigned waited = atomic_load(&child_ticks[i]) - spawned_at;
        if (waited > latest)
            latest = waited;
    }
    cr_assert_leq(latest, INJECTED_FILLERS / 2u,
                  "a child spawned on the worker waited %u polls behind %d injected tasks", latest,
                  INJECTED_FILLERS);
}

/* ---- wake-ups and polls ---------------------------------------------------- */

static rt_waker stashed_waker;

/* The first poll leaves a clone of its waker for the test, which wakes it
 * while the poll is still held inside; the second poll finishes. */
static rt_poll woken_in_poll_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    if (atomic_exchange(&in_poll, 1) != 0)
        atomic_fetch_add(&overlapping_polls, 1);
    int n = atomic_fetch_add(&polls, 1) + 1;
    if (n == 1) {
        stashed_waker = rt_waker_clone(rt_context_waker(cx));
        event_signal(&entered_poll);
        event_wait_for(&resume_poll, 1);
        atomic_store(&in_poll, 0);
        return RT_PENDING;
    }
    atomic_store(&in_poll, 0);
    *out = (void *)(uintptr_t)n;
    return RT_READY;
}

Test(task, task_woken_during_its_poll_is_polled_again_afterwards_never_concurrently)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, woken_in_poll_poll, counting_drop, NULL, 0, &task), 0);
    cr_assert(event_wait_for(&entered_poll, 1));
    rt_waker_wake(&stashed_waker);
    /* The free worker runs a probe; a task wrongly scheduled by the wake
     * would reach it first and be polled concurrently. */
    run_probe(rt);
    cr_assert_eq(atomic_load(&polls), 1, "polled again while the first poll still runs");
    event_signal(&resume_poll);

    void *value = NULL;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &value), 0,
                 "a wake that arrived during the poll was lost");
    cr_assert_eq(value, (void *)(uintptr_t)2);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&overlapping_polls), 0);
    cr_assert_eq(atomic_load(&polls), 2);
    cr_assert_eq(atomic_load(&drops), 1);
}

#define WAKER_THREADS 8
#define WAKES_PER_THREAD 2000

static rt_waker storm_wakers[WAKER_THREADS];
static pthread_barrier_t storm_start;

/* The first poll clones one waker per storm thread; later polls just count.
 * It never finishes. */
static rt_poll storm_target_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)out;
    if (atomic_fetch_add(&polls, 1) == 0)
        for (int i = 0; i < WAKER_THREADS; i++)
            storm_wakers[i] = rt_waker_clone(rt_context_waker(cx));
    event_signal(&polled);
    return RT_PENDING;
}

static void *storm_thread(void *arg)
{
    rt_waker *w = arg;
    pthread_barrier_wait(&storm_start);
    for (int i = 0; i < WAKES_PER_THREAD; i++) {
        if (i % 8 == 0) {
            rt_waker copy = rt_waker_clone(w);
            rt_waker_wake(&copy);
        } else {
            rt_waker_wake_by_ref(w);
        }
    }
    rt_waker_wake(w);
    return NULL;
}

Test(task, many_concurrent_wakes_of_an_idle_task_schedule_it_once)
{
    static struct blocker blocker = {EVENT_INIT, EVENT_INIT};
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(rt_spawn(rt, storm_target_poll, counting_drop, NULL, 0, NULL), 0);
    cr_assert(event_wait_for(&polled, 1));

    /* Hold the only worker, so that no poll can consume a wake while the
     * storm runs: every wake lands on the same idle (then scheduled) task. */
    struct blocker *bp = &blocker;
    rt_task *blocking = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, blocker_poll, NULL, &bp, &blocking), 0);
    cr_assert(event_wait_for(&blocker.entered, 1));

    pthread_t threads[WAKER_THREADS];
    cr_assert_eq(pthread_barrier_init(&storm_start, NULL, WAKER_THREADS), 0);
    for (int i = 0; i < WAKER_THREADS; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, storm_thread, &storm_wakers[i]), 0);
    for (int i = 0; i < WAKER_THREADS; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&storm_start);

    event_signal(&blocker.release);
    cr_assert_eq(task_wait_status(blocking, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert(event_wait_for(&polled, 2), "the woken task was never polled");
    /* A worker parks only when it finds no runnable task, so once the only
     * worker is parked every copy of the task that was queued has run. */
    cr_assert(wait_all_workers_parked(rt), "the worker never went idle");

    rt_metrics m;
    finish_runtime_metrics(rt, 1, &m);
    cr_assert_eq(atomic_load(&polls), 2, "%d wakes scheduled the task %d times",
                 WAKER_THREADS * (WAKES_PER_THREAD + 1), atomic_load(&polls) - 1);
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.completed, 1, "only the blocker completes");
    cr_assert_eq(m.cancelled, 1);
}

/* ---- a yield is not starved by two tasks waking each other ------------- */

/* Two tasks that wake each other hand the single worker back and forth
 * through its LIFO slot, so the deque stays empty and a yielded task waits on
 * the deferred list. The yielded task must still get its turn (within a few
 * maintenance intervals), not only once the pair has finished: the pair stops
 * by itself only after PAIR_LIMIT rounds, which the check below shows were
 * never needed. */

#define PAIR_LIMIT 2000000ul

struct pair_game {
    rt_waker waker[2];    /* each partner's waker, stored while it waits */
    unsigned long rounds; /* polls of the partners so far */
    atomic_bool stop;     /* set by the yielder once it ran again */
    unsigned long rounds_when_yielder_returned;
};

static struct pair_game pair_game;

struct partner {
    unsigned me;       /* 0 or 1 */
    bool spawned_peer; /* partner 0 spawns partner 1 on its first poll */
};

static rt_poll partner_poll(void *state, rt_context *cx, void **out);

static rt_poll partner_poll(void *state, rt_context *cx, void **out)
{
    struct partner *p = state;
    *out = NULL;
    if (atomic_load(&pair_game.stop) || pair_game.rounds >= PAIR_LIMIT) {
        /* Release the other side so that it sees the stop too. */
        rt_waker_wake_by_ref(&pair_game.waker[1 - p->me]);
        return RT_READY;
    }
    pair_game.rounds++;
    rt_waker_drop(&pair_game.waker[p->me]);
    pair_game.waker[p->me] = rt_waker_clone(rt_context_waker(cx));
    if (p->me == 0 && !p->spawned_peer) {
        p->spawned_peer = true;
        struct partner peer = {1, false};
        cr_assert_eq(RT_SPAWN_STATE(NULL, partner_poll, NULL, &peer, NULL), 0);
    } else {
        rt_waker_wake_by_ref(&pair_game.waker[1 - p->me]);
    }
    return RT_PENDING;
}

struct starved_yielder {
    bool yielded;
};

static rt_poll starved_yielder_poll(void *state, rt_context *cx, void **out)
{
    struct starved_yielder *y = state;
    *out = NULL;
    if (!y->yielded) {
        y->yielded = true;
        struct partner first = {0, false};
        cr_assert_eq(RT_SPAWN_STATE(NULL, partner_poll, NULL, &first, NULL), 0);
        return rt_yield(cx);
    }
    pair_game.rounds_when_yielder_returned = pair_game.rounds;
    atomic_store(&pair_game.stop, true);
    return RT_READY;
}

Test(task, a_yield_is_not_starved_by_two_tasks_waking_each_other)
{
    rt_runtime *rt = new_runtime(1);
    pair_game.waker[0] = pair_game.waker[1] = rt_waker_noop();
    pair_game.rounds = 0;
    atomic_store(&pair_game.stop, false);

    struct starved_yielder y = {false};
    cr_assert_eq(block_on_status(rt, starved_yielder_poll, NULL, &y, sizeof y, NULL), 0);
    unsigned long waited = pair_game.rounds_when_yielder_returned;
    cr_assert_lt(waited, 1000, "the yielded task waited %lu polls of the pair (limit %lu)", waited,
                 PAIR_LIMIT);
    finish_runtime(rt, -1);
    rt_waker_drop(&pair_game.waker[0]);
    rt_waker_drop(&pair_game.waker[1]);
}
