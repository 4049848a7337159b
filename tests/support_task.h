/* What the task suites (test_task_spawn.c, test_task_join.c,
 * test_task_yield.c) share: futures that finish at once and count their polls
 * in support.h's counters, a task that holds its worker, a probe task, and a
 * report a task fills in for the test thread. support_task.c has the
 * functions. */
#ifndef RT_TESTS_SUPPORT_TASK_H
#define RT_TESTS_SUPPORT_TASK_H

#include "support.h"

/* Finishes at once with the pointer-sized value stored in its state. */
rt_poll value_poll(void *state, rt_context *cx, void **out);

/* Finishes at once with a NULL result; never reads its (empty) state. */
rt_poll empty_poll(void *state, rt_context *cx, void **out);

/* A task that occupies its worker until the test releases it, so the test
 * can hold a one-worker runtime still while it sets something up. */
struct blocker {
    struct event entered;
    struct event release;
};

rt_poll blocker_poll(void *state, rt_context *cx, void **out);

/* Spawns and waits for a trivial task; with more than one worker this gives
 * a wrongly scheduled task on another worker the time to show itself. */
void run_probe(rt_runtime *rt);

/* What a task records for the test thread; rt_block_on returning orders
 * these plain writes before the test reads them. */
struct report {
    int rc[6];
    void *values[4];
    int status[4];
    rt_runtime *current[2];
};

#endif
