/* Black-box tests of the bounded multi-producer channel (asyncrt/channel.h)
 * between tasks and threads: many producers of both kinds deliver every
 * message exactly once and in order, aborted receives and sends lose or
 * duplicate nothing, a dropped receiver wakes a waiting sender with -EPIPE,
 * receives and sends spend the cooperative budget, and shutdown while
 * senders and receivers of both kinds of channel wait releases everything.
 * Values that own memory are malloc'd so that AddressSanitizer catches a
 * value freed twice or never. */
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

/* What the receiver tasks below return at end of stream. */
#define EPIPE_TOKEN V(0xE919E)

/* Sends one value with a send operation. owns_value: the value is a heap
 * value the task frees unless it was sent (then it is the channel's): the
 * send finished with result 0, or it was dropped unfinished and the drop
 * left its result 0 (a receive took the value just before: recorded in
 * *accepted_by_drop); the drop records in *freed_unsent that it freed an
 * unsent value. holds_ref: the task owns a sender reference, given back
 * when it finishes or is dropped. Returns the send's result. */
struct chan_sender {
    rt_coro co;
    rt_chan *ch;
    void *value;
    bool owns_value;
    bool holds_ref;
    bool announced;
    bool initialised; /* op was initialised */
    int status;
    bool *freed_unsent;
    /* 1: the drop of the unfinished send found it sent; -1: the drop of a
     * send that had finished changed its result */
    int *accepted_by_drop;
    struct event *pending;
    struct event *dropped;
    rt_chan_send op;
};

static rt_poll chan_sender_poll(void *state, rt_context *cx, void **out)
{
    struct chan_sender *s = state;
    RT_CORO_BEGIN(&s->co);
    if (rt_chan_send_init(&s->op, s->ch, s->value) != 0)
        RT_RETURN(&s->co, out, (intptr_t)-1000);
    s->initialised = true;
    RT_AWAIT_POLL(&s->co, announce(RT_POLL_OP(&s->op, cx), &s->announced, s->pending));
    s->status = (int)s->op.result;
    if (s->status == 0)
        s->owns_value = false; /* the channel's now */
    RT_RETURN(&s->co, out, (intptr_t)s->status);
    RT_CORO_END(&s->co, out);
}

static void chan_sender_drop(void *state)
{
    struct chan_sender *s = state;
    bool finished = rt_future_is_done(&s->op.future);
    int64_t before = s->op.result;
    RT_DROP(&s->op);
    if (finished) {
        /* Finished by a poll: the drop must change nothing. */
        if (s->op.result != before && s->accepted_by_drop != NULL)
            *s->accepted_by_drop = -1;
    } else if (s->initialised && s->op.result == 0) {
        /* A receive moved the value into the channel just before the drop:
         * it is the receiver side's now. */
        s->owns_value = false;
        if (s->accepted_by_drop != NULL && *s->accepted_by_drop == 0)
            *s->accepted_by_drop = 1;
    }
    if (s->owns_value) {
        free(s->value);
        s->owns_value = false;
        if (s->freed_unsent != NULL)
            *s->freed_unsent = true;
    }
    if (s->holds_ref)
        rt_chan_sender_drop(s->ch);
    s->holds_ref = false;
    if (s->dropped != NULL)
        event_signal(s->dropped);
}

static rt_task *spawn_chan_sender(rt_runtime *rt, struct chan_sender *s)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, chan_sender_poll, chan_sender_drop, s, &task), 0);
    return task;
}

/* Receives one value; returns it, or EPIPE_TOKEN at end of stream. With
 * owns_receiver it releases the receiver in its drop (disposing of buffered
 * values with dispose_free). */
struct chan_receiver {
    rt_coro co;
    rt_chan *ch;
    rt_chan_recv op;
    bool owns_receiver;
    bool announced;
    void *value;
    int status;
    struct event *pending;
    struct event *dropped;
};

static rt_poll chan_receiver_poll(void *state, rt_context *cx, void **out)
{
    struct chan_receiver *r = state;
    RT_CORO_BEGIN(&r->co);
    rt_chan_recv_init(&r->op, r->ch);
    RT_AWAIT_POLL(&r->co, announce(RT_POLL_OP(&r->op, cx), &r->announced, r->pending));
    r->status = (int)r->op.result;
    r->value = r->op.value;
    if (r->status == -EPIPE)
        RT_RETURN(&r->co, out, EPIPE_TOKEN);
    if (r->status != 0)
        RT_RETURN(&r->co, out, NULL);
    RT_RETURN(&r->co, out, r->value);
    RT_CORO_END(&r->co, out);
}

static void chan_receiver_drop(void *state)
{
    struct chan_receiver *r = state;
    RT_DROP(&r->op);
    if (r->owns_receiver)
        rt_chan_receiver_drop(r->ch, dispose_free, NULL);
    r->owns_receiver = false;
    if (r->dropped != NULL)
        event_signal(r->dropped);
}

static rt_task *spawn_chan_receiver(rt_runtime *rt, struct chan_receiver *r)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, chan_receiver_poll, chan_receiver_drop, r, &task), 0);
    return task;
}

/* ---- mpsc: producers and consumers as tasks and threads ------------------------- */

#define ENCODE(id, seq) ((void *)(uintptr_t)(((uint64_t)(id) + 1) << 32 | (uint64_t)(seq)))
#define DECODE_ID(v) ((int)(((uint64_t)(uintptr_t)(v) >> 32) - 1))
#define DECODE_SEQ(v) ((uint32_t)((uint64_t)(uintptr_t)(v)&0xFFFFFFFFu))

#define MP_TASKS 16
#define MP_THREADS 2
#define MP_PRODUCERS (MP_TASKS + MP_THREADS)
#define MP_MSGS 2000

static atomic_long mp_send_errors;

/* Sends MP_MSGS values numbered 0.. (some with try_send first), then gives
 * its sender reference back. */
struct mp_producer {
    rt_coro co;
    rt_chan *ch;
    uint32_t id;
    uint32_t seq;
    uint32_t count;
    bool holds_ref;
    rt_chan_send op;
};

static rt_poll mp_producer_poll(void *state, rt_context *cx, void **out)
{
    struct mp_producer *p = state;
    RT_CORO_BEGIN(&p->co);
    for (p->seq = 0; p->seq < p->count; p->seq++) {
        if (p->seq % 4 == 1 && rt_chan_try_send(p->ch, ENCODE(p->id, p->seq)) == 0)
            continue;
        rt_chan_send_init(&p->op, p->ch, ENCODE(p->id, p->seq));
        RT_AWAIT(&p->co, cx, &p->op);
        if (p->op.result != 0) {
            atomic_fetch_add(&mp_send_errors, 1);
            break;
        }
    }
    rt_chan_sender_drop(p->ch);
    p->holds_ref = false;
    RT_RETURN(&p->co, out, NULL);
    RT_CORO_END(&p->co, out);
}

static void mp_producer_drop(void *state)
{
    struct mp_producer *p = state;
    RT_DROP(&p->op);
    if (p->holds_ref)
        rt_chan_sender_drop(p->ch);
    p->holds_ref = false;
}

struct mp_thread {
    rt_chan *ch;
    uint32_t id;
};

static void *mp_thread_main(void *arg)
{
    struct mp_thread *t = arg;
    for (uint32_t seq = 0; seq < MP_MSGS; seq++) {
        int rc = rt_chan_send_wait(t->ch, ENCODE(t->id, seq), WAIT_DEADLINE_NS);
        if (rc != 0) {
            atomic_fetch_add(&mp_send_errors, 1);
            break;
        }
    }
    rt_chan_sender_drop(t->ch);
    return NULL;
}

/* Receives until end of stream, checking each producer's order. */
struct mp_tally {
    long total;
    long bad;
    long out_of_order;
    int last_status;
    uint32_t next[MP_PRODUCERS];
};

struct mp_consumer {
    rt_coro co;
    rt_chan *ch;
    rt_chan_recv op;
    struct mp_tally *tally;
};

static void mp_tally_one(struct mp_tally *t, void *v)
{
    int id = DECODE_ID(v);
    uint32_t seq = DECODE_SEQ(v);
    if (id < 0 || id >= MP_PRODUCERS) {
        t->bad++;
        return;
    }
    if (seq != t->next[id])
        t->out_of_order++;
    t->next[id] = seq + 1;
    t->total++;
}

static rt_poll mp_consumer_poll(void *state, rt_context *cx, void **out)
{
    struct mp_consumer *c = state;
    RT_CORO_BEGIN(&c->co);
    for (;;) {
        rt_chan_recv_init(&c->op, c->ch);
        RT_AWAIT(&c->co, cx, &c->op);
        if (c->op.result != 0)
            break;
        mp_tally_one(c->tally, c->op.value);
    }
    c->tally->last_status = (int)c->op.result;
    RT_RETURN(&c->co, out, NULL);
    RT_CORO_END(&c->co, out);
}

Test(channel, chan_many_producers_tasks_and_threads_deliver_every_message_once_in_order)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    static struct mp_tally tally;
    memset(&tally, 0, sizeof tally);
    struct mp_consumer c = {0};
    c.ch = ch;
    c.tally = &tally;
    rt_task *consumer = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, mp_consumer_poll, NULL, &c, &consumer), 0);
    rt_task *tasks[MP_TASKS];
    for (int i = 0; i < MP_TASKS; i++) {
        cr_assert_eq(rt_chan_sender_clone(ch), 0);
        struct mp_producer p = {0};
        p.ch = ch;
        p.id = (uint32_t)i;
        p.count = MP_MSGS;
        p.holds_ref = true;
        cr_assert_eq(RT_SPAWN_STATE(rt, mp_producer_poll, mp_producer_drop, &p, &tasks[i]), 0);
    }
    pthread_t threads[MP_THREADS];
    struct mp_thread mt[MP_THREADS];
    for (int i = 0; i < MP_THREADS; i++) {
        cr_assert_eq(rt_chan_sender_clone(ch), 0);
        mt[i].ch = ch;
        mt[i].id = (uint32_t)(MP_TASKS + i);
        cr_assert_eq(pthread_create(&threads[i], NULL, mp_thread_main, &mt[i]), 0);
    }
    rt_chan_sender_drop(ch); /* the test's own reference */
    for (int i = 0; i < MP_TASKS; i++)
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, NULL), 0);
    for (int i = 0; i < MP_THREADS; i++)
        pthread_join(threads[i], NULL);
    cr_assert_eq(task_wait_status(consumer, WAIT_DEADLINE_NS, NULL), 0,
                 "the consumer never saw the end of the stream");
    cr_assert_eq(atomic_load(&mp_send_errors), 0);
    cr_assert_eq(tally.last_status, -EPIPE, "the stream ended with %s",
                 rt_strerror(tally.last_status));
    cr_assert_eq(tally.bad, 0, "%ld values were not sent by anyone", tally.bad);
    cr_assert_eq(tally.out_of_order, 0, "%ld values out of their producer's order",
                 tally.out_of_order);
    for (int i = 0; i < MP_PRODUCERS; i++)
        cr_assert_eq(tally.next[i], MP_MSGS, "producer %d: %u values received", i, tally.next[i]);
    cr_assert_eq(tally.total, (long)MP_PRODUCERS * MP_MSGS);
    cr_assert_eq(rt_chan_len(ch), 0);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

Test(channel, chan_single_task_producer_to_a_blocking_receiver_keeps_fifo_order)
{
    enum { COUNT = 20000 };
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(8, &ch), 0);
    struct mp_producer p = {0};
    p.ch = ch;
    p.id = 0;
    p.count = COUNT;
    p.holds_ref = true; /* the test's reference goes to the task */
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, mp_producer_poll, mp_producer_drop, &p, &task), 0);
    for (uint32_t seq = 0; seq < COUNT; seq++) {
        void *v = NULL;
        int rc = rt_chan_recv_wait(ch, WAIT_DEADLINE_NS, &v);
        cr_assert_eq(rc, 0, "receive %u: %s", seq, rt_strerror(rc));
        cr_assert_eq(DECODE_ID(v), 0);
        cr_assert_eq(DECODE_SEQ(v), seq, "got %u where %u was due", DECODE_SEQ(v), seq);
    }
    void *v = V(1);
    cr_assert_eq(rt_chan_recv_wait(ch, WAIT_DEADLINE_NS, &v), -EPIPE);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(atomic_load(&mp_send_errors), 0);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* ---- mpsc: abort safety ----------------------------------------------------------- */

static struct event recv_pending = EVENT_INIT;

Test(channel, chan_receive_aborted_mid_wait_loses_no_message)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    struct chan_receiver r = {0};
    r.ch = ch;
    r.pending = &recv_pending;
    rt_task *task = spawn_chan_receiver(rt, &r);
    cr_assert(event_wait_for(&recv_pending, 1), "the receiver never waited");
    rt_task_cancel(task);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(rt_chan_try_send(ch, V(0x51)), 0);
    cr_assert_eq(rt_chan_len(ch), 1, "the message went to the aborted receive");
    /* A new receiver gets it. */
    struct chan_receiver r2 = {0};
    r2.ch = ch;
    task = spawn_chan_receiver(rt, &r2);
    void *v = NULL;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq(v, V(0x51), "the new receiver got %p", v);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

#define RACE_ROUNDS 200

Test(channel, chan_receive_aborted_racing_a_send_gets_the_message_or_leaves_it)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    int received = 0, left = 0;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        struct chan_receiver r = {0};
        r.ch = ch;
        r.pending = &recv_pending;
        rt_task *task = spawn_chan_receiver(rt, &r);
        cr_assert(event_wait_for(&recv_pending, (unsigned long)i + 1), "round %d", i);
        cr_assert_eq(rt_chan_try_send(ch, V(i + 1)), 0);
        rt_task_cancel(task);
        void *v = NULL;
        int rc = task_wait_status(task, WAIT_DEADLINE_NS, &v);
        void *left_v = NULL;
        int trc = rt_chan_try_recv(ch, &left_v);
        if (rc == 0) {
            received++;
            cr_assert_eq(v, V(i + 1), "round %d: the task got %p", i, v);
            cr_assert_eq(trc, -EAGAIN, "round %d: the message was received twice", i);
        } else {
            cr_assert_eq(rc, -ECANCELED);
            left++;
            cr_assert_eq(trc, 0, "round %d: the aborted receive lost the message", i);
            cr_assert_eq(left_v, V(i + 1));
        }
    }
    cr_log_info("abort vs send: received %d, left in the channel %d", received, left);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

static struct event send_pending = EVENT_INIT;
static struct event send_dropped = EVENT_INIT;

Test(channel, chan_send_aborted_while_waiting_keeps_the_value_and_blocks_no_other_sender)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    struct msg *first = new_msg(1);
    cr_assert_eq(rt_chan_try_send(ch, first), 0);
    bool freed_unsent = false;
    struct chan_sender s = {0};
    cr_assert_eq(rt_chan_sender_clone(ch), 0);
    s.ch = ch;
    s.value = new_msg(2);
    s.owns_value = true;
    s.holds_ref = true;
    s.freed_unsent = &freed_unsent;
    s.pending = &send_pending;
    s.dropped = &send_dropped;
    void *aborted_value = s.value;
    rt_task *task = spawn_chan_sender(rt, &s);
    cr_assert(event_wait_for(&send_pending, 1), "the sender never waited");
    /* A second sender waits behind it, polled by hand. */
    struct hand h;
    hand_init(&h);
    rt_chan_send op;
    cr_assert_eq(rt_chan_send_init(&op, ch, V(3)), 0);
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_PENDING);
    rt_task_cancel(task);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(freed_unsent, "the drop said a send nobody received from was sent");
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, first);
    free(first);
    cr_assert_eq(counting_wakes(&h.w), 1, "the sender behind the aborted one was not served");
    cr_assert_eq(RT_POLL_OP(&op, &h.cx), RT_READY);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_neq(v, aborted_value, "the aborted send's value was delivered");
    cr_assert_eq(v, V(3));
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN);
    cr_assert_eq(rt_chan_try_send(ch, V(4)), 0, "a ghost waiting sender blocks try_send");
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(4));
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

Test(channel, chan_send_aborted_racing_a_receive_leaves_the_value_where_the_dropped_send_says)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    int delivered = 0, accepted = 0, kept = 0;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        cr_assert_eq(rt_chan_try_send(ch, V(1)), 0, "round %d: a ghost sender blocks try_send", i);
        bool freed_unsent = false;
        int accepted_by_drop = 0;
        struct chan_sender s = {0};
        cr_assert_eq(rt_chan_sender_clone(ch), 0);
        s.ch = ch;
        s.value = new_msg(i);
        s.owns_value = true;
        s.holds_ref = true;
        s.freed_unsent = &freed_unsent;
        s.accepted_by_drop = &accepted_by_drop;
        s.pending = &send_pending;
        void *sent_value = s.value;
        rt_task *task = spawn_chan_sender(rt, &s);
        cr_assert(event_wait_for(&send_pending, (unsigned long)i + 1), "round %d", i);
        void *v = NULL;
        cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
        cr_assert_eq(v, V(1));
        rt_task_cancel(task);
        void *result = NULL;
        int rc = task_wait_status(task, WAIT_DEADLINE_NS, &result);
        int trc = rt_chan_try_recv(ch, &v);
        cr_assert_neq(accepted_by_drop, -1,
                      "round %d: a drop after RT_READY changed the send's result", i);
        if (rc == 0) {
            delivered++;
            cr_assert_eq((intptr_t)result, 0, "round %d: send status %d", i, (int)(intptr_t)result);
            cr_assert(!freed_unsent);
            cr_assert_eq(accepted_by_drop, 0, "round %d: the drop claimed a finished send", i);
            cr_assert_eq(trc, 0, "round %d: a completed send's value is not in the channel", i);
            cr_assert_eq(v, sent_value);
            free(v);
        } else if (accepted_by_drop == 1) {
            cr_assert_eq(rc, -ECANCELED);
            accepted++;
            cr_assert(!freed_unsent);
            cr_assert_eq(trc, 0,
                         "round %d: the dropped send's result is 0 but the value is not in "
                         "the channel",
                         i);
            cr_assert_eq(v, sent_value);
            free(v);
        } else {
            cr_assert_eq(rc, -ECANCELED);
            kept++;
            cr_assert(freed_unsent, "round %d", i);
            cr_assert_eq(trc, -EAGAIN,
                         "round %d: the dropped send's result is -ECANCELED but the value "
                         "was delivered (and freed by its owner)",
                         i);
        }
    }
    cr_log_info("send abort vs receive: completed %d, accepted before the drop %d, kept %d",
                delivered, accepted, kept);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

static struct event rdrop_pending = EVENT_INIT;

Test(channel, chan_receiver_dropped_wakes_a_waiting_sender_task_with_epipe)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    cr_assert_eq(rt_chan_try_send(ch, new_msg(0)), 0);
    bool freed_unsent = false;
    struct chan_sender s = {0};
    cr_assert_eq(rt_chan_sender_clone(ch), 0);
    s.ch = ch;
    s.value = new_msg(1);
    s.owns_value = true;
    s.holds_ref = true;
    s.freed_unsent = &freed_unsent;
    s.pending = &rdrop_pending;
    rt_task *task = spawn_chan_sender(rt, &s);
    cr_assert(event_wait_for(&rdrop_pending, 1), "the sender never waited");
    rt_chan_receiver_drop(ch, dispose_free, NULL);
    cr_assert_eq(atomic_load(&disposed_free_count), 1, "the buffered value was not disposed");
    void *result = NULL;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &result), 0);
    cr_assert_eq((intptr_t)result, -EPIPE, "the waiting send ended with %d", (int)(intptr_t)result);
    cr_assert(freed_unsent, "the refused value was not left to its sender");
    cr_assert_eq(atomic_load(&disposed_free_count), 1);
    rt_chan_sender_drop(ch);
    finish_runtime(rt, 0);
}

/* ---- the cooperative budget --------------------------------------------------------- */

#define BUDGET_VALUES 1000

/* On a one-worker runtime: spawns a task that sets a flag, then receives
 * (or sends) BUDGET_VALUES values that are all ready at once, and returns
 * whether the other task ran meanwhile, or -1 on a channel error. */
struct budget_user {
    rt_coro co;
    rt_chan *ch;
    rt_chan_recv recv;
    bool sending;
    int i;
    int status;
    intptr_t result;
    rt_task *other; /* until the join takes it over */
    rt_chan_send op;
    rt_task_join join;
};

static rt_poll budget_user_poll(void *state, rt_context *cx, void **out)
{
    struct budget_user *b = state;
    RT_CORO_BEGIN(&b->co);
    if (rt_spawn(NULL, budget_flag_poll, NULL, NULL, 0, &b->other) != 0)
        RT_RETURN(&b->co, out, (intptr_t)-1);
    b->result = 0;
    for (b->i = 0; b->i < BUDGET_VALUES; b->i++) {
        if (b->sending) {
            rt_chan_send_init(&b->op, b->ch, V(b->i + 1));
            RT_AWAIT(&b->co, cx, &b->op);
            b->status = (int)b->op.result;
        } else {
            rt_chan_recv_init(&b->recv, b->ch);
            RT_AWAIT(&b->co, cx, &b->recv);
            b->status = (int)b->recv.result;
            if (b->recv.value != V(b->i + 1))
                b->result = -1;
        }
        if (b->status != 0)
            b->result = -1;
        if (b->result != 0)
            break;
    }
    if (b->result == 0)
        b->result = atomic_load(&budget_other_ran) ? 1 : 0;
    rt_task_join_init(&b->join, b->other);
    b->other = NULL; /* the join owns the handle now */
    RT_AWAIT(&b->co, cx, &b->join);
    RT_RETURN(&b->co, out, b->result);
    RT_CORO_END(&b->co, out);
}

static void budget_user_drop(void *state)
{
    struct budget_user *b = state;
    RT_DROP(&b->op);
    RT_DROP(&b->recv);
    RT_DROP(&b->join); /* unfinished, it detaches the handle */
    if (b->other != NULL)
        rt_task_drop(b->other);
}

static intptr_t run_budget_case(unsigned budget, bool sending)
{
    atomic_store(&budget_other_ran, false);
    rt_runtime *rt = new_runtime_budget(1, budget);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(BUDGET_VALUES, &ch), 0);
    if (!sending)
        for (int i = 0; i < BUDGET_VALUES; i++)
            cr_assert_eq(rt_chan_try_send(ch, V(i + 1)), 0);
    struct budget_user b = {0};
    b.ch = ch;
    b.sending = sending;
    void *v = V(-5);
    cr_assert_eq(block_on_status(rt, budget_user_poll, budget_user_drop, &b, sizeof b, &v), 0);
    finish_runtime(rt, 0);
    if (sending) {
        cr_assert_eq(rt_chan_len(ch), BUDGET_VALUES);
        for (int i = 0; i < BUDGET_VALUES; i++) {
            void *x = NULL;
            cr_assert_eq(rt_chan_try_recv(ch, &x), 0);
            cr_assert_eq(x, V(i + 1));
        }
    }
    cr_assert_eq(rt_chan_len(ch), 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    return (intptr_t)v;
}

Test(channel, chan_receives_and_sends_spend_the_cooperative_budget)
{
    cr_assert_eq(run_budget_case(0, false), 0,
                 "the other task ran with the budget off (the test is blind)");
    cr_assert_eq(run_budget_case(128, false), 1,
                 "1000 ready receives never let the other task run");
    cr_assert_eq(run_budget_case(0, true), 0,
                 "the other task ran with the budget off (the test is blind)");
    cr_assert_eq(run_budget_case(128, true), 1, "1000 ready sends never let the other task run");
}

/* ---- shutdown ------------------------------------------------------------------------ */

#define SHUT_SENDERS 8
static struct event shut_pending = EVENT_INIT;
static struct event shut_dropped = EVENT_INIT;

Test(channel, shutdown_while_senders_and_receivers_wait_releases_everything)
{
    rt_runtime *rt = new_runtime(2);
    /* ch1: full, with sender tasks waiting on it. */
    rt_chan *ch1 = NULL;
    cr_assert_eq(rt_chan_new(1, &ch1), 0);
    cr_assert_eq(rt_chan_try_send(ch1, new_msg(0)), 0);
    bool freed[SHUT_SENDERS];
    memset(freed, 0, sizeof freed);
    for (int i = 0; i < SHUT_SENDERS; i++) {
        struct chan_sender s = {0};
        cr_assert_eq(rt_chan_sender_clone(ch1), 0);
        s.ch = ch1;
        s.value = new_msg(i + 1);
        s.owns_value = true;
        s.holds_ref = true;
        s.freed_unsent = &freed[i];
        s.pending = &shut_pending;
        s.dropped = &shut_dropped;
        rt_task_drop(spawn_chan_sender(rt, &s));
    }
    /* ch2: empty, its receiver owned by a waiting task. */
    rt_chan *ch2 = NULL;
    cr_assert_eq(rt_chan_new(1, &ch2), 0);
    struct chan_receiver r = {0};
    r.ch = ch2;
    r.owns_receiver = true;
    r.pending = &shut_pending;
    r.dropped = &shut_dropped;
    rt_task_drop(spawn_chan_receiver(rt, &r));
    /* A oneshot whose receiver is owned by a waiting task. */
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    struct oneshot_receiver orc = {0};
    orc.o = o;
    orc.owns_receiver = true;
    orc.pending = &shut_pending;
    orc.dropped = &shut_dropped;
    cr_assert_eq(RT_SPAWN_STATE(rt, oneshot_receiver_poll, oneshot_receiver_drop, &orc, NULL), 0);

    const int waiting = SHUT_SENDERS + 2;
    cr_assert(event_wait_for(&shut_pending, (unsigned long)waiting), "only %lu of %d waited",
              event_count(&shut_pending), waiting);
    finish_runtime(rt, waiting);
    cr_assert_eq(event_count(&shut_dropped), (unsigned long)waiting);
    for (int i = 0; i < SHUT_SENDERS; i++)
        cr_assert(freed[i], "sender %d's value was not left to it", i);
    /* ch1 holds just its one buffered value; no ghost sender waits. */
    cr_assert_eq(rt_chan_len(ch1), 1);
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch1, &v), 0);
    cr_assert_eq(((struct msg *)v)->seq, 0);
    free(v);
    cr_assert_eq(rt_chan_try_send(ch1, new_msg(50)), 0, "a cancelled sender still waits");
    rt_chan_sender_drop(ch1);
    rt_chan_receiver_drop(ch1, dispose_free, NULL);
    cr_assert_eq(atomic_load(&disposed_free_count), 1);
    /* ch2's receiver was released by the cancelled task. */
    struct msg *m = new_msg(60);
    cr_assert_eq(rt_chan_try_send(ch2, m), -EPIPE);
    free(m);
    rt_chan_sender_drop(ch2);
    /* So was the oneshot's. */
    m = new_msg(70);
    cr_assert_eq(rt_oneshot_send(o, m), -EPIPE);
    free(m);
}
