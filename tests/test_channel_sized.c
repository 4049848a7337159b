/* Channels of fixed-size values: structs copied in and out without a malloc,
 * in order, each to exactly one receiver, through the try, blocking and
 * operation forms, a waiting sender's bytes handed in when room is made, and
 * what is left buffered at the end handed to dispose. */
#include "support.h"

TestSuite(channel_sized, .fini = fail_on_leaks);

/* A value bigger than a pointer, with a check that catches a torn copy. */
struct sample {
    uint64_t seq;
    double reading;
    char tag[12];
    uint32_t check; /* seq ^ 0xA5A5A5A5 */
};

static struct sample sample_of(uint64_t seq)
{
    struct sample s = {
        .seq = seq, .reading = (double)seq / 4, .check = (uint32_t)seq ^ 0xA5A5A5A5u};
    snprintf(s.tag, sizeof s.tag, "s%llu", (unsigned long long)(seq % 100000));
    return s;
}

static void assert_sample(const struct sample *s, uint64_t seq)
{
    struct sample want = sample_of(seq);
    cr_assert_eq(memcmp(s, &want, sizeof want), 0, "value %llu arrived torn or out of order",
                 (unsigned long long)seq);
}

Test(channel_sized, bad_sizes_and_mismatched_forms_are_einval)
{
    rt_chan *ch;
    cr_assert_eq(rt_chan_new_sized(4, 0, &ch), -EINVAL);
    cr_assert_eq(rt_chan_new_sized(4, RT_CHAN_VALUE_MAX + 1, &ch), -EINVAL);
    cr_assert_eq(rt_chan_new_sized(0, 8, &ch), -EINVAL);
    cr_assert_eq(rt_chan_new_sized(4, sizeof(struct sample), NULL), -EINVAL);
    cr_assert_eq(rt_chan_new_sized(4, sizeof(struct sample), &ch), 0);
    cr_assert_eq(rt_chan_value_size(ch), sizeof(struct sample));
    cr_assert_eq(rt_chan_value_size(NULL), 0);
    /* The `void *` forms refuse a channel of structs. */
    cr_assert_eq(rt_chan_try_send(ch, NULL), -EINVAL);
    void *p = &p;
    cr_assert_eq(rt_chan_try_recv(ch, &p), -EINVAL);
    cr_assert_null(p);
    cr_assert_eq(rt_chan_send_wait(ch, NULL, 0), -EINVAL);
    cr_assert_eq(rt_chan_recv_wait(ch, 0, NULL), -EINVAL);
    rt_chan_send tx;
    cr_assert_eq(rt_chan_send_init(&tx, ch, NULL), -EINVAL);
    cr_assert(rt_future_is_done(&tx.future));
    cr_assert_eq(tx.result, -EINVAL);
    rt_chan_recv rx;
    cr_assert_eq(rt_chan_recv_init(&rx, ch), -EINVAL);
    cr_assert_eq(rx.result, -EINVAL);
    cr_assert_eq(rt_chan_send_copy_init(&tx, ch, NULL), -EINVAL);
    cr_assert_eq(rt_chan_recv_into_init(&rx, ch, NULL), -EINVAL);
    cr_assert_eq(rt_chan_try_send_copy(ch, NULL), -EINVAL);
    cr_assert_eq(rt_chan_try_send_copy(NULL, &p), -EINVAL);
    cr_assert_eq(rt_chan_try_recv_into(NULL, &p), -EINVAL);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

Test(channel_sized, try_forms_copy_whole_values_in_order)
{
    rt_chan *ch;
    cr_assert_eq(rt_chan_new_sized(3, sizeof(struct sample), &ch), 0);
    for (uint64_t i = 0; i < 3; i++) {
        struct sample s = sample_of(i);
        cr_assert_eq(rt_chan_try_send_copy(ch, &s), 0);
        memset(&s, 0xff, sizeof s); /* the channel has its own copy */
    }
    struct sample extra = sample_of(9);
    cr_assert_eq(rt_chan_try_send_copy(ch, &extra), -EAGAIN);
    cr_assert_eq(rt_chan_len(ch), 3);
    for (uint64_t i = 0; i < 3; i++) {
        struct sample got;
        cr_assert_eq(rt_chan_try_recv_into(ch, &got), 0);
        assert_sample(&got, i);
    }
    struct sample none;
    cr_assert_eq(rt_chan_try_recv_into(ch, &none), -EAGAIN);
    cr_assert_eq(rt_chan_try_send_copy(ch, &extra), 0);
    cr_assert_eq(rt_chan_try_recv_into(ch, NULL), 0, "taken, not handed back");
    rt_chan_sender_drop(ch);
    cr_assert_eq(rt_chan_try_recv_into(ch, &none), -EPIPE);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

Test(channel_sized, pointer_size_values_of_a_plain_channel_go_both_ways)
{
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    cr_assert_eq(rt_chan_value_size(ch), sizeof(void *));
    static int a, b;
    int *pa = &a;
    cr_assert_eq(rt_chan_try_send_copy(ch, &pa), 0);
    cr_assert_eq(rt_chan_try_send(ch, &b), 0);
    void *got = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &got), 0);
    cr_assert_eq(got, &a);
    int *pb = NULL;
    cr_assert_eq(rt_chan_try_recv_into(ch, &pb), 0);
    cr_assert_eq(pb, &b);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
}

static uint64_t disposed_sum;
static unsigned disposed;

static void dispose_sample(void *value, void *arg)
{
    cr_assert_eq(arg, &disposed);
    const struct sample *s = value;
    assert_sample(s, s->seq);
    disposed_sum += s->seq;
    disposed++;
}

Test(channel_sized, values_left_buffered_go_to_dispose_as_bytes)
{
    rt_chan *ch;
    cr_assert_eq(rt_chan_new_sized(4, sizeof(struct sample), &ch), 0);
    for (uint64_t i = 1; i <= 3; i++) {
        struct sample s = sample_of(i);
        cr_assert_eq(rt_chan_try_send_copy(ch, &s), 0);
    }
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, dispose_sample, &disposed);
    cr_assert_eq(disposed, 3);
    cr_assert_eq(disposed_sum, 6);
}

/* ---- tasks ------------------------------------------------------------------- */

#define MESSAGES 20000

/* Sends sample_of(first), sample_of(first + 1), ... `count` values. */
struct producer {
    rt_coro co;
    rt_chan *ch;
    uint64_t next, end;
    struct sample out; /* the bytes of the send in flight */
    rt_chan_send tx;
};

static void producer_drop(void *state)
{
    struct producer *p = state;
    rt_coro_cleanup(&p->co);
    rt_chan_sender_drop(p->ch);
}

static rt_poll producer_poll(void *state, rt_context *cx, void **out)
{
    struct producer *p = state;
    RT_CORO_BEGIN(&p->co);
    for (; p->next < p->end; p->next++) {
        p->out = sample_of(p->next);
        rt_chan_send_copy_init(&p->tx, p->ch, &p->out);
        RT_AWAIT(&p->co, cx, &p->tx);
        cr_assert_eq(p->tx.result, 0);
    }
    RT_CORO_END(&p->co, out);
}

/* Receives until the end of the stream, checking every value and marking
 * which it saw. */
static atomic_uchar seen[MESSAGES];

struct consumer {
    rt_coro co;
    rt_chan *ch;
    uint64_t count;
    struct sample in;
    rt_chan_recv rx;
};

static void consumer_drop(void *state)
{
    struct consumer *c = state;
    rt_coro_cleanup(&c->co);
    rt_chan_receiver_drop(c->ch, NULL, NULL);
}

static rt_poll consumer_poll(void *state, rt_context *cx, void **out)
{
    struct consumer *c = state;
    RT_CORO_BEGIN(&c->co);
    for (;;) {
        rt_chan_recv_into_init(&c->rx, c->ch, &c->in);
        RT_AWAIT(&c->co, cx, &c->rx);
        if (c->rx.result == -EPIPE)
            break;
        cr_assert_eq(c->rx.result, 0);
        cr_assert_lt(c->in.seq, MESSAGES);
        assert_sample(&c->in, c->in.seq);
        cr_assert_eq(atomic_fetch_add(&seen[c->in.seq], 1), 0, "value %llu received twice",
                     (unsigned long long)c->in.seq);
        c->count++;
    }
    RT_RETURN(&c->co, out, (uintptr_t)c->count);
    RT_CORO_END(&c->co, out);
}

Test(channel_sized, two_producers_and_two_consumers_exchange_structs)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new_sized(8, sizeof(struct sample), &ch), 0);
    cr_assert_eq(rt_chan_sender_clone(ch), 0);
    cr_assert_eq(rt_chan_receiver_clone(ch), 0);
    struct producer p1 = {.ch = ch, .next = 0, .end = MESSAGES / 2};
    struct producer p2 = {.ch = ch, .next = MESSAGES / 2, .end = MESSAGES};
    struct consumer c = {.ch = ch};
    rt_task *tp1, *tp2, *tc1, *tc2;
    cr_assert_eq(RT_SPAWN_STATE(rt, producer_poll, producer_drop, &p1, &tp1), 0);
    cr_assert_eq(RT_SPAWN_STATE(rt, producer_poll, producer_drop, &p2, &tp2), 0);
    cr_assert_eq(RT_SPAWN_STATE(rt, consumer_poll, consumer_drop, &c, &tc1), 0);
    cr_assert_eq(RT_SPAWN_STATE(rt, consumer_poll, consumer_drop, &c, &tc2), 0);
    cr_assert_eq(task_wait_status(tp1, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(task_wait_status(tp2, WAIT_DEADLINE_NS, NULL), 0);
    void *n1, *n2;
    cr_assert_eq(task_wait_status(tc1, WAIT_DEADLINE_NS, &n1), 0);
    cr_assert_eq(task_wait_status(tc2, WAIT_DEADLINE_NS, &n2), 0);
    cr_assert_eq((uintptr_t)n1 + (uintptr_t)n2, MESSAGES, "every value exactly once");
    for (unsigned i = 0; i < MESSAGES; i++)
        cr_assert_eq(atomic_load(&seen[i]), 1);
    finish_runtime(rt, 0);
}

Test(channel_sized, a_waiting_senders_bytes_are_handed_in_when_room_is_made)
{
    rt_runtime *rt = new_runtime(1);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new_sized(1, sizeof(struct sample), &ch), 0);
    struct sample first = sample_of(1);
    cr_assert_eq(rt_chan_try_send_copy(ch, &first), 0); /* full */
    cr_assert_eq(rt_chan_sender_clone(ch), 0);
    struct producer p = {.ch = ch, .next = 2, .end = 3};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, producer_poll, producer_drop, &p, &t), 0);
    /* A blocking receive takes the first value; the waiting send's bytes
     * move into the freed slot as it does. */
    struct sample got;
    cr_assert_eq(rt_chan_recv_into_wait(ch, WAIT_DEADLINE_NS, &got), 0);
    assert_sample(&got, 1);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_chan_recv_into_wait(ch, WAIT_DEADLINE_NS, &got), 0);
    assert_sample(&got, 2);
    struct sample third = sample_of(3);
    cr_assert_eq(rt_chan_send_copy_wait(ch, &third, WAIT_DEADLINE_NS), 0);
    cr_assert_eq(rt_chan_recv_into_wait(ch, WAIT_DEADLINE_NS, NULL), 0, "not handed back");
    cr_assert_eq(rt_chan_recv_into_wait(ch, 1 * MS, &got), -ETIMEDOUT);
    rt_chan_sender_drop(ch);
    cr_assert_eq(rt_chan_recv_into_wait(ch, WAIT_DEADLINE_NS, &got), -EPIPE);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* Awaits a select prepared by the test. */
struct await_select {
    rt_coro co;
    rt_select *sel;
};

static rt_poll await_select_poll(void *state, rt_context *cx, void **out)
{
    struct await_select *a = state;
    RT_CORO_BEGIN(&a->co);
    RT_AWAIT(&a->co, cx, a->sel);
    RT_CORO_END(&a->co, out);
}

Test(channel_sized, a_dropped_receive_leaves_the_destination_alone)
{
    rt_runtime *rt = new_runtime(1);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new_sized(1, sizeof(struct sample), &ch), 0);
    static struct sample dst;
    memset(&dst, 0x5a, sizeof dst);
    static rt_chan_recv rx;
    static rt_sleep nap;
    static rt_select sel;
    rt_chan_recv_into_init(&rx, ch, &dst);
    rt_sleep_init(&nap, rt, 2 * MS);
    rt_select_init(&sel, RT_FUTURES(&rx.future, &nap.future));
    struct await_select a = {.sel = &sel};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, await_select_poll, rt_coro_drop, &a, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(sel.index, 1);
    cr_assert_eq(rx.result, -ECANCELED);
    for (size_t i = 0; i < sizeof dst; i++)
        cr_assert_eq(((unsigned char *)&dst)[i], 0x5a);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

static void *disposed_pointer;

static void keep_disposed(void *value, void *arg)
{
    (void)arg;
    memcpy(&disposed_pointer, value, sizeof disposed_pointer);
}

Test(channel_sized, an_eight_byte_sized_channel_is_not_a_channel_of_pointers)
{
    rt_chan *ch;
    cr_assert_eq(rt_chan_new_sized(2, sizeof(uint64_t), &ch), 0);
    cr_assert_eq(rt_chan_try_send(ch, NULL), -EINVAL, "the void * forms are rt_chan_new's");
    uint64_t v = 0x1122334455667788u;
    cr_assert_eq(rt_chan_try_send_copy(ch, &v), 0);
    rt_chan_sender_drop(ch);
    /* dispose gets a pointer to the 8 bytes, as for any sized channel. */
    rt_chan_receiver_drop(ch, keep_disposed, NULL);
    cr_assert_eq((uintptr_t)disposed_pointer, (uintptr_t)0x1122334455667788u);
}
