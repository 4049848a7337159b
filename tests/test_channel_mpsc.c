/* Black-box tests of the bounded multi-producer channel (asyncrt/channel.h)
 * driven from the test thread: argument checking, FIFO order across
 * wrap-around, backpressure, FIFO service of waiting senders that a try_send
 * never overtakes, end of stream, close, the receiver's drop disposing of
 * buffered values oldest first, and the blocking forms (timeouts, -EDEADLK
 * inside a task). Values that own memory are malloc'd so that
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

/* ---- helpers ----------------------------------------------------------- */

/* A dispose function that records the order and frees. */
struct disposal {
    int count;
    int seqs[64];
    void *arg_seen;
};

static void dispose_record(void *value, void *arg)
{
    struct disposal *d = arg;
    struct msg *m = value;
    if (d->count < 64)
        d->seqs[d->count] = m->seq;
    d->count++;
    d->arg_seen = arg;
    free(m);
}

/* ---- mpsc: arguments and non-waiting forms --------------------------------- */

Test(channel, chan_new_rejects_bad_arguments)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(0, &ch), -EINVAL);
    cr_assert_eq(rt_chan_new(((size_t)1 << 31) + 1, &ch), -EINVAL);
    cr_assert_eq(rt_chan_new(SIZE_MAX, &ch), -EINVAL);
    cr_assert_eq(rt_chan_new(4, NULL), -EINVAL);
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    cr_assert_not_null(ch);
    cr_assert_eq(rt_chan_capacity(ch), 4);
    cr_assert_eq(rt_chan_len(ch), 0);
    cr_assert_eq(rt_chan_sender_clone(NULL), -EINVAL);
    rt_chan_send op;
    cr_assert_eq(rt_chan_send_init(NULL, ch, V(1)), -EINVAL);
    cr_assert_eq(rt_chan_send_init(&op, NULL, V(1)), -EINVAL);
    /* The failed init left the send finished with its error. */
    rt_context cx = noop_context();
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, -EINVAL);
    rt_chan_recv rop;
    cr_assert_eq(rt_chan_recv_init(NULL, ch), -EINVAL);
    cr_assert_eq(rt_chan_recv_init(&rop, NULL), -EINVAL);
    cr_assert_eq(RT_POLL_OP(&rop, &cx), RT_READY);
    cr_assert_eq(rop.result, -EINVAL);
    cr_assert_null(rop.value);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);

    cr_assert_eq(rt_chan_new(1, &ch), 0);
    cr_assert_eq(rt_chan_capacity(ch), 1);
    rt_chan_receiver_drop(ch, NULL, NULL); /* the receiver first this time */
    rt_chan_sender_drop(ch);
}

Test(channel, chan_zero_initialised_send_may_be_dropped)
{
    rt_chan_send op;
    memset(&op, 0, sizeof op);
    /* Polled, a zeroed send finishes at once with -EINVAL. */
    rt_context cx = noop_context();
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, -EINVAL);
    memset(&op, 0, sizeof op);
    RT_DROP(&op);
    RT_DROP(&op);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    /* Initialised but never polled: dropping it sends nothing. */
    cr_assert_eq(rt_chan_send_init(&op, ch, V(1)), 0);
    RT_DROP(&op);
    cr_assert_eq(op.result, -ECANCELED, "a send dropped unpolled reported it sent");
    cr_assert_eq(rt_chan_len(ch), 0);
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

Test(channel, chan_try_send_and_try_recv_keep_fifo_order_across_wrap_around)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(3, &ch), 0);
    void *v = V(1);
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN);
    cr_assert_eq(rt_chan_try_send(ch, V(1)), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(2)), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(3)), 0);
    cr_assert_eq(rt_chan_len(ch), 3);
    cr_assert_eq(rt_chan_try_send(ch, V(4)), -EAGAIN, "a full channel took a fourth value");
    cr_assert_eq(rt_chan_len(ch), 3);
    uintptr_t next_out = 1, next_in = 4;
    for (int round = 0; round < 100; round++) {
        for (int k = 0; k < 2; k++) {
            cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
            cr_assert_eq(v, V(next_out), "got %lu, expected %lu", (unsigned long)(uintptr_t)v,
                         (unsigned long)next_out);
            next_out++;
        }
        cr_assert_eq(rt_chan_len(ch), 1);
        cr_assert_eq(rt_chan_try_send(ch, V(next_in)), 0);
        next_in++;
        cr_assert_eq(rt_chan_try_send(ch, V(next_in)), 0);
        next_in++;
        cr_assert_eq(rt_chan_try_send(ch, V(next_in)), -EAGAIN);
    }
    while (next_out < next_in) {
        cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
        cr_assert_eq(v, V(next_out));
        next_out++;
    }
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN);
    cr_assert_eq(rt_chan_len(ch), 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

/* ---- mpsc: backpressure and waiting senders --------------------------------- */

Test(channel, chan_send_stays_pending_on_a_full_channel_until_a_receive)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(0xA)), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(0xB)), -EAGAIN, "capacity 1 took a second value");
    struct hand h;
    hand_init(&h);
    rt_chan_send op;
    cr_assert_eq(rt_chan_send_init(&op, ch, V(0xC)), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    cr_assert_eq(counting_wakes(&h.w), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(0xD)), -EAGAIN);
    cr_assert_eq(rt_chan_len(ch), 1);
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(0xA));
    cr_assert_eq(counting_wakes(&h.w), 1, "the waiting sender was not woken by the receive");
    cr_assert_eq(rt_chan_try_send(ch, V(0xD)), -EAGAIN, "try_send overtook the waiting sender");
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    /* Finished: polled again it reports the same, and sends nothing more. */
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(rt_chan_len(ch), 1, "a second poll sent the value again");
    RT_DROP(&op);
    cr_assert_eq(op.result, 0, "drop after RT_READY changed the result");
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(0xC));
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN);
    cr_assert_eq(rt_chan_try_send(ch, V(0xD)), 0);
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(0xD));
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

Test(channel, chan_waiting_senders_are_served_in_fifo_order_and_try_send_never_overtakes)
{
    enum { N = 4 };
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(100)), 0);
    struct hand h[N + 1];
    rt_chan_send op[N + 1];
    for (int i = 1; i <= N; i++) {
        hand_init(&h[i]);
        cr_assert_eq(rt_chan_send_init(&op[i], ch, V(100 + i)), 0);
        cr_assert_eq(RT_POLL_OP(&op[i], &h[i].cx), RT_PENDING);
    }
    for (int k = 1; k <= N; k++) {
        void *v = NULL;
        cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
        cr_assert_eq(v, V(100 + k - 1), "receive %d got %lu", k, (unsigned long)(uintptr_t)v);
        for (int i = 1; i <= N; i++)
            cr_assert_eq(counting_wakes(&h[i].w), i <= k ? 1 : 0,
                         "after receive %d sender %d woken %ld", k, i, counting_wakes(&h[i].w));
        cr_assert_eq(rt_chan_try_send(ch, V(999)), -EAGAIN,
                     "try_send overtook waiting senders (receive %d)", k);
        for (int i = N; i > k; i--)
            cr_assert_eq(RT_POLL_OP(&op[i], &h[i].cx), RT_PENDING, "sender %d overtook sender %d",
                         i, k);
        cr_assert_eq(RT_POLL_OP(&op[k], &h[k].cx), RT_READY, "sender %d", k);
        cr_assert_eq(op[k].result, 0);
    }
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(100 + N));
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN);
    for (int i = 1; i <= N; i++)
        cr_assert_eq(counting_outstanding(&h[i].w), 0, "sender %d", i);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

Test(channel, chan_send_dropped_after_a_receive_made_room_reports_where_the_value_is)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(1)), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_chan_send op1, op2;
    cr_assert_eq(rt_chan_send_init(&op1, ch, V(2)), 0);
    cr_assert_eq(rt_chan_send_init(&op2, ch, V(3)), 0);
    cr_assert_eq(RT_POLL_OP(&op1, &h1.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&op2, &h2.cx), RT_PENDING);
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(1));
    cr_assert_eq(counting_wakes(&h1.w), 1);
    /* op1 is dropped before its poll reports: its result after the drop
     * says whether its value went in (0) or not (-ECANCELED), and the
     * channel agrees. */
    RT_DROP(&op1);
    cr_assert(op1.result == 0 || op1.result == -ECANCELED, "the dropped send's result: %lld",
              (long long)op1.result);
    int accepted = op1.result == 0;
    RT_DROP(&op1);
    cr_assert_eq(op1.result, accepted ? 0 : -ECANCELED, "a second drop changed the result");
    if (accepted) {
        cr_assert_eq(rt_chan_len(ch), 1);
        cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
        cr_assert_eq(v, V(2), "the drop reported it sent but the channel holds %p", v);
    } else {
        /* Not sent: the room it leaves goes to the next waiting sender. */
        cr_assert_eq(counting_wakes(&h2.w), 1, "the next sender was not served");
    }
    cr_assert_eq(RT_POLL_OP(&op2, &h2.cx), RT_READY);
    cr_assert_eq(op2.result, 0);
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(3));
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN, "an extra value is buffered");
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    cr_log_info("send dropped after a receive made room: %s", accepted ? "sent" : "not sent");
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

Test(channel, chan_receives_polled_by_hand_are_served_oldest_first)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_chan_recv r1, r2;
    cr_assert_eq(rt_chan_recv_init(&r1, ch), 0);
    cr_assert_eq(rt_chan_recv_init(&r2, ch), 0);
    cr_assert_eq(RT_POLL_OP(&r1, &h1.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&r2, &h2.cx), RT_PENDING);
    cr_assert_eq(rt_chan_try_send(ch, V(0x77)), 0);
    cr_assert_eq(counting_wakes(&h1.w), 1, "the oldest receive was not woken");
    cr_assert_eq(counting_wakes(&h2.w), 0, "one value woke two receives");
    /* The value is promised to r1: a try does not barge. */
    void *v = V(1);
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN);
    cr_assert_eq(RT_POLL_OP(&r1, &h1.cx), RT_READY);
    cr_assert_eq(r1.result, 0);
    cr_assert_eq(r1.value, V(0x77));
    /* A poll after completion reports the same and takes no other value. */
    cr_assert_eq(RT_POLL_OP(&r1, &h1.cx), RT_READY, "a poll after completion");
    cr_assert_eq(r1.result, 0, "a poll after completion");
    cr_assert_eq(r1.value, V(0x77), "a poll after completion");
    RT_DROP(&r1); /* after completion: nothing to do */
    cr_assert_eq(r1.result, 0);
    cr_assert_eq(rt_chan_try_send(ch, V(0x78)), 0);
    cr_assert_eq(counting_wakes(&h2.w), 1);
    cr_assert_eq(RT_POLL_OP(&r2, &h2.cx), RT_READY);
    cr_assert_eq(r2.result, 0);
    cr_assert_eq(r2.value, V(0x78), "the second receive got %p", r2.value);
    RT_DROP(&r2);
    RT_DROP(&r2); /* idempotent */
    cr_assert_eq(r2.result, 0);
    cr_assert_eq(rt_chan_len(ch), 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
}

Test(channel, chan_a_woken_receive_dropped_unpolled_passes_its_value_on)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    rt_chan_recv r1, r2;
    cr_assert_eq(rt_chan_recv_init(&r1, ch), 0);
    cr_assert_eq(rt_chan_recv_init(&r2, ch), 0);
    cr_assert_eq(RT_POLL_OP(&r1, &h1.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&r2, &h2.cx), RT_PENDING);
    cr_assert_eq(rt_chan_try_send(ch, V(5)), 0);
    cr_assert_eq(counting_wakes(&h1.w), 1);
    /* r1's task was aborted before its next poll: its wake goes to r2, and
     * the value stays in the channel for it. */
    RT_DROP(&r1);
    cr_assert_eq(r1.result, -ECANCELED);
    cr_assert_eq(counting_wakes(&h2.w), 1, "the dropped receive kept the wake to itself");
    cr_assert_eq(RT_POLL_OP(&r2, &h2.cx), RT_READY);
    cr_assert_eq(r2.result, 0);
    cr_assert_eq(r2.value, V(5));
    RT_DROP(&r2);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
}

/* One receive polled once with cx, then dropped (a waiting one leaves the
 * queue). Returns the poll's answer; when it is RT_READY, *v and *st
 * receive the operation's value and result. */
static rt_poll recv_once(rt_chan *ch, rt_context *cx, void **v, int *st)
{
    rt_chan_recv op;
    cr_assert_eq(rt_chan_recv_init(&op, ch), 0);
    rt_poll r = RT_POLL_OP(&op, cx);
    if (r == RT_READY) {
        *v = op.value;
        *st = (int)op.result;
    }
    RT_DROP(&op);
    return r;
}

/* ---- mpsc: end of stream, close, receiver drop --------------------------------- */

Test(channel, chan_end_of_stream_comes_after_the_last_sender_and_a_drained_buffer)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    cr_assert_eq(rt_chan_sender_clone(ch), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(1)), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(2)), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(3)), 0);
    rt_chan_sender_drop(ch);
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(1));
    rt_chan_sender_drop(ch); /* the last one */
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0, "buffered values lost with the last sender");
    cr_assert_eq(v, V(2));
    rt_context cx = noop_context();
    int st = 1;
    cr_assert_eq(recv_once(ch, &cx, &v, &st), RT_READY);
    cr_assert_eq(st, 0);
    cr_assert_eq(v, V(3));
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EPIPE);
    v = V(1);
    cr_assert_eq(recv_once(ch, &cx, &v, &st), RT_READY);
    cr_assert_eq(st, -EPIPE);
    cr_assert_null(v, "end of stream must give a NULL value");
    cr_assert_eq(recv_once(ch, &cx, &v, &st), RT_READY);
    cr_assert_eq(st, -EPIPE);
    cr_assert_eq(rt_chan_recv_wait(ch, 0, &v), -EPIPE);
    rt_chan_receiver_drop(ch, NULL, NULL);

    /* A waiting receiver is woken by the last sender's drop, not before. */
    struct hand h;
    hand_init(&h);
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    cr_assert_eq(rt_chan_sender_clone(ch), 0);
    rt_chan_recv op;
    cr_assert_eq(rt_chan_recv_init(&op, ch), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    rt_chan_sender_drop(ch);
    cr_assert_eq(counting_wakes(&h.w), 0, "woken while a sender remained");
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    rt_chan_sender_drop(ch);
    cr_assert_eq(counting_wakes(&h.w), 1,
                 "the waiting receiver was not woken by the last sender's drop");
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, -EPIPE);
    cr_assert_null(op.value, "end of stream must give a NULL value");
    RT_DROP(&op);
    rt_chan_receiver_drop(ch, NULL, NULL);
    cr_assert_eq(counting_outstanding(&h.w), 0);
}

struct blocked_sender {
    rt_chan *ch;
    struct msg *m;
    int64_t timeout;
    int rc;
    struct event started;
};

static void *blocked_sender_main(void *arg)
{
    struct blocked_sender *b = arg;
    event_signal(&b->started);
    b->rc = rt_chan_send_wait(b->ch, b->m, b->timeout);
    if (b->rc != 0)
        free(b->m); /* not sent: still ours */
    return NULL;
}

Test(channel, chan_close_refuses_waiting_and_later_senders_who_keep_their_values)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    struct msg *a = new_msg(1), *b = new_msg(2), *c = new_msg(3), *d = new_msg(4);
    cr_assert_eq(rt_chan_try_send(ch, a), 0);
    struct hand hb, hc;
    hand_init(&hb);
    hand_init(&hc);
    rt_chan_send sb, sc;
    cr_assert_eq(rt_chan_send_init(&sb, ch, b), 0);
    cr_assert_eq(rt_chan_send_init(&sc, ch, c), 0);
    cr_assert_eq(RT_POLL_OP(&sb, &hb.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&sc, &hc.cx), RT_PENDING);

    /* A foreign thread blocked in a send too (or about to be). */
    static struct blocked_sender bs = {NULL, NULL, 0, 1, EVENT_INIT};
    bs.ch = ch;
    bs.m = new_msg(5);
    bs.timeout = WAIT_DEADLINE_NS;
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, blocked_sender_main, &bs), 0);
    cr_assert(event_wait_for(&bs.started, 1));

    rt_chan_close(ch);
    cr_assert_eq(counting_wakes(&hb.w), 1, "a waiting sender was not woken by close");
    cr_assert_eq(counting_wakes(&hc.w), 1, "a waiting sender was not woken by close");
    cr_assert_eq(RT_POLL_OP(&sb, &hb.cx), RT_READY);
    cr_assert_eq(sb.result, -EPIPE);
    cr_assert_eq(RT_POLL_OP(&sc, &hc.cx), RT_READY);
    cr_assert_eq(sc.result, -EPIPE);
    free(b); /* refused: still ours */
    free(c);
    pthread_join(thread, NULL);
    cr_assert_eq(bs.rc, -EPIPE, "the blocked sender got %s", rt_strerror(bs.rc));
    cr_assert_eq(rt_chan_try_send(ch, d), -EPIPE);
    free(d);
    cr_assert_eq(rt_chan_send_wait(ch, V(6), 0), -EPIPE);
    rt_chan_send se;
    rt_context cx = noop_context();
    cr_assert_eq(rt_chan_send_init(&se, ch, V(7)), 0);
    cr_assert_eq(RT_POLL_OP(&se, &cx), RT_READY);
    cr_assert_eq(se.result, -EPIPE);

    /* What was buffered before the close is still received, then -EPIPE. */
    cr_assert_eq(rt_chan_len(ch), 1);
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, a);
    free(a);
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EPIPE, "a closed, drained channel is not at its end");
    int st = 1;
    cr_assert_eq(recv_once(ch, &cx, &v, &st), RT_READY);
    cr_assert_eq(st, -EPIPE);
    cr_assert_eq(rt_chan_recv_wait(ch, WAIT_DEADLINE_NS, &v), -EPIPE);
    rt_chan_close(ch); /* idempotent */
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EPIPE);
    cr_assert_eq(counting_outstanding(&hb.w), 0);
    cr_assert_eq(counting_outstanding(&hc.w), 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, dispose_free, NULL);
    cr_assert_eq(atomic_load(&disposed_free_count), 0);
}

Test(channel, chan_receiver_drop_disposes_buffered_values_oldest_first_and_refuses_senders)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    cr_assert_eq(rt_chan_sender_clone(ch), 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(rt_chan_try_send(ch, new_msg(i)), 0);
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(((struct msg *)v)->seq, 0);
    free(v);
    cr_assert_eq(rt_chan_try_send(ch, new_msg(4)), 0);
    /* A sender waits on the full channel. */
    struct msg *waiting = new_msg(99);
    struct hand h;
    hand_init(&h);
    rt_chan_send op;
    cr_assert_eq(rt_chan_send_init(&op, ch, waiting), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);

    struct disposal d;
    memset(&d, 0, sizeof d);
    rt_chan_receiver_drop(ch, dispose_record, &d);
    cr_assert_eq(d.count, 4, "dispose ran %d times", d.count);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(d.seqs[i], i + 1, "disposal %d was of value %d", i, d.seqs[i]);
    cr_assert_eq(d.arg_seen, &d);
    cr_assert_eq(counting_wakes(&h.w), 1,
                 "the waiting sender was not woken by the receiver's drop");
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, -EPIPE);
    free(waiting); /* refused: still ours, and not disposed */
    struct msg *late = new_msg(100);
    cr_assert_eq(rt_chan_try_send(ch, late), -EPIPE);
    free(late);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_chan_sender_drop(ch);
    rt_chan_sender_drop(ch);
}

/* ---- mpsc: blocking forms -------------------------------------------------------- */

Test(channel, chan_blocking_forms_time_out_without_sending_or_receiving)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    void *v = V(1);
    int64_t t0 = rt_now_ns();
    cr_assert_eq(rt_chan_recv_wait(ch, 20 * MS, &v), -ETIMEDOUT);
    int64_t took = rt_now_ns() - t0;
    cr_assert_geq(took, 20 * MS, "timed out after only %lld us", (long long)(took / 1000));
    cr_assert_eq(rt_chan_recv_wait(ch, 0, &v), -ETIMEDOUT);
    cr_assert_eq(rt_chan_try_send(ch, V(1)), 0);
    t0 = rt_now_ns();
    cr_assert_eq(rt_chan_send_wait(ch, V(2), 20 * MS), -ETIMEDOUT);
    took = rt_now_ns() - t0;
    cr_assert_geq(took, 20 * MS, "timed out after only %lld us", (long long)(took / 1000));
    cr_assert_eq(rt_chan_send_wait(ch, V(2), 0), -ETIMEDOUT);
    cr_assert_eq(rt_chan_len(ch), 1);
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(1));
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN, "a timed-out send was delivered");
    /* The timed-out sender left the queue: a try_send is not refused. */
    cr_assert_eq(rt_chan_try_send(ch, V(3)), 0, "a timed-out sender still blocks try_send");
    cr_assert_eq(rt_chan_recv_wait(ch, 0, &v), 0);
    cr_assert_eq(v, V(3));
    cr_assert_eq(rt_chan_send_wait(ch, V(4), 0), 0);
    cr_assert_eq(rt_chan_recv_wait(ch, -1, &v), 0);
    cr_assert_eq(v, V(4));
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

struct chan_deadlock_probe {
    rt_chan *ch;
    rt_oneshot *o;
    int chan_recv_rc;
    int chan_send_rc;
    int oneshot_rc;
};

static rt_poll chan_deadlock_probe_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct chan_deadlock_probe *p = *(struct chan_deadlock_probe **)state;
    void *v = NULL;
    p->chan_recv_rc = rt_chan_recv_wait(p->ch, 50 * MS, &v);
    p->chan_send_rc = rt_chan_send_wait(p->ch, V(2), 50 * MS);
    p->oneshot_rc = rt_oneshot_recv_wait(p->o, 50 * MS, &v);
    *out = NULL;
    return RT_READY;
}

Test(channel, blocking_forms_fail_with_edeadlk_inside_a_task_and_move_nothing)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    cr_assert_eq(rt_oneshot_new(&o), 0);
    /* Everything could complete at once: still -EDEADLK on a worker. */
    cr_assert_eq(rt_chan_try_send(ch, V(1)), 0);
    cr_assert_eq(rt_oneshot_send(o, V(9)), 0);
    struct chan_deadlock_probe p = {ch, o, 1, 1, 1};
    struct chan_deadlock_probe *pp = &p;
    cr_assert_eq(block_on_status(rt, chan_deadlock_probe_poll, NULL, &pp, sizeof pp, NULL), 0);
    cr_assert_eq(p.chan_recv_rc, -EDEADLK, "rt_chan_recv_wait: %s", rt_strerror(p.chan_recv_rc));
    cr_assert_eq(p.chan_send_rc, -EDEADLK, "rt_chan_send_wait: %s", rt_strerror(p.chan_send_rc));
    cr_assert_eq(p.oneshot_rc, -EDEADLK, "rt_oneshot_recv_wait: %s", rt_strerror(p.oneshot_rc));
    cr_assert_eq(rt_chan_len(ch), 1, "a failed blocking call moved a value");
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(1));
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN);
    cr_assert_eq(rt_oneshot_try_recv(o, &v), 0, "the oneshot value was taken by a failed call");
    cr_assert_eq(v, V(9));
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}
