/* The heap values, dispose function and oneshot receiver task of
 * support_channel.h, shared by the channel suites. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_channel.h"

struct msg *new_msg(int seq)
{
    struct msg *m = malloc(sizeof *m);
    cr_assert_not_null(m);
    m->seq = seq;
    return m;
}

atomic_int disposed_free_count;

void dispose_free(void *value, void *arg)
{
    (void)arg;
    atomic_fetch_add(&disposed_free_count, 1);
    free(value);
}

rt_poll oneshot_receiver_poll(void *state, rt_context *cx, void **out)
{
    struct oneshot_receiver *r = state;
    RT_CORO_BEGIN(&r->co);
    rt_oneshot_recv_init(&r->op, r->o);
    RT_AWAIT_POLL(&r->co, announce(RT_POLL_OP(&r->op, cx), &r->announced, r->pending));
    r->status = (int)r->op.result;
    r->value = r->op.value;
    if (r->res != NULL) {
        r->res->status = r->status;
        r->res->value = r->value;
        /* The same operation, polled again after it completed. */
        r->res->again = RT_POLL_OP(&r->op, cx);
        r->res->again_status = (int)r->op.result;
        r->res->again_value = r->op.value;
    }
    RT_RETURN(&r->co, out, r->value);
    RT_CORO_END(&r->co, out);
}

void oneshot_receiver_drop(void *state)
{
    struct oneshot_receiver *r = state;
    RT_DROP(&r->op);
    if (r->owns_receiver) {
        void *u = NULL;
        if (rt_oneshot_receiver_drop(r->o, &u) == 1)
            free(u);
    }
    r->owns_receiver = false;
    if (r->dropped != NULL)
        event_signal(r->dropped);
}
