/* Timeouts, selects and joins over operations of every kind (real sockets on
 * 127.0.0.1, channels, timers, locks, notifications, joins), nested, and a
 * coroutine aborted or shut down at each of its await points: what a
 * combinator drops loses nothing, and what a coroutine leaves behind is
 * cleaned up without a drop function of its own. */
#include "support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(combine, .fini = fail_on_leaks);

/* ---- fixtures ---------------------------------------------------------------- */

/* A connected TCP pair on 127.0.0.1: *ours stays a plain blocking socket of
 * the test thread, *theirs is registered with rt. */
static void tcp_pair(rt_runtime *rt, int *ours, rt_io **theirs)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(l, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(l, 1), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &len), 0);
    *ours = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(*ours, 0);
    cr_assert_eq(connect(*ours, (struct sockaddr *)&a, sizeof a), 0);
    int fd = accept(l, NULL, NULL);
    cr_assert_geq(fd, 0);
    close(l);
    cr_assert_eq(rt_io_open(rt, fd, theirs), 0);
}

/* A task that awaits one operation prepared by the test (which owns it, in
 * static storage) and reports when it waits. */
struct await_one {
    rt_coro co;
    rt_future *op;
    struct event *pending;
};

static rt_poll await_one_poll(void *state, rt_context *cx, void **out)
{
    struct await_one *a = state;
    RT_CORO_BEGIN(&a->co);
    RT_AWAIT_POLL(&a->co, note_pending(rt_future_poll(a->op, cx), a->pending));
    RT_CORO_END(&a->co, out);
}

/* Runs `op` to completion in a task of rt. */
static void run_to_end(rt_runtime *rt, rt_future *op)
{
    static struct event pending = EVENT_INIT;
    struct await_one a = {.op = op, .pending = &pending};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, await_one_poll, NULL, &a, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
}

/* Starts `op` in a task of rt and returns once it waits. */
static rt_task *start_waiting(rt_runtime *rt, rt_future *op, struct event *pending)
{
    struct await_one a = {.op = op, .pending = pending};
    unsigned long before = event_count(pending);
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, await_one_poll, NULL, &a, &t), 0);
    cr_assert(event_wait_for(pending, before + 1));
    return t;
}

/* ---- select ------------------------------------------------------------------ */

Test(combine, select_reports_the_first_and_drops_the_rest)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    static int message;
    cr_assert_eq(rt_chan_try_send(ch, &message), 0);
    static rt_chan_recv rx;
    static rt_sleep long_sleep;
    static rt_select sel;
    rt_chan_recv_init(&rx, ch);
    rt_sleep_init(&long_sleep, rt, 3600 * SEC);
    cr_assert_eq(rt_select_init(&sel, RT_FUTURES(&long_sleep.future, &rx.future)), 0);
    run_to_end(rt, &sel.future);
    cr_assert_eq(sel.index, 1);
    cr_assert_eq(sel.result, 0);
    cr_assert_eq(rx.value, &message);
    cr_assert_eq(long_sleep.result, -ECANCELED, "the loser is dropped");
    cr_assert(rt_future_is_done(&long_sleep.future));
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

Test(combine, a_receive_that_lost_keeps_its_message_in_the_channel)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    static rt_chan_recv rx;
    static rt_sleep short_sleep;
    static rt_select sel;
    rt_chan_recv_init(&rx, ch);
    rt_sleep_init(&short_sleep, rt, 5 * MS);
    rt_select_init(&sel, RT_FUTURES(&rx.future, &short_sleep.future));
    run_to_end(rt, &sel.future);
    cr_assert_eq(sel.index, 1);
    cr_assert_eq(rx.result, -ECANCELED);
    /* The receive left the queue: a message sent now waits for the next
     * receiver instead of going to the dropped one. */
    static int message;
    cr_assert_eq(rt_chan_try_send(ch, &message), 0);
    void *got = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &got), 0);
    cr_assert_eq(got, &message);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

Test(combine, a_send_that_lost_keeps_its_value)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    static int first, second;
    cr_assert_eq(rt_chan_try_send(ch, &first), 0); /* full */
    static rt_chan_send tx;
    static rt_sleep short_sleep;
    static rt_select sel;
    rt_chan_send_init(&tx, ch, &second);
    rt_sleep_init(&short_sleep, rt, 5 * MS);
    rt_select_init(&sel, RT_FUTURES(&tx.future, &short_sleep.future));
    run_to_end(rt, &sel.future);
    cr_assert_eq(sel.index, 1);
    cr_assert_eq(tx.result, -ECANCELED, "not sent: the value is still ours");
    void *got = NULL;
    cr_assert_eq(rt_chan_try_recv(ch, &got), 0);
    cr_assert_eq(got, &first);
    cr_assert_eq(rt_chan_try_recv(ch, &got), -EAGAIN, "the lost send left nothing behind");
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

Test(combine, a_lock_that_lost_is_not_held)
{
    rt_runtime *rt = new_runtime(2);
    static rt_mutex *m;
    rt_mutex_new(&m);
    cr_assert_eq(rt_mutex_try_lock(m), 0); /* the test holds it */
    static rt_mutex_lock lk;
    static rt_sleep short_sleep;
    static rt_select sel;
    rt_mutex_lock_init(&lk, m);
    rt_sleep_init(&short_sleep, rt, 5 * MS);
    rt_select_init(&sel, RT_FUTURES(&lk.future, &short_sleep.future));
    run_to_end(rt, &sel.future);
    cr_assert_eq(sel.index, 1);
    cr_assert_eq(lk.result, -ECANCELED);
    rt_mutex_unlock(m);
    cr_assert_eq(rt_mutex_try_lock(m), 0, "the dropped wait took nothing");
    rt_mutex_unlock(m);
    rt_mutex_drop(m);
    finish_runtime(rt, 0);
}

Test(combine, select_wakes_on_whichever_arm_becomes_ready)
{
    rt_runtime *rt = new_runtime(2);
    int ours;
    rt_io *io;
    tcp_pair(rt, &ours, &io);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    static char buf[8];
    static rt_io_read rd;
    static rt_chan_recv rx;
    static rt_select sel;
    rt_io_read_init(&rd, io, buf, sizeof buf);
    rt_chan_recv_init(&rx, ch);
    rt_select_init(&sel, RT_FUTURES(&rd.future, &rx.future));
    static struct event pending = EVENT_INIT;
    rt_task *t = start_waiting(rt, &sel.future, &pending);
    cr_assert_eq(write(ours, "hi", 2), 2);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(sel.index, 0);
    cr_assert_eq(sel.result, 2);
    cr_assert_eq(memcmp(buf, "hi", 2), 0);
    cr_assert_eq(rx.result, -ECANCELED);
    rt_io_close(io);
    close(ours);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

Test(combine, init_rejects_bad_arguments)
{
    rt_select sel;
    rt_future *none[1] = {NULL};
    cr_assert_eq(rt_select_init(NULL, none, 1), -EINVAL);
    cr_assert_eq(rt_select_init(&sel, NULL, 1), -EINVAL);
    cr_assert_eq(rt_select_init(&sel, none, 1), -EINVAL);
    cr_assert(rt_future_is_done(&sel.future), "a failed init leaves it finished");
    cr_assert_eq(sel.result, -EINVAL);
    rt_future *many[RT_COMBINE_MAX + 1] = {0};
    cr_assert_eq(rt_select_init(&sel, many, RT_COMBINE_MAX + 1), -EINVAL);
    cr_assert_eq(rt_select_init(&sel, many, 0), -EINVAL);
    rt_join_all j;
    rt_sleep s = {0};
    rt_future *one[1] = {&s.future};
    cr_assert_eq(rt_join_all_init(&j, one, 1, 0x80), -EINVAL);
    cr_assert_eq(rt_timeout_init(NULL, NULL, &s.future, 1), -EINVAL);
    rt_timeout t;
    cr_assert_eq(rt_timeout_init(&t, NULL, &s.future, 1), -EINVAL, "no runtime outside a task");
    rt_context cx = noop_context();
    cr_assert_eq(RT_POLL_OP(&t, &cx), RT_READY);
    cr_assert_eq(t.result, -EINVAL);
}

/* ---- timeout ----------------------------------------------------------------- */

Test(combine, timeout_around_a_socket_read_loses_no_byte)
{
    rt_runtime *rt = new_runtime(2);
    int ours;
    rt_io *io;
    tcp_pair(rt, &ours, &io);
    static char buf[8];
    static rt_io_read rd;
    static rt_timeout limit;
    rt_io_read_init(&rd, io, buf, sizeof buf);
    rt_timeout_init(&limit, rt, &rd.future, 5 * MS);
    run_to_end(rt, &limit.future);
    cr_assert_eq(limit.result, -ETIMEDOUT);
    cr_assert_eq(rd.result, -ECANCELED);
    /* Bytes that come later are all there for the next read. */
    cr_assert_eq(write(ours, "late", 4), 4);
    rt_io_read_init(&rd, io, buf, sizeof buf);
    rt_timeout_init(&limit, rt, &rd.future, 30 * SEC);
    run_to_end(rt, &limit.future);
    cr_assert_eq(limit.result, 4);
    cr_assert_eq(memcmp(buf, "late", 4), 0);
    rt_io_close(io);
    close(ours);
    finish_runtime(rt, 0);
}

Test(combine, deadline_around_a_join)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *sleeper;
    cr_assert_eq(rt_spawn(rt, never_poll, NULL, NULL, 0, &sleeper), 0);
    static rt_task_join join;
    static rt_timeout limit;
    rt_task_join_init(&join, sleeper);
    cr_assert_eq(rt_timeout_until_init(&limit, rt, &join.future, rt_now_ns() + 5 * MS), 0);
    run_to_end(rt, &limit.future);
    cr_assert_eq(limit.result, -ETIMEDOUT);
    cr_assert_eq(join.result, -ECANCELED, "the join was dropped, detaching the handle");
    finish_runtime(rt, 1); /* the never-ending task, cancelled by shutdown */
}

Test(combine, timeout_around_a_select_of_a_read_and_a_receive)
{
    rt_runtime *rt = new_runtime(2);
    int ours;
    rt_io *io;
    tcp_pair(rt, &ours, &io);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    static char buf[8];
    static rt_io_read rd;
    static rt_chan_recv rx;
    static rt_select sel;
    static rt_timeout limit;
    rt_io_read_init(&rd, io, buf, sizeof buf);
    rt_chan_recv_init(&rx, ch);
    rt_select_init(&sel, RT_FUTURES(&rd.future, &rx.future));
    rt_timeout_init(&limit, rt, &sel.future, 30 * SEC);
    static struct event pending = EVENT_INIT;
    rt_task *t = start_waiting(rt, &limit.future, &pending);
    static int message;
    cr_assert_eq(rt_chan_try_send(ch, &message), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(limit.result, 0);
    cr_assert_eq(sel.index, 1);
    cr_assert_eq(rx.value, &message);
    cr_assert_eq(rd.result, -ECANCELED);

    /* The same nest timing out drops both arms and the select. */
    rt_io_read_init(&rd, io, buf, sizeof buf);
    rt_chan_recv_init(&rx, ch);
    rt_select_init(&sel, RT_FUTURES(&rd.future, &rx.future));
    rt_timeout_init(&limit, rt, &sel.future, 5 * MS);
    run_to_end(rt, &limit.future);
    cr_assert_eq(limit.result, -ETIMEDOUT);
    cr_assert_eq(sel.result, -ECANCELED);
    cr_assert_eq(rx.result, -ECANCELED);
    cr_assert_eq(rd.result, -ECANCELED);
    rt_io_close(io);
    close(ours);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* ---- join_all ---------------------------------------------------------------- */

Test(combine, join_all_waits_for_every_operation)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    rt_task *child;
    cr_assert_eq(rt_spawn(rt, trivial_poll, NULL, NULL, 0, &child), 0);
    static rt_sleep nap;
    static rt_chan_recv rx;
    static rt_task_join join;
    static rt_join_all all;
    rt_sleep_init(&nap, rt, 2 * MS);
    rt_chan_recv_init(&rx, ch);
    rt_task_join_init(&join, child);
    rt_join_all_init(&all, RT_FUTURES(&nap.future, &rx.future, &join.future), 0);
    static struct event pending = EVENT_INIT;
    rt_task *t = start_waiting(rt, &all.future, &pending);
    static int message;
    cr_assert_eq(rt_chan_try_send(ch, &message), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(all.result, 0);
    cr_assert_eq(all.failed, 3);
    cr_assert_eq(nap.result, 0);
    cr_assert_eq(rx.value, &message);
    cr_assert_eq(join.result, 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

Test(combine, join_all_reports_the_first_error_and_can_cancel_the_rest)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    rt_chan_sender_drop(ch); /* every receive ends with -EPIPE */
    static rt_sleep nap, long_sleep;
    static rt_chan_recv rx;
    static rt_join_all all;
    rt_sleep_init(&nap, rt, 1 * MS);
    rt_chan_recv_init(&rx, ch);
    rt_join_all_init(&all, RT_FUTURES(&nap.future, &rx.future), 0);
    run_to_end(rt, &all.future);
    cr_assert_eq(all.result, -EPIPE);
    cr_assert_eq(all.failed, 1);
    cr_assert_eq(nap.result, 0, "without the flag the others run to the end");

    rt_sleep_init(&long_sleep, rt, 3600 * SEC);
    rt_chan_recv_init(&rx, ch);
    rt_join_all_init(&all, RT_FUTURES(&long_sleep.future, &rx.future), RT_JOIN_CANCEL_ON_ERROR);
    run_to_end(rt, &all.future);
    cr_assert_eq(all.result, -EPIPE);
    cr_assert_eq(all.failed, 1);
    cr_assert_eq(long_sleep.result, -ECANCELED, "the first error cancelled the sleep");
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* ---- a coroutine ended at each await point ------------------------------------ */

/* An operation around another that tells the test where the task waits. */
struct observed {
    RT_FUTURE_HEADER;
    rt_future *inner;
    int point;
};

static atomic_int parked_at = -1;
static struct event parked = EVENT_INIT;

static rt_poll observed_poll(rt_future *f, rt_context *cx)
{
    struct observed *o = (struct observed *)f;
    if (rt_future_poll(o->inner, cx) == RT_READY)
        return rt_future_finish(f, o->inner->result);
    atomic_store(&parked_at, o->point);
    event_signal(&parked);
    return RT_PENDING;
}

static void observed_drop(rt_future *f)
{
    rt_future_drop(((struct observed *)f)->inner);
}

static const rt_future_vtable observed_vtable = {observed_poll, observed_drop, NULL};

static void observe(struct observed *o, rt_future *inner, int point)
{
    o->future.vtable = &observed_vtable;
    o->result = 0;
    o->inner = inner;
    o->point = point;
}

/* What the journey goes through; each await point can be left blocked. */
static struct {
    rt_mutex *lock;    /* point 0: locked, then held across the rest */
    rt_chan *messages; /* point 1: a receive, against a long sleep */
    rt_io *socket;     /* point 2: a read, within a long timeout */
    rt_notify *notify; /* point 3: a notification and a nap, joined */
    rt_chan *full;     /* point 4: a send, into a channel of one */
} world;

#define POINTS 5

/* The state begins with the coroutine record and the task is spawned with
 * rt_coro_drop: nothing else cleans up after it. */
struct journey {
    rt_coro co;
    struct observed obs;
    rt_mutex_lock lock;
    rt_chan_recv rx;
    rt_sleep long_sleep;
    rt_select sel;
    char buf[4];
    rt_io_read rd;
    rt_timeout limit;
    rt_notified note;
    rt_sleep nap;
    rt_join_all all;
    rt_chan_send tx;
};

static int sent_value;

static rt_poll journey_poll(void *state, rt_context *cx, void **out)
{
    struct journey *j = state;
    RT_CORO_BEGIN(&j->co);
    rt_mutex_lock_init(&j->lock, world.lock);
    observe(&j->obs, &j->lock.future, 0);
    RT_AWAIT(&j->co, cx, &j->obs);
    rt_coro_hold(&j->co, &j->lock.guard);

    rt_chan_recv_init(&j->rx, world.messages);
    rt_sleep_init(&j->long_sleep, NULL, 3600 * SEC);
    rt_select_init(&j->sel, RT_FUTURES(&j->rx.future, &j->long_sleep.future));
    observe(&j->obs, &j->sel.future, 1);
    RT_AWAIT(&j->co, cx, &j->obs);

    rt_io_read_init(&j->rd, world.socket, j->buf, sizeof j->buf);
    rt_timeout_init(&j->limit, NULL, &j->rd.future, 3600 * SEC);
    observe(&j->obs, &j->limit.future, 2);
    RT_AWAIT(&j->co, cx, &j->obs);

    rt_notified_init(&j->note, world.notify);
    rt_sleep_init(&j->nap, NULL, 1 * MS);
    rt_join_all_init(&j->all, RT_FUTURES(&j->note.future, &j->nap.future), 0);
    observe(&j->obs, &j->all.future, 3);
    RT_AWAIT(&j->co, cx, &j->obs);

    rt_chan_send_init(&j->tx, world.full, &sent_value);
    observe(&j->obs, &j->tx.future, 4);
    RT_AWAIT(&j->co, cx, &j->obs);
    RT_RELEASE(&j->co, &j->lock);
    RT_CORO_END(&j->co, out);
}

/* Sets the world up so that the journey passes every point before `stop`
 * and waits at `stop` (POINTS: it runs to its end). */
static void world_open(rt_runtime *rt, int stop, int *ours)
{
    static int message, filler;
    rt_mutex_new(&world.lock);
    if (stop == 0)
        cr_assert_eq(rt_mutex_try_lock(world.lock), 0);
    cr_assert_eq(rt_chan_new(1, &world.messages), 0);
    if (stop > 1)
        cr_assert_eq(rt_chan_try_send(world.messages, &message), 0);
    tcp_pair(rt, ours, &world.socket);
    if (stop > 2)
        cr_assert_eq(write(*ours, "x", 1), 1);
    rt_notify_new(&world.notify);
    if (stop > 3)
        rt_notify_one(world.notify);
    cr_assert_eq(rt_chan_new(1, &world.full), 0);
    if (stop <= 4)
        cr_assert_eq(rt_chan_try_send(world.full, &filler), 0);
}

/* Checks that the journey, wherever it ended, left nothing held or taken
 * that it had not finished taking, and ends the world. */
static void world_check_and_close(int stop, int ours, bool shut)
{
    if (stop == 0)
        rt_mutex_unlock(world.lock); /* the test's own hold */
    cr_assert_eq(rt_mutex_try_lock(world.lock), 0, "the lock was released (point %d)", stop);
    rt_mutex_unlock(world.lock);
    void *v = NULL;
    if (stop == 1) {
        /* The receive dropped at the point left the queue: a message sent
         * now is there for the next receiver. */
        static int later;
        cr_assert_eq(rt_chan_try_send(world.messages, &later), 0);
        cr_assert_eq(rt_chan_try_recv(world.messages, &v), 0);
        cr_assert_eq(v, &later);
    }
    cr_assert_eq(rt_chan_try_recv(world.messages, &v), -EAGAIN, "nothing left (point %d)", stop);
    if (stop <= 4) {
        /* The send that did not finish left the channel as it was. */
        cr_assert_eq(rt_chan_try_recv(world.full, &v), 0);
        cr_assert_neq(v, &sent_value, "point %d", stop);
    } else {
        cr_assert_eq(rt_chan_try_recv(world.full, &v), 0);
        cr_assert_eq(v, &sent_value);
    }
    cr_assert_eq(rt_chan_try_recv(world.full, &v), -EAGAIN);
    rt_chan_sender_drop(world.messages);
    rt_chan_receiver_drop(world.messages, NULL, NULL);
    rt_chan_sender_drop(world.full);
    rt_chan_receiver_drop(world.full, NULL, NULL);
    if (!shut)
        rt_io_close(world.socket); /* else shutdown closed it */
    close(ours);
    rt_notify_drop(world.notify);
    rt_mutex_drop(world.lock);
}

/* Starts a journey and returns once it waits at `stop`. */
static rt_task *journey_start(rt_runtime *rt, int stop)
{
    atomic_store(&parked_at, -1);
    struct journey j = {0};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, journey_poll, rt_coro_drop, &j, &t), 0);
    unsigned long seen = event_count(&parked);
    while (atomic_load(&parked_at) != stop)
        cr_assert(event_wait_for(&parked, ++seen), "the journey never waited at %d", stop);
    return t;
}

Test(combine, a_coroutine_aborted_at_any_await_point_cleans_up_by_itself)
{
    for (int stop = 0; stop < POINTS; stop++) {
        rt_runtime *rt = new_runtime(2);
        int ours;
        world_open(rt, stop, &ours);
        rt_task *t = journey_start(rt, stop);
        rt_task_cancel(t);
        cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), -ECANCELED);
        world_check_and_close(stop, ours, false);
        finish_runtime(rt, 0);
    }
}

Test(combine, a_coroutine_cancelled_by_shutdown_at_any_await_point_cleans_up_by_itself)
{
    for (int stop = 0; stop < POINTS; stop++) {
        rt_runtime *rt = new_runtime(2);
        int ours;
        world_open(rt, stop, &ours);
        rt_task *t = journey_start(rt, stop);
        rt_task_drop(t);
        shut_down(rt, 1);
        world_check_and_close(stop, ours, true);
        cr_assert_eq(rt_runtime_free(rt), 0);
    }
}

Test(combine, a_coroutine_runs_its_whole_journey)
{
    rt_runtime *rt = new_runtime(2);
    int ours;
    world_open(rt, POINTS, &ours);
    struct journey j = {0};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, journey_poll, rt_coro_drop, &j, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    world_check_and_close(POINTS, ours, false);
    finish_runtime(rt, 0);
}

/* ---- edges ------------------------------------------------------------------- */

Test(combine, a_finished_operation_keeps_its_result_when_polled_without_context)
{
    rt_runtime *rt = new_runtime(1);
    static rt_sleep nap;
    static rt_join_all all;
    rt_sleep_init(&nap, rt, 1 * MS);
    rt_join_all_init(&all, RT_FUTURES(&nap.future), 0);
    rt_context cx = noop_context();
    cr_assert_eq(RT_POLL_OP(&all, NULL), RT_READY, "no context: -EINVAL, nothing done");
    cr_assert_eq(all.result, -EINVAL);
    cr_assert(!rt_future_is_done(&all.future));
    run_to_end(rt, &all.future);
    cr_assert_eq(all.result, 0, "the earlier -EINVAL is not the join's outcome");
    cr_assert_eq(all.failed, 1);
    cr_assert_eq(RT_POLL_OP(&all, NULL), RT_READY);
    cr_assert_eq(all.result, 0, "a finished operation keeps its result");
    cr_assert_eq(RT_POLL_OP(&all, &cx), RT_READY);
    cr_assert_eq(all.result, 0);
    finish_runtime(rt, 0);
}

Test(combine, an_interval_tick_in_a_select_keeps_the_phase_when_it_loses_or_is_given_twice)
{
    rt_runtime *rt = new_runtime(1);
    static rt_interval iv;
    static rt_interval_tick tick;
    static rt_sleep soon;
    static rt_select sel;
    cr_assert_eq(rt_interval_init(&iv, rt, 20 * MS), 0);
    int64_t first = iv.next_ns;
    cr_assert_eq(rt_interval_tick_init(&tick, &iv), 0);
    rt_sleep_init(&soon, rt, 1 * MS);
    rt_select_init(&sel, RT_FUTURES(&tick.future, &soon.future));
    run_to_end(rt, &sel.future);
    cr_assert_eq(sel.index, 1, "the sleep comes first");
    cr_assert_eq(tick.result, -ECANCELED, "the losing tick was dropped...");
    cr_assert_eq(iv.next_ns, first, "...and the interval waits for the same tick");
    cr_assert_eq(rt_interval_tick_init(&tick, &iv), 0);
    rt_select_init(&sel, RT_FUTURES(&tick.future, &tick.future));
    run_to_end(rt, &sel.future);
    cr_assert_lt(sel.index, 2, "either of the two is the winner");
    cr_assert_eq(sel.result, 0, "the winner given twice is not dropped as a loser");
    /* On by one period, or by more if the process was held up past a tick. */
    cr_assert_geq(iv.next_ns, first + 20 * MS, "the tick moved the interval on");
    cr_assert_eq((iv.next_ns - first) % (20 * MS), 0, "the interval keeps its phase");
    cr_assert_eq(rt_interval_tick_init(&tick, &iv), 0);
    run_to_end(rt, &tick.future); /* and the next tick comes */
    cr_assert_eq(tick.result, 0);
    cr_assert_geq(rt_now_ns(), first + 20 * MS, "a tick never comes early");
    finish_runtime(rt, 0);
}

Test(combine, a_failed_init_drops_the_operations_it_was_given)
{
    rt_runtime *rt = new_runtime(1);
    rt_task *t;
    cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, &t), 0);
    rt_task_join join;
    rt_task_join_init(&join, t);
    rt_timeout limit;
    /* This thread has no current runtime: the timeout cannot be made, and
     * the join it was given is dropped, which releases the handle. */
    cr_assert_eq(rt_timeout_init(&limit, NULL, &join.future, SEC), -EINVAL);
    cr_assert(rt_future_is_done(&join.future));
    cr_assert_eq(join.result, -ECANCELED);
    cr_assert_null(join.task);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    rt_chan_recv rx;
    rt_chan_recv_init(&rx, ch);
    rt_select sel;
    rt_future *arms[RT_COMBINE_MAX + 1];
    for (size_t i = 0; i < RT_COMBINE_MAX + 1; i++)
        arms[i] = &rx.future;
    cr_assert_eq(rt_select_init(&sel, arms, RT_COMBINE_MAX + 1), -EINVAL);
    cr_assert_eq(rx.result, -ECANCELED);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 1); /* the detached never-ending task */
}

Test(combine, a_timeout_around_a_join_set_to_abort_cancels_the_task)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *t;
    cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, &t), 0);
    static rt_task_join join;
    static rt_timeout limit;
    rt_task_join_init(&join, t);
    join.cancel_on_drop = true;
    rt_timeout_init(&limit, rt, &join.future, 5 * MS);
    run_to_end(rt, &limit.future);
    cr_assert_eq(limit.result, -ETIMEDOUT);
    cr_assert(event_wait_for(&dropped, 1), "the joined task was aborted");
    finish_runtime(rt, 0); /* nothing left for shutdown to cancel */
}
