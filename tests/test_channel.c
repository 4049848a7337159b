/* Black-box tests of asyncrt/channel.h: the oneshot channel (send and
 * receive, either side dropped first, the unreceived value handed back,
 * try/blocking forms, a send racing the receiver's drop) and the bounded
 * multi-producer channel (argument checking, FIFO order, backpressure, FIFO
 * service of waiting senders that a try_send never overtakes, many producers
 * of both kinds delivering every message exactly once and in order, end of
 * stream, close, the receiver's drop disposing of buffered values, aborted
 * receives and sends losing or duplicating nothing, the blocking forms, the
 * cooperative budget, and shutdown while senders and receivers wait).
 * Values that own memory are malloc'd so that AddressSanitizer catches a
 * value freed twice or never. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#define TEST_WANT_COUNTING_WAKER /* the shared counting user waker */
#include "support.h"

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

#define MS (1000000LL)
#define SEC (1000000000LL)

/* Seconds any wait for an event may take before the test reports a hang. */
#define EVENT_DEADLINE_S 30
/* The same bound, for rt_task_wait calls that must not hang the suite. */
#define WAIT_DEADLINE_NS (30LL * SEC)

TestSuite(channel, .timeout = 120, .fini = fail_on_leaks);

/* A plain token value (never dereferenced). */
#define V(x) ((void *)(uintptr_t)(x))
/* What the receiver tasks below return at end of stream. */
#define EPIPE_TOKEN V(0xE919E)

/* ---- helpers ----------------------------------------------------------- */

static rt_context noop_context(void)
{
    return rt_context_from_waker(rt_waker_noop());
}

/* A heap value: AddressSanitizer sees it leaked or freed twice. */
struct msg {
    int seq;
};

static struct msg *new_msg(int seq)
{
    struct msg *m = malloc(sizeof *m);
    cr_assert_not_null(m);
    m->seq = seq;
    return m;
}

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

static atomic_int disposed_free_count;

static void dispose_free(void *value, void *arg)
{
    (void)arg;
    atomic_fetch_add(&disposed_free_count, 1);
    free(value);
}

/* ---- tasks --------------------------------------------------------------- */

/* Sends one value with a send operation. owns_value: the value is a heap
 * value the task frees unless it was sent (then it is the channel's): the
 * send's poll said so, or rt_chan_send_drop returned 1 (recorded in
 * *accepted_by_drop); the drop records in *freed_unsent that it freed an
 * unsent value. holds_ref:
 * the task owns a sender reference, given back when it finishes or is
 * dropped. Returns the send's status. */
struct chan_sender {
    rt_coro co;
    rt_chan *ch;
    void *value;
    bool owns_value;
    bool holds_ref;
    bool announced;
    int status;
    bool *freed_unsent;
    int *accepted_by_drop; /* set to 1 when rt_chan_send_drop returned 1 */
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
    RT_AWAIT(&s->co,
             announce(rt_chan_send_poll(&s->op, cx, &s->status), &s->announced, s->pending));
    if (s->status == 0)
        s->owns_value = false; /* the channel's now */
    RT_RETURN(&s->co, out, (intptr_t)s->status);
    RT_CORO_END(&s->co, out);
}

static void chan_sender_drop(void *state)
{
    struct chan_sender *s = state;
    int accepted = rt_chan_send_drop(&s->op);
    if (accepted == 1) {
        /* A receive moved the value into the channel just before the drop:
         * it is the receiver side's now. */
        if (!s->owns_value && s->accepted_by_drop != NULL)
            *s->accepted_by_drop = -1; /* accepted twice: report it */
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
    cr_assert_eq(RT_SPAWN(rt, chan_sender_poll, chan_sender_drop, s, &task), 0);
    return task;
}

/* Receives one value; returns it, or EPIPE_TOKEN at end of stream. With
 * owns_receiver it releases the receiver in its drop (disposing of buffered
 * values with dispose_free). */
struct chan_receiver {
    rt_coro co;
    rt_chan *ch;
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
    RT_AWAIT(&r->co,
             announce(rt_chan_recv(r->ch, cx, &r->value, &r->status), &r->announced, r->pending));
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
    if (r->owns_receiver)
        rt_chan_receiver_drop(r->ch, dispose_free, NULL);
    r->owns_receiver = false;
    if (r->dropped != NULL)
        event_signal(r->dropped);
}

static rt_task *spawn_chan_receiver(rt_runtime *rt, struct chan_receiver *r)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, chan_receiver_poll, chan_receiver_drop, r, &task), 0);
    return task;
}

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
    void *v = V(1);
    int st = 1;
    cr_assert_eq(rt_oneshot_recv(o, &h.cx, &v, &st), RT_PENDING);
    cr_assert_eq(rt_oneshot_recv(o, &h.cx, &v, &st), RT_PENDING);
    cr_assert_eq(counting_wakes(&h.w), 0);
    cr_assert_eq(rt_oneshot_send(o, V(5)), 0);
    cr_assert_eq(counting_wakes(&h.w), 1, "the receiver was woken %ld times", counting_wakes(&h.w));
    cr_assert_eq(rt_oneshot_recv(o, &h.cx, &v, &st), RT_READY);
    cr_assert_eq(st, 0);
    cr_assert_eq(v, V(5));
    v = V(1);
    st = 1;
    cr_assert_eq(rt_oneshot_recv(o, &h.cx, &v, &st), RT_READY, "a later poll is not ready again");
    cr_assert_null(v, "the value was handed out twice");
    cr_assert_eq(st, -EALREADY);
    cr_assert_eq(rt_oneshot_recv(o, &h.cx, NULL, NULL), RT_READY);
    void *u = V(1);
    cr_assert_eq(rt_oneshot_receiver_drop(o, &u), 0);
    cr_assert_null(u);
    cr_assert_eq(counting_outstanding(&h.w), 0, "a waker reference was not given back");
}

Test(channel, oneshot_sender_dropped_without_sending_gives_epipe)
{
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    struct hand h;
    hand_init(&h);
    void *v = NULL;
    int st = 1;
    cr_assert_eq(rt_oneshot_recv(o, &h.cx, &v, &st), RT_PENDING);
    rt_oneshot_sender_drop(o);
    cr_assert_eq(counting_wakes(&h.w), 1, "the receiver was not woken by the sender's drop");
    cr_assert_eq(rt_oneshot_recv(o, &h.cx, &v, &st), RT_READY);
    cr_assert_eq(st, -EPIPE);
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

    /* A receiver that was waiting gives its waker back when dropped. */
    struct hand h;
    hand_init(&h);
    cr_assert_eq(rt_oneshot_new(&o), 0);
    cr_assert_eq(rt_oneshot_recv(o, &h.cx, NULL, NULL), RT_PENDING);
    cr_assert_eq(rt_oneshot_receiver_drop(o, &u), 0);
    m = new_msg(2);
    cr_assert_eq(rt_oneshot_send(o, m), -EPIPE);
    free(m);
    cr_assert_eq(counting_outstanding(&h.w), 0, "the dropped receiver's waker was kept");
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
    cr_assert_eq(rt_oneshot_recv_blocking(o, 20 * MS, &v), -ETIMEDOUT);
    int64_t took = rt_now_ns() - t0;
    cr_assert_geq(took, 20 * MS, "timed out after only %lld us", (long long)(took / 1000));
    cr_assert_eq(rt_oneshot_recv_blocking(o, 0, &v), -ETIMEDOUT);
    struct oneshot_send_task t = {o, V(77)};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, oneshot_send_task_poll, NULL, &t, &task), 0);
    cr_assert_eq(rt_oneshot_recv_blocking(o, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq(v, V(77));
    void *sent_rc = V(1);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, &sent_rc), 0);
    cr_assert_eq((intptr_t)sent_rc, 0);
    cr_assert_eq(rt_oneshot_recv_blocking(o, 0, &v), -EALREADY);
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);

    /* The sender dropped by a task: -EPIPE. */
    cr_assert_eq(rt_oneshot_new(&o), 0);
    t.o = o;
    t.value = NULL;
    cr_assert_eq(RT_SPAWN(rt, oneshot_send_task_poll, NULL, &t, &task), 0);
    cr_assert_eq(rt_oneshot_recv_blocking(o, WAIT_DEADLINE_NS, &v), -EPIPE);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);
    finish_runtime(rt, 0);
}

/* Receives in a task, then polls again and records both answers. */
struct oneshot_result {
    int status;
    void *value;
    rt_poll again;
    int again_status;
    void *again_value;
};

struct oneshot_receiver {
    rt_coro co;
    rt_oneshot *o;
    bool owns_receiver;
    bool announced;
    void *value;
    int status;
    struct oneshot_result *res;
    struct event *pending;
    struct event *dropped;
};

static rt_poll oneshot_receiver_poll(void *state, rt_context *cx, void **out)
{
    struct oneshot_receiver *r = state;
    RT_CORO_BEGIN(&r->co);
    RT_AWAIT(&r->co,
             announce(rt_oneshot_recv(r->o, cx, &r->value, &r->status), &r->announced, r->pending));
    if (r->res != NULL) {
        r->res->status = r->status;
        r->res->value = r->value;
        r->res->again_value = V(1);
        r->res->again_status = 1;
        r->res->again = rt_oneshot_recv(r->o, cx, &r->res->again_value, &r->res->again_status);
    }
    RT_RETURN(&r->co, out, r->value);
    RT_CORO_END(&r->co, out);
}

static void oneshot_receiver_drop(void *state)
{
    struct oneshot_receiver *r = state;
    if (r->owns_receiver) {
        void *u = NULL;
        if (rt_oneshot_receiver_drop(r->o, &u) == 1)
            free(u);
    }
    r->owns_receiver = false;
    if (r->dropped != NULL)
        event_signal(r->dropped);
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
    cr_assert_eq(RT_SPAWN(rt, oneshot_receiver_poll, oneshot_receiver_drop, &r, &task), 0);
    cr_assert(event_wait_for(&os_pending, 1), "the receiver never waited");
    cr_assert_eq(rt_oneshot_send(o, V(0xAB)), 0);
    void *v = NULL;
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq(v, V(0xAB));
    cr_assert_eq(res.status, 0);
    cr_assert_eq(res.value, V(0xAB));
    cr_assert_eq(res.again, RT_READY);
    cr_assert_eq(res.again_status, -EALREADY);
    cr_assert_null(res.again_value);
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
    cr_assert_eq(RT_SPAWN(rt, oneshot_receiver_poll, oneshot_receiver_drop, &r, &task), 0);
    cr_assert(event_wait_for(&os_pending, 1), "the receiver never waited");
    rt_task_abort(task);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
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
    cr_assert_eq(rt_chan_send_drop(&op), 0);
    cr_assert_eq(rt_chan_send_drop(&op), 0);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    /* Initialised but never polled: dropping it sends nothing. */
    cr_assert_eq(rt_chan_send_init(&op, ch, V(1)), 0);
    cr_assert_eq(rt_chan_send_drop(&op), 0);
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
    int st = 1;
    cr_assert_eq(rt_chan_send_init(&op, ch, V(0xC)), 0);
    cr_assert_eq(rt_chan_send_poll(&op, &h.cx, &st), RT_PENDING);
    cr_assert_eq(rt_chan_send_poll(&op, &h.cx, &st), RT_PENDING);
    cr_assert_eq(counting_wakes(&h.w), 0);
    cr_assert_eq(rt_chan_try_send(ch, V(0xD)), -EAGAIN);
    cr_assert_eq(rt_chan_len(ch), 1);
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(0xA));
    cr_assert_eq(counting_wakes(&h.w), 1, "the waiting sender was not woken by the receive");
    cr_assert_eq(rt_chan_try_send(ch, V(0xD)), -EAGAIN, "try_send overtook the waiting sender");
    cr_assert_eq(rt_chan_send_poll(&op, &h.cx, &st), RT_READY);
    cr_assert_eq(st, 0);
    cr_assert_eq(rt_chan_send_drop(&op), 0, "drop after RT_READY must report 0");
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
    int st[N + 1];
    for (int i = 1; i <= N; i++) {
        hand_init(&h[i]);
        cr_assert_eq(rt_chan_send_init(&op[i], ch, V(100 + i)), 0);
        cr_assert_eq(rt_chan_send_poll(&op[i], &h[i].cx, &st[i]), RT_PENDING);
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
            cr_assert_eq(rt_chan_send_poll(&op[i], &h[i].cx, &st[i]), RT_PENDING,
                         "sender %d overtook sender %d", i, k);
        cr_assert_eq(rt_chan_send_poll(&op[k], &h[k].cx, &st[k]), RT_READY, "sender %d", k);
        cr_assert_eq(st[k], 0);
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
    int st = 1;
    cr_assert_eq(rt_chan_send_init(&op1, ch, V(2)), 0);
    cr_assert_eq(rt_chan_send_init(&op2, ch, V(3)), 0);
    cr_assert_eq(rt_chan_send_poll(&op1, &h1.cx, &st), RT_PENDING);
    cr_assert_eq(rt_chan_send_poll(&op2, &h2.cx, &st), RT_PENDING);
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(1));
    cr_assert_eq(counting_wakes(&h1.w), 1);
    /* op1 is dropped before its poll reports: the drop says whether its
     * value went in, and the channel agrees. */
    int accepted = rt_chan_send_drop(&op1);
    cr_assert(accepted == 0 || accepted == 1, "rt_chan_send_drop returned %d", accepted);
    cr_assert_eq(rt_chan_send_drop(&op1), 0, "a second drop must report 0");
    if (accepted == 1) {
        cr_assert_eq(rt_chan_len(ch), 1);
        cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
        cr_assert_eq(v, V(2), "drop reported 1 but the channel holds %p", v);
    } else {
        /* Not sent: the room it leaves goes to the next waiting sender. */
        cr_assert_eq(counting_wakes(&h2.w), 1, "the next sender was not served");
    }
    cr_assert_eq(rt_chan_send_poll(&op2, &h2.cx, &st), RT_READY);
    cr_assert_eq(st, 0);
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(3));
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN, "an extra value is buffered");
    cr_assert_eq(counting_outstanding(&h1.w), 0);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
    cr_log_info("rt_chan_send_drop after a receive made room: %d", accepted);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

Test(channel, chan_recv_polled_by_hand_wakes_only_the_latest_waker)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    struct hand h1, h2;
    hand_init(&h1);
    hand_init(&h2);
    void *v = V(1);
    int st = 1;
    cr_assert_eq(rt_chan_recv(ch, &h1.cx, &v, &st), RT_PENDING);
    cr_assert_eq(rt_chan_recv(ch, &h2.cx, &v, &st), RT_PENDING);
    cr_assert_eq(counting_outstanding(&h1.w), 0, "the replaced waker was not released");
    cr_assert_eq(rt_chan_try_send(ch, V(0x77)), 0);
    cr_assert_eq(counting_wakes(&h2.w), 1);
    cr_assert_eq(counting_wakes(&h1.w), 0, "the replaced waker was woken");
    cr_assert_eq(rt_chan_recv(ch, &h2.cx, &v, &st), RT_READY);
    cr_assert_eq(st, 0);
    cr_assert_eq(v, V(0x77));
    cr_assert_eq(rt_chan_recv(ch, &h2.cx, NULL, NULL), RT_PENDING);
    cr_assert_eq(rt_chan_try_send(ch, V(0x78)), 0);
    cr_assert_eq(rt_chan_recv(ch, &h2.cx, NULL, NULL), RT_READY, "value and status may be NULL");
    cr_assert_eq(rt_chan_len(ch), 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    cr_assert_eq(counting_outstanding(&h2.w), 0);
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
    cr_assert_eq(rt_chan_recv(ch, &cx, &v, &st), RT_READY);
    cr_assert_eq(st, 0);
    cr_assert_eq(v, V(3));
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EPIPE);
    v = V(1);
    cr_assert_eq(rt_chan_recv(ch, &cx, &v, &st), RT_READY);
    cr_assert_eq(st, -EPIPE);
    cr_assert_null(v, "end of stream must give a NULL value");
    cr_assert_eq(rt_chan_recv(ch, &cx, &v, &st), RT_READY);
    cr_assert_eq(st, -EPIPE);
    cr_assert_eq(rt_chan_recv_blocking(ch, 0, &v), -EPIPE);
    rt_chan_receiver_drop(ch, NULL, NULL);

    /* A waiting receiver is woken by the last sender's drop, not before. */
    struct hand h;
    hand_init(&h);
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    cr_assert_eq(rt_chan_sender_clone(ch), 0);
    cr_assert_eq(rt_chan_recv(ch, &h.cx, &v, &st), RT_PENDING);
    rt_chan_sender_drop(ch);
    cr_assert_eq(counting_wakes(&h.w), 0, "woken while a sender remained");
    cr_assert_eq(rt_chan_recv(ch, &h.cx, &v, &st), RT_PENDING);
    rt_chan_sender_drop(ch);
    cr_assert_eq(counting_wakes(&h.w), 1,
                 "the waiting receiver was not woken by the last sender's drop");
    cr_assert_eq(rt_chan_recv(ch, &h.cx, &v, &st), RT_READY);
    cr_assert_eq(st, -EPIPE);
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
    b->rc = rt_chan_send_blocking(b->ch, b->m, b->timeout);
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
    int stb = 1, stc = 1;
    cr_assert_eq(rt_chan_send_init(&sb, ch, b), 0);
    cr_assert_eq(rt_chan_send_init(&sc, ch, c), 0);
    cr_assert_eq(rt_chan_send_poll(&sb, &hb.cx, &stb), RT_PENDING);
    cr_assert_eq(rt_chan_send_poll(&sc, &hc.cx, &stc), RT_PENDING);

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
    cr_assert_eq(rt_chan_send_poll(&sb, &hb.cx, &stb), RT_READY);
    cr_assert_eq(stb, -EPIPE);
    cr_assert_eq(rt_chan_send_poll(&sc, &hc.cx, &stc), RT_READY);
    cr_assert_eq(stc, -EPIPE);
    free(b); /* refused: still ours */
    free(c);
    pthread_join(thread, NULL);
    cr_assert_eq(bs.rc, -EPIPE, "the blocked sender got %s", rt_strerror(bs.rc));
    cr_assert_eq(rt_chan_try_send(ch, d), -EPIPE);
    free(d);
    cr_assert_eq(rt_chan_send_blocking(ch, V(6), 0), -EPIPE);
    rt_chan_send se;
    int ste = 1;
    rt_context cx = noop_context();
    cr_assert_eq(rt_chan_send_init(&se, ch, V(7)), 0);
    cr_assert_eq(rt_chan_send_poll(&se, &cx, &ste), RT_READY);
    cr_assert_eq(ste, -EPIPE);

    /* What was buffered before the close is still received, then -EPIPE. */
    cr_assert_eq(rt_chan_len(ch), 1);
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, a);
    free(a);
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EPIPE, "a closed, drained channel is not at its end");
    int st = 1;
    cr_assert_eq(rt_chan_recv(ch, &cx, &v, &st), RT_READY);
    cr_assert_eq(st, -EPIPE);
    cr_assert_eq(rt_chan_recv_blocking(ch, WAIT_DEADLINE_NS, &v), -EPIPE);
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
    int st = 1;
    cr_assert_eq(rt_chan_send_init(&op, ch, waiting), 0);
    cr_assert_eq(rt_chan_send_poll(&op, &h.cx, &st), RT_PENDING);

    struct disposal d;
    memset(&d, 0, sizeof d);
    rt_chan_receiver_drop(ch, dispose_record, &d);
    cr_assert_eq(d.count, 4, "dispose ran %d times", d.count);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(d.seqs[i], i + 1, "disposal %d was of value %d", i, d.seqs[i]);
    cr_assert_eq(d.arg_seen, &d);
    cr_assert_eq(counting_wakes(&h.w), 1,
                 "the waiting sender was not woken by the receiver's drop");
    cr_assert_eq(rt_chan_send_poll(&op, &h.cx, &st), RT_READY);
    cr_assert_eq(st, -EPIPE);
    free(waiting); /* refused: still ours, and not disposed */
    struct msg *late = new_msg(100);
    cr_assert_eq(rt_chan_try_send(ch, late), -EPIPE);
    free(late);
    cr_assert_eq(counting_outstanding(&h.w), 0);
    rt_chan_sender_drop(ch);
    rt_chan_sender_drop(ch);
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
    int status;
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
        RT_AWAIT(&p->co, rt_chan_send_poll(&p->op, cx, &p->status));
        if (p->status != 0) {
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
    rt_chan_send_drop(&p->op);
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
        int rc = rt_chan_send_blocking(t->ch, ENCODE(t->id, seq), WAIT_DEADLINE_NS);
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
    void *v;
    int status;
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
        RT_AWAIT(&c->co, rt_chan_recv(c->ch, cx, &c->v, &c->status));
        if (c->status != 0)
            break;
        mp_tally_one(c->tally, c->v);
    }
    c->tally->last_status = c->status;
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
    cr_assert_eq(RT_SPAWN(rt, mp_consumer_poll, NULL, &c, &consumer), 0);
    rt_task *tasks[MP_TASKS];
    for (int i = 0; i < MP_TASKS; i++) {
        cr_assert_eq(rt_chan_sender_clone(ch), 0);
        struct mp_producer p = {0};
        p.ch = ch;
        p.id = (uint32_t)i;
        p.count = MP_MSGS;
        p.holds_ref = true;
        cr_assert_eq(RT_SPAWN(rt, mp_producer_poll, mp_producer_drop, &p, &tasks[i]), 0);
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
        cr_assert_eq(rt_task_wait(tasks[i], WAIT_DEADLINE_NS, NULL), 0);
    for (int i = 0; i < MP_THREADS; i++)
        pthread_join(threads[i], NULL);
    cr_assert_eq(rt_task_wait(consumer, WAIT_DEADLINE_NS, NULL), 0,
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
    cr_assert_eq(RT_SPAWN(rt, mp_producer_poll, mp_producer_drop, &p, &task), 0);
    for (uint32_t seq = 0; seq < COUNT; seq++) {
        void *v = NULL;
        int rc = rt_chan_recv_blocking(ch, WAIT_DEADLINE_NS, &v);
        cr_assert_eq(rc, 0, "receive %u: %s", seq, rt_strerror(rc));
        cr_assert_eq(DECODE_ID(v), 0);
        cr_assert_eq(DECODE_SEQ(v), seq, "got %u where %u was due", DECODE_SEQ(v), seq);
    }
    void *v = V(1);
    cr_assert_eq(rt_chan_recv_blocking(ch, WAIT_DEADLINE_NS, &v), -EPIPE);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(atomic_load(&mp_send_errors), 0);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* ---- mpsc: blocking forms -------------------------------------------------------- */

Test(channel, chan_blocking_forms_time_out_without_sending_or_receiving)
{
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    void *v = V(1);
    int64_t t0 = rt_now_ns();
    cr_assert_eq(rt_chan_recv_blocking(ch, 20 * MS, &v), -ETIMEDOUT);
    int64_t took = rt_now_ns() - t0;
    cr_assert_geq(took, 20 * MS, "timed out after only %lld us", (long long)(took / 1000));
    cr_assert_eq(rt_chan_recv_blocking(ch, 0, &v), -ETIMEDOUT);
    cr_assert_eq(rt_chan_try_send(ch, V(1)), 0);
    t0 = rt_now_ns();
    cr_assert_eq(rt_chan_send_blocking(ch, V(2), 20 * MS), -ETIMEDOUT);
    took = rt_now_ns() - t0;
    cr_assert_geq(took, 20 * MS, "timed out after only %lld us", (long long)(took / 1000));
    cr_assert_eq(rt_chan_send_blocking(ch, V(2), 0), -ETIMEDOUT);
    cr_assert_eq(rt_chan_len(ch), 1);
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, V(1));
    cr_assert_eq(rt_chan_try_recv(ch, &v), -EAGAIN, "a timed-out send was delivered");
    /* The timed-out sender left the queue: a try_send is not refused. */
    cr_assert_eq(rt_chan_try_send(ch, V(3)), 0, "a timed-out sender still blocks try_send");
    cr_assert_eq(rt_chan_recv_blocking(ch, 0, &v), 0);
    cr_assert_eq(v, V(3));
    cr_assert_eq(rt_chan_send_blocking(ch, V(4), 0), 0);
    cr_assert_eq(rt_chan_recv_blocking(ch, -1, &v), 0);
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
    p->chan_recv_rc = rt_chan_recv_blocking(p->ch, 50 * MS, &v);
    p->chan_send_rc = rt_chan_send_blocking(p->ch, V(2), 50 * MS);
    p->oneshot_rc = rt_oneshot_recv_blocking(p->o, 50 * MS, &v);
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
    cr_assert_eq(rt_block_on(rt, chan_deadlock_probe_poll, NULL, &pp, sizeof pp, NULL), 0);
    cr_assert_eq(p.chan_recv_rc, -EDEADLK, "rt_chan_recv_blocking: %s",
                 rt_strerror(p.chan_recv_rc));
    cr_assert_eq(p.chan_send_rc, -EDEADLK, "rt_chan_send_blocking: %s",
                 rt_strerror(p.chan_send_rc));
    cr_assert_eq(p.oneshot_rc, -EDEADLK, "rt_oneshot_recv_blocking: %s", rt_strerror(p.oneshot_rc));
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
    rt_task_abort(task);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(rt_chan_try_send(ch, V(0x51)), 0);
    cr_assert_eq(rt_chan_len(ch), 1, "the message went to the aborted receive");
    /* A new receiver gets it. */
    struct chan_receiver r2 = {0};
    r2.ch = ch;
    task = spawn_chan_receiver(rt, &r2);
    void *v = NULL;
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, &v), 0);
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
        rt_task_abort(task);
        void *v = NULL;
        int rc = rt_task_wait(task, WAIT_DEADLINE_NS, &v);
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
    int st = 1;
    cr_assert_eq(rt_chan_send_init(&op, ch, V(3)), 0);
    cr_assert_eq(rt_chan_send_poll(&op, &h.cx, &st), RT_PENDING);
    rt_task_abort(task);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(freed_unsent, "rt_chan_send_drop said a send nobody received from was accepted");
    void *v = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &v), 0);
    cr_assert_eq(v, first);
    free(first);
    cr_assert_eq(counting_wakes(&h.w), 1, "the sender behind the aborted one was not served");
    cr_assert_eq(rt_chan_send_poll(&op, &h.cx, &st), RT_READY);
    cr_assert_eq(st, 0);
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

Test(channel, chan_send_aborted_racing_a_receive_leaves_the_value_where_send_drop_says)
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
        rt_task_abort(task);
        void *result = NULL;
        int rc = rt_task_wait(task, WAIT_DEADLINE_NS, &result);
        int trc = rt_chan_try_recv(ch, &v);
        cr_assert_neq(accepted_by_drop, -1,
                      "round %d: rt_chan_send_drop returned 1 after "
                      "RT_READY",
                      i);
        if (rc == 0) {
            delivered++;
            cr_assert_eq((intptr_t)result, 0, "round %d: send status %d", i, (int)(intptr_t)result);
            cr_assert(!freed_unsent);
            cr_assert_eq(accepted_by_drop, 0, "round %d: drop after RT_READY returned 1", i);
            cr_assert_eq(trc, 0, "round %d: a completed send's value is not in the channel", i);
            cr_assert_eq(v, sent_value);
            free(v);
        } else if (accepted_by_drop == 1) {
            cr_assert_eq(rc, -ECANCELED);
            accepted++;
            cr_assert(!freed_unsent);
            cr_assert_eq(trc, 0,
                         "round %d: rt_chan_send_drop returned 1 but the value is not in "
                         "the channel",
                         i);
            cr_assert_eq(v, sent_value);
            free(v);
        } else {
            cr_assert_eq(rc, -ECANCELED);
            kept++;
            cr_assert(freed_unsent, "round %d", i);
            cr_assert_eq(trc, -EAGAIN,
                         "round %d: rt_chan_send_drop returned 0 but the value was delivered "
                         "(and freed by its owner)",
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
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, &result), 0);
    cr_assert_eq((intptr_t)result, -EPIPE, "the waiting send ended with %d", (int)(intptr_t)result);
    cr_assert(freed_unsent, "the refused value was not left to its sender");
    cr_assert_eq(atomic_load(&disposed_free_count), 1);
    rt_chan_sender_drop(ch);
    finish_runtime(rt, 0);
}

/* ---- the cooperative budget --------------------------------------------------------- */

static atomic_bool budget_other_ran;

static rt_poll budget_flag_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    atomic_store(&budget_other_ran, true);
    *out = NULL;
    return RT_READY;
}

#define BUDGET_VALUES 1000

/* On a one-worker runtime: spawns a task that sets a flag, then receives
 * (or sends) BUDGET_VALUES values that are all ready at once, and returns
 * whether the other task ran meanwhile, or -1 on a channel error. */
struct budget_user {
    rt_coro co;
    rt_chan *ch;
    bool sending;
    int i;
    int status;
    intptr_t result;
    void *v;
    rt_task *other;
    rt_chan_send op;
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
            RT_AWAIT(&b->co, rt_chan_send_poll(&b->op, cx, &b->status));
        } else {
            RT_AWAIT(&b->co, rt_chan_recv(b->ch, cx, &b->v, &b->status));
            if (b->v != V(b->i + 1))
                b->result = -1;
        }
        if (b->status != 0)
            b->result = -1;
        if (b->result != 0)
            break;
    }
    if (b->result == 0)
        b->result = atomic_load(&budget_other_ran) ? 1 : 0;
    RT_AWAIT(&b->co, rt_task_join(b->other, cx, NULL, NULL));
    b->other = NULL;
    RT_RETURN(&b->co, out, b->result);
    RT_CORO_END(&b->co, out);
}

static void budget_user_drop(void *state)
{
    struct budget_user *b = state;
    rt_chan_send_drop(&b->op);
    if (b->other != NULL)
        rt_task_detach(b->other);
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
    cr_assert_eq(rt_block_on(rt, budget_user_poll, budget_user_drop, &b, sizeof b, &v), 0);
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
        rt_task_detach(spawn_chan_sender(rt, &s));
    }
    /* ch2: empty, its receiver owned by a waiting task. */
    rt_chan *ch2 = NULL;
    cr_assert_eq(rt_chan_new(1, &ch2), 0);
    struct chan_receiver r = {0};
    r.ch = ch2;
    r.owns_receiver = true;
    r.pending = &shut_pending;
    r.dropped = &shut_dropped;
    rt_task_detach(spawn_chan_receiver(rt, &r));
    /* A oneshot whose receiver is owned by a waiting task. */
    rt_oneshot *o = NULL;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    struct oneshot_receiver orc = {0};
    orc.o = o;
    orc.owns_receiver = true;
    orc.pending = &shut_pending;
    orc.dropped = &shut_dropped;
    cr_assert_eq(RT_SPAWN(rt, oneshot_receiver_poll, oneshot_receiver_drop, &orc, NULL), 0);

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
