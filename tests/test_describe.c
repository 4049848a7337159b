/* What an operation waits for (rt_future_describe, diag.h), for the
 * operations that wait on no descriptor of their own: the operations the
 * library does not know (zeroed, finished, a user's vtable with or without
 * describe), text cut at the buffer's end, timers, channels, locks and
 * groups, each polled once by hand so that it waits, described, and
 * dropped; the combinators with their inner operations in words, nested;
 * and an operation described from the test thread while a worker's task
 * waits in it. test_describe_io.c has the operations on descriptors. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_describe.h"

#include <string.h>
#include <unistd.h>

TestSuite(describe, .fini = fail_on_leaks);

/* ---- operations the library does not know ------------------------------------------- */

/* A user's operation that never finishes and names itself in `words`. */
struct user_op {
    RT_FUTURE_HEADER;
    const char *words;
};

static rt_poll user_poll(rt_future *f, rt_context *cx)
{
    (void)f;
    (void)cx;
    return RT_PENDING;
}

static void user_describe(const rt_future *f, rt_wait_info *info)
{
    const struct user_op *op = (const struct user_op *)f;
    info->kind = RT_WAIT_OTHER;
    info->number = 42;
    snprintf(info->text, sizeof info->text, "%s", op->words);
}

static const rt_future_vtable plain_vtable = {user_poll, NULL, NULL};
static const rt_future_vtable worded_vtable = {user_poll, NULL, user_describe};

Test(describe, null_arguments_are_refused)
{
    rt_wait_info info;
    memset(&info, 0x5a, sizeof info);
    cr_assert_eq(rt_future_describe(NULL, &info), -EINVAL);
    cr_assert_eq(info.kind, RT_WAIT_NONE, "info is emptied even when f is NULL");
    cr_assert_eq(info.fd, -1);
    cr_assert_eq(info.text[0], '\0');
    struct user_op op = {.future = {&plain_vtable, 0}};
    cr_assert_eq(rt_future_describe(&op.future, NULL), -EINVAL);
    rt_wait_info_append(NULL, " | ", &op.future); /* nothing happens */
}

Test(describe, a_zeroed_operation_has_not_started)
{
    rt_sleep s;
    memset(&s, 0, sizeof s);
    rt_wait_info info = describe(&s.future);
    expect_fields(&info, RT_WAIT_NONE, -1, 0, NULL, 0);
    cr_assert_str_eq(info.text, "not started");
}

Test(describe, a_finished_operation_says_so_with_its_result)
{
    rt_chan_recv rx;
    cr_assert_eq(rt_chan_recv_init(&rx, NULL), -EINVAL); /* finished with -EINVAL */
    rt_wait_info info = describe(&rx.future);
    expect_fields(&info, RT_WAIT_NONE, -1, 0, NULL, 0);
    expect_words(&info, "finished");
    expect_words(&info, "-22");
}

Test(describe, a_user_operation_without_describe_is_named_by_its_poll_function)
{
    struct user_op op = {.future = {&plain_vtable, 0}};
    rt_wait_info info = describe(&op.future);
    expect_fields(&info, RT_WAIT_OTHER, -1, 0, NULL, 0);
    expect_words(&info, "polled by ");
}

Test(describe, a_user_describe_is_called_and_its_text_terminated)
{
    static char long_words[400];
    memset(long_words, 'x', sizeof long_words - 1);
    struct user_op op = {.future = {&worded_vtable, 0}, .words = "my own wait"};
    rt_wait_info info = describe(&op.future);
    expect_fields(&info, RT_WAIT_OTHER, -1, 0, NULL, 42);
    cr_assert_str_eq(info.text, "my own wait");
    op.words = long_words;
    info = describe(&op.future);
    cr_assert_eq(strlen(info.text), sizeof info.text - 1);
}

Test(describe, appending_to_a_full_text_cuts_it_and_keeps_it_terminated)
{
    static char long_words[120];
    memset(long_words, 'y', sizeof long_words - 1);
    static struct user_op ops[4];
    for (int i = 0; i < 4; i++)
        ops[i] = (struct user_op){.future = {&worded_vtable, 0}, .words = long_words};
    static rt_select sel;
    cr_assert_eq(rt_select_init(&sel, RT_FUTURES(&ops[0].future, &ops[1].future, &ops[2].future,
                                                 &ops[3].future)),
                 0);
    rt_wait_info info = describe(&sel.future);
    expect_fields(&info, RT_WAIT_SELECT, -1, 0, NULL, 0);
    cr_assert_eq(strlen(info.text), sizeof info.text - 1);
    cr_assert_str_eq(info.text + sizeof info.text - 4, "...", "a cut text ends in \"...\"");
    rt_wait_info_append(&info, " | ", &ops[0].future); /* full: nothing more, still terminated */
    cr_assert_eq(strlen(info.text), sizeof info.text - 1);
    RT_DROP(&sel);
}

Test(describe, a_combinator_that_contains_itself_is_described_to_a_bounded_depth)
{
    static rt_select sel;
    cr_assert_eq(rt_select_init(&sel, RT_FUTURES(&sel.future)), 0);
    rt_wait_info info = describe(&sel.future);
    expect_words(&info, "first of 1: first of 1: ");
    expect_words(&info, "...");
    rt_wait_info_append(&info, "", NULL);
    RT_DROP(&sel);
    cr_assert(rt_future_is_done(&sel.future));
}

/* ---- timers ------------------------------------------------------------------ */

Test(describe, a_sleep_says_how_long_is_left)
{
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    hand_init(&h);
    rt_sleep s;
    cr_assert_eq(rt_sleep_init(&s, rt, 100 * SEC), 0);
    rt_wait_info info = describe_pending(&s.future, &h);
    expect_fields(&info, RT_WAIT_SLEEP, -1, s.deadline_ns, NULL, 0);
    expect_words(&info, "sleep until +");
    double left = seconds_after(&info, "until ");
    cr_assert(left > 0 && left <= 100.0, "%f s left of 100 s", left);
    expect_no_words(&info, "due");
    RT_DROP(&s);

    /* Overdue (never polled, or a dump that comes late): negative. */
    cr_assert_eq(rt_sleep_until_init(&s, rt, rt_now_ns() - 2 * SEC), 0);
    info = describe(&s.future);
    expect_fields(&info, RT_WAIT_SLEEP, -1, s.deadline_ns, NULL, 0);
    expect_words(&info, "sleep until -");
    expect_words(&info, "(due)");
    left = seconds_after(&info, "until ");
    cr_assert(left <= -2.0, "%f s", left);
    RT_DROP(&s);
    finish_runtime(rt, 0);
}

Test(describe, an_interval_says_its_next_tick_and_period)
{
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    hand_init(&h);
    rt_interval iv;
    rt_interval_tick tick;
    cr_assert_eq(rt_interval_init(&iv, rt, 250 * SEC), 0);
    cr_assert_eq(rt_interval_tick_init(&tick, &iv), 0);
    rt_wait_info info = describe_pending(&tick.future, &h);
    expect_fields(&info, RT_WAIT_SLEEP, -1, iv.next_ns, NULL, 0);
    expect_words(&info, "tick until +");
    expect_words(&info, "every 250.000 s");
    RT_DROP(&tick);
    finish_runtime(rt, 0);
}

/* ---- channels, locks, groups ---------------------------------------------------------- */

Test(describe, channel_operations_name_their_channel)
{
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    hand_init(&h);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);

    rt_chan_recv rx;
    rt_chan_recv_init(&rx, ch);
    EXPECT_WAIT(&rx, &h, RT_WAIT_RECV, -1, ch, "receive on channel ", "capacity 1");

    static int first, second;
    cr_assert_eq(rt_chan_try_send(ch, &first), 0); /* full now */
    rt_chan_send tx;
    rt_chan_send_init(&tx, ch, &second);
    EXPECT_WAIT(&tx, &h, RT_WAIT_SEND, -1, ch, "send on channel ");
    cr_assert_eq(tx.result, -ECANCELED);

    rt_oneshot *o;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    rt_oneshot_recv orx;
    rt_oneshot_recv_init(&orx, o);
    EXPECT_WAIT(&orx, &h, RT_WAIT_RECV, -1, o, "oneshot");

    rt_oneshot_sender_drop(o);
    rt_oneshot_receiver_drop(o, NULL);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&h.w), 0);
}

Test(describe, lock_acquire_and_notified_name_their_primitive)
{
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    hand_init(&h);

    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_mutex_lock lk;
    rt_mutex_lock_init(&lk, m);
    EXPECT_WAIT(&lk, &h, RT_WAIT_LOCK, -1, m, "lock of mutex ");
    rt_mutex_unlock(m);
    rt_mutex_drop(m);

    rt_semaphore *sem;
    cr_assert_eq(rt_semaphore_new(1, &sem), 0);
    rt_semaphore_acquire acq;
    rt_semaphore_acquire_init(&acq, sem, 2);
    EXPECT_WAIT(&acq, &h, RT_WAIT_ACQUIRE, -1, sem, "acquire 2 permits of semaphore ");
    rt_semaphore_drop(sem);

    rt_notify *n;
    cr_assert_eq(rt_notify_new(&n), 0);
    rt_notified nd;
    rt_notified_init(&nd, n);
    EXPECT_WAIT(&nd, &h, RT_WAIT_NOTIFIED, -1, n, "notif");
    rt_notify_drop(n);

    finish_runtime(rt, 0);
    cr_assert_eq(counting_outstanding(&h.w), 0);
}

/* A child of the group that waits behind a gate. */
static struct gate child_gate = GATE_INIT;

static rt_poll gated_child_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    if (!gate_pass(&child_gate, cx))
        return RT_PENDING;
    *out = NULL;
    return RT_READY;
}

Test(describe, group_waits_name_their_group)
{
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    hand_init(&h);
    rt_group *g;
    cr_assert_eq(rt_group_new(rt, NULL, NULL, &g), 0);

    rt_group_next next;
    rt_group_next_init(&next, g);
    EXPECT_WAIT(&next, &h, RT_WAIT_GROUP, -1, g, "next result of group ");

    cr_assert_eq(rt_group_spawn(g, NULL, gated_child_poll, NULL, NULL, 0, NULL), 0);
    rt_group_join all;
    rt_group_join_all_init(&all, g);
    EXPECT_WAIT(&all, &h, RT_WAIT_GROUP, -1, g, "every child of group ");

    /* A close is described before any poll. */
    rt_group_close_init(&all, g);
    EXPECT_WAIT(&all, NULL, RT_WAIT_GROUP, -1, g, "close of group ");

    gate_open(&child_gate);
    rt_group_join_all_init(&all, g);
    poll_to_end(&all.future);
    cr_assert_eq(all.result, 0);
    rt_group_free(g);
    finish_runtime(rt, 0);
}

/* ---- combinators ------------------------------------------------------------------ */

Test(describe, nested_combinators_describe_every_inner_operation)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    struct hand h;
    hand_init(&h);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    rt_io *in;
    int writer;
    pipe_to_read(rt, &in, &writer);
    int rfd = rt_io_fd(in);

    static rt_chan_recv rx;
    static rt_io_read rd;
    static rt_select sel;
    static rt_timeout limit;
    char buf[8];
    rt_chan_recv_init(&rx, ch);
    rt_io_read_init(&rd, in, buf, sizeof buf);
    cr_assert_eq(rt_select_init(&sel, RT_FUTURES(&rx.future, &rd.future)), 0);
    cr_assert_eq(rt_timeout_init(&limit, rt, &sel.future, 500 * SEC), 0);
    rt_wait_info info = describe_pending(&limit.future, &h);
    expect_fields(&info, RT_WAIT_TIMEOUT, -1, limit.sleep.deadline_ns, NULL, 0);
    expect_words(&info, "timeout in +");
    double left = seconds_after(&info, "timeout in ");
    cr_assert(left > 0 && left <= 500.0, "%f s", left);
    expect_words(&info, " around: first of 2: receive on channel ");
    expect_object_words(&info, ch);
    expect_words(&info, " | read on ");
    expect_fd_words(&info, rfd);

    info = describe(&sel.future);
    expect_fields(&info, RT_WAIT_SELECT, -1, 0, NULL, 0);
    expect_words(&info, "first of 2: receive on channel ");
    RT_DROP(&limit);
    cr_assert(rt_future_is_done(&rx.future) && rt_future_is_done(&rd.future));

    /* A join describes only the operations it still waits for. */
    static int message;
    cr_assert_eq(rt_chan_try_send(ch, &message), 0);
    static rt_join_all all;
    rt_chan_recv_init(&rx, ch);
    rt_io_read_init(&rd, in, buf, sizeof buf);
    cr_assert_eq(rt_join_all_init(&all, RT_FUTURES(&rx.future, &rd.future), 0), 0);
    info = describe_pending(&all.future, &h);
    cr_assert_eq(rx.result, 0);
    expect_fields(&info, RT_WAIT_JOIN_ALL, -1, 0, NULL, 0);
    expect_words(&info, "all of 2 (1 done): read on ");
    expect_fd_words(&info, rfd);
    expect_no_words(&info, "channel");
    RT_DROP(&all);

    cr_assert_eq(rt_io_close(in), 0);
    close(writer);
    cr_assert_eq(count_fds(), fds);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* A task that awaits one operation prepared by the test (in static
 * storage) and signals `pending` whenever it waits. */
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

Test(describe, an_operation_a_task_waits_in_is_described_from_another_thread)
{
    /* As a task dump does: the task waits on a worker, nothing wakes it,
     * and the test thread reads its operation. */
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(2, &ch), 0);
    rt_io *in;
    int writer;
    pipe_to_read(rt, &in, &writer);
    static rt_chan_recv rx;
    static rt_io_read rd;
    static rt_select sel;
    static rt_timeout limit;
    static char buf[8];
    rt_chan_recv_init(&rx, ch);
    rt_io_read_init(&rd, in, buf, sizeof buf);
    rt_select_init(&sel, RT_FUTURES(&rx.future, &rd.future));
    rt_timeout_init(&limit, rt, &sel.future, 600 * SEC);
    static struct event pending = EVENT_INIT;
    struct await_one a = {.op = &limit.future, .pending = &pending};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, await_one_poll, NULL, &a, &t), 0);
    cr_assert(event_wait_for(&pending, 1));
    rt_wait_info info = describe(&limit.future);
    expect_fields(&info, RT_WAIT_TIMEOUT, -1, limit.sleep.deadline_ns, NULL, 0);
    expect_words(&info, "receive on channel ");
    expect_fd_words(&info, rt_io_fd(in));
    static int message;
    cr_assert_eq(rt_chan_try_send(ch, &message), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(limit.result, 0);
    info = describe(&limit.future);
    expect_fields(&info, RT_WAIT_NONE, -1, 0, NULL, 0);
    expect_words(&info, "finished (result 0)");
    cr_assert_eq(rt_io_close(in), 0);
    close(writer);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}
