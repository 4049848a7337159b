/* Black-box tests of asyncrt/combine.h's timeouts and deadlines, and of
 * asyncrt/timer.h's intervals. A timeout is an operation around another
 * operation: around one that never finishes it gives -ETIMEDOUT after the
 * duration (or at the deadline) and drops the inner one (its result
 * -ECANCELED); around one that finishes first it gives that one's result;
 * the inner operation is polled first. Around real operations (a channel
 * receive, a read on a socket pair, a mutex lock, a join, a sleep) the
 * operation finishes in time when its event comes, and an expired timeout
 * loses nothing: a message sent, bytes written or a lock released after the
 * expiry reach the next waiter, and a task whose join expired still runs
 * to its end. Aborting a task sleeping alone or inside a timeout drops it
 * promptly and cancels its timers; an interval ticks no earlier than start
 * plus k periods, skips missed ticks instead of bursting, and wakes once per
 * tick. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_timer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

TestSuite(timer, .timeout = 110, .fini = fail_on_leaks);

/* ---- operations of the test's own --------------------------------------- */

/* An operation that never finishes and stores no waker; counts its polls
 * and its drops. */
struct never_op {
    RT_FUTURE_HEADER;
    atomic_int polls;
    atomic_int drops;
};

static rt_poll never_op_poll(rt_future *f, rt_context *cx)
{
    (void)cx;
    struct never_op *n = (struct never_op *)f;
    atomic_fetch_add(&n->polls, 1);
    return RT_PENDING;
}

static void never_op_drop(rt_future *f)
{
    struct never_op *n = (struct never_op *)f;
    atomic_fetch_add(&n->drops, 1);
}

static const rt_future_vtable never_op_vtable = {never_op_poll, never_op_drop, NULL};

static void never_op_init(struct never_op *n)
{
    memset(n, 0, sizeof *n);
    n->future.vtable = &never_op_vtable;
}

/* An operation that finishes at its first poll with a fixed result. */
struct ready_op {
    RT_FUTURE_HEADER;
    int64_t value;
    int polls;
};

static rt_poll ready_op_poll(rt_future *f, rt_context *cx)
{
    (void)cx;
    struct ready_op *r = (struct ready_op *)f;
    r->polls++;
    return rt_future_finish(f, r->value);
}

static const rt_future_vtable ready_op_vtable = {ready_op_poll, NULL, NULL};

static void ready_op_init(struct ready_op *r, int64_t value)
{
    memset(r, 0, sizeof *r);
    r->future.vtable = &ready_op_vtable;
    r->value = value;
}

/* A sleep inside an operation of the test's own, which counts its polls
 * and finishes with SLEEP_OP_VALUE (or the sleep's error), so a timeout
 * around it must pass on a result that is neither 0 nor its own. */
#define SLEEP_OP_VALUE ((int64_t)0x5EE9)

struct sleep_op {
    RT_FUTURE_HEADER;
    rt_sleep s;
    int polls;
};

static rt_poll sleep_op_poll(rt_future *f, rt_context *cx)
{
    struct sleep_op *o = (struct sleep_op *)f;
    o->polls++;
    if (RT_POLL_OP(&o->s, cx) != RT_READY)
        return RT_PENDING;
    return rt_future_finish(f, o->s.result == 0 ? SLEEP_OP_VALUE : o->s.result);
}

static void sleep_op_drop(rt_future *f)
{
    struct sleep_op *o = (struct sleep_op *)f;
    RT_DROP(&o->s);
}

static const rt_future_vtable sleep_op_vtable = {sleep_op_poll, sleep_op_drop, NULL};

static int sleep_op_init(struct sleep_op *o, rt_runtime *rt, int64_t duration)
{
    memset(o, 0, sizeof *o);
    o->future.vtable = &sleep_op_vtable;
    return rt_sleep_init(&o->s, rt, duration);
}

/* ---- a task that awaits one operation with a time limit ------------------ */

enum inner_kind { INNER_NEVER, INNER_SLEEP, INNER_RECV, INNER_READ, INNER_LOCK, INNER_JOIN };

/* What a limited task saw, written to the test's copy before it finishes
 * (the task's own state is freed after its drop). */
struct limited_result {
    int init_rc;
    int64_t result;       /* the timeout's */
    int64_t inner_result; /* the inner operation's */
    int64_t elapsed;      /* from before the timeout's init to its RT_READY */
    int64_t end;          /* rt_now_ns() at its RT_READY */
    void *value;          /* what the receive or the join gave */
    unsigned char bytes[16];
    int never_polls, never_drops;
    int sleep_polls;
    int64_t sleep_result; /* of the sleep inside the sleep_op */
    bool followed;        /* the follow-up ran */
    int64_t follow_result;
    void *follow_value;
    unsigned char follow_bytes[16];
};

/* Awaits one operation of `kind` inside a timeout of `limit` (a duration,
 * or an absolute deadline when by_deadline), records what it saw in *res,
 * and, with follow_up, after an expiry signals limited_expired and awaits
 * the same kind of operation again, without a limit (the operation struct
 * initialised again after its drop), to show that what comes after the
 * expiry is not lost. Signals limited_waiting at its first pending poll. */
struct limited {
    rt_coro co;
    enum inner_kind kind;
    int64_t limit;
    bool by_deadline;
    bool follow_up;
    bool announced;
    int64_t inner_sleep; /* INNER_SLEEP: the sleep's duration */
    rt_chan *ch;         /* INNER_RECV: the test's channel */
    rt_io *io;           /* INNER_READ: one end of the test's socket pair */
    rt_mutex *mu;        /* INNER_LOCK: the test's mutex */
    rt_task *target;     /* INNER_JOIN: the handle, handed over to the join */
    struct limited_result *res;
    int64_t start;
    rt_future *inner;
    rt_timeout t;
    struct never_op never;
    struct sleep_op sleep;
    rt_chan_recv rx;
    rt_io_read rd;
    rt_mutex_lock lock;
    rt_task_join join;
    unsigned char buf[16];
};

static struct event limited_waiting = EVENT_INIT;
static struct event limited_expired = EVENT_INIT;
static struct event limited_dropped = EVENT_INIT;

/* Initialises the operation of s->kind and returns it (NULL after an init
 * error, which goes to s->res->init_rc). */
static rt_future *limited_inner_init(struct limited *s)
{
    int rc = -EINVAL;
    rt_future *f = NULL;
    switch (s->kind) {
    case INNER_NEVER:
        never_op_init(&s->never);
        rc = 0;
        f = &s->never.future;
        break;
    case INNER_SLEEP:
        rc = sleep_op_init(&s->sleep, NULL, s->inner_sleep);
        f = &s->sleep.future;
        break;
    case INNER_RECV:
        rc = rt_chan_recv_init(&s->rx, s->ch);
        f = &s->rx.future;
        break;
    case INNER_READ:
        memset(s->buf, 0, sizeof s->buf);
        rc = rt_io_read_init(&s->rd, s->io, s->buf, sizeof s->buf);
        f = &s->rd.future;
        break;
    case INNER_LOCK:
        rc = rt_mutex_lock_init(&s->lock, s->mu);
        f = &s->lock.future;
        break;
    case INNER_JOIN:
        rc = rt_task_join_init(&s->join, s->target);
        s->target = NULL; /* the join owns the handle now */
        f = &s->join.future;
        break;
    }
    if (rc != 0) {
        s->res->init_rc = rc;
        return NULL;
    }
    return f;
}

static rt_poll limited_body(struct limited *s, rt_context *cx, void **out)
{
    struct limited_result *r = s->res;
    RT_CORO_BEGIN(&s->co);
    s->start = rt_now_ns();
    s->inner = limited_inner_init(s);
    if (s->inner == NULL)
        RT_RETURN(&s->co, out, NULL);
    r->init_rc = s->by_deadline ? rt_timeout_until_init(&s->t, NULL, s->inner, s->limit)
                                : rt_timeout_init(&s->t, NULL, s->inner, s->limit);
    if (r->init_rc != 0)
        RT_RETURN(&s->co, out, NULL);
    RT_AWAIT(&s->co, cx, &s->t);
    r->end = rt_now_ns();
    r->elapsed = r->end - s->start;
    r->result = s->t.result;
    r->inner_result = s->inner->result;
    r->never_polls = atomic_load(&s->never.polls);
    r->never_drops = atomic_load(&s->never.drops);
    r->sleep_polls = s->sleep.polls;
    r->sleep_result = s->sleep.s.result;
    r->value = s->kind == INNER_RECV ? s->rx.value : s->kind == INNER_JOIN ? s->join.value : NULL;
    memcpy(r->bytes, s->buf, sizeof r->bytes);
    if (s->kind == INNER_LOCK && s->lock.result == 0)
        rt_mutex_unlock(s->mu);
    if (s->follow_up && s->t.result == -ETIMEDOUT &&
        (s->kind == INNER_RECV || s->kind == INNER_READ || s->kind == INNER_LOCK)) {
        event_signal(&limited_expired);
        s->inner = limited_inner_init(s);
        if (s->inner == NULL)
            RT_RETURN(&s->co, out, NULL);
        RT_AWAIT_FUTURE(&s->co, cx, s->inner);
        r->followed = true;
        r->follow_result = s->inner->result;
        r->follow_value = s->kind == INNER_RECV ? s->rx.value : NULL;
        memcpy(r->follow_bytes, s->buf, sizeof r->follow_bytes);
        if (s->kind == INNER_LOCK && s->lock.result == 0)
            rt_mutex_unlock(s->mu);
    }
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

static rt_poll limited_poll(void *state, rt_context *cx, void **out)
{
    struct limited *s = state;
    return announce(limited_body(s, cx, out), &s->announced, &limited_waiting);
}

/* What the drop of a limited task found, for the abort tests. */
static struct {
    int64_t time;
    int64_t result;       /* the timeout's, after the cleanup */
    int64_t inner_result; /* the inner operation's, after the cleanup */
    int64_t sleep_result; /* the sleep's inside a sleep_op */
    atomic_int count;
} limited_drop_seen;

static void limited_drop(void *state)
{
    struct limited *s = state;
    /* Drops the operation in flight: the timeout (and through it the inner
     * operation and the timer), or a follow-up. */
    rt_coro_cleanup(&s->co);
    rt_task_drop(s->target); /* a join never initialised */
    s->target = NULL;
    limited_drop_seen.result = s->t.result;
    limited_drop_seen.inner_result = s->inner != NULL ? s->inner->result : 0;
    limited_drop_seen.sleep_result = s->sleep.s.result;
    limited_drop_seen.time = rt_now_ns();
    atomic_fetch_add(&limited_drop_seen.count, 1);
    event_signal(&limited_dropped);
}

static rt_task *spawn_limited(rt_runtime *rt, struct limited *s)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, limited_poll, limited_drop, s, &task), 0);
    return task;
}

/* Waits for a limited task to finish and checks that it got going. */
static void wait_limited(rt_task *task, const struct limited_result *r)
{
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), 0,
                 "the limited task never finished");
    cr_assert_eq(r->init_rc, 0, "init: %s", rt_strerror(r->init_rc));
}

/* Runs a limited task to its end while the test does nothing. */
static void run_limited(rt_runtime *rt, struct limited *s)
{
    wait_limited(spawn_limited(rt, s), s->res);
}

static const char *errname(int64_t result)
{
    return result < 0 ? rt_strerror((int)result) : "(not an error)";
}

/* ---- around operations that never finish, or finish by themselves ------- */

Test(timer, timeout_around_an_operation_that_never_finishes_gives_etimedout_and_drops_it)
{
    rt_runtime *rt = new_runtime(2);
    struct limited_result r = {0};
    struct limited s = {.kind = INNER_NEVER, .limit = 30 * MS, .res = &r};
    run_limited(rt, &s);
    cr_assert_eq(r.result, -ETIMEDOUT, "result %lld (%s)", (long long)r.result, errname(r.result));
    cr_assert_geq(r.elapsed, 30 * MS, "timed out after only %lld ns", (long long)r.elapsed);
    cr_assert_lt(r.elapsed, 30 * MS + OUTLIER_BOUND_NS, "timed out %lld ms late",
                 (long long)((r.elapsed - 30 * MS) / MS));
    cr_assert_geq(r.never_polls, 1, "the inner operation was never polled");
    cr_assert_eq(r.never_drops, 1, "the expired timeout dropped the inner operation %d times",
                 r.never_drops);
    cr_assert_eq(r.inner_result, -ECANCELED, "the dropped inner operation reports %lld",
                 (long long)r.inner_result);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&limited_drop_seen.count), 1);
}

Test(timer, deadline_around_an_operation_that_never_finishes_expires_at_the_deadline)
{
    rt_runtime *rt = new_runtime(2);
    struct limited_result r = {0};
    int64_t deadline = rt_now_ns() + 30 * MS;
    struct limited s = {.kind = INNER_NEVER, .limit = deadline, .by_deadline = true, .res = &r};
    run_limited(rt, &s);
    cr_assert_eq(r.result, -ETIMEDOUT, "result %s", errname(r.result));
    cr_assert_geq(r.end, deadline, "expired %lld ns before the deadline",
                  (long long)(deadline - r.end));
    cr_assert_lt(r.end, deadline + OUTLIER_BOUND_NS, "expired %lld ms late",
                 (long long)((r.end - deadline) / MS));
    cr_assert_eq(r.never_drops, 1);
    cr_assert_eq(r.inner_result, -ECANCELED);
    finish_runtime(rt, 0);
}

Test(timer, timeout_around_an_operation_that_finishes_first_gives_its_result)
{
    rt_runtime *rt = new_runtime(2);
    struct limited_result r = {0};
    struct limited s = {.kind = INNER_SLEEP, .limit = 5 * SEC, .inner_sleep = 20 * MS, .res = &r};
    run_limited(rt, &s);
    cr_assert_eq(r.result, SLEEP_OP_VALUE, "result %lld (%s): the inner result was not passed on",
                 (long long)r.result, errname(r.result));
    cr_assert_eq(r.inner_result, SLEEP_OP_VALUE);
    cr_assert_eq(r.sleep_result, 0);
    cr_assert_geq(r.elapsed, 20 * MS, "the inner sleep finished early");
    cr_assert_lt(r.elapsed, 20 * MS + OUTLIER_BOUND_NS);
    cr_assert_geq(r.sleep_polls, 2, "the inner operation was polled %d times", r.sleep_polls);
    /* The 5 s timer was released when the timeout finished: shutdown does
     * not wait. */
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms", (long long)(took / MS));
}

Test(timer, timeout_polls_the_inner_operation_first_even_when_already_due)
{
    rt_runtime *rt = new_runtime(1);
    struct counting_waker w;
    counting_waker_init(&w);
    rt_context cx = counting_context(&w);
    rt_timeout t;

    /* Inner ready at once, deadline already passed: the inner result wins. */
    struct ready_op ready;
    ready_op_init(&ready, 0xACE);
    cr_assert_eq(rt_timeout_init(&t, rt, &ready.future, 0), 0);
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_READY);
    cr_assert_eq(t.result, 0xACE, "a ready inner operation lost to a due deadline: %lld",
                 (long long)t.result);
    cr_assert_eq(ready.result, 0xACE);
    cr_assert_eq(ready.polls, 1);
    /* Finished: every later poll reports the same, and a drop does nothing. */
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_READY);
    cr_assert_eq(t.result, 0xACE);
    RT_DROP(&t);
    cr_assert_eq(t.result, 0xACE, "a drop after RT_READY changed the result");
    cr_assert_eq(ready.result, 0xACE, "a drop after RT_READY reached the inner operation");

    /* The same with a real operation and a deadline long past: a receive
     * with a message already waiting gets it. */
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    void *msg = (void *)(uintptr_t)0x4D5347;
    cr_assert_eq(rt_chan_try_send(ch, msg), 0);
    rt_chan_recv rx;
    cr_assert_eq(rt_chan_recv_init(&rx, ch), 0);
    cr_assert_eq(rt_timeout_until_init(&t, rt, &rx.future, rt_now_ns() - SEC), 0);
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_READY);
    cr_assert_eq(t.result, 0, "a waiting message lost to a past deadline: %s", errname(t.result));
    cr_assert_eq(rx.result, 0);
    cr_assert_eq(rx.value, msg);

    /* Inner pending, deadline already passed: -ETIMEDOUT at once, after one
     * poll of the inner operation, which is then dropped. */
    struct never_op never;
    never_op_init(&never);
    cr_assert_eq(rt_timeout_init(&t, rt, &never.future, -1), 0);
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_READY);
    cr_assert_eq(t.result, -ETIMEDOUT, "result %s", errname(t.result));
    cr_assert_eq(atomic_load(&never.polls), 1, "the inner operation was not polled first");
    cr_assert_eq(atomic_load(&never.drops), 1, "the inner operation was not dropped");
    cr_assert_eq(never.result, -ECANCELED);

    /* A receive on the empty channel with a past deadline: it waited, was
     * dropped, and left nothing behind: a message sent now is there for
     * the taking (a receive still queued would have it promised). */
    cr_assert_eq(rt_chan_recv_init(&rx, ch), 0);
    cr_assert_eq(rt_timeout_until_init(&t, rt, &rx.future, 0), 0);
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_READY);
    cr_assert_eq(t.result, -ETIMEDOUT, "result %s", errname(t.result));
    cr_assert_eq(rx.result, -ECANCELED, "the dropped receive reports %lld", (long long)rx.result);
    cr_assert_null(rx.value);
    void *late = (void *)(uintptr_t)0x1A7E;
    cr_assert_eq(rt_chan_try_send(ch, late), 0);
    void *got = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &got), 0, "the message sent after the expiry is held back");
    cr_assert_eq(got, late);

    /* Inner pending with a long limit: pending; dropping the timeout drops
     * the inner operation and cancels the timer. */
    never_op_init(&never);
    cr_assert_eq(rt_timeout_init(&t, rt, &never.future, 10 * SEC), 0);
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_PENDING);
    cr_assert_eq(atomic_load(&never.polls), 1);
    /* cx NULL: RT_READY with -EINVAL, and the operation left as it was. */
    cr_assert_eq(RT_POLL_OP(&t, NULL), RT_READY);
    cr_assert_eq(t.result, -EINVAL);
    cr_assert_eq(atomic_load(&never.polls), 1, "a poll without a context reached the inner one");
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_PENDING, "a poll without a context changed the timeout");
    cr_assert_eq(atomic_load(&never.polls), 2);
    RT_DROP(&t);
    cr_assert_eq(t.result, -ECANCELED);
    cr_assert_eq(never.result, -ECANCELED);
    cr_assert_eq(atomic_load(&never.drops), 1);
    RT_DROP(&t);
    cr_assert_eq(atomic_load(&never.drops), 1, "a second drop reached the inner operation");

    /* Inner ready at once with a long limit: its result, and no timer left. */
    ready_op_init(&ready, 7);
    cr_assert_eq(rt_timeout_until_init(&t, rt, &ready.future, rt_now_ns() + 10 * SEC), 0);
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_READY);
    cr_assert_eq(t.result, 7);

    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms: a 10 s timer outlived its timeout",
                 (long long)(took / MS));
    cr_assert_eq(counting_outstanding(&w), 0, "%ld waker references never given back",
                 counting_outstanding(&w));
}

Test(timer, timeout_expiring_around_a_long_inner_sleep_drops_it_and_cancels_its_timer)
{
    rt_runtime *rt = new_runtime(2);
    struct limited_result r = {0};
    struct limited s = {.kind = INNER_SLEEP, .limit = 40 * MS, .inner_sleep = 10 * SEC, .res = &r};
    run_limited(rt, &s);
    cr_assert_eq(r.result, -ETIMEDOUT, "result %s", errname(r.result));
    cr_assert_eq(r.inner_result, -ECANCELED, "the inner operation reports %lld",
                 (long long)r.inner_result);
    cr_assert_eq(r.sleep_result, -ECANCELED, "the inner sleep was not dropped: %lld",
                 (long long)r.sleep_result);
    cr_assert_geq(r.elapsed, 40 * MS);
    cr_assert_lt(r.elapsed, 40 * MS + OUTLIER_BOUND_NS);
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms: a dropped timer is still waited for",
                 (long long)(took / MS));
}

/* ---- around a channel receive ---------------------------------------------- */

Test(timer, timeout_around_a_channel_receive_gives_the_message_sent_in_time)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    struct limited_result r = {0};
    struct limited s = {.kind = INNER_RECV, .limit = 10 * SEC, .ch = ch, .res = &r};
    rt_task *task = spawn_limited(rt, &s);
    cr_assert(event_wait_for(&limited_waiting, 1), "the receive never waited");
    void *msg = (void *)(uintptr_t)0xC4A7;
    cr_assert_eq(rt_chan_try_send(ch, msg), 0);
    wait_limited(task, &r);
    cr_assert_eq(r.result, 0, "result %s", errname(r.result));
    cr_assert_eq(r.inner_result, 0);
    cr_assert_eq(r.value, msg);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms", (long long)(took / MS));
}

Test(timer, expired_timeout_around_a_channel_receive_loses_no_message_sent_after_it)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    struct limited_result r = {0};
    struct limited s = {
        .kind = INNER_RECV, .limit = 30 * MS, .follow_up = true, .ch = ch, .res = &r};
    rt_task *task = spawn_limited(rt, &s);
    cr_assert(event_wait_for(&limited_expired, 1), "the timeout never expired");
    void *msg = (void *)(uintptr_t)0xAF7E;
    cr_assert_eq(rt_chan_try_send(ch, msg), 0);
    wait_limited(task, &r);
    cr_assert_eq(r.result, -ETIMEDOUT, "result %s", errname(r.result));
    cr_assert_geq(r.elapsed, 30 * MS);
    cr_assert_eq(r.inner_result, -ECANCELED, "the dropped receive reports %lld",
                 (long long)r.inner_result);
    cr_assert_null(r.value);
    cr_assert(r.followed);
    cr_assert_eq(r.follow_result, 0, "the next receive got %s", errname(r.follow_result));
    cr_assert_eq(r.follow_value, msg, "the message sent after the expiry was lost");
    /* Nothing of the dropped receive is left in the channel either. */
    void *again = (void *)(uintptr_t)0xA6A1;
    cr_assert_eq(rt_chan_try_send(ch, again), 0);
    void *got = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &got), 0);
    cr_assert_eq(got, again);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

Test(timer, expired_deadline_around_a_channel_receive_leaves_the_next_message_to_others)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    struct limited_result r = {0};
    int64_t deadline = rt_now_ns() + 30 * MS;
    struct limited s = {
        .kind = INNER_RECV, .limit = deadline, .by_deadline = true, .ch = ch, .res = &r};
    run_limited(rt, &s);
    cr_assert_eq(r.result, -ETIMEDOUT, "result %s", errname(r.result));
    cr_assert_geq(r.end, deadline);
    cr_assert_eq(r.inner_result, -ECANCELED);
    /* The receive left the queue when it was dropped: the message is not
     * promised to it, so this thread takes it at once. */
    void *msg = (void *)(uintptr_t)0xD1ED;
    cr_assert_eq(rt_chan_try_send(ch, msg), 0);
    void *got = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &got), 0,
                 "the message is held back for the receive the deadline dropped");
    cr_assert_eq(got, msg);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* ---- around a read on a socket pair -------------------------------------------- */

static rt_io *open_socket_pair(rt_runtime *rt, int fds[2])
{
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0,
                 "socketpair: %s", strerror(errno));
    rt_io *io = NULL;
    int rc = rt_io_open(rt, fds[0], &io);
    cr_assert_eq(rc, 0, "rt_io_open: %s", rt_strerror(rc));
    return io;
}

Test(timer, timeout_around_a_socket_read_gives_the_bytes_written_in_time)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    rt_io *io = open_socket_pair(rt, fds);
    struct limited_result r = {0};
    struct limited s = {.kind = INNER_READ, .limit = 10 * SEC, .io = io, .res = &r};
    rt_task *task = spawn_limited(rt, &s);
    cr_assert(event_wait_for(&limited_waiting, 1), "the read never waited");
    cr_assert_eq(write(fds[1], "ping", 4), 4);
    wait_limited(task, &r);
    cr_assert_eq(r.result, 4, "result %lld (%s)", (long long)r.result, errname(r.result));
    cr_assert_eq(r.inner_result, 4);
    cr_assert_eq(memcmp(r.bytes, "ping", 4), 0);
    cr_assert_eq(rt_io_close(io), 0);
    close(fds[1]);
    finish_runtime(rt, 0);
}

Test(timer, expired_timeout_around_a_socket_read_loses_no_bytes_written_after_it)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    rt_io *io = open_socket_pair(rt, fds);
    struct limited_result r = {0};
    struct limited s = {
        .kind = INNER_READ, .limit = 30 * MS, .follow_up = true, .io = io, .res = &r};
    rt_task *task = spawn_limited(rt, &s);
    cr_assert(event_wait_for(&limited_expired, 1), "the timeout never expired");
    cr_assert_eq(write(fds[1], "late", 4), 4);
    wait_limited(task, &r);
    cr_assert_eq(r.result, -ETIMEDOUT, "result %s", errname(r.result));
    cr_assert_geq(r.elapsed, 30 * MS);
    cr_assert_eq(r.inner_result, -ECANCELED, "the dropped read reports %lld",
                 (long long)r.inner_result);
    cr_assert(r.followed);
    cr_assert_eq(r.follow_result, 4, "the next read got %lld (%s)", (long long)r.follow_result,
                 errname(r.follow_result));
    cr_assert_eq(memcmp(r.follow_bytes, "late", 4), 0, "the next read got other bytes");
    cr_assert_eq(rt_io_close(io), 0);
    close(fds[1]);
    finish_runtime(rt, 0);
}

/* ---- around a mutex lock ---------------------------------------------------------- */

Test(timer, timeout_around_a_mutex_lock_gets_the_lock_released_in_time)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex *mu;
    cr_assert_eq(rt_mutex_new(&mu), 0);
    cr_assert_eq(rt_mutex_try_lock(mu), 0);
    struct limited_result r = {0};
    struct limited s = {.kind = INNER_LOCK, .limit = 10 * SEC, .mu = mu, .res = &r};
    rt_task *task = spawn_limited(rt, &s);
    cr_assert(event_wait_for(&limited_waiting, 1), "the lock never waited");
    rt_mutex_unlock(mu); /* hands the lock to the waiting task */
    wait_limited(task, &r);
    cr_assert_eq(r.result, 0, "result %s", errname(r.result));
    cr_assert_eq(r.inner_result, 0);
    /* The task unlocked after its timeout finished. */
    cr_assert_eq(rt_mutex_try_lock(mu), 0, "the lock is still held");
    rt_mutex_unlock(mu);
    rt_mutex_drop(mu);
    finish_runtime(rt, 0);
}

Test(timer, expired_timeout_around_a_mutex_lock_leaves_the_queue_to_the_next_waiter)
{
    rt_runtime *rt = new_runtime(2);
    rt_mutex *mu;
    cr_assert_eq(rt_mutex_new(&mu), 0);
    cr_assert_eq(rt_mutex_try_lock(mu), 0);
    struct limited_result r = {0};
    struct limited s = {
        .kind = INNER_LOCK, .limit = 30 * MS, .follow_up = true, .mu = mu, .res = &r};
    rt_task *task = spawn_limited(rt, &s);
    cr_assert(event_wait_for(&limited_expired, 1), "the timeout never expired");
    /* Were the dropped lock still queued, the unlock would hand the lock to
     * it and the next one would wait forever. */
    rt_mutex_unlock(mu);
    wait_limited(task, &r);
    cr_assert_eq(r.result, -ETIMEDOUT, "result %s", errname(r.result));
    cr_assert_eq(r.inner_result, -ECANCELED, "the dropped lock reports %lld",
                 (long long)r.inner_result);
    cr_assert(r.followed);
    cr_assert_eq(r.follow_result, 0, "the next lock got %s", errname(r.follow_result));
    cr_assert_eq(rt_mutex_try_lock(mu), 0, "the lock is still held");
    rt_mutex_unlock(mu);
    rt_mutex_drop(mu);
    finish_runtime(rt, 0);
}

/* ---- around a join ------------------------------------------------------------------ */

#define JOIN_VALUE ((void *)(uintptr_t)0x1017)

static struct gate target_gate = GATE_INIT;
static atomic_bool target_finished; /* its poll returned RT_READY */
static struct event target_done = EVENT_INIT;

/* Finishes with JOIN_VALUE once target_gate opens. */
static rt_poll gated_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    if (!gate_pass(&target_gate, cx))
        return RT_PENDING;
    *out = JOIN_VALUE;
    atomic_store(&target_finished, true);
    return RT_READY;
}

/* Signals target_done once the task is over, finished or not. */
static void gated_drop(void *state)
{
    (void)state;
    event_signal(&target_done);
}

static rt_task *spawn_gated(rt_runtime *rt)
{
    rt_task *target = NULL;
    cr_assert_eq(rt_spawn(rt, gated_poll, gated_drop, NULL, 0, &target), 0);
    return target;
}

Test(timer, timeout_around_a_join_gives_the_value_of_a_task_that_finishes_in_time)
{
    rt_runtime *rt = new_runtime(2);
    struct limited_result r = {0};
    struct limited s = {
        .kind = INNER_JOIN, .limit = 10 * SEC, .target = spawn_gated(rt), .res = &r};
    rt_task *task = spawn_limited(rt, &s);
    cr_assert(event_wait_for(&limited_waiting, 1), "the join never waited");
    gate_open(&target_gate);
    wait_limited(task, &r);
    cr_assert_eq(r.result, 0, "result %s", errname(r.result));
    cr_assert_eq(r.inner_result, 0);
    cr_assert_eq(r.value, JOIN_VALUE);
    cr_assert(atomic_load(&target_finished));
    finish_runtime(rt, 0);
}

Test(timer, expired_timeout_around_a_join_detaches_the_task_which_still_runs_to_its_end)
{
    rt_runtime *rt = new_runtime(2);
    struct limited_result r = {0};
    struct limited s = {.kind = INNER_JOIN, .limit = 30 * MS, .target = spawn_gated(rt), .res = &r};
    run_limited(rt, &s);
    cr_assert_eq(r.result, -ETIMEDOUT, "result %s", errname(r.result));
    cr_assert_geq(r.elapsed, 30 * MS);
    cr_assert_eq(r.inner_result, -ECANCELED, "the dropped join reports %lld",
                 (long long)r.inner_result);
    cr_assert_null(r.value);
    /* The dropped join detached the handle; the task was not aborted. */
    cr_assert_eq(event_count(&target_done), 0, "the gated task ended behind a shut gate");
    gate_open(&target_gate);
    cr_assert(event_wait_for(&target_done, 1), "the detached task never ended");
    cr_assert(atomic_load(&target_finished), "the detached task was cancelled, not finished");
    finish_runtime(rt, 0);
}

/* ---- aborting tasks that wait ------------------------------------------------------- */

Test(timer, aborting_a_task_sleeping_inside_a_timeout_drops_it_promptly_and_cancels_both_timers)
{
    rt_runtime *rt = new_runtime(2);
    struct limited_result r = {0};
    struct limited s = {.kind = INNER_SLEEP, .limit = 10 * SEC, .inner_sleep = 10 * SEC, .res = &r};
    rt_task *task = spawn_limited(rt, &s);
    cr_assert(event_wait_for(&limited_waiting, 1), "the task never waited");
    int64_t abort_time = rt_now_ns();
    rt_task_cancel(task);
    cr_assert(event_wait_for_s(&limited_dropped, 1, 5), "the aborted task was not dropped");
    cr_assert_lt(limited_drop_seen.time - abort_time, SEC, "the drop ran %lld ms after the abort",
                 (long long)((limited_drop_seen.time - abort_time) / MS));
    /* rt_coro_cleanup dropped the timeout, which dropped the inner one. */
    cr_assert_eq(limited_drop_seen.result, -ECANCELED, "the timeout: %lld",
                 (long long)limited_drop_seen.result);
    cr_assert_eq(limited_drop_seen.inner_result, -ECANCELED, "the inner operation: %lld",
                 (long long)limited_drop_seen.inner_result);
    cr_assert_eq(limited_drop_seen.sleep_result, -ECANCELED, "the inner sleep: %lld",
                 (long long)limited_drop_seen.sleep_result);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms", (long long)(took / MS));
    cr_assert_eq(atomic_load(&limited_drop_seen.count), 1);
}

Test(timer, aborting_a_task_receiving_inside_a_timeout_loses_no_message)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch = NULL;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    struct limited_result r = {0};
    struct limited s = {.kind = INNER_RECV, .limit = 10 * SEC, .ch = ch, .res = &r};
    rt_task *task = spawn_limited(rt, &s);
    cr_assert(event_wait_for(&limited_waiting, 1), "the receive never waited");
    rt_task_cancel(task);
    cr_assert(event_wait_for_s(&limited_dropped, 1, 5), "the aborted task was not dropped");
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(limited_drop_seen.inner_result, -ECANCELED);
    void *msg = (void *)(uintptr_t)0xAB07;
    cr_assert_eq(rt_chan_try_send(ch, msg), 0);
    void *got = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &got), 0, "the message went to the aborted receive");
    cr_assert_eq(got, msg);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms: the timer outlived the abort",
                 (long long)(took / MS));
}

static struct event long_sleeper_pending = EVENT_INIT;
static struct event long_sleeper_dropped = EVENT_INIT;
static atomic_int long_sleeper_drops;
static int64_t long_sleeper_drop_time;

static rt_poll long_sleeper_poll(void *state, rt_context *cx, void **out)
{
    rt_poll p = plain_sleep_poll(state, cx, out);
    if (p == RT_PENDING)
        event_signal(&long_sleeper_pending);
    return p;
}

static void long_sleeper_drop(void *state)
{
    plain_sleep_drop(state);
    long_sleeper_drop_time = rt_now_ns();
    atomic_fetch_add(&long_sleeper_drops, 1);
    event_signal(&long_sleeper_dropped);
}

Test(timer, aborting_a_task_sleeping_10s_drops_it_promptly_and_shuts_down_quickly)
{
    rt_runtime *rt = new_runtime(2);
    struct plain_sleep p = {.duration = 10 * SEC};
    rt_task *task = NULL;
    int64_t start = rt_now_ns();
    cr_assert_eq(RT_SPAWN_STATE(rt, long_sleeper_poll, long_sleeper_drop, &p, &task), 0);
    cr_assert(event_wait_for(&long_sleeper_pending, 1), "the task never slept");
    int64_t abort_time = rt_now_ns();
    rt_task_cancel(task);
    cr_assert(event_wait_for_s(&long_sleeper_dropped, 1, 5), "the aborted task was not dropped");
    cr_assert_lt(long_sleeper_drop_time - abort_time, SEC, "the drop ran %lld ms after the abort",
                 (long long)((long_sleeper_drop_time - abort_time) / MS));
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    int64_t took = finish_runtime_timed(rt, 0);
    cr_assert_lt(took, 2 * SEC, "shutdown took %lld ms: the cancelled timer is still waited for",
                 (long long)(took / MS));
    cr_assert_lt(rt_now_ns() - start, 5 * SEC, "the whole test took as long as the sleep");
    cr_assert_eq(atomic_load(&long_sleeper_drops), 1);
}

/* ---- intervals --------------------------------------------------------------------- */

#define INTERVAL_TICKS 10
#define INTERVAL_PERIOD (10LL * MS)

struct ticker {
    rt_coro co;
    int k;
    int64_t start;
    int64_t *ticks; /* INTERVAL_TICKS, owned by the test */
    rt_interval iv;
    rt_interval_tick tick;
};

static rt_poll ticker_poll(void *state, rt_context *cx, void **out)
{
    struct ticker *t = state;
    RT_CORO_BEGIN(&t->co);
    t->start = rt_now_ns();
    if (rt_interval_init(&t->iv, NULL, INTERVAL_PERIOD) != 0)
        RT_RETURN(&t->co, out, (intptr_t)-1);
    for (t->k = 0; t->k < INTERVAL_TICKS; t->k++) {
        /* Each tick is an operation of its own on the interval. */
        rt_interval_tick_init(&t->tick, &t->iv);
        RT_AWAIT(&t->co, cx, &t->tick);
        if (t->tick.result != 0)
            RT_RETURN(&t->co, out, (intptr_t)t->tick.result);
        t->ticks[t->k] = rt_now_ns() - t->start;
    }
    RT_RETURN(&t->co, out, 0);
    RT_CORO_END(&t->co, out);
}

/* A tick still waiting (a shutdown) holds a timer. */
static void ticker_drop(void *state)
{
    struct ticker *t = state;
    RT_DROP(&t->tick);
}

Test(timer, interval_ticks_n_times_each_no_earlier_than_start_plus_k_periods)
{
    rt_runtime *rt = new_runtime(2);
    int64_t ticks[INTERVAL_TICKS] = {0};
    struct ticker t;
    memset(&t, 0, sizeof t);
    t.ticks = ticks;
    void *value = (void *)(intptr_t)-99;
    cr_assert_eq(block_on_status(rt, ticker_poll, ticker_drop, &t, sizeof t, &value), 0);
    cr_assert_eq((intptr_t)value, 0, "interval: %s", rt_strerror((int)(intptr_t)value));
    for (int k = 0; k < INTERVAL_TICKS; k++) {
        int64_t due = (int64_t)(k + 1) * INTERVAL_PERIOD;
        cr_assert_geq(ticks[k], due, "tick %d came at %lld us, before start + %d periods", k + 1,
                      (long long)(ticks[k] / 1000), k + 1);
        if (k > 0)
            cr_assert_gt(ticks[k], ticks[k - 1]);
    }
    /* Skipped ticks may stretch the run, but not absurdly. */
    cr_assert_lt(ticks[INTERVAL_TICKS - 1], 2 * INTERVAL_TICKS * INTERVAL_PERIOD + OUTLIER_BOUND_NS,
                 "10 ticks of 10 ms took %lld ms", (long long)(ticks[INTERVAL_TICKS - 1] / MS));
    finish_runtime(rt, 0);
}

#define SKIP_PERIOD (20LL * MS)

struct skipper {
    rt_coro co;
    int64_t err;
    int64_t start;       /* before rt_interval_init */
    int64_t first_tick;  /* after the first ready */
    int64_t before_late; /* just before the late poll */
    int64_t late_tick;   /* the late poll's (or the first after it) ready */
    int64_t next_tick;   /* the ready after that */
    rt_interval iv;
    rt_interval_tick tick;
    rt_sleep s;
};

static struct skipper skipper_result;

static rt_poll skipper_poll(void *state, rt_context *cx, void **out)
{
    struct skipper *k = state;
    RT_CORO_BEGIN(&k->co);
    k->start = rt_now_ns();
    if (rt_interval_init(&k->iv, NULL, SKIP_PERIOD) != 0)
        RT_RETURN(&k->co, out, (intptr_t)-1);
    rt_interval_tick_init(&k->tick, &k->iv);
    RT_AWAIT(&k->co, cx, &k->tick);
    k->err = k->tick.result;
    k->first_tick = rt_now_ns();
    /* Fall behind by several periods. */
    if (rt_sleep_init(&k->s, NULL, 4 * SKIP_PERIOD - SKIP_PERIOD / 4) != 0)
        RT_RETURN(&k->co, out, (intptr_t)-2);
    RT_AWAIT(&k->co, cx, &k->s);
    k->before_late = rt_now_ns();
    rt_interval_tick_init(&k->tick, &k->iv);
    RT_AWAIT(&k->co, cx, &k->tick);
    k->late_tick = rt_now_ns();
    rt_interval_tick_init(&k->tick, &k->iv);
    RT_AWAIT(&k->co, cx, &k->tick);
    k->next_tick = rt_now_ns();
    if (k->err == 0)
        k->err = k->tick.result;
    skipper_result = *k;
    RT_RETURN(&k->co, out, 0);
    RT_CORO_END(&k->co, out);
}

static void skipper_drop(void *state)
{
    struct skipper *k = state;
    RT_DROP(&k->tick);
    RT_DROP(&k->s);
}

Test(timer, interval_that_falls_behind_skips_missed_ticks_instead_of_bursting)
{
    rt_runtime *rt = new_runtime(2);
    struct skipper k;
    memset(&k, 0, sizeof k);
    void *value = (void *)(intptr_t)-99;
    cr_assert_eq(block_on_status(rt, skipper_poll, skipper_drop, &k, sizeof k, &value), 0);
    cr_assert_eq((intptr_t)value, 0);
    struct skipper *r = &skipper_result;
    cr_assert_eq(r->err, 0);
    cr_assert_geq(r->first_tick - r->start, SKIP_PERIOD, "first tick before one period");
    /* The tick after the late one is the first multiple of the period after
     * the late poll began (the interval's own start is at or after r->start). */
    int64_t behind = r->before_late - r->start;
    int64_t next_multiple = (behind / SKIP_PERIOD + 1) * SKIP_PERIOD;
    cr_assert_geq(r->next_tick - r->start, next_multiple,
                  "missed ticks came in a burst: late poll at +%lld us, next tick at +%lld us, "
                  "expected none before +%lld us",
                  (long long)(behind / 1000), (long long)((r->next_tick - r->start) / 1000),
                  (long long)(next_multiple / 1000));
    cr_assert_lt(r->next_tick - r->start, next_multiple + SKIP_PERIOD + OUTLIER_BOUND_NS,
                 "the tick after the skip is far too late");
    finish_runtime(rt, 0);
}

Test(timer, interval_polled_by_hand_wakes_once_per_tick)
{
    rt_runtime *rt = new_runtime(1);
    struct counting_waker w;
    counting_waker_init(&w);
    rt_context cx = counting_context(&w);
    rt_interval iv;
    rt_interval_tick tick;
    int64_t start = rt_now_ns();
    cr_assert_eq(rt_interval_init(&iv, rt, 15 * MS), 0);
    for (int k = 1; k <= 3; k++) {
        unsigned long seen = event_count(&w.woken);
        cr_assert_eq(rt_interval_tick_init(&tick, &iv), 0);
        rt_poll p = RT_POLL_OP(&tick, &cx);
        /* Wait for a wake, poll again; a spurious wake only costs a round. */
        for (int round = 0; p == RT_PENDING && round < 1000; round++) {
            cr_assert(event_wait_for(&w.woken, seen + 1), "tick %d never woke", k);
            seen = event_count(&w.woken);
            p = RT_POLL_OP(&tick, &cx);
        }
        cr_assert_eq(p, RT_READY, "tick %d: still pending after 1000 wakes", k);
        cr_assert_eq(tick.result, 0);
        cr_assert_geq(rt_now_ns() - start, k * 15 * MS, "tick %d early", k);
    }
    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&w), 0, "%ld waker references never given back",
                 counting_outstanding(&w));
}
