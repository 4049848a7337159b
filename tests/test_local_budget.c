/* Black-box tests of the cooperative budget (rt_coop_proceed,
 * rt_config.budget in asyncrt/runtime.h): a task that always finds its data
 * ready starves its worker with the budget off and lets the other tasks run
 * with it on, a poll completes exactly `budget` operations and the refused
 * one wakes the task, and rt_coop_proceed is always true outside a worker. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(local, .timeout = 90, .fini = fail_on_leaks);

/* ---- the cooperative budget ------------------------------------------------------ */

/* A leaf written as the header asks: ask for budget before an operation that
 * would complete at once. */
static rt_poll ready_leaf(rt_context *cx)
{
    if (!rt_coop_proceed(cx))
        return RT_PENDING; /* the task has been woken */
    return RT_READY;
}

static atomic_int flag_set;
static struct event flag_event = EVENT_INIT;

static rt_poll set_flag_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    atomic_store(&flag_set, 1);
    event_signal(&flag_event);
    *out = NULL;
    return RT_READY;
}

#define GREEDY_LIMIT 1000000L

struct greedy_report {
    long iterations;
    int saw_flag;
    int pendings;
    int polls;
    int spawn_rc;
};

/* Spawns the flag setter (onto its own worker, so the setter runs right
 * after this task yields), then completes ready leaf operations until it
 * sees the flag or reaches GREEDY_LIMIT. */
struct greedy {
    struct greedy_report *r;
    long i;
    bool spawned;
};

static rt_poll greedy_poll(void *state, rt_context *cx, void **out)
{
    struct greedy *g = state;
    g->r->polls++;
    if (!g->spawned) {
        g->spawned = true;
        g->r->spawn_rc = rt_spawn(NULL, set_flag_poll, NULL, NULL, 0, NULL);
    }
    for (;;) {
        if (atomic_load(&flag_set)) {
            g->r->saw_flag = 1;
            break;
        }
        if (g->i == GREEDY_LIMIT)
            break;
        if (ready_leaf(cx) == RT_PENDING) {
            g->r->pendings++;
            return RT_PENDING;
        }
        g->i++;
    }
    g->r->iterations = g->i;
    *out = NULL;
    return RT_READY;
}

static struct greedy_report run_greedy(rt_runtime *rt)
{
    struct greedy_report r = {-1, 0, 0, 0, INT_MIN};
    struct greedy g = {&r, 0, false};
    rt_task *h = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, greedy_poll, NULL, &g, &h), 0);
    cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(r.spawn_rc, 0);
    cr_assert(event_wait_for(&flag_event, 1), "the flag setter never ran");
    cr_log_info("greedy task: %ld iterations, %d polls, %d pending leaves, flag %s", r.iterations,
                r.polls, r.pendings, r.saw_flag ? "seen" : "not seen");
    return r;
}

Test(local, with_the_budget_off_a_task_that_always_finds_data_ready_starves_its_worker)
{
    rt_runtime *rt = new_runtime_budget(1, 0);
    struct greedy_report r = run_greedy(rt);
    cr_assert_not(r.saw_flag, "the other task ran after %ld iterations with the budget off",
                  r.iterations);
    cr_assert_eq(r.iterations, GREEDY_LIMIT);
    cr_assert_eq(r.pendings, 0, "rt_coop_proceed returned false with budget 0");
    cr_assert_eq(r.polls, 1);
    finish_runtime(rt, 0);
}

Test(local, with_the_default_budget_the_other_task_runs_once_the_budget_is_spent)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cr_assert_eq(cfg.budget, 128);
    rt_runtime *rt = new_runtime_budget(1, -1);
    struct greedy_report r = run_greedy(rt);
    cr_assert(r.saw_flag, "the other task never ran while the greedy one went on (%ld iterations)",
              r.iterations);
    cr_assert_eq(r.iterations, 128, "the other task ran after %ld iterations, budget 128",
                 r.iterations);
    cr_assert_eq(r.pendings, 1);
    cr_assert_eq(r.polls, 2);
    finish_runtime(rt, 0);
}

Test(local, a_small_budget_lets_the_other_task_run_after_that_many_operations)
{
    rt_runtime *rt = new_runtime_budget(1, 10);
    struct greedy_report r = run_greedy(rt);
    cr_assert(r.saw_flag);
    cr_assert_eq(r.iterations, 10, "the other task ran after %ld iterations, budget 10",
                 r.iterations);
    cr_assert_eq(r.polls, 2);
    finish_runtime(rt, 0);
}

#define BUDGET_POLLS 3

/* Counts how many times rt_coop_proceed says yes in each poll, and returns
 * RT_PENDING without storing any waker when it says no: only the wake the
 * budget promises brings the next poll. */
struct budget_counter {
    int counts[BUDGET_POLLS];
    int polls;
};

static rt_poll budget_counter_poll(void *state, rt_context *cx, void **out)
{
    struct budget_counter *b = state;
    int n = 0;
    while (rt_coop_proceed(cx) && n < 100000)
        n++;
    b->counts[b->polls++] = n;
    if (b->polls < BUDGET_POLLS)
        return RT_PENDING;
    *out = (void *)(intptr_t)(b->counts[0] * 1000000 + b->counts[1] * 1000 + b->counts[2]);
    return RT_READY;
}

Test(local, a_poll_completes_exactly_budget_operations_and_a_refused_leaf_woke_the_task)
{
    rt_runtime *rt = new_runtime_budget(2, 7);
    struct budget_counter b;
    memset(&b, 0, sizeof b);
    rt_task *h = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, budget_counter_poll, NULL, &b, &h), 0);
    void *value = NULL;
    int rc = task_wait_status(h, 10 * SEC, &value);
    if (rc == -ETIMEDOUT) {
        rt_task_cancel(h);
        cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, NULL), -ECANCELED);
        finish_runtime(rt, 0);
        cr_assert_fail("rt_coop_proceed returned false without waking the task");
    }
    cr_assert_eq(rc, 0);
    cr_assert_eq((intptr_t)value, 7 * 1000000 + 7 * 1000 + 7,
                 "operations per poll: %ld (3 polls, 3 digits each), expected 7 each",
                 (long)(intptr_t)value);
    finish_runtime(rt, 0);
}

Test(local, coop_proceed_is_always_true_outside_a_worker_and_wakes_nothing)
{
    struct counting_waker w;
    counting_waker_init(&w);
    rt_context cx = counting_context(&w);
    for (int i = 0; i < 10000; i++)
        cr_assert(rt_coop_proceed(&cx), "rt_coop_proceed false at call %d on the test thread", i);
    /* Also while a runtime with a tiny budget exists. */
    rt_runtime *rt = new_runtime_budget(1, 1);
    for (int i = 0; i < 1000; i++)
        cr_assert(rt_coop_proceed(&cx));
    cr_assert_eq(atomic_load(&w.wakes_by_ref) + atomic_load(&w.wakes_by_value), 0);
    cr_assert_eq(counting_outstanding(&w), 0);
    finish_runtime(rt, 0);
}
