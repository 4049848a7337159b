/* Fair and biased selects: with every arm ready at once, a fair select
 * (rt_select_init) lets each win about as often as the others, also when it
 * is initialised again in a loop, when two selects are interleaved on one
 * thread, and inside a task; a biased one (rt_select_biased_init) always
 * lets the first ready arm win. */
#include "support.h"

#include <string.h>

TestSuite(select_fair, .fini = fail_on_leaks);

/* An operation that is ready at every poll: it finishes at once. */
typedef struct ready_op {
    RT_FUTURE_HEADER;
} ready_op;

static rt_poll ready_poll(rt_future *f, rt_context *cx)
{
    (void)cx;
    return rt_future_finish(f, 0);
}

static const rt_future_vtable ready_vtable = {ready_poll, NULL, NULL};

static void ready_init(ready_op *op)
{
    op->future.vtable = &ready_vtable;
    op->result = 0;
}

enum { ROUNDS = 10000 };

/* Runs ROUNDS selects over `arms` always-ready operations, polled by hand,
 * and counts each arm's wins. */
static void count_wins(size_t arms, bool biased, unsigned *wins)
{
    ready_op ops[4];
    rt_future *f[4];
    for (size_t i = 0; i < arms; i++)
        f[i] = &ops[i].future;
    rt_context cx = noop_context();
    memset(wins, 0, arms * sizeof *wins);
    for (int r = 0; r < ROUNDS; r++) {
        for (size_t i = 0; i < arms; i++)
            ready_init(&ops[i]);
        rt_select sel;
        int rc = biased ? rt_select_biased_init(&sel, f, arms) : rt_select_init(&sel, f, arms);
        cr_assert_eq(rc, 0);
        cr_assert_eq(RT_POLL_OP(&sel, &cx), RT_READY);
        cr_assert_lt(sel.index, arms);
        wins[sel.index]++;
        for (size_t i = 0; i < arms; i++)
            if (i != sel.index)
                cr_assert_eq(ops[i].result, -ECANCELED, "a loser was not dropped");
    }
}

Test(select_fair, two_always_ready_arms_each_win_40_to_60_percent)
{
    unsigned wins[2];
    count_wins(2, false, wins);
    for (int i = 0; i < 2; i++)
        cr_assert(wins[i] >= ROUNDS * 40 / 100 && wins[i] <= ROUNDS * 60 / 100,
                  "arm %d won %u of %d selects", i, wins[i], ROUNDS);
}

Test(select_fair, every_arm_of_four_wins_its_share)
{
    unsigned wins[4];
    count_wins(4, false, wins);
    for (int i = 0; i < 4; i++)
        cr_assert(wins[i] >= ROUNDS * 20 / 100 && wins[i] <= ROUNDS * 30 / 100,
                  "arm %d won %u of %d selects", i, wins[i], ROUNDS);
}

Test(select_fair, a_biased_select_lets_the_first_ready_arm_win)
{
    unsigned wins[2];
    count_wins(2, true, wins);
    cr_assert_eq(wins[0], ROUNDS, "the first arm won only %u times", wins[0]);
}

Test(select_fair, two_selects_interleaved_on_one_thread_stay_fair)
{
    /* A counter shared by the two would give one of them every even
     * number: its first arm would always win. */
    ready_op a[2], b[2];
    rt_future *fa[2] = {&a[0].future, &a[1].future};
    rt_future *fb[2] = {&b[0].future, &b[1].future};
    rt_context cx = noop_context();
    unsigned wins_a = 0, wins_b = 0;
    for (int r = 0; r < ROUNDS; r++) {
        rt_select sa, sb;
        ready_init(&a[0]);
        ready_init(&a[1]);
        ready_init(&b[0]);
        ready_init(&b[1]);
        cr_assert_eq(rt_select_init(&sa, fa, 2), 0);
        cr_assert_eq(rt_select_init(&sb, fb, 2), 0);
        cr_assert_eq(RT_POLL_OP(&sa, &cx), RT_READY);
        cr_assert_eq(RT_POLL_OP(&sb, &cx), RT_READY);
        wins_a += sa.index == 0;
        wins_b += sb.index == 0;
    }
    cr_assert(wins_a >= ROUNDS * 40 / 100 && wins_a <= ROUNDS * 60 / 100, "a: %u", wins_a);
    cr_assert(wins_b >= ROUNDS * 40 / 100 && wins_b <= ROUNDS * 60 / 100, "b: %u", wins_b);
}

/* The same inside a task, where each worker picks from its own generator:
 * two channels that always hold a value, received in a select loop. */
struct chooser {
    rt_coro co;
    rt_chan *ch[2];
    rt_chan_recv rx[2];
    rt_select sel;
    int round;
    unsigned wins[2];
};

static rt_poll chooser_poll(void *p, rt_context *cx, void **out)
{
    struct chooser *c = p;
    RT_CORO_BEGIN(&c->co);
    for (c->round = 0; c->round < ROUNDS; c->round++) {
        rt_chan_recv_init(&c->rx[0], c->ch[0]);
        rt_chan_recv_init(&c->rx[1], c->ch[1]);
        rt_select_init(&c->sel, RT_FUTURES(&c->rx[0].future, &c->rx[1].future));
        RT_AWAIT(&c->co, cx, &c->sel);
        if (c->sel.result != 0)
            RT_FAIL(&c->co, out, (int)c->sel.result);
        c->wins[c->sel.index]++;
        /* Refill the channel that lost a value: both stay ready. */
        rt_chan_try_send(c->ch[c->sel.index], (void *)1);
    }
    RT_CORO_END(&c->co, out);
}

Test(select_fair, a_select_loop_in_a_task_receives_from_both_channels_evenly)
{
    rt_runtime *rt = new_runtime(2);
    struct chooser c;
    memset(&c, 0, sizeof c);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(rt_chan_new(2, &c.ch[i]), 0);
        cr_assert_eq(rt_chan_try_send(c.ch[i], (void *)1), 0);
    }
    int status = 1;
    cr_assert_eq(rt_block_on(rt, chooser_poll, rt_coro_drop, &c, sizeof c, NULL, &status), 0);
    cr_assert_eq(status, 0, "%s", rt_strerror(status));
    for (int i = 0; i < 2; i++) {
        cr_assert(c.wins[i] >= ROUNDS * 40 / 100 && c.wins[i] <= ROUNDS * 60 / 100,
                  "channel %d won %u of %d", i, c.wins[i], ROUNDS);
        rt_chan_sender_drop(c.ch[i]);
        rt_chan_receiver_drop(c.ch[i], NULL, NULL);
    }
    finish_runtime(rt, 0);
}
