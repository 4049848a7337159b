/* The sleeping task and the timed finish of support_timer.h, shared by the
 * timer suites. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_timer.h"

int64_t finish_runtime_timed(rt_runtime *rt, int expected_cancelled)
{
    int64_t t0 = rt_now_ns();
    finish_runtime(rt, expected_cancelled);
    return rt_now_ns() - t0;
}

rt_poll plain_sleep_poll(void *state, rt_context *cx, void **out)
{
    struct plain_sleep *p = state;
    RT_CORO_BEGIN(&p->co);
    if (rt_sleep_init(&p->s, NULL, p->duration) != 0)
        RT_RETURN(&p->co, out, (intptr_t)-1);
    RT_AWAIT(&p->co, cx, &p->s);
    p->err = (int)p->s.result;
    RT_RETURN(&p->co, out, (intptr_t)p->err);
    RT_CORO_END(&p->co, out);
}

void plain_sleep_drop(void *state)
{
    struct plain_sleep *p = state;
    RT_DROP(&p->s);
}
