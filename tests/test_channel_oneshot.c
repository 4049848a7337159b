/* Black-box tests of the oneshot channel (asyncrt/channel.h): send and
 * receive, either side dropped first, the unreceived value handed back, the
 * try and blocking forms, a receive in a task from a foreign thread's send,
 * an aborted receiving task releasing the receiver, and a send racing the
 * receiver's drop. Values that own memory are malloc'd so that
 * AddressSanitizer catches a value freed twice or never. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_channel.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(channel, .timeout = 120, .fini = fail_on_leaks);

/* ---- oneshot ------------------------------------------------------------- */

Test(channel, oneshot_new_rejects_null)
{
    cr_assert_eq(rt_oneshot_new(NULL), -EINVAL);
}

Test(channel, oneshot_try_recv_before_and_after_the_send)
{
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    cr_assert_not_null(o);
    void *v = V(1);
    cr_assert_eq(rt_oneshot_try_recv(o, &v), -EAGAIN);
    cr_assert_eq(rt_oneshot_send(o, V(42)), 0);
    cr_assert_eq(rt_oneshot_try_recv(o, &v), 0);
    cr_assert_eq(v, V(42));
    cr_assert_eq(rt_oneshot_try_recv(o, &v), -EALREADY);
    void *u = V(1);
    cr_assert_eq(rt_oneshot_receiver_drop(o, &u), 0, "a received value was handed back");
    cr_assert_null(u);
}

Test(channel, oneshot_recv_polled_by_hand_is_woken_once_and_hands_the_value_out_once)
{
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    struct hand h;
    hand_init(&h);
    rt_oneshot_recv op;
    cr_assert_eq(rt_oneshot_recv_init(&op, o), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    cr_assert_eq(counting_wakes(&h.w), 0);
    cr_assert_eq(rt_oneshot_send(o, V(5)), 0);
    cr_assert_eq(counting_wakes(&h.w), 1, "the receiver was woken %ld times", counting_wakes(&h.w));
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(op.value, V(5));
    /* A later poll is ready again with the same result, and takes nothing. */
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY, "a later poll is not ready again");
    cr_assert_eq(op.result, 0);
    cr_assert_eq(op.value, V(5));
    RT_DROP(&op); /* after completion: nothing to do */
    cr_assert_eq(op.result, 0, "a drop after completion changed the result");
    void *v = V(1);
    cr_assert_eq(rt_oneshot_try_recv(o, &v), -EALREADY, "the value was handed out twice");
    /* A new receive after the value was taken: -EALREADY. */
    cr_assert_eq(rt_oneshot_recv_init(&op, o), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, -EALREADY);
    cr_assert_null(op.value, "the value was handed out twice");
    void *u = V(1);
    cr_assert_eq(rt_oneshot_receiver_drop(o, &u), 0);
    cr_assert_null(u);
    cr_assert_eq(counting_outstanding(&h.w), 0, "a waker reference was not given back");
}

Test(channel, oneshot_a_second_receive_while_one_waits_is_ebusy_not_a_silent_hang)
{
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_oneshot_recv r1, r2;
    cr_assert_eq(rt_oneshot_recv_init(&r1, o), 0);
    cr_assert_eq(rt_oneshot_recv_init(&r2, o), 0);
    cr_assert_eq(RT_POLL_OP(&r1, &h1.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&r2, &h2.cx), RT_READY, "a second receive waited behind the first");
    cr_assert_eq(r2.result, -EBUSY);
    cr_assert_null(r2.value);
    void *v = NULL;
    cr_assert_eq(rt_oneshot_recv_wait(o, 0, &v), -EBUSY);
    cr_assert_eq(counting_outstanding(&h2.w), 0, "the refused receive's waker was kept");
    /* The first still gets the value. */
    cr_assert_eq(rt_oneshot_send(o, V(9)), 0);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    cr_assert_eq(RT_POLL_OP(&r1, &h1.cx), RT_READY);
    cr_assert_eq(r1.result, 0);
    cr_assert_eq(r1.value, V(9));
    /* Once the first one is dropped while waiting, a second may wait. */
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);
    cr_assert_eq(rt_oneshot_new(&o), 0);
    cr_assert_eq(rt_oneshot_recv_init(&r1, o), 0);
    cr_assert_eq(rt_oneshot_recv_init(&r2, o), 0);
    cr_assert_eq(RT_POLL_OP(&r1, &h1.cx), RT_PENDING);
    RT_DROP(&r1);
    cr_assert_eq(r1.result, -ECANCELED);
    cr_assert_eq(RT_POLL_OP(&r2, &h2.cx), RT_PENDING);
    cr_assert_eq(rt_oneshot_send(o, V(3)), 0);
    cr_assert_eq(counting_wakes(&h2.w), 1);
    cr_assert_eq(RT_POLL_OP(&r2, &h2.cx), RT_READY);
    cr_assert_eq(r2.result, 0);
    cr_assert_eq(r2.value, V(3));
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
}

Test(channel, oneshot_sender_dropped_without_sending_gives_epipe)
{
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    struct hand h;
    hand_init(&h);
    rt_oneshot_recv op;
    cr_assert_eq(rt_oneshot_recv_init(&op, o), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    rt_oneshot_sender_drop(o);
    cr_assert_eq(counting_wakes(&h.w), 1, "the receiver was not woken by the sender's drop");
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, -EPIPE);
    cr_assert_null(op.value);
    void *v = NULL;
    void *u = V(1);
    cr_assert_eq(rt_oneshot_receiver_drop(o, &u), 0);
    cr_assert_null(u);
    cr_assert_eq(counting_outstanding(&h.w), 0);

    /* The same seen through try_recv. */
    cr_assert_eq(rt_oneshot_new(&o), 0);
    rt_oneshot_sender_drop(o);
    cr_assert_eq(rt_oneshot_try_recv(o, &v), -EPIPE);
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);
}

Test(channel, oneshot_receiver_dropped_first_send_gets_epipe_and_keeps_the_value)
{
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    void *u = V(1);
    cr_assert_eq(rt_oneshot_receiver_drop(o, &u), 0);
    cr_assert_null(u);
    struct msg *m = new_msg(1);
    cr_assert_eq(rt_oneshot_send(o, m), -EPIPE);
    cr_assert_eq(m->seq, 1);
    free(m); /* still ours */

    /* A receive that was waiting gives its waker back when dropped. */
    struct hand h;
    hand_init(&h);
    cr_assert_eq(rt_oneshot_new(&o), 0);
    rt_oneshot_recv op;
    cr_assert_eq(rt_oneshot_recv_init(&op, o), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    RT_DROP(&op);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_eq(counting_outstanding(&h.w), 0, "the dropped receive's waker was kept");
    cr_assert_eq(rt_oneshot_receiver_drop(o, &u), 0);
    m = new_msg(2);
    cr_assert_eq(rt_oneshot_send(o, m), -EPIPE);
    free(m);
}

Test(channel, oneshot_receiver_drop_returns_an_unreceived_value)
{
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    struct msg *m = new_msg(7);
    cr_assert_eq(rt_oneshot_send(o, m), 0);
    void *u = NULL;
    cr_assert_eq(rt_oneshot_receiver_drop(o, &u), 1);
    cr_assert_eq(u, m, "the unreceived value was not handed back");
    free(u);

    cr_assert_eq(rt_oneshot_new(&o), 0);
    cr_assert_eq(rt_oneshot_send(o, V(9)), 0);
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 1);

    /* Received: nothing to hand back. */
    cr_assert_eq(rt_oneshot_new(&o), 0);
    cr_assert_eq(rt_oneshot_send(o, V(3)), 0);
    void *v = NULL;
    cr_assert_eq(rt_oneshot_try_recv(o, &v), 0);
    cr_assert_eq(v, V(3));
    u = V(1);
    cr_assert_eq(rt_oneshot_receiver_drop(o, &u), 0);
    cr_assert_null(u);
}

struct oneshot_send_task {
    rt_oneshot *o;
    void *value; /* NULL: drop the sender without sending */
};

static rt_poll oneshot_send_task_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct oneshot_send_task *t = state;
    if (t->value == NULL) {
        rt_oneshot_sender_drop(t->o);
        *out = NULL;
    } else {
        *out = (void *)(intptr_t)rt_oneshot_send(t->o, t->value);
    }
    return RT_READY;
}

Test(channel, oneshot_recv_blocking_on_a_foreign_thread_times_out_then_receives)
{
    rt_runtime *rt = new_runtime(2);
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    void *v = V(1);
    int64_t t0 = rt_now_ns();
    cr_assert_eq(rt_oneshot_recv_wait(o, 20 * MS, &v), -ETIMEDOUT);
    int64_t took = rt_now_ns() - t0;
    cr_assert_geq(took, 20 * MS, "timed out after only %lld us", (long long)(took / 1000));
    cr_assert_eq(rt_oneshot_recv_wait(o, 0, &v), -ETIMEDOUT);
    struct oneshot_send_task t = {o, V(77)};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, oneshot_send_task_poll, NULL, &t, &task), 0);
    cr_assert_eq(rt_oneshot_recv_wait(o, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq(v, V(77));
    void *sent_rc = V(1);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &sent_rc), 0);
    cr_assert_eq((intptr_t)sent_rc, 0);
    cr_assert_eq(rt_oneshot_recv_wait(o, 0, &v), -EALREADY);
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);

    /* The sender dropped by a task: -EPIPE. */
    cr_assert_eq(rt_oneshot_new(&o), 0);
    t.o = o;
    t.value = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, oneshot_send_task_poll, NULL, &t, &task), 0);
    cr_assert_eq(rt_oneshot_recv_wait(o, WAIT_DEADLINE_NS, &v), -EPIPE);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);
    finish_runtime(rt, 0);
}

static struct event os_pending = EVENT_INIT;
static struct event os_dropped = EVENT_INIT;

Test(channel, oneshot_recv_in_a_task_sent_from_a_foreign_thread)
{
    rt_runtime *rt = new_runtime(2);
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    struct oneshot_result res;
    memset(&res, 0, sizeof res);
    struct oneshot_receiver r = {0};
    r.o = o;
    r.res = &res;
    r.pending = &os_pending;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, oneshot_receiver_poll, oneshot_receiver_drop, &r, &task), 0);
    cr_assert(event_wait_for(&os_pending, 1), "the receiver never waited");
    cr_assert_eq(rt_oneshot_send(o, V(0xAB)), 0);
    void *v = NULL;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq(v, V(0xAB));
    cr_assert_eq(res.status, 0);
    cr_assert_eq(res.value, V(0xAB));
    /* Polled again, the finished receive reports the same result and value,
     * and the oneshot does not hand the value out a second time. */
    cr_assert_eq(res.again, RT_READY);
    cr_assert_eq(res.again_status, 0);
    cr_assert_eq(res.again_value, V(0xAB));
    cr_assert_eq(rt_oneshot_try_recv(o, &v), -EALREADY, "the value was handed out twice");
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);
    finish_runtime(rt, 0);
}

Test(channel, oneshot_receiving_task_aborted_releases_the_receiver)
{
    rt_runtime *rt = new_runtime(2);
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    struct oneshot_receiver r = {0};
    r.o = o;
    r.owns_receiver = true;
    r.pending = &os_pending;
    r.dropped = &os_dropped;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, oneshot_receiver_poll, oneshot_receiver_drop, &r, &task), 0);
    cr_assert(event_wait_for(&os_pending, 1), "the receiver never waited");
    rt_task_cancel(task);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(event_count(&os_dropped), 1);
    struct msg *m = new_msg(1);
    cr_assert_eq(rt_oneshot_send(o, m), -EPIPE, "sent to a receiver that was dropped");
    free(m);
    finish_runtime(rt, 0);
}

/* A send racing the receiver's drop: the value ends with exactly one side. */
#define OS_RACE_ROUNDS 2000

struct os_race {
    pthread_barrier_t start;
    pthread_barrier_t end;
    rt_oneshot *o;
    int epipe;
    int errors;
};

static void *os_race_sender(void *arg)
{
    struct os_race *r = arg;
    for (int i = 0; i < OS_RACE_ROUNDS; i++) {
        pthread_barrier_wait(&r->start);
        struct msg *m = malloc(sizeof *m);
        m->seq = i;
        int rc = rt_oneshot_send(r->o, m);
        if (rc == -EPIPE) {
            r->epipe++;
            free(m);
        } else if (rc != 0) {
            r->errors++;
            free(m);
        }
        pthread_barrier_wait(&r->end);
    }
    return NULL;
}

Test(channel, oneshot_send_racing_the_receivers_drop_leaves_the_value_with_exactly_one_side)
{
    static struct os_race r;
    memset(&r, 0, sizeof r);
    cr_assert_eq(pthread_barrier_init(&r.start, NULL, 2), 0);
    cr_assert_eq(pthread_barrier_init(&r.end, NULL, 2), 0);
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, os_race_sender, &r), 0);
    int returned = 0, errors = 0;
    for (int i = 0; i < OS_RACE_ROUNDS; i++) {
        rt_oneshot *o = NULL;
        cr_assert_eq(rt_oneshot_new(&o), 0);
        r.o = o;
        pthread_barrier_wait(&r.start);
        void *u = V(1);
        int got = rt_oneshot_receiver_drop(o, &u);
        if (got == 1) {
            struct msg *m = u;
            if (m == NULL || m->seq != i)
                errors++;
            free(m);
            returned++;
        } else if (got != 0 || u != NULL) {
            errors++;
        }
        pthread_barrier_wait(&r.end);
    }
    pthread_join(thread, NULL);
    pthread_barrier_destroy(&r.start);
    pthread_barrier_destroy(&r.end);
    cr_assert_eq(errors, 0);
    cr_assert_eq(r.errors, 0);
    cr_assert_eq(returned + r.epipe, OS_RACE_ROUNDS,
                 "%d values handed back + %d refused sends != %d rounds", returned, r.epipe,
                 OS_RACE_ROUNDS);
    cr_log_info("oneshot send vs receiver drop: %d handed back, %d refused", returned, r.epipe);
}
