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
    RT_AWAIT(&r->co, announce(rt_oneshot_recv_poll(&r->op, cx, &r->value, &r->status),
                              &r->announced, r->pending));
    if (r->res != NULL) {
        r->res->status = r->status;
        r->res->value = r->value;
        r->res->again_value = V(1);
        r->res->again_status = 1;
        /* The same operation, polled again after it completed. */
        r->res->again =
            rt_oneshot_recv_poll(&r->op, cx, &r->res->again_value, &r->res->again_status);
    }
    RT_RETURN(&r->co, out, r->value);
    RT_CORO_END(&r->co, out);
}

void oneshot_receiver_drop(void *state)
{
    struct oneshot_receiver *r = state;
    rt_oneshot_recv_drop(&r->op);
    if (r->owns_receiver) {
        void *u = NULL;
        if (rt_oneshot_receiver_drop(r->o, &u) == 1)
            free(u);
    }
    r->owns_receiver = false;
    if (r->dropped != NULL)
        event_signal(r->dropped);
}
