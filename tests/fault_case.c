/* One fault-injection case (see test_fault.c, which runs this program once
 * per case): runs the named scenario on a fresh runtime with request number
 * N failed (and every later one with --persistent), frees the runtime, checks
 * what the scenario saw, and writes a struct fault_report to descriptor 3.
 * LeakSanitizer's check at exit then turns a leak into exit status 23.
 *
 *     fault_case SCENARIO N [--persistent]
 *
 * A scenario records in the ledger what each task did; after
 * rt_runtime_free the case checks:
 *   - every error a call returned is one the header documents for a resource
 *     failure (ENOMEM, EAGAIN, EMFILE), or the documented consequence of one;
 *   - every task that was spawned had its drop run exactly once, and a task
 *     whose spawn failed never ran (rt_block_on included: on any error but
 *     -ECANCELED its future never ran);
 *   - the process's descriptors and threads are back to what they were. */
#include <asyncrt.h>

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"
#include "fault_report.h"

#define MAX_SLOTS 64

/* ---- The ledger: what each task did (one child process per case) -------- */

static struct {
    atomic_uint next;               /* slots handed out */
    atomic_uint spawned[MAX_SLOTS]; /* 1 once the spawn succeeded */
    atomic_uint polled[MAX_SLOTS];  /* polls */
    atomic_uint dropped[MAX_SLOTS]; /* drops (must end at spawned) */
    atomic_uint bad_errors;         /* errors outside the documented set */
    char first_bad[160];            /* the first of them, in words */
} ledger;

static unsigned slot_take(void)
{
    unsigned s = atomic_fetch_add(&ledger.next, 1);
    assert(s < MAX_SLOTS);
    return s;
}

/* Records a spawn's outcome for its slot; returns err. */
static int slot_spawned(unsigned slot, int err)
{
    if (err == 0)
        atomic_store(&ledger.spawned[slot], 1);
    return err;
}

/* The errors a failed resource request may surface as. */
static bool resource_errno(int err)
{
    /* -ENOBUFS: an accepted connection that epoll had no memory to watch. */
    return err == -ENOMEM || err == -EAGAIN || err == -EMFILE || err == -ENOBUFS;
}

/* Checks that `err` is 0 or one of `extra` (a 0-terminated list) or a
 * resource errno; records the first that is not. Returns err. */
static int expect(const char *what, int err, const int *extra)
{
    if (err == 0 || resource_errno(err))
        return err;
    for (; extra != NULL && *extra != 0; extra++)
        if (err == *extra)
            return err;
    if (atomic_fetch_add(&ledger.bad_errors, 1) == 0)
        snprintf(ledger.first_bad, sizeof ledger.first_bad, "%s returned %d (%s)", what, err,
                 rt_strerror(err));
    return err;
}
#define EXPECT(call) expect(#call, (call), NULL)
#define EXPECT_OR(call, ...) expect(#call, (call), (const int[]){__VA_ARGS__, 0})

/* ---- Small futures ------------------------------------------------------ */

/* A child: counts its polls, yields `yields` times, returns its slot. */
struct child {
    rt_coro co;
    unsigned slot;
    int yields;
};

static rt_poll child_poll(void *p, rt_context *cx, void **out)
{
    struct child *c = p;
    atomic_fetch_add(&ledger.polled[c->slot], 1);
    RT_CORO_BEGIN(&c->co);
    while (c->yields-- > 0)
        RT_CORO_YIELD(&c->co, cx);
    RT_RETURN(&c->co, out, (uintptr_t)c->slot);
    RT_CORO_END(&c->co, out);
}

static void child_drop(void *p)
{
    struct child *c = p;
    atomic_fetch_add(&ledger.dropped[c->slot], 1);
}

static int spawn_child(rt_runtime *rt, int yields, rt_task **handle)
{
    struct child c = {.slot = slot_take(), .yields = yields};
    return slot_spawned(c.slot, rt_spawn(rt, child_poll, child_drop, &c, sizeof c, handle));
}

/* An operation that never finishes and stores no waker: only a timeout ends
 * it (by dropping it). */
struct never {
    RT_FUTURE_HEADER;
};

static rt_poll never_poll(rt_future *f, rt_context *cx)
{
    (void)f, (void)cx;
    return RT_PENDING;
}

static const rt_future_vtable never_vtable = {never_poll, NULL, NULL};

static void never_init(struct never *n)
{
    *n = (struct never){.future.vtable = &never_vtable};
}

/* ---- Scenarios ---------------------------------------------------------- */

/* Every root future starts with these fields: its slot and the first error it
 * met (its result). */
struct root_head {
    rt_coro co;
    unsigned slot;
    int err;
};

static void root_drop_head(struct root_head *h)
{
    atomic_fetch_add(&ledger.dropped[h->slot], 1);
}

/* Runs `poll` as the root task with rt_block_on, checking its promise, and
 * returns the root's own error (or rt_block_on's). */
static int run_root(rt_runtime *rt, rt_poll_fn poll, rt_drop_fn drop, void *state, size_t size)
{
    struct root_head *h = state;
    h->slot = slot_take();
    void *value = NULL;
    unsigned slot = h->slot; /* the state comes back as the drop left it */
    int status = 0;
    int err = EXPECT(rt_block_on(rt, poll, drop, state, size, &value, &status));
    if (err == 0)
        atomic_store(&ledger.spawned[slot], 1);
    /* On errors the ledger expects no poll and no drop for the slot. */
    if (err == 0 && status != 0)
        err = expect("the root's status", status, (const int[]){-ECANCELED, 0});
    return err != 0 ? err : (int)(intptr_t)value;
}

/* Creates the runtime a scenario runs on. */
static int new_rt(unsigned workers, bool diag, rt_runtime **rt)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = workers;
    cfg.blocking_shutdown_ns = 2000000000;
    if (diag) {
        /* Every diagnostic that asks for resources: the watchdog thread,
         * the dump signal's listener, timed tasks. */
        cfg.stall_ns = 1000000000;
        cfg.poll_timing = 1;
        cfg.dump_signal = SIGUSR2;
    }
    return EXPECT(rt_runtime_new(&cfg, rt));
}

/* 1. Start, run a trivial future, stop. */
struct trivial {
    struct root_head h;
};

static rt_poll trivial_poll(void *p, rt_context *cx, void **out)
{
    (void)cx;
    struct trivial *t = p;
    atomic_fetch_add(&ledger.polled[t->h.slot], 1);
    *out = NULL;
    return RT_READY;
}

static void trivial_drop(void *p)
{
    root_drop_head(p);
}

static int scenario_runtime(rt_runtime *rt)
{
    struct trivial t = {0};
    return run_root(rt, trivial_poll, trivial_drop, &t, sizeof t);
}

/* 2. Spawning: joins, an abort, a detach, a named local task, a detached
 * spawn, and a foreign-thread wait. */
struct spawner {
    struct root_head h;
    rt_task *tasks[4]; /* handles not (yet) owned by the join */
    rt_task_join join; /* joins tasks[i], taking its handle over */
    int i;
};

static rt_poll spawner_poll(void *p, rt_context *cx, void **out)
{
    struct spawner *s = p;
    atomic_fetch_add(&ledger.polled[s->h.slot], 1);
    RT_CORO_BEGIN(&s->h.co);
    for (s->i = 0; s->i < 4; s->i++) {
        if ((s->h.err = EXPECT(spawn_child(NULL, s->i, &s->tasks[s->i]))) < 0)
            RT_RETURN(&s->h.co, out, (intptr_t)s->h.err);
    }
    {
        rt_spawn_options opts;
        rt_spawn_options_init(&opts);
        opts.name = "local";
        opts.worker = RT_WORKER_CURRENT;
        struct child c = {.slot = slot_take(), .yields = 2};
        s->h.err = EXPECT(slot_spawned(
            c.slot, rt_spawn_ex(NULL, &opts, child_poll, child_drop, &c, sizeof c, NULL)));
        if (s->h.err == 0)
            s->h.err = EXPECT(spawn_child(NULL, 1, NULL));
    }
    rt_task_cancel(s->tasks[2]);
    rt_task_drop(s->tasks[3]);
    s->tasks[3] = NULL;
    for (s->i = 0; s->i < 3; s->i++) {
        rt_task_join_init(&s->join, s->tasks[s->i]);
        s->tasks[s->i] = NULL;
        RT_AWAIT(&s->h.co, cx, &s->join);
        if (s->join.result != 0 && !(s->i == 2 && s->join.result == -ECANCELED))
            expect("rt_task_join status", (int)s->join.result, NULL);
    }
    RT_RETURN(&s->h.co, out, (intptr_t)s->h.err);
    RT_CORO_END(&s->h.co, out);
}

static void spawner_drop(void *p)
{
    struct spawner *s = p;
    RT_DROP(&s->join); /* detaches the handle it owns, if unfinished */
    for (int i = 0; i < 4; i++)
        rt_task_drop(s->tasks[i]);
    root_drop_head(&s->h);
}

static int scenario_spawn(rt_runtime *rt)
{
    struct spawner s = {0};
    int err = run_root(rt, spawner_poll, spawner_drop, &s, sizeof s);
    /* And from this (foreign) thread: spawn, then wait. */
    rt_task *t = NULL;
    int e = EXPECT(spawn_child(rt, 1, &t));
    if (e == 0) {
        int status = 0;
        e = EXPECT(rt_task_wait(t, -1, NULL, &status));
        if (e < 0)
            rt_task_drop(t); /* the wait's own error: the handle is still ours */
        else
            e = EXPECT(status);
    }
    return err != 0 ? err : e;
}

/* 3. Timers: a sleep, a timeout that fires, an interval's two ticks. */
struct timers {
    struct root_head h;
    rt_sleep sleep;
    struct never never;
    rt_timeout timeout; /* around never */
    rt_interval interval;
    rt_interval_tick tick;
    int ticks;
};

static rt_poll timers_poll(void *p, rt_context *cx, void **out)
{
    struct timers *t = p;
    atomic_fetch_add(&ledger.polled[t->h.slot], 1);
    RT_CORO_BEGIN(&t->h.co);
    rt_sleep_init(&t->sleep, NULL, 1000000);
    RT_AWAIT(&t->h.co, cx, &t->sleep); /* finished: its timer is released */
    t->h.err = (int)t->sleep.result;
    if (EXPECT(t->h.err) < 0)
        RT_RETURN(&t->h.co, out, (intptr_t)t->h.err);
    never_init(&t->never);
    rt_timeout_init(&t->timeout, NULL, &t->never.future, 2000000);
    RT_AWAIT(&t->h.co, cx, &t->timeout);
    t->h.err = (int)t->timeout.result;
    if (t->h.err == -ETIMEDOUT)
        t->h.err = 0;
    else if (EXPECT(t->h.err) == 0)
        expect("timeout of a never-ready future", -EPROTO, NULL);
    if (t->h.err < 0)
        RT_RETURN(&t->h.co, out, (intptr_t)t->h.err);
    rt_interval_init(&t->interval, NULL, 1000000);
    for (t->ticks = 0; t->ticks < 2; t->ticks++) {
        rt_interval_tick_init(&t->tick, &t->interval);
        RT_AWAIT(&t->h.co, cx, &t->tick);
        t->h.err = (int)t->tick.result;
        if (EXPECT(t->h.err) < 0)
            break;
    }
    RT_RETURN(&t->h.co, out, (intptr_t)t->h.err);
    RT_CORO_END(&t->h.co, out);
}

static void timers_drop(void *p)
{
    struct timers *t = p;
    RT_DROP(&t->sleep);
    RT_DROP(&t->timeout); /* and never, if it still waits */
    RT_DROP(&t->tick);
    root_drop_head(&t->h);
}

static int scenario_timers(rt_runtime *rt)
{
    struct timers t = {0};
    return run_root(rt, timers_poll, timers_drop, &t, sizeof t);
}

/* 4. TCP: a server task accepts and echoes one message; the root connects,
 * writes, joins the server (so a failed server never leaves the client
 * waiting), then reads the echo. */
struct server {
    rt_coro co;
    unsigned slot;
    rt_io *listener; /* borrowed from the root */
    rt_io *conn;
    rt_tcp_accept accept;
    rt_io_read rd;
    rt_io_write_all wr;
    char buf[64];
    int err;
};

static rt_poll server_poll(void *p, rt_context *cx, void **out)
{
    struct server *s = p;
    atomic_fetch_add(&ledger.polled[s->slot], 1);
    RT_CORO_BEGIN(&s->co);
    rt_tcp_accept_init(&s->accept, s->listener);
    RT_AWAIT(&s->co, cx, &s->accept);
    s->err = (int)s->accept.result;
    if (EXPECT(s->err) < 0)
        RT_RETURN(&s->co, out, (intptr_t)s->err);
    s->conn = s->accept.conn;
    rt_io_read_init(&s->rd, s->conn, s->buf, sizeof s->buf);
    RT_AWAIT(&s->co, cx, &s->rd);
    if (s->rd.result <= 0) {
        s->err = s->rd.result < 0 ? (int)s->rd.result : -EPROTO;
        expect("server read", s->err, NULL);
        RT_RETURN(&s->co, out, (intptr_t)s->err);
    }
    rt_io_write_all_init(&s->wr, s->conn, s->buf, (size_t)s->rd.result);
    RT_AWAIT(&s->co, cx, &s->wr);
    s->err = s->wr.result < 0 ? expect("server write", (int)s->wr.result, NULL) : 0;
    RT_RETURN(&s->co, out, (intptr_t)s->err);
    RT_CORO_END(&s->co, out);
}

/* The accept is not dropped: it waits on the root's listener, which the root
 * may have closed already when the runtime shuts down (an abandoned accept
 * only leaves its waker there, which the close releases). */
static void server_drop(void *p)
{
    struct server *s = p;
    RT_DROP(&s->rd);
    RT_DROP(&s->wr);
    rt_io_close(s->conn);
    atomic_fetch_add(&ledger.dropped[s->slot], 1);
}

struct tcp {
    struct root_head h;
    rt_io *listener;
    rt_io *client;
    rt_task_join server; /* owns the server task's handle */
    rt_tcp_connect connect;
    struct sockaddr_storage addr;
    socklen_t len;
    rt_io_write_all wr;
    rt_io_read rd;
    char buf[16];
};

static rt_poll tcp_poll(void *p, rt_context *cx, void **out)
{
    struct tcp *t = p;
    atomic_fetch_add(&ledger.polled[t->h.slot], 1);
    RT_CORO_BEGIN(&t->h.co);
    rt_net_addr("127.0.0.1", 0, &t->addr, &t->len);
    if ((t->h.err = EXPECT(rt_tcp_listen(NULL, (struct sockaddr *)&t->addr, t->len, 16,
                                         RT_NET_REUSEADDR, &t->listener))) < 0)
        RT_RETURN(&t->h.co, out, (intptr_t)t->h.err);
    rt_net_local_addr(t->listener, &t->addr, &t->len);
    {
        struct server s = {.slot = slot_take(), .listener = t->listener};
        rt_task *handle = NULL;
        t->h.err = EXPECT(
            slot_spawned(s.slot, rt_spawn(NULL, server_poll, server_drop, &s, sizeof s, &handle)));
        if (t->h.err < 0)
            RT_RETURN(&t->h.co, out, (intptr_t)t->h.err);
        rt_task_join_init(&t->server, handle);
    }
    rt_tcp_connect_init(&t->connect, NULL, (struct sockaddr *)&t->addr, t->len);
    RT_AWAIT(&t->h.co, cx, &t->connect);
    t->h.err = (int)t->connect.result;
    if (EXPECT(t->h.err) < 0) {
        /* The server may wait for a connection that never comes. */
        rt_task_cancel(t->server.task);
    } else {
        t->client = t->connect.conn;
        rt_io_write_all_init(&t->wr, t->client, "ping", 4);
        RT_AWAIT(&t->h.co, cx, &t->wr);
        if (t->wr.result < 0)
            t->h.err = expect("client write", (int)t->wr.result, NULL);
    }
    RT_AWAIT(&t->h.co, cx, &t->server);
    if (t->h.err == 0 && t->server.result == 0 && t->server.value == NULL) {
        rt_io_read_init(&t->rd, t->client, t->buf, sizeof t->buf);
        RT_AWAIT(&t->h.co, cx, &t->rd);
        if (t->rd.result != 4 || memcmp(t->buf, "ping", 4) != 0)
            expect("client read", t->rd.result < 0 ? (int)t->rd.result : -EPROTO, NULL);
    } else if (t->h.err == 0) {
        t->h.err = t->server.result != 0 ? (int)t->server.result : (int)(intptr_t)t->server.value;
    }
    rt_io_close(t->client);
    t->client = NULL;
    rt_io_close(t->listener);
    t->listener = NULL;
    RT_RETURN(&t->h.co, out, (intptr_t)t->h.err);
    RT_CORO_END(&t->h.co, out);
}

static void tcp_drop(void *p)
{
    struct tcp *t = p;
    RT_DROP(&t->connect);           /* closes its half-open socket, if unfinished */
    rt_task_cancel(t->server.task); /* NULL once joined: a no-op */
    RT_DROP(&t->server);            /* detaches the handle, if not joined */
    RT_DROP(&t->wr);
    RT_DROP(&t->rd);
    rt_io_close(t->client);
    rt_io_close(t->listener);
    root_drop_head(&t->h);
}

static int scenario_tcp(rt_runtime *rt)
{
    struct tcp t = {0};
    return run_root(rt, tcp_poll, tcp_drop, &t, sizeof t);
}

/* 5. Channels: a producer task sends 8 values through a channel of 2 slots,
 * the root receives them to the end of stream; then a oneshot. */
struct producer {
    rt_coro co;
    unsigned slot;
    rt_chan *ch; /* one sender reference, owned */
    rt_chan_send send;
    int i;
};

static rt_poll producer_poll(void *p, rt_context *cx, void **out)
{
    struct producer *pr = p;
    atomic_fetch_add(&ledger.polled[pr->slot], 1);
    RT_CORO_BEGIN(&pr->co);
    for (pr->i = 1; pr->i <= 8; pr->i++) {
        rt_chan_send_init(&pr->send, pr->ch, (void *)(intptr_t)pr->i);
        RT_AWAIT(&pr->co, cx, &pr->send);
        if (pr->send.result != 0)
            expect("rt_chan_send", (int)pr->send.result, NULL);
    }
    RT_CORO_END(&pr->co, out);
}

static void producer_drop(void *p)
{
    struct producer *pr = p;
    RT_DROP(&pr->send);
    rt_chan_sender_drop(pr->ch);
    atomic_fetch_add(&ledger.dropped[pr->slot], 1);
}

struct chans {
    struct root_head h;
    rt_chan *ch;
    rt_chan_recv recv;
    rt_oneshot *once;
    rt_oneshot_recv once_recv;
    int received;
};

static rt_poll chans_poll(void *p, rt_context *cx, void **out)
{
    struct chans *c = p;
    atomic_fetch_add(&ledger.polled[c->h.slot], 1);
    RT_CORO_BEGIN(&c->h.co);
    if ((c->h.err = EXPECT(rt_chan_new(2, &c->ch))) < 0)
        RT_RETURN(&c->h.co, out, (intptr_t)c->h.err);
    {
        struct producer pr = {.slot = slot_take(), .ch = c->ch};
        rt_chan_sender_clone(c->ch);
        c->h.err = EXPECT(slot_spawned(
            pr.slot, rt_spawn(NULL, producer_poll, producer_drop, &pr, sizeof pr, NULL)));
        if (c->h.err < 0)
            rt_chan_sender_drop(c->ch); /* the producer's reference */
        rt_chan_sender_drop(c->ch);     /* our own: the stream ends with the producer */
        if (c->h.err < 0)
            RT_RETURN(&c->h.co, out, (intptr_t)c->h.err);
    }
    for (;;) {
        rt_chan_recv_init(&c->recv, c->ch);
        RT_AWAIT(&c->h.co, cx, &c->recv);
        if (c->recv.result != 0)
            break;
        if ((intptr_t)c->recv.value != ++c->received)
            expect("channel order", -EPROTO, NULL);
    }
    if (c->recv.result != -EPIPE || c->received != 8)
        expect("channel end", c->recv.result != -EPIPE ? (int)c->recv.result : -EPROTO, NULL);
    if ((c->h.err = EXPECT(rt_oneshot_new(&c->once))) < 0)
        RT_RETURN(&c->h.co, out, (intptr_t)c->h.err);
    rt_oneshot_send(c->once, (void *)(intptr_t)7);
    rt_oneshot_recv_init(&c->once_recv, c->once);
    RT_AWAIT(&c->h.co, cx, &c->once_recv);
    if (c->once_recv.result != 0 || (intptr_t)c->once_recv.value != 7)
        expect("oneshot", c->once_recv.result != 0 ? (int)c->once_recv.result : -EPROTO, NULL);
    rt_oneshot_receiver_drop(c->once, NULL);
    c->once = NULL;
    RT_CORO_END(&c->h.co, out);
}

static void chans_drop(void *p)
{
    struct chans *c = p;
    RT_DROP(&c->recv);
    RT_DROP(&c->once_recv);
    if (c->ch != NULL)
        rt_chan_receiver_drop(c->ch, NULL, NULL);
    if (c->once != NULL) {
        rt_oneshot_sender_drop(c->once);
        rt_oneshot_receiver_drop(c->once, NULL);
    }
    root_drop_head(&c->h);
}

static int scenario_channel(rt_runtime *rt)
{
    struct chans c = {0};
    return run_root(rt, chans_poll, chans_drop, &c, sizeof c);
}

/* 6. A task group: four children, then join_all. */
struct group {
    struct root_head h;
    rt_group *g;
    rt_group_join wait;
    int i;
};

static rt_poll group_poll(void *p, rt_context *cx, void **out)
{
    struct group *g = p;
    atomic_fetch_add(&ledger.polled[g->h.slot], 1);
    RT_CORO_BEGIN(&g->h.co);
    if ((g->h.err = EXPECT(rt_group_new(NULL, NULL, NULL, &g->g))) < 0)
        RT_RETURN(&g->h.co, out, (intptr_t)g->h.err);
    for (g->i = 0; g->i < 4 && g->h.err == 0; g->i++) {
        struct child c = {.slot = slot_take(), .yields = g->i};
        g->h.err = EXPECT(slot_spawned(
            c.slot, rt_group_spawn(g->g, NULL, child_poll, child_drop, &c, sizeof c, NULL)));
    }
    rt_group_join_all_init(&g->wait, g->g);
    RT_AWAIT(&g->h.co, cx, &g->wait);
    if (g->wait.result != 0 || g->wait.failed != 0)
        expect("rt_group_join_all", g->wait.result != 0 ? (int)g->wait.result : -EPROTO, NULL);
    rt_group_free(g->g);
    g->g = NULL;
    RT_RETURN(&g->h.co, out, (intptr_t)g->h.err);
    RT_CORO_END(&g->h.co, out);
}

static void group_drop(void *p)
{
    struct group *g = p;
    RT_DROP(&g->wait);
    rt_group_free(g->g);
    root_drop_head(&g->h);
}

static int scenario_group(rt_runtime *rt)
{
    struct group g = {0};
    return run_root(rt, group_poll, group_drop, &g, sizeof g);
}

/* 7. The blocking pool: a joined job and a detached one, from the root task
 * and from this thread. */
static void *job(void *arg)
{
    return arg;
}

struct blocking {
    struct root_head h;
    rt_task_join job; /* owns the job's handle */
};

static rt_poll blocking_poll(void *p, rt_context *cx, void **out)
{
    struct blocking *b = p;
    atomic_fetch_add(&ledger.polled[b->h.slot], 1);
    RT_CORO_BEGIN(&b->h.co);
    {
        rt_task *handle = NULL;
        if ((b->h.err = EXPECT(rt_spawn_blocking(NULL, job, (void *)(intptr_t)5, &handle))) < 0)
            RT_RETURN(&b->h.co, out, (intptr_t)b->h.err);
        rt_task_join_init(&b->job, handle);
    }
    RT_AWAIT(&b->h.co, cx, &b->job);
    if (b->job.result != 0 || (intptr_t)b->job.value != 5)
        expect("blocking join", b->job.result != 0 ? (int)b->job.result : -EPROTO, NULL);
    b->h.err = EXPECT(rt_spawn_blocking(NULL, job, NULL, NULL));
    RT_RETURN(&b->h.co, out, (intptr_t)b->h.err);
    RT_CORO_END(&b->h.co, out);
}

static void blocking_drop(void *p)
{
    struct blocking *b = p;
    RT_DROP(&b->job); /* detaches the handle, if not joined */
    root_drop_head(&b->h);
}

static int scenario_blocking(rt_runtime *rt)
{
    struct blocking b = {0};
    int err = run_root(rt, blocking_poll, blocking_drop, &b, sizeof b);
    rt_task *t = NULL;
    int e = EXPECT(rt_spawn_blocking(rt, job, (void *)(intptr_t)6, &t));
    if (e == 0) {
        void *value = NULL;
        int status = 0;
        e = EXPECT(rt_task_wait(t, -1, &value, &status));
        if (e < 0)
            rt_task_drop(t); /* the wait's own error: the handle is still ours */
        else if ((e = EXPECT(status)) == 0 && (intptr_t)value != 6)
            expect("blocking wait", -EPROTO, NULL);
    }
    return err != 0 ? err : e;
}

/* 8. Shutdown with work in flight: tasks waiting on their own channels and on
 * long sleeps, and a blocking job, when the runtime is freed. */
struct waiter {
    rt_coro co;
    unsigned slot;
    rt_chan *ch;
    rt_chan_recv recv;
    rt_sleep sleep;
};

static rt_poll waiter_poll(void *p, rt_context *cx, void **out)
{
    struct waiter *w = p;
    atomic_fetch_add(&ledger.polled[w->slot], 1);
    RT_CORO_BEGIN(&w->co);
    if (w->slot % 2 == 0) {
        if (EXPECT(rt_chan_new(1, &w->ch)) < 0)
            RT_RETURN(&w->co, out, NULL);
        /* It holds the only sender: the receive never completes. */
        rt_chan_recv_init(&w->recv, w->ch);
        RT_AWAIT(&w->co, cx, &w->recv);
    } else {
        rt_sleep_init(&w->sleep, NULL, 60 * 1000000000LL);
        RT_AWAIT(&w->co, cx, &w->sleep);
        EXPECT_OR((int)w->sleep.result, -ESHUTDOWN);
    }
    RT_CORO_END(&w->co, out);
}

static void waiter_drop(void *p)
{
    struct waiter *w = p;
    RT_DROP(&w->recv);
    if (w->ch != NULL) {
        rt_chan_sender_drop(w->ch);
        rt_chan_receiver_drop(w->ch, NULL, NULL);
    }
    RT_DROP(&w->sleep);
    atomic_fetch_add(&ledger.dropped[w->slot], 1);
}

static int scenario_shutdown(rt_runtime *rt)
{
    int err = 0;
    for (int i = 0; i < 6 && err == 0; i++) {
        struct waiter w = {.slot = slot_take()};
        err = EXPECT(
            slot_spawned(w.slot, rt_spawn(rt, waiter_poll, waiter_drop, &w, sizeof w, NULL)));
    }
    if (err == 0)
        err = EXPECT(rt_spawn_blocking(rt, job, NULL, NULL));
    if (err == 0)
        err = scenario_runtime(rt); /* make sure the waiters had their chance to run */
    return err;
}

/* 9. A pipe adopted with rt_io_open: on failure the descriptor must be as it
 * was (still blocking, flags untouched) and still the caller's. */
struct pipe_exchange {
    struct root_head h;
    int fds[2];
    rt_io *ends[2];
    rt_io_write_all wr;
    rt_io_read rd;
    char buf[8];
};

static rt_poll pipe_poll(void *p, rt_context *cx, void **out)
{
    struct pipe_exchange *x = p;
    atomic_fetch_add(&ledger.polled[x->h.slot], 1);
    RT_CORO_BEGIN(&x->h.co);
    for (int i = 0; i < 2; i++) {
        int fl = fcntl(x->fds[i], F_GETFL), fdfl = fcntl(x->fds[i], F_GETFD);
        x->h.err = EXPECT(rt_io_open(NULL, x->fds[i], &x->ends[i]));
        if (x->h.err < 0) {
            if (fcntl(x->fds[i], F_GETFL) != fl || fcntl(x->fds[i], F_GETFD) != fdfl)
                expect("rt_io_open left the flags changed", -EPROTO, NULL);
            RT_RETURN(&x->h.co, out, (intptr_t)x->h.err);
        }
        x->fds[i] = -1; /* the rt_io owns it now */
    }
    rt_io_write_all_init(&x->wr, x->ends[1], "pipe", 4);
    RT_AWAIT(&x->h.co, cx, &x->wr);
    if (x->wr.result != 4)
        expect("pipe write", x->wr.result < 0 ? (int)x->wr.result : -EPROTO, NULL);
    rt_io_read_init(&x->rd, x->ends[0], x->buf, sizeof x->buf);
    RT_AWAIT(&x->h.co, cx, &x->rd);
    if (x->rd.result != 4 || memcmp(x->buf, "pipe", 4) != 0)
        expect("pipe read", x->rd.result < 0 ? (int)x->rd.result : -EPROTO, NULL);
    RT_CORO_END(&x->h.co, out);
}

static void pipe_drop(void *p)
{
    struct pipe_exchange *x = p;
    RT_DROP(&x->wr);
    RT_DROP(&x->rd);
    for (int i = 0; i < 2; i++) {
        rt_io_close(x->ends[i]);
        if (x->fds[i] >= 0)
            close(x->fds[i]);
    }
    root_drop_head(&x->h);
}

static int scenario_pipe(rt_runtime *rt)
{
    struct pipe_exchange x = {0};
    if (pipe(x.fds) != 0)
        return expect("pipe", -errno, NULL);
    int err = run_root(rt, pipe_poll, pipe_drop, &x, sizeof x);
    if (atomic_load(&ledger.spawned[x.h.slot]) == 0) {
        /* The root never ran: the descriptors are still ours. */
        close(x.fds[0]);
        close(x.fds[1]);
    }
    return err;
}

/* 10. A line through a buffered writer and reader over a pipe, and a
 * signal to a listener: every allocation and descriptor of bufio and
 * signal. */
struct lines_and_signal {
    struct root_head h;
    int fds[2];
    rt_io *ends[2];
    rt_reader *reader;
    rt_writer *writer;
    rt_signal *sig;
    rt_writer_write wr;
    rt_writer_flush fl;
    rt_read_until line;
    rt_signal_recv recv;
};

static rt_poll lines_poll(void *p, rt_context *cx, void **out)
{
    struct lines_and_signal *x = p;
    atomic_fetch_add(&ledger.polled[x->h.slot], 1);
    RT_CORO_BEGIN(&x->h.co);
    for (int i = 0; i < 2; i++) {
        x->h.err = EXPECT(rt_io_open(NULL, x->fds[i], &x->ends[i]));
        if (x->h.err < 0)
            RT_RETURN(&x->h.co, out, (intptr_t)x->h.err);
        x->fds[i] = -1; /* the rt_io owns it now */
    }
    if ((x->h.err = EXPECT(rt_reader_new(x->ends[0], 64, &x->reader))) < 0 ||
        (x->h.err = EXPECT(rt_writer_new(x->ends[1], 64, &x->writer))) < 0 ||
        (x->h.err = EXPECT(rt_signal_new(NULL, SIGUSR1, &x->sig))) < 0)
        RT_RETURN(&x->h.co, out, (intptr_t)x->h.err);
    rt_writer_write_init(&x->wr, x->writer, "line\n", 5);
    RT_AWAIT(&x->h.co, cx, &x->wr);
    rt_writer_flush_init(&x->fl, x->writer);
    RT_AWAIT(&x->h.co, cx, &x->fl);
    if (x->fl.result != 5)
        expect("flush", x->fl.result < 0 ? (int)x->fl.result : -EPROTO, NULL);
    rt_read_line_init(&x->line, x->reader);
    RT_AWAIT(&x->h.co, cx, &x->line);
    if (x->line.result != 5 || memcmp(x->line.data, "line", 4) != 0)
        expect("read line", x->line.result < 0 ? (int)x->line.result : -EPROTO, NULL);
    raise(SIGUSR1);
    rt_signal_recv_init(&x->recv, x->sig);
    RT_AWAIT(&x->h.co, cx, &x->recv);
    if (x->recv.result < 1)
        expect("signal", x->recv.result < 0 ? (int)x->recv.result : -EPROTO, NULL);
    RT_CORO_END(&x->h.co, out);
}

static void lines_drop(void *p)
{
    struct lines_and_signal *x = p;
    rt_coro_cleanup(&x->h.co);
    rt_signal_free(x->sig);
    rt_reader_free(x->reader);
    rt_writer_free(x->writer);
    for (int i = 0; i < 2; i++) {
        rt_io_close(x->ends[i]);
        if (x->fds[i] >= 0)
            close(x->fds[i]);
    }
    root_drop_head(&x->h);
}

static int scenario_lines(rt_runtime *rt)
{
    struct lines_and_signal x = {0};
    if (pipe(x.fds) != 0)
        return expect("pipe", -errno, NULL);
    int err = run_root(rt, lines_poll, lines_drop, &x, sizeof x);
    if (atomic_load(&ledger.spawned[x.h.slot]) == 0) {
        close(x.fds[0]);
        close(x.fds[1]);
    }
    return err;
}

/* 11. A child process with both pipes: every descriptor and allocation of
 * a spawn, and the reaping whatever fails. */
struct child_process {
    struct root_head h;
    rt_process *child;
    rt_io_write_all wr;
    rt_io_read rd;
    rt_process_exited exit;
    char buf[8];
};

static rt_poll process_poll(void *p, rt_context *cx, void **out)
{
    struct child_process *x = p;
    atomic_fetch_add(&ledger.polled[x->h.slot], 1);
    RT_CORO_BEGIN(&x->h.co);
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = (const char *const[]){"cat", NULL};
    o.stdin_mode = o.stdout_mode = RT_STDIO_PIPE;
    x->h.err = EXPECT(rt_process_spawn(NULL, &o, &x->child));
    if (x->h.err < 0)
        RT_RETURN(&x->h.co, out, (intptr_t)x->h.err);
    rt_io_write_all_init(&x->wr, rt_process_stdio(x->child, 0), "cat", 3);
    RT_AWAIT(&x->h.co, cx, &x->wr);
    rt_process_close_stdio(x->child, 0);
    rt_io_read_init(&x->rd, rt_process_stdio(x->child, 1), x->buf, sizeof x->buf);
    RT_AWAIT(&x->h.co, cx, &x->rd);
    if (x->rd.result != 3 || memcmp(x->buf, "cat", 3) != 0)
        expect("read from cat", x->rd.result < 0 ? (int)x->rd.result : -EPROTO, NULL);
    rt_process_exited_init(&x->exit, x->child);
    RT_AWAIT(&x->h.co, cx, &x->exit);
    if (x->exit.result != 0 || x->exit.code != 0)
        expect("cat's exit", x->exit.result < 0 ? (int)x->exit.result : -EPROTO, NULL);
    RT_RETURN(&x->h.co, out, NULL);
    RT_CORO_END(&x->h.co, out);
}

static void process_drop(void *p)
{
    struct child_process *x = p;
    rt_coro_cleanup(&x->h.co);
    rt_process_free(x->child);
    root_drop_head(&x->h);
}

static int scenario_process(rt_runtime *rt)
{
    struct child_process x = {0};
    return run_root(rt, process_poll, process_drop, &x, sizeof x);
}

/* 12. A descriptor passed over a Unix socket pair and used there: every
 * descriptor of the pair and of the receive (SCM_RIGHTS). */
struct passing {
    struct root_head h;
    rt_io *ends[2];
    int pipe_fds[2];
    rt_unix_send_fds send;
    rt_unix_recv_fds recv;
    char byte;
};

static rt_poll passing_poll(void *p, rt_context *cx, void **out)
{
    struct passing *x = p;
    atomic_fetch_add(&ledger.polled[x->h.slot], 1);
    RT_CORO_BEGIN(&x->h.co);
    x->h.err = EXPECT(rt_unix_pair(NULL, SOCK_STREAM, &x->ends[0], &x->ends[1]));
    if (x->h.err < 0)
        RT_RETURN(&x->h.co, out, (intptr_t)x->h.err);
    rt_unix_send_fds_init(&x->send, x->ends[0], "F", 1, &x->pipe_fds[1], 1);
    RT_AWAIT(&x->h.co, cx, &x->send);
    if (x->send.result != 1)
        RT_RETURN(&x->h.co, out, (intptr_t)EXPECT((int)x->send.result));
    rt_unix_recv_fds_init(&x->recv, x->ends[1], &x->byte, 1, 1);
    RT_AWAIT(&x->h.co, cx, &x->recv);
    if (x->recv.result < 0)
        RT_RETURN(&x->h.co, out, (intptr_t)EXPECT((int)x->recv.result));
    if (x->recv.result != 1 || x->recv.nfds != 1) {
        expect("the descriptor passed", -EPROTO, NULL);
    } else {
        if (write(x->recv.fds[0], "y", 1) != 1)
            expect("write through the passed descriptor", -errno, NULL);
        close(x->recv.fds[0]);
    }
    RT_RETURN(&x->h.co, out, NULL);
    RT_CORO_END(&x->h.co, out);
}

static void passing_drop(void *p)
{
    struct passing *x = p;
    rt_coro_cleanup(&x->h.co);
    rt_io_close(x->ends[0]);
    rt_io_close(x->ends[1]);
    close(x->pipe_fds[0]);
    close(x->pipe_fds[1]);
    root_drop_head(&x->h);
}

static int scenario_passing(rt_runtime *rt)
{
    struct passing x = {0};
    if (pipe(x.pipe_fds) != 0)
        return expect("pipe", -errno, NULL);
    int err = run_root(rt, passing_poll, passing_drop, &x, sizeof x);
    if (atomic_load(&ledger.spawned[x.h.slot]) == 0) {
        close(x.pipe_fds[0]);
        close(x.pipe_fds[1]);
    }
    return err;
}

/* 13. Diagnostics: task dumps and looks while children run, on a runtime
 * with the watchdog, the dump signal and poll timing. */
struct looker {
    struct root_head h;
    rt_task *tasks[3];
    rt_task_join join;
    int i;
};

static int count_task(const rt_task_info *t, void *arg)
{
    (void)t;
    ++*(int *)arg;
    return 0;
}

static rt_poll looker_poll(void *p, rt_context *cx, void **out)
{
    struct looker *s = p;
    atomic_fetch_add(&ledger.polled[s->h.slot], 1);
    RT_CORO_BEGIN(&s->h.co);
    for (s->i = 0; s->i < 3; s->i++) {
        if ((s->h.err = EXPECT(spawn_child(NULL, 3, &s->tasks[s->i]))) < 0)
            RT_RETURN(&s->h.co, out, (intptr_t)s->h.err);
    }
    {
        int n = 0;
        int err = rt_runtime_tasks(rt_current_runtime(), count_task, &n);
        if (err < 0)
            s->h.err = EXPECT(err);
        FILE *null = fopen("/dev/null", "w");
        if (null != NULL) {
            err = rt_runtime_dump(rt_current_runtime(), null);
            if (err < 0)
                s->h.err = EXPECT(err);
            fclose(null);
        }
    }
    for (s->i = 0; s->i < 3; s->i++) {
        rt_task_join_init(&s->join, s->tasks[s->i]);
        s->tasks[s->i] = NULL;
        RT_AWAIT(&s->h.co, cx, &s->join);
    }
    RT_RETURN(&s->h.co, out, (intptr_t)s->h.err);
    RT_CORO_END(&s->h.co, out);
}

static void looker_drop(void *p)
{
    struct looker *s = p;
    RT_DROP(&s->join);
    for (int i = 0; i < 3; i++)
        rt_task_drop(s->tasks[i]);
    root_drop_head(&s->h);
}

static int scenario_diag(rt_runtime *rt)
{
    struct looker l = {0};
    return run_root(rt, looker_poll, looker_drop, &l, sizeof l);
}

/* Fibers: a stack mapped (or not), a sleep in the fiber, fibers joining
 * fibers; a fiber whose stack cannot be mapped finishes with -ENOMEM
 * without running. */
static void *fault_fiber_leaf(void *arg)
{
    /* Cancelled when the case ends early (the wait failed) and shutdown
     * cancels what still runs; refused if the shutdown began before the
     * leaf first ran. */
    int err = EXPECT_OR(rt_sleep_await(1000000), -ECANCELED, -ESHUTDOWN);
    free(arg); /* it owns its argument: without a stack, the release frees it */
    return (void *)(intptr_t)err;
}

static void *fault_fiber_root(void *arg)
{
    (void)arg;
    rt_task *kids[3];
    int err = 0;
    rt_fiber_options opts;
    rt_fiber_options_init(&opts);
    opts.release = free;
    for (int i = 0; i < 3; i++) {
        void *owned = malloc(16); /* LeakSanitizer reports it if neither frees it */
        if (EXPECT_OR(rt_fiber_spawn_ex(NULL, &opts, fault_fiber_leaf, owned, &kids[i]),
                      -ESHUTDOWN) < 0) {
            free(owned);
            kids[i] = NULL;
        }
    }
    for (int i = 0; i < 3; i++) {
        if (kids[i] == NULL)
            continue;
        rt_task_join j;
        rt_task_join_init(&j, kids[i]);
        int e = EXPECT_OR((int)rt_fiber_await(&j.future), -ECANCELED);
        if (e == 0)
            e = EXPECT_OR((int)(intptr_t)j.value, -ECANCELED, -ESHUTDOWN);
        if (err == 0)
            err = e;
    }
    return (void *)(intptr_t)err;
}

static int scenario_fiber(rt_runtime *rt)
{
    rt_task *t = NULL;
    int e = EXPECT(rt_fiber_spawn(rt, fault_fiber_root, NULL, &t));
    if (e < 0)
        return e;
    void *value = NULL;
    int status = 0;
    e = EXPECT(rt_task_wait(t, -1, &value, &status));
    if (e < 0) {
        rt_task_drop(t);
        return e;
    }
    if ((e = EXPECT(status)) < 0)
        return e;
    return EXPECT((int)(intptr_t)value);
}

struct scenario {
    const char *name;
    unsigned workers;
    int (*run)(rt_runtime *rt);
    bool diag; /* on a runtime with every diagnostic on */
};

static const struct scenario scenarios[] = {
    {"runtime", 2, scenario_runtime, false},   {"spawn", 2, scenario_spawn, false},
    {"timers", 2, scenario_timers, false},     {"tcp", 2, scenario_tcp, false},
    {"channel", 2, scenario_channel, false},   {"group", 2, scenario_group, false},
    {"blocking", 2, scenario_blocking, false}, {"shutdown", 2, scenario_shutdown, false},
    {"pipe", 2, scenario_pipe, false},         {"lines", 2, scenario_lines, false},
    {"process", 2, scenario_process, false},   {"passing", 2, scenario_passing, false},
    {"diag", 2, scenario_diag, true},          {"fiber", 2, scenario_fiber, false},
};

static unsigned count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* The child: runs the scenario under the plan and checks the ledger. */
static void run_case(const struct scenario *sc, uint64_t nth, bool persistent, int fd)
{
    struct fault_report rep = {0};
    unsigned fds_before = count_dir("/proc/self/fd");
    unsigned threads_before = count_dir("/proc/self/task");
    rt__fault_arm(nth, persistent, 0, 0);

    rt_runtime *rt = NULL;
    if (new_rt(sc->workers, sc->diag, &rt) == 0) {
        sc->run(rt);
        int err = rt_runtime_free(rt);
        if (err != 0)
            expect("rt_runtime_free", err, NULL);
    }
    rep.calls = rt__fault_calls();
    rep.failed = rt__fault_failed();
    const char *site = rt__fault_first_site();
    snprintf(rep.site, sizeof rep.site, "%s", site != NULL ? site : "-");
    /* No more failures: the checks below may allocate. */
    rt__fault_arm(0, false, 0, 0);

    char *pb = rep.problem;
    size_t room = sizeof rep.problem;
#define PROBLEM(...)                                                                               \
    do {                                                                                           \
        if (pb == rep.problem)                                                                     \
            snprintf(pb, room, __VA_ARGS__);                                                       \
    } while (0)
    if (atomic_load(&ledger.bad_errors) > 0)
        PROBLEM("undocumented error: %s", ledger.first_bad);
    unsigned slots = atomic_load(&ledger.next);
    for (unsigned s = 0; s < slots; s++) {
        unsigned spawned = atomic_load(&ledger.spawned[s]);
        unsigned dropped = atomic_load(&ledger.dropped[s]);
        unsigned polled = atomic_load(&ledger.polled[s]);
        if (dropped != spawned)
            PROBLEM("task slot %u: spawned %u, dropped %u times", s, spawned, dropped);
        if (!spawned && polled != 0)
            PROBLEM("task slot %u: its spawn failed but it was polled %u times", s, polled);
    }
    /* Detached blocking-pool threads may still be on their way out. */
    for (int i = 0; i < 400 && count_dir("/proc/self/task") != threads_before; i++)
        usleep(5000);
    unsigned fds_after = count_dir("/proc/self/fd");
    unsigned threads_after = count_dir("/proc/self/task");
    if (fds_after != fds_before)
        PROBLEM("descriptors: %u before, %u after", fds_before, fds_after);
    if (threads_after != threads_before)
        PROBLEM("threads: %u before, %u after", threads_before, threads_after);
#undef PROBLEM
    if (write(fd, &rep, sizeof rep) != (ssize_t)sizeof rep)
        exit(3);
    if (rep.problem[0] != '\0') {
        fprintf(stderr, "fault_case %s %llu%s: first failed at %s: %s\n", sc->name,
                (unsigned long long)nth, persistent ? " --persistent" : "", rep.site, rep.problem);
        exit(1);
    }
}

/* The driver's signal that the case hangs: report where the first failure
 * was, so the hang is attributed, and stop. Only async-signal-safe calls. */
static void on_hang(int sig)
{
    (void)sig;
    struct fault_report rep = {.calls = rt__fault_calls(), .failed = rt__fault_failed()};
    const char *site = rt__fault_first_site();
    size_t n = site != NULL ? strlen(site) : 0;
    memcpy(rep.site, site != NULL ? site : "-",
           n < sizeof rep.site - 1 ? n + (n == 0) : sizeof rep.site - 1);
    memcpy(rep.problem, "hung", 5);
    if (write(FAULT_REPORT_FD, &rep, sizeof rep) < 0)
        _exit(4);
    _exit(5);
}

int main(int argc, char **argv)
{
    signal(SIGTERM, on_hang);
    if (argc < 3) {
        fprintf(stderr, "usage: fault_case SCENARIO N [--persistent]\n");
        return 2;
    }
    for (size_t i = 0; i < sizeof scenarios / sizeof scenarios[0]; i++) {
        if (strcmp(scenarios[i].name, argv[1]) == 0) {
            run_case(&scenarios[i], strtoull(argv[2], NULL, 10),
                     argc > 3 && strcmp(argv[3], "--persistent") == 0, FAULT_REPORT_FD);
            return 0;
        }
    }
    fprintf(stderr, "fault_case: no scenario %s\n", argv[1]);
    return 2;
}
