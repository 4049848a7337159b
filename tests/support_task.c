/* The futures, blocker and probe of support_task.h, shared by the task
 * suites. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_task.h"

rt_poll value_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    atomic_fetch_add(&polls, 1);
    event_signal(&polled);
    *out = *(void **)state;
    return RT_READY;
}

rt_poll empty_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    atomic_fetch_add(&polls, 1);
    event_signal(&polled);
    *out = NULL;
    return RT_READY;
}

rt_poll blocker_poll(void *state, rt_context *cx, void **out)
{
    struct blocker *b = *(struct blocker **)state;
    (void)cx;
    event_signal(&b->entered);
    event_wait_for(&b->release, 1);
    *out = NULL;
    return RT_READY;
}

void run_probe(rt_runtime *rt)
{
    rt_task *probe = NULL;
    cr_assert_eq(rt_spawn(rt, trivial_poll, NULL, NULL, 0, &probe), 0);
    cr_assert_eq(task_wait_status(probe, WAIT_DEADLINE_NS, NULL), 0);
}
