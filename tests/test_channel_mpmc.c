/* Black-box tests of channels with several receivers (asyncrt/channel.h):
 * receiver tasks and foreign threads share one channel with a receiver
 * reference each; every value reaches exactly one of them, the end of the
 * stream reaches all of them, and receivers aborted while they wait (woken
 * for a value or not) lose nothing and strand nothing; by hand, a waiting
 * sender's value moved in by a woken receive wakes the next one, and a
 * receiver that lets go of the channel inside the end-of-stream wake does
 * not pull it from under the last sender. */
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
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(channel, .timeout = 120, .fini = fail_on_leaks);

#define MC_VALUES 20000
#define MC_RECEIVERS 6
#define MC_THREADS 2

/* Every value 1..MC_VALUES, seen how many times. */
static atomic_int seen[MC_VALUES + 1];
static atomic_int receivers_at_end; /* receivers that saw -EPIPE */
static atomic_int received;         /* values taken by any receiver */

static void record(void *v)
{
    uintptr_t x = (uintptr_t)v;
    cr_assert(x >= 1 && x <= MC_VALUES, "a value that was never sent: %lu", (unsigned long)x);
    atomic_fetch_add(&seen[x], 1);
    atomic_fetch_add(&received, 1);
}

static void assert_each_value_once(void)
{
    for (int i = 1; i <= MC_VALUES; i++)
        cr_assert_eq(atomic_load(&seen[i]), 1, "value %d received %d times", i,
                     atomic_load(&seen[i]));
}

/* A receiver task: receives until the end of the stream, yielding now and
 * then so that others wait and get woken. */
struct mc_receiver {
    rt_coro co;
    rt_chan *ch; /* its own receiver reference */
    rt_chan_recv op;
    void *value;
    int status;
    unsigned count;
};

static rt_poll mc_receiver_poll(void *state, rt_context *cx, void **out)
{
    struct mc_receiver *r = state;
    RT_CORO_BEGIN(&r->co);
    for (;;) {
        rt_chan_recv_init(&r->op, r->ch);
        RT_AWAIT(&r->co, cx, &r->op);
        r->status = (int)r->op.result;
        r->value = r->op.value;
        if (r->status != 0)
            break;
        record(r->value);
        if (++r->count % 16 == 0)
            RT_CORO_YIELD(&r->co, cx);
    }
    if (r->status == -EPIPE)
        atomic_fetch_add(&receivers_at_end, 1);
    RT_RETURN(&r->co, out, (intptr_t)r->status);
    RT_CORO_END(&r->co, out);
}

static void mc_receiver_drop(void *state)
{
    struct mc_receiver *r = state;
    RT_DROP(&r->op);
    rt_chan_receiver_drop(r->ch, NULL, NULL);
}

/* A foreign thread receiving with rt_chan_recv_wait. */
static void *mc_thread(void *arg)
{
    rt_chan *ch = arg;
    for (;;) {
        void *v = NULL;
        int err = rt_chan_recv_wait(ch, WAIT_DEADLINE_NS, &v);
        if (err == -EPIPE) {
            atomic_fetch_add(&receivers_at_end, 1);
            break;
        }
        cr_assert_eq(err, 0, "blocking receive: %s", rt_strerror(err));
        record(v);
    }
    rt_chan_receiver_drop(ch, NULL, NULL);
    return NULL;
}

static void spawn_receivers(rt_runtime *rt, rt_chan *ch, rt_task **h, int n)
{
    for (int i = 0; i < n; i++) {
        cr_assert_eq(rt_chan_receiver_clone(ch), 0);
        struct mc_receiver r;
        memset(&r, 0, sizeof r);
        r.ch = ch;
        cr_assert_eq(rt_spawn(rt, mc_receiver_poll, mc_receiver_drop, &r, sizeof r, &h[i]), 0);
    }
}

Test(channel, several_receiver_tasks_and_threads_get_each_value_once_and_all_see_the_end)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(8, &ch), 0);
    rt_task *h[MC_RECEIVERS];
    spawn_receivers(rt, ch, h, MC_RECEIVERS);
    pthread_t th[MC_THREADS];
    for (int i = 0; i < MC_THREADS; i++) {
        cr_assert_eq(rt_chan_receiver_clone(ch), 0);
        cr_assert_eq(pthread_create(&th[i], NULL, mc_thread, ch), 0);
    }
    rt_chan_receiver_drop(ch, NULL, NULL); /* ours: only the receivers hold one */
    for (uintptr_t i = 1; i <= MC_VALUES; i++)
        cr_assert_eq(rt_chan_send_wait(ch, (void *)i, WAIT_DEADLINE_NS), 0);
    rt_chan_sender_drop(ch); /* the end of the stream */
    for (int i = 0; i < MC_RECEIVERS; i++) {
        void *v = NULL;
        cr_assert_eq(task_wait_status(h[i], WAIT_DEADLINE_NS, &v), 0);
        cr_assert_eq((intptr_t)v, -EPIPE, "receiver %d ended with %d", i, (int)(intptr_t)v);
    }
    for (int i = 0; i < MC_THREADS; i++)
        pthread_join(th[i], NULL);
    assert_each_value_once();
    cr_assert_eq(atomic_load(&receivers_at_end), MC_RECEIVERS + MC_THREADS);
    finish_runtime(rt, 0);
}

Test(channel, receivers_aborted_while_they_wait_lose_and_strand_nothing)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    rt_task *h[MC_RECEIVERS];
    spawn_receivers(rt, ch, h, MC_RECEIVERS);
    /* Half the receivers are aborted while values flow, whether they wait,
     * were just woken for a value, or are running: the values they did not
     * take stay in the channel for the others. */
    for (uintptr_t i = 1; i <= MC_VALUES; i++) {
        cr_assert_eq(rt_chan_send_wait(ch, (void *)i, WAIT_DEADLINE_NS), 0);
        if (i % (MC_VALUES / 4) == 0 && i / (MC_VALUES / 4) <= MC_RECEIVERS / 2)
            rt_task_cancel(h[i / (MC_VALUES / 4) - 1]);
    }
    rt_chan_sender_drop(ch);
    int ended = 0;
    for (int i = 0; i < MC_RECEIVERS; i++) {
        void *v = NULL;
        int err = task_wait_status(h[i], WAIT_DEADLINE_NS, &v);
        cr_assert(err == 0 || err == -ECANCELED, "receiver %d: %s", i, rt_strerror(err));
        if (err == 0) {
            cr_assert_eq((intptr_t)v, -EPIPE);
            ended++;
        }
    }
    cr_assert_geq(ended, MC_RECEIVERS / 2, "the receivers not aborted did not all end");
    /* The receivers left took everything, each value once. (That a woken
     * receive dropped before its poll passes the wake on is checked by hand,
     * deterministically, in test_channel_mpsc.c.) */
    cr_assert_eq(atomic_load(&received), MC_VALUES);
    assert_each_value_once();
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

Test(channel, a_receiver_reference_keeps_the_channel_open_until_the_last_drop)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    cr_assert_eq(rt_chan_receiver_clone(ch), 0);
    rt_chan_receiver_drop(ch, NULL, NULL); /* not the last: still open */
    cr_assert_eq(rt_chan_try_send(ch, V(1)), 0, "a receiver remained, yet sends fail");
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(1));
    rt_chan_receiver_drop(ch, NULL, NULL); /* the last: closed */
    cr_assert_eq(rt_chan_try_send(ch, V(2)), -EPIPE);
    rt_chan_sender_drop(ch);
}

/* ---- by hand ---------------------------------------------------------------------- */

Test(channel, a_waiting_senders_value_moved_in_by_a_woken_receive_wakes_the_next_receive)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    struct hand h1, h2, hs;
    hand_init(&h1);
    hand_init(&h2);
    hand_init(&hs);
    rt_chan_recv r1, r2;
    cr_assert_eq(rt_chan_recv_init(&r1, ch), 0);
    cr_assert_eq(rt_chan_recv_init(&r2, ch), 0);
    cr_assert_eq(RT_POLL_OP(&r1, &h1.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&r2, &h2.cx), RT_PENDING);
    cr_assert_eq(rt_chan_try_send(ch, V(1)), 0); /* promised to r1 */
    rt_chan_send send;
    cr_assert_eq(rt_chan_send_init(&send, ch, V(2)), 0);
    cr_assert_eq(RT_POLL_OP(&send, &hs.cx), RT_PENDING, "the buffer is full");
    cr_assert_eq(RT_POLL_OP(&r1, &h1.cx), RT_READY);
    cr_assert_eq(r1.result, 0);
    cr_assert_eq(r1.value, V(1));
    /* Taking 1 moved 2 in: it is r2's now. */
    cr_assert_eq(counting_wakes(&h2.w), 1, "the value moved in woke nobody");
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN, "a try took the value promised to r2");
    cr_assert_eq(RT_POLL_OP(&r2, &h2.cx), RT_READY);
    cr_assert_eq(r2.result, 0);
    cr_assert_eq(r2.value, V(2));
    cr_assert_eq(counting_wakes(&hs.w), 1);
    cr_assert_eq(RT_POLL_OP(&send, &hs.cx), RT_READY);
    cr_assert_eq(send.result, 0);
    RT_DROP(&send);
    RT_DROP(&r1);
    RT_DROP(&r2);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    cr_assert_eq(counting_outstanding(&hs.w), 0);
}

/* A receiver whose wake gives up its receive and the last receiver
 * reference, as a thread woken by the end of the stream may do at once. */
struct letgo {
    rt_chan *ch;
    rt_chan_recv op;
    int woken;
};

static const rt_waker_vtable letgo_vtable;

static rt_waker letgo_clone(const void *data)
{
    rt_waker w = {&letgo_vtable, data};
    return w;
}

static void letgo_wake_by_ref(const void *data)
{
    struct letgo *l = (struct letgo *)data;
    if (l->woken++ == 0) {
        RT_DROP(&l->op);
        rt_chan_receiver_drop(l->ch, NULL, NULL);
    }
}

static void letgo_nothing(const void *data)
{
    (void)data;
}

static const rt_waker_vtable letgo_vtable = {letgo_clone, letgo_wake_by_ref, letgo_wake_by_ref,
                                             letgo_nothing};

Test(channel, a_receiver_letting_go_in_its_end_of_stream_wake_leaves_the_channel_to_the_sender)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    struct letgo l = {.ch = ch, .woken = 0};
    cr_assert_eq(rt_chan_recv_init(&l.op, ch), 0);
    rt_context cx = {{&letgo_vtable, &l}};
    cr_assert_eq(RT_POLL_OP(&l.op, &cx), RT_PENDING);
    /* The last sender wakes the receive to see the end; the receiver lets
     * go of everything inside that wake, while the sender's drop has yet to
     * take the channel's lock again. The channel is freed once, after. */
    rt_chan_sender_drop(ch);
    cr_assert_eq(l.woken, 1);
}
