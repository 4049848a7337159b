/* asyncrt-bench: the benchmark workloads (docs/benchmarks.md), run on asyncrt.
 *
 * One runtime is created once (rt_runtime_new) with W workers and every
 * workload runs on it: 1 warm-up repetition, then R measured ones. Each
 * workload prints exactly one line on stdout:
 *
 *   bench <workload> runtime=asyncrt workers=<W> ops=<N> median_ns_per_op=<x>
 *         min_ns_per_op=<x> max_ns_per_op=<x> [extra=value ...]
 *
 * Everything else (progress, errors) goes to stderr.
 *
 * How a repetition is timed, as the peers (Tokio, Go) do it: the work is
 * started and awaited by a task on the runtime (an "orchestrator" task run
 * with rt_block_on), which reads the monotonic clock just before its first
 * spawn and again once the completion signal has woken it; spawn_remote is
 * the exception: its spawner is the main thread itself, which waits on a
 * futex. The completion signal is a countdown latch: every finishing task
 * decrements it and the one reaching zero wakes the waiter through its waker.
 *
 * tcp_echo is timed by its load generator instead: the echo server runs as
 * tasks on the runtime, in this process, and a separate client process
 * (asyncrt-echo-client, fork+exec'd for each repetition) times its own round
 * trips and prints them; see the tcp_echo section. `--echo-server PORT` runs
 * that server alone until SIGINT or SIGTERM.
 *
 * Correctness is checked after each repetition (counts, fib's value, timers
 * that never fire early, echoed bytes: the client compares them) and once
 * more after shutdown, when the runtime's metrics are exact: every task this
 * program spawned must have completed, none cancelled. Any failure prints a
 * message and exits 1; a repetition that does not finish within --rep-timeout
 * seconds (a lost wake-up, say) is reported the same way instead of hanging. */
#define _GNU_SOURCE

#include <asyncrt.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fiber_bench.h"

#define PROG "asyncrt-bench"

/* ------------------------------------------------------------------------ */
/* Parameters and small helpers                                             */
/* ------------------------------------------------------------------------ */

/* Workload sizes; the defaults are the workloads' reference sizes. */
struct params {
    uint64_t spawn_n;        /* spawn_local / spawn_remote: N tasks */
    uint64_t yield_tasks;    /* yield_many: T tasks */
    uint64_t yields;         /* yield_many: Y yields per task */
    uint64_t pairs;          /* ping_pong: P pairs of tasks */
    uint64_t rounds;         /* ping_pong: R round trips per pair */
    uint64_t chain;          /* chained_spawn: D tasks in the chain */
    uint64_t fib_n;          /* fork_join: fib(n) */
    uint64_t skynet_depth;   /* fiber_skynet: levels below the root */
    uint64_t timers_n;       /* timers: N sleeping tasks */
    uint64_t select_tasks;   /* select: T tasks (T/2 pairs, R round trips each) */
    uint64_t tcp_conns;      /* tcp_echo: C connections */
    uint64_t tcp_msgs;       /* tcp_echo: M round trips per connection */
    uint64_t tcp_size;       /* tcp_echo: bytes per message */
    uint64_t tcp_busy;       /* tcp_echo: CPU-bound tasks running beside the server */
    const char *echo_client; /* tcp_echo: path of asyncrt-echo-client */
};

/* Room for the extra fields (timers: total_ms and three lateness
 * percentiles; tcp_echo: two round-trip percentiles). */
#define MAX_EXTRAS 4

struct extra_field {
    const char *name;
    double value;
};

/* What one repetition measured and how many tasks it spawned (counted here so
 * that the runtime's exact totals can be checked after shutdown), plus the
 * workload's extra fields, if any. */
struct rep_result {
    uint64_t elapsed_ns;
    uint64_t tasks_spawned;
    struct extra_field extras[MAX_EXTRAS];
    unsigned n_extras;
};

static void add_extra(struct rep_result *r, const char *name, double value)
{
    if (r->n_extras < MAX_EXTRAS)
        r->extras[r->n_extras++] = (struct extra_field){name, value};
}

/* The reported figures of one workload. */
struct summary {
    const char *workload;
    unsigned workers;
    uint64_t ops;
    double median_ns_per_op;
    double min_ns_per_op;
    double max_ns_per_op;
    struct extra_field extras[MAX_EXTRAS];
    unsigned n_extras;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Reports a broken repetition or a library failure seen on the main thread. */
/* Reports a broken repetition or a library failure seen on the main thread
 * (or from a fiber: fiber_bench.c) and exits 1. */
_Noreturn void bench_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* Failures seen inside tasks: a task cannot exit the process halfway through
 * the runtime's work, so it reports, counts the failure, and still signals
 * completion so that the main thread sees the failure instead of hanging. */
static atomic_uint g_task_failures;

static void task_failed(const char *what, int err)
{
    fprintf(stderr, PROG ": error in a task: %s: %s\n", what, rt_strerror(err));
    atomic_fetch_add(&g_task_failures, 1);
}

/* fib(n) computed plainly, to check fork_join and to count its tasks. */
static uint64_t fib_plain(uint64_t n)
{
    uint64_t a = 0, b = 1;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t c = a + b;
        a = b;
        b = c;
    }
    return a;
}

/* ------------------------------------------------------------------------ */
/* Completion signals                                                       */
/* ------------------------------------------------------------------------ */

/* A countdown awaited by one task (the orchestrator of a repetition).
 *
 * The waiter clones its waker into the latch *before* it spawns the first
 * counted task, so the waker is always there when the count reaches zero: no
 * register-then-recheck dance is needed, and no wake-up can be lost. The task
 * that reaches zero copies the waker out, then sets `done`, then wakes the
 * copy: after the store it no longer touches the latch, so the latch may live
 * inside the waiter's own state, which is freed once the waiter sees `done`. */
struct task_latch {
    atomic_uint_fast64_t remaining;
    atomic_bool done;
    rt_waker waiter; /* owned clone; consumed by the wake at zero */
};

/* Called by the waiting task, from its poll, before any count_down can run. */
static void task_latch_init(struct task_latch *l, uint64_t count, rt_context *cx)
{
    atomic_init(&l->remaining, count);
    atomic_init(&l->done, false);
    l->waiter = rt_waker_clone(rt_context_waker(cx));
}

/* Takes `k` off the count; whoever reaches zero wakes the waiter. */
static void task_latch_count_down(struct task_latch *l, uint64_t k)
{
    if (atomic_fetch_sub_explicit(&l->remaining, k, memory_order_acq_rel) == k) {
        rt_waker w = l->waiter; /* read before `done`: the latch may vanish after */
        atomic_store_explicit(&l->done, true, memory_order_release);
        rt_waker_wake(&w);
    }
}

/* Poll-style wait for RT_AWAIT_POLL. The waker it relies on was registered by
 * task_latch_init, once for all polls (this waiter is woken by nothing else). */
static rt_poll task_latch_poll(struct task_latch *l)
{
    return atomic_load_explicit(&l->done, memory_order_acquire) ? RT_READY : RT_PENDING;
}

static void futex_wait(atomic_uint *word, unsigned expected)
{
    /* EINTR and EAGAIN (the word already changed) just send the caller back to
     * its check; no timeout: the watchdog reports a signal that never comes. */
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *word)
{
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* A countdown awaited by a plain OS thread (the main thread in spawn_remote),
 * which sleeps on a futex. The signaller's futex wake comes after the store
 * that releases the waiter, so the latch must outlive the repetition: it is a
 * static object, reinitialised before each one (a late wake on it from the
 * previous repetition is harmless: the waiter re-checks `done`). */
struct thread_latch {
    atomic_uint_fast64_t remaining;
    atomic_uint done; /* futex word: 0 until the count reaches zero */
};

static void thread_latch_init(struct thread_latch *l, uint64_t count)
{
    atomic_store(&l->remaining, count);
    atomic_store(&l->done, 0);
}

static void thread_latch_count_down(struct thread_latch *l, uint64_t k)
{
    if (atomic_fetch_sub_explicit(&l->remaining, k, memory_order_acq_rel) == k) {
        atomic_store_explicit(&l->done, 1, memory_order_release);
        futex_wake_all(&l->done);
    }
}

/* Adds `k` to a count that cannot reach zero meanwhile (its caller holds one
 * of the counts itself). */
static void thread_latch_add(struct thread_latch *l, uint64_t k)
{
    atomic_fetch_add_explicit(&l->remaining, k, memory_order_relaxed);
}

static void thread_latch_wait(struct thread_latch *l)
{
    while (atomic_load_explicit(&l->done, memory_order_acquire) == 0)
        futex_wait(&l->done, 0);
}

/* Runs an orchestrator task to completion from the main thread. */
static void block_on(rt_runtime *rt, const char *workload, rt_poll_fn poll, rt_drop_fn drop,
                     void *state, size_t size)
{
    int err = rt_block_on(rt, poll, drop, state, size, NULL, NULL);
    if (err < 0)
        bench_fail("%s: rt_block_on: %s", workload, rt_strerror(err));
}

/* ------------------------------------------------------------------------ */
/* spawn_local: a task on the runtime spawns N tasks; each decrements a      */
/* shared counter; the one reaching zero signals. Time: first spawn to the  */
/* signal.                                                                  */
/* ------------------------------------------------------------------------ */

/* One counted task: decrements the latch and finishes. */
struct counter_task {
    struct task_latch *latch;
};

static rt_poll counter_task_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct counter_task *t = state;
    task_latch_count_down(t->latch, 1);
    *out = NULL;
    return RT_READY;
}

/* The orchestrator. Writes into the main thread's result, which outlives it
 * (rt_block_on does not return before the task has finished). */
struct spawn_local_root {
    rt_coro co;
    uint64_t n;
    uint64_t t0;
    struct rep_result *result;
    struct task_latch latch;
};

static rt_poll spawn_local_root_poll(void *state, rt_context *cx, void **out)
{
    struct spawn_local_root *r = state;
    RT_CORO_BEGIN(&r->co);
    task_latch_init(&r->latch, r->n, cx);
    r->t0 = now_ns();
    {
        /* The loop works on locals: r->n shares a cache line with the counter
         * the children decrement, and re-reading it after every spawn (an
         * opaque call) would add false sharing to the spawner's cost. */
        const uint64_t n = r->n;
        uint64_t spawned = 0;
        struct counter_task child = {&r->latch};
        for (; spawned < n; spawned++) {
            int err = RT_SPAWN_STATE(NULL, counter_task_poll, NULL, &child, NULL);
            if (err < 0) {
                task_failed("spawn_local: rt_spawn", err);
                task_latch_count_down(&r->latch, n - spawned); /* the ones never spawned */
                break;
            }
        }
        r->result->tasks_spawned += spawned;
    }
    RT_AWAIT_POLL(&r->co, task_latch_poll(&r->latch));
    r->result->elapsed_ns = now_ns() - r->t0;
    RT_CORO_END(&r->co, out);
}

static struct rep_result run_spawn_local(rt_runtime *rt, const struct params *p)
{
    struct rep_result res = {.tasks_spawned = 1}; /* the orchestrator is a task too */
    struct spawn_local_root root = {.n = p->spawn_n, .result = &res};
    block_on(rt, "spawn_local", spawn_local_root_poll, NULL, &root, sizeof root);
    if (res.tasks_spawned != p->spawn_n + 1)
        bench_fail("spawn_local: spawned %" PRIu64 " of %" PRIu64 " tasks", res.tasks_spawned - 1,
                   p->spawn_n);
    return res;
}

/* ------------------------------------------------------------------------ */
/* spawn_remote: the same N tasks, spawned by the main thread, which is not  */
/* a worker (so every spawn goes through the injector).                     */
/* ------------------------------------------------------------------------ */

static struct thread_latch g_remote_latch;

struct remote_counter_task {
    struct thread_latch *latch;
};

static rt_poll remote_counter_task_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct remote_counter_task *t = state;
    thread_latch_count_down(t->latch, 1);
    *out = NULL;
    return RT_READY;
}

static struct rep_result run_spawn_remote(rt_runtime *rt, const struct params *p)
{
    struct rep_result res = {.tasks_spawned = 0};
    struct remote_counter_task task = {&g_remote_latch};
    thread_latch_init(&g_remote_latch, p->spawn_n);

    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < p->spawn_n; i++) {
        int err = RT_SPAWN_STATE(rt, remote_counter_task_poll, NULL, &task, NULL);
        if (err < 0) {
            /* Wait for the tasks already spawned before failing, so none of
             * them runs on after main has moved on. */
            thread_latch_count_down(&g_remote_latch, p->spawn_n - i);
            thread_latch_wait(&g_remote_latch);
            bench_fail("spawn_remote: rt_spawn (task %" PRIu64 "): %s", i, rt_strerror(err));
        }
    }
    thread_latch_wait(&g_remote_latch);
    res.elapsed_ns = now_ns() - t0;
    res.tasks_spawned = p->spawn_n;

    uint64_t left = atomic_load(&g_remote_latch.remaining);
    if (left != 0)
        bench_fail("spawn_remote: signalled with %" PRIu64 " tasks unfinished", left);
    return res;
}

/* ------------------------------------------------------------------------ */
/* yield_many: T tasks each yield Y times (wake themselves by reference and  */
/* return pending) before finishing. Time: until all T have finished.       */
/* ------------------------------------------------------------------------ */

struct yielder {
    uint64_t yields;      /* how many to do */
    uint64_t yields_done; /* how many done so far */
    atomic_uint_fast64_t *total_yields;
    struct task_latch *latch;
};

static rt_poll yielder_poll(void *state, rt_context *cx, void **out)
{
    struct yielder *y = state;
    if (y->yields_done < y->yields) {
        y->yields_done++;
        return rt_yield(cx); /* wake_by_ref on our own waker, then pending */
    }
    /* Added before the count-down, whose release publishes it to the waiter. */
    atomic_fetch_add_explicit(y->total_yields, y->yields_done, memory_order_relaxed);
    task_latch_count_down(y->latch, 1);
    *out = NULL;
    return RT_READY;
}

struct yield_many_root {
    rt_coro co;
    uint64_t tasks;
    uint64_t yields;
    uint64_t t0;
    struct rep_result *result;
    uint64_t *yields_seen; /* the main thread's */
    atomic_uint_fast64_t total_yields;
    struct task_latch latch;
};

static rt_poll yield_many_root_poll(void *state, rt_context *cx, void **out)
{
    struct yield_many_root *r = state;
    RT_CORO_BEGIN(&r->co);
    atomic_init(&r->total_yields, 0);
    task_latch_init(&r->latch, r->tasks, cx);
    r->t0 = now_ns();
    {
        const uint64_t tasks = r->tasks; /* locals: see spawn_local_root_poll */
        uint64_t spawned = 0;
        struct yielder child = {r->yields, 0, &r->total_yields, &r->latch};
        for (; spawned < tasks; spawned++) {
            int err = RT_SPAWN_STATE(NULL, yielder_poll, NULL, &child, NULL);
            if (err < 0) {
                task_failed("yield_many: rt_spawn", err);
                task_latch_count_down(&r->latch, tasks - spawned);
                break;
            }
        }
        r->result->tasks_spawned += spawned;
    }
    RT_AWAIT_POLL(&r->co, task_latch_poll(&r->latch));
    r->result->elapsed_ns = now_ns() - r->t0;
    *r->yields_seen = atomic_load_explicit(&r->total_yields, memory_order_relaxed);
    RT_CORO_END(&r->co, out);
}

static struct rep_result run_yield_many(rt_runtime *rt, const struct params *p)
{
    struct rep_result res = {.tasks_spawned = 1};
    uint64_t yields_seen = 0;
    /* The task gets a copy of this state: the yielders point into that copy. */
    struct yield_many_root root = {
        .tasks = p->yield_tasks, .yields = p->yields, .result = &res, .yields_seen = &yields_seen};
    block_on(rt, "yield_many", yield_many_root_poll, NULL, &root, sizeof root);
    if (res.tasks_spawned != p->yield_tasks + 1)
        bench_fail("yield_many: spawned %" PRIu64 " of %" PRIu64 " tasks", res.tasks_spawned - 1,
                   p->yield_tasks);
    if (yields_seen != p->yield_tasks * p->yields)
        bench_fail("yield_many: %" PRIu64 " yields done, expected %" PRIu64, yields_seen,
                   p->yield_tasks * p->yields);
    return res;
}

/* ------------------------------------------------------------------------ */
/* ping_pong: P pairs of tasks pass a token back and forth R round trips     */
/* through two single-slot channels per pair. Time: until all 2P finish.    */
/* ------------------------------------------------------------------------ */

struct pinger {
    rt_coro co;
    rt_chan *out; /* sender of a->b */
    rt_chan *in;  /* receiver of b->a */
    uint64_t rounds;
    uint64_t round;
    uintptr_t token;
    rt_chan_send send;
    rt_chan_recv recv;
    struct task_latch *latch;
};

static void pinger_drop(void *state)
{
    struct pinger *p = state;
    RT_DROP(&p->send);
    RT_DROP(&p->recv);
    rt_chan_sender_drop(p->out);
    rt_chan_receiver_drop(p->in, NULL, NULL);
}

static rt_poll pinger_poll(void *state, rt_context *cx, void **out)
{
    struct pinger *p = state;
    RT_CORO_BEGIN(&p->co);
    for (p->round = 0; p->round < p->rounds; p->round++) {
        rt_chan_send_init(&p->send, p->out, (void *)p->token);
        RT_AWAIT(&p->co, cx, &p->send);
        if (p->send.result != 0)
            bench_fail("ping_pong: pinger send: %s", rt_strerror((int)p->send.result));
        rt_chan_recv_init(&p->recv, p->in);
        RT_AWAIT(&p->co, cx, &p->recv);
        if (p->recv.result != 0)
            bench_fail("ping_pong: pinger recv: %s", rt_strerror((int)p->recv.result));
        p->token = (uintptr_t)p->recv.value;
    }
    if (p->token != p->rounds)
        bench_fail("ping_pong: token %" PRIuPTR " after %" PRIu64 " rounds", p->token, p->rounds);
    task_latch_count_down(p->latch, 1);
    RT_CORO_END(&p->co, out);
}

struct ponger {
    rt_coro co;
    rt_chan *in;  /* receiver of a->b */
    rt_chan *out; /* sender of b->a */
    uint64_t rounds;
    uint64_t round;
    uintptr_t token;
    rt_chan_send send;
    rt_chan_recv recv;
    struct task_latch *latch;
};

static void ponger_drop(void *state)
{
    struct ponger *p = state;
    RT_DROP(&p->send);
    RT_DROP(&p->recv);
    rt_chan_sender_drop(p->out);
    rt_chan_receiver_drop(p->in, NULL, NULL);
}

static rt_poll ponger_poll(void *state, rt_context *cx, void **out)
{
    struct ponger *p = state;
    RT_CORO_BEGIN(&p->co);
    for (p->round = 0; p->round < p->rounds; p->round++) {
        rt_chan_recv_init(&p->recv, p->in);
        RT_AWAIT(&p->co, cx, &p->recv);
        if (p->recv.result != 0)
            bench_fail("ping_pong: ponger recv: %s", rt_strerror((int)p->recv.result));
        p->token = (uintptr_t)p->recv.value + 1;
        rt_chan_send_init(&p->send, p->out, (void *)p->token);
        RT_AWAIT(&p->co, cx, &p->send);
        if (p->send.result != 0)
            bench_fail("ping_pong: ponger send: %s", rt_strerror((int)p->send.result));
    }
    task_latch_count_down(p->latch, 1);
    RT_CORO_END(&p->co, out);
}

struct ping_pong_root {
    rt_coro co;
    uint64_t pairs;
    uint64_t rounds;
    uint64_t t0;
    struct rep_result *result;
    struct task_latch latch;
};

static rt_poll ping_pong_root_poll(void *state, rt_context *cx, void **out)
{
    struct ping_pong_root *r = state;
    RT_CORO_BEGIN(&r->co);
    task_latch_init(&r->latch, 2 * r->pairs, cx);
    r->t0 = now_ns();
    {
        const uint64_t pairs = r->pairs;
        uint64_t spawned = 0;
        for (uint64_t i = 0; i < pairs; i++) {
            rt_chan *ab, *ba;
            if (rt_chan_new(1, &ab) < 0 || rt_chan_new(1, &ba) < 0)
                bench_fail("ping_pong: rt_chan_new failed");
            struct pinger a = {.out = ab, .in = ba, .rounds = r->rounds, .latch = &r->latch};
            struct ponger b = {.in = ab, .out = ba, .rounds = r->rounds, .latch = &r->latch};
            int err = RT_SPAWN_STATE(NULL, pinger_poll, pinger_drop, &a, NULL);
            if (err < 0)
                task_failed("ping_pong: rt_spawn", err);
            err = RT_SPAWN_STATE(NULL, ponger_poll, ponger_drop, &b, NULL);
            if (err < 0)
                task_failed("ping_pong: rt_spawn", err);
            spawned += 2;
        }
        r->result->tasks_spawned += spawned;
    }
    RT_AWAIT_POLL(&r->co, task_latch_poll(&r->latch));
    r->result->elapsed_ns = now_ns() - r->t0;
    RT_CORO_END(&r->co, out);
}

static struct rep_result run_ping_pong(rt_runtime *rt, const struct params *p)
{
    struct rep_result res = {.tasks_spawned = 1};
    struct ping_pong_root root = {.pairs = p->pairs, .rounds = p->rounds, .result = &res};
    block_on(rt, "ping_pong", ping_pong_root_poll, NULL, &root, sizeof root);
    if (res.tasks_spawned != 2 * p->pairs + 1)
        bench_fail("ping_pong: spawned %" PRIu64 " of %" PRIu64 " tasks", res.tasks_spawned - 1,
                   2 * p->pairs);
    return res;
}

/* ------------------------------------------------------------------------ */
/* select: T tasks in T/2 pairs pass a token as in ping_pong, but every      */
/* receive is a select over the channel and a 1 s sleep that never fires,   */
/* so each one arms a timer and cancels it. One op: one select. Biased (the */
/* channel is polled first), as the Tokio peer's `biased;` select! is;      */
/* select_fair is the same with rt_select's default, fair, order, which     */
/* polls the sleep first half of the time.                                  */
/* ------------------------------------------------------------------------ */

struct selector {
    rt_coro co;
    rt_chan *out; /* sender of this task's outgoing channel */
    rt_chan *in;  /* receiver of its incoming one */
    uint64_t rounds;
    uint64_t round;
    uintptr_t token;
    bool serves; /* sends first (the pinger), else receives first */
    bool fair;   /* rt_select_init, else rt_select_biased_init */
    rt_chan_send send;
    rt_chan_recv recv;
    rt_sleep limit;
    rt_select sel;
    struct task_latch *latch;
};

static void selector_drop(void *state)
{
    struct selector *p = state;
    rt_coro_cleanup(&p->co);
    rt_chan_sender_drop(p->out);
    rt_chan_receiver_drop(p->in, NULL, NULL);
}

static rt_poll selector_poll(void *state, rt_context *cx, void **out)
{
    struct selector *p = state;
    RT_CORO_BEGIN(&p->co);
    for (p->round = 0; p->round < p->rounds; p->round++) {
        if (p->serves) {
            rt_chan_send_init(&p->send, p->out, (void *)p->token);
            RT_AWAIT(&p->co, cx, &p->send);
            if (p->send.result != 0)
                bench_fail("select: send: %s", rt_strerror((int)p->send.result));
        }
        rt_chan_recv_init(&p->recv, p->in);
        rt_sleep_init(&p->limit, NULL, RT_SEC(1));
        if (p->fair)
            rt_select_init(&p->sel, RT_FUTURES(&p->recv.future, &p->limit.future));
        else
            rt_select_biased_init(&p->sel, RT_FUTURES(&p->recv.future, &p->limit.future));
        RT_AWAIT(&p->co, cx, &p->sel);
        if (p->sel.index != 0 || p->recv.result != 0)
            bench_fail("select: the receive lost: arm %zu, %s", p->sel.index,
                       rt_strerror((int)p->sel.result));
        p->token = (uintptr_t)p->recv.value;
        if (!p->serves) {
            rt_chan_send_init(&p->send, p->out, (void *)(p->token + 1));
            RT_AWAIT(&p->co, cx, &p->send);
            if (p->send.result != 0)
                bench_fail("select: send: %s", rt_strerror((int)p->send.result));
        }
    }
    if (p->serves && p->token != p->rounds)
        bench_fail("select: token %" PRIuPTR " after %" PRIu64 " rounds", p->token, p->rounds);
    task_latch_count_down(p->latch, 1);
    RT_CORO_END(&p->co, out);
}

struct select_root {
    rt_coro co;
    uint64_t pairs;
    uint64_t rounds;
    bool fair;
    uint64_t t0;
    struct rep_result *result;
    struct task_latch latch;
};

static rt_poll select_root_poll(void *state, rt_context *cx, void **out)
{
    struct select_root *r = state;
    RT_CORO_BEGIN(&r->co);
    task_latch_init(&r->latch, 2 * r->pairs, cx);
    r->t0 = now_ns();
    for (uint64_t i = 0; i < r->pairs; i++) {
        rt_chan *ab, *ba;
        if (rt_chan_new(1, &ab) < 0 || rt_chan_new(1, &ba) < 0)
            bench_fail("select: rt_chan_new failed");
        struct selector a = {.out = ab,
                             .in = ba,
                             .rounds = r->rounds,
                             .serves = true,
                             .fair = r->fair,
                             .latch = &r->latch};
        struct selector b = {
            .out = ba, .in = ab, .rounds = r->rounds, .fair = r->fair, .latch = &r->latch};
        int err = RT_SPAWN_STATE(NULL, selector_poll, selector_drop, &a, NULL);
        if (err < 0)
            task_failed("select: rt_spawn", err);
        err = RT_SPAWN_STATE(NULL, selector_poll, selector_drop, &b, NULL);
        if (err < 0)
            task_failed("select: rt_spawn", err);
        r->result->tasks_spawned += 2;
    }
    RT_AWAIT_POLL(&r->co, task_latch_poll(&r->latch));
    r->result->elapsed_ns = now_ns() - r->t0;
    RT_CORO_END(&r->co, out);
}

static struct rep_result run_select_as(rt_runtime *rt, const struct params *p, bool fair)
{
    struct rep_result res = {.tasks_spawned = 1};
    struct select_root root = {
        .pairs = p->select_tasks / 2, .rounds = p->rounds, .fair = fair, .result = &res};
    block_on(rt, fair ? "select_fair" : "select", select_root_poll, NULL, &root, sizeof root);
    if (res.tasks_spawned != 2 * root.pairs + 1)
        bench_fail("select: spawned %" PRIu64 " of %" PRIu64 " tasks", res.tasks_spawned - 1,
                   2 * root.pairs);
    return res;
}

static struct rep_result run_select(rt_runtime *rt, const struct params *p)
{
    return run_select_as(rt, p, false);
}

static struct rep_result run_select_fair(rt_runtime *rt, const struct params *p)
{
    return run_select_as(rt, p, true);
}

/* ------------------------------------------------------------------------ */
/* chained_spawn: a chain of D tasks, each spawning the next (detached) and  */
/* completing; the last one signals.                                        */
/* ------------------------------------------------------------------------ */

struct chain_link {
    uint64_t links_after; /* tasks still to come after this one */
    struct task_latch *latch;
};

static rt_poll chain_link_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct chain_link *link = state;
    if (link->links_after == 0) {
        task_latch_count_down(link->latch, 1);
    } else {
        struct chain_link next = {link->links_after - 1, link->latch};
        int err = RT_SPAWN_STATE(NULL, chain_link_poll, NULL, &next, NULL);
        if (err < 0) {
            task_failed("chained_spawn: rt_spawn", err);
            task_latch_count_down(link->latch, 1); /* the chain ends here */
        }
    }
    *out = NULL;
    return RT_READY;
}

struct chained_spawn_root {
    rt_coro co;
    uint64_t depth;
    uint64_t t0;
    struct rep_result *result;
    struct task_latch latch;
};

static rt_poll chained_spawn_root_poll(void *state, rt_context *cx, void **out)
{
    struct chained_spawn_root *r = state;
    RT_CORO_BEGIN(&r->co);
    task_latch_init(&r->latch, 1, cx);
    r->t0 = now_ns();
    {
        struct chain_link first = {r->depth - 1, &r->latch}; /* D tasks in all */
        int err = RT_SPAWN_STATE(NULL, chain_link_poll, NULL, &first, NULL);
        if (err < 0) {
            task_failed("chained_spawn: rt_spawn", err);
            task_latch_count_down(&r->latch, 1);
        }
    }
    RT_AWAIT_POLL(&r->co, task_latch_poll(&r->latch));
    r->result->elapsed_ns = now_ns() - r->t0;
    RT_CORO_END(&r->co, out);
}

static struct rep_result run_chained_spawn(rt_runtime *rt, const struct params *p)
{
    struct rep_result res = {.tasks_spawned = 1 + p->chain};
    struct chained_spawn_root root = {.depth = p->chain, .result = &res};
    block_on(rt, "chained_spawn", chained_spawn_root_poll, NULL, &root, sizeof root);
    /* A failed spawn was reported by its task and is caught by the caller
     * (g_task_failures); the full count is checked after shutdown. */
    return res;
}

/* ------------------------------------------------------------------------ */
/* fork_join: fib(n), where fib(n >= 2) spawns fib(n-1) and fib(n-2) as two  */
/* tasks and awaits both join handles; fib(n < 2) = n.                      */
/* ------------------------------------------------------------------------ */

/* A task's result is a void *: fib values travel as integers in it. */
#define FIB_VALUE(p) ((uint64_t)(uintptr_t)(p))
#define FIB_RESULT(v) ((void *)(uintptr_t)(v))

/* A hand-written state machine rather than a coroutine, with one join
 * operation awaiting the left child and then the right one: the state then
 * fits the 64 bytes that keep a task in one cached block (an rt_coro and two
 * joins would not), and fork_join spawns millions of these. */
struct fib_task {
    rt_task_join join; /* the child awaited: the left one, then the right one */
    rt_task *right;    /* the right child's handle until the join takes it over */
    uint64_t n;        /* the argument; then the left child's value */
    int left_status;   /* the left join's result */
    unsigned stage;    /* 0: not started; 1: joining left; 2: joining right */
};

_Static_assert(sizeof(struct fib_task) <= 64, "fork_join: a fib task fits a cached block");

static rt_poll fib_task_poll(void *state, rt_context *cx, void **out);

/* Releases a handle still held (the runtime shut down under the task): the
 * join dropped unfinished detaches its child, and the right child's handle
 * is detached if the join had not taken it over yet. The children then run
 * on, detached. After a completed task both are no-ops. */
static void fib_task_drop(void *state)
{
    struct fib_task *f = state;
    RT_DROP(&f->join);
    rt_task_drop(f->right);
}

static int spawn_fib(uint64_t n, rt_task **handle)
{
    struct fib_task child = {.n = n};
    return RT_SPAWN_STATE(NULL, fib_task_poll, fib_task_drop, &child, handle);
}

static rt_poll fib_task_poll(void *state, rt_context *cx, void **out)
{
    struct fib_task *f = state;
    if (f->stage == 0) { /* the first poll: spawn both children */
        if (f->n < 2) {
            *out = FIB_RESULT(f->n);
            return RT_READY;
        }
        rt_task *left = NULL;
        int err = spawn_fib(f->n - 1, &left);
        if (err == 0)
            err = spawn_fib(f->n - 2, &f->right);
        if (err < 0) {
            task_failed("fork_join: rt_spawn", err);
            rt_task_drop(left); /* NULL-safe; a wrong sum reports it too */
            *out = FIB_RESULT(0);
            return RT_READY;
        }
        rt_task_join_init(&f->join, left);
        f->stage = 1;
    }
    if (f->stage == 1) { /* joining the left child */
        if (RT_POLL_OP(&f->join, cx) == RT_PENDING)
            return RT_PENDING;
        f->left_status = (int)f->join.result;
        f->n = FIB_VALUE(f->join.value);
        rt_task_join_init(&f->join, f->right); /* takes over the handle */
        f->right = NULL;
        f->stage = 2;
    }
    /* Joining the right child. */
    if (RT_POLL_OP(&f->join, cx) == RT_PENDING)
        return RT_PENDING;
    if (f->left_status != 0 || f->join.result != 0)
        task_failed("fork_join: rt_task_join",
                    f->left_status ? f->left_status : (int)f->join.result);
    *out = FIB_RESULT(f->n + FIB_VALUE(f->join.value));
    return RT_READY;
}

/* Spawns the root call fib(n) as a task (it counts among the 2*fib(n+1)-1
 * tasks) and awaits it, like the peers do. */
struct fork_join_root {
    rt_coro co;
    uint64_t n;
    uint64_t t0;
    rt_task_join join;   /* owns the root call's handle */
    uint64_t *fib_value; /* the main thread's */
    struct rep_result *result;
};

static void fork_join_root_drop(void *state)
{
    struct fork_join_root *r = state;
    RT_DROP(&r->join); /* detaches the handle if not joined */
}

static rt_poll fork_join_root_poll(void *state, rt_context *cx, void **out)
{
    struct fork_join_root *r = state;
    RT_CORO_BEGIN(&r->co);
    r->t0 = now_ns();
    {
        rt_task *handle;
        int err = spawn_fib(r->n, &handle);
        if (err < 0) {
            task_failed("fork_join: rt_spawn", err);
            RT_RETURN(&r->co, out, NULL);
        }
        rt_task_join_init(&r->join, handle);
    }
    RT_AWAIT(&r->co, cx, &r->join);
    r->result->elapsed_ns = now_ns() - r->t0;
    if (r->join.result != 0)
        task_failed("fork_join: rt_task_join", (int)r->join.result);
    *r->fib_value = FIB_VALUE(r->join.value);
    RT_CORO_END(&r->co, out);
}

static uint64_t fork_join_tasks(uint64_t n)
{
    return 2 * fib_plain(n + 1) - 1;
}

static struct rep_result run_fork_join(rt_runtime *rt, const struct params *p)
{
    struct rep_result res = {.tasks_spawned = 1 + fork_join_tasks(p->fib_n)};
    uint64_t value = UINT64_MAX;
    struct fork_join_root root = {.n = p->fib_n, .fib_value = &value, .result = &res};
    block_on(rt, "fork_join", fork_join_root_poll, fork_join_root_drop, &root, sizeof root);
    uint64_t want = fib_plain(p->fib_n);
    if (value != want)
        bench_fail("fork_join: fib(%" PRIu64 ") computed as %" PRIu64 ", expected %" PRIu64,
                   p->fib_n, value, want);
    return res;
}

/* ------------------------------------------------------------------------ */
/* timers: N tasks; task i sleeps d_i = 1 + (i*7919 mod 50) ms with          */
/* rt_sleep, then records how late it woke (wake time minus deadline) and    */
/* completes. Time: from the first spawn until all N have finished.          */
/* ------------------------------------------------------------------------ */

/* Fits the 64 bytes of a cached task block: a hand-written poll, since an
 * rt_coro beside the sleep would not fit. */
struct sleeper {
    rt_sleep sleep;   /* zeroed until the first poll initialises it */
    int64_t *late_ns; /* the main thread's array of N */
    struct task_latch *latch;
    uint32_t index;
    bool started; /* the sleep was initialised */
};

_Static_assert(sizeof(struct sleeper) <= 64, "timers: a sleeper fits a cached block");

/* The one place the sleep's timer is released, whether the task completed
 * (a no-op then) or was cancelled in the middle of its sleep (a zeroed sleep
 * too is fine to drop). */
static void sleeper_drop(void *state)
{
    struct sleeper *s = state;
    RT_DROP(&s->sleep);
}

static rt_poll sleeper_poll(void *state, rt_context *cx, void **out)
{
    struct sleeper *s = state;
    if (!s->started) {
        int64_t ms = 1 + (int64_t)((uint64_t)s->index * 7919 % 50);
        int err = rt_sleep_init(&s->sleep, NULL, ms * 1000000);
        if (err < 0) {
            task_failed("timers: rt_sleep_init", err);
            task_latch_count_down(s->latch, 1);
            *out = NULL;
            return RT_READY;
        }
        s->started = true;
    }
    if (RT_POLL_OP(&s->sleep, cx) == RT_PENDING)
        return RT_PENDING;
    /* Written before the count-down, whose release publishes it. */
    s->late_ns[s->index] = rt_now_ns() - s->sleep.deadline_ns;
    if (s->sleep.result < 0)
        task_failed("timers: rt_sleep", (int)s->sleep.result);
    task_latch_count_down(s->latch, 1);
    *out = NULL;
    return RT_READY;
}

struct timers_root {
    rt_coro co;
    uint64_t n;
    uint64_t t0;
    int64_t *late_ns;
    struct rep_result *result;
    struct task_latch latch;
};

static rt_poll timers_root_poll(void *state, rt_context *cx, void **out)
{
    struct timers_root *r = state;
    RT_CORO_BEGIN(&r->co);
    task_latch_init(&r->latch, r->n, cx);
    r->t0 = now_ns();
    {
        const uint64_t n = r->n; /* locals: see spawn_local_root_poll */
        uint64_t spawned = 0;
        struct sleeper child = {.late_ns = r->late_ns, .latch = &r->latch};
        for (; spawned < n; spawned++) {
            child.index = (uint32_t)spawned;
            int err = RT_SPAWN_STATE(NULL, sleeper_poll, sleeper_drop, &child, NULL);
            if (err < 0) {
                task_failed("timers: rt_spawn", err);
                task_latch_count_down(&r->latch, n - spawned);
                break;
            }
        }
        r->result->tasks_spawned += spawned;
    }
    RT_AWAIT_POLL(&r->co, task_latch_poll(&r->latch));
    r->result->elapsed_ns = now_ns() - r->t0;
    RT_CORO_END(&r->co, out);
}

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least pct % of all at or below it. */
static int64_t percentile_i64(const int64_t *sorted, uint64_t n, unsigned pct)
{
    uint64_t rank = (n * pct + 99) / 100;
    return sorted[(rank < 1 ? 1 : rank) - 1];
}

static struct rep_result run_timers(rt_runtime *rt, const struct params *p)
{
    struct rep_result res = {.tasks_spawned = 1};
    const uint64_t n = p->timers_n;
    int64_t *late = malloc(n * sizeof *late);
    if (!late)
        bench_fail("out of memory");
    for (uint64_t i = 0; i < n; i++)
        late[i] = INT64_MIN; /* "never woke" */
    struct timers_root root = {.n = n, .late_ns = late, .result = &res};
    block_on(rt, "timers", timers_root_poll, NULL, &root, sizeof root);
    if (res.tasks_spawned != n + 1)
        bench_fail("timers: spawned %" PRIu64 " of %" PRIu64 " tasks", res.tasks_spawned - 1, n);

    qsort(late, n, sizeof *late, compare_i64);
    if (late[0] == INT64_MIN)
        bench_fail("timers: a task finished without recording its wake-up");
    if (late[0] < 0)
        bench_fail("timers: a sleep ended %.1f us before its deadline (timer.h: never early)",
                   (double)-late[0] / 1e3);
    add_extra(&res, "total_ms", (double)res.elapsed_ns / 1e6);
    add_extra(&res, "late_p50_us", (double)percentile_i64(late, n, 50) / 1e3);
    add_extra(&res, "late_p99_us", (double)percentile_i64(late, n, 99) / 1e3);
    add_extra(&res, "late_max_us", (double)late[n - 1] / 1e3);
    free(late);
    return res;
}

/* ------------------------------------------------------------------------ */
/* sleep_1ms: one task sleeps 1 ms, 1000 times in a row, on an otherwise    */
/* idle runtime (every worker parked during each sleep), and records how    */
/* late each sleep woke it: the precision a lone timer gets, where timers   */
/* measures many at once. One op: one sleep.                                 */
/* ------------------------------------------------------------------------ */

#define SLEEP_1MS_COUNT 1000

struct napper {
    rt_coro co;
    int64_t *late_ns; /* SLEEP_1MS_COUNT entries, the main thread's */
    int i;
    uint64_t t0;
    struct rep_result *result;
    rt_sleep nap;
};

static rt_poll napper_poll(void *state, rt_context *cx, void **out)
{
    struct napper *n = state;
    RT_CORO_BEGIN(&n->co);
    n->t0 = now_ns();
    for (n->i = 0; n->i < SLEEP_1MS_COUNT; n->i++) {
        rt_sleep_init(&n->nap, NULL, RT_MS(1));
        RT_AWAIT(&n->co, cx, &n->nap);
        if (n->nap.result < 0)
            bench_fail("sleep_1ms: rt_sleep: %s", rt_strerror((int)n->nap.result));
        n->late_ns[n->i] = rt_now_ns() - n->nap.deadline_ns;
    }
    n->result->elapsed_ns = now_ns() - n->t0;
    RT_CORO_END(&n->co, out);
}

static struct rep_result run_sleep_1ms(rt_runtime *rt, const struct params *p)
{
    (void)p;
    struct rep_result res = {.tasks_spawned = 1};
    int64_t late[SLEEP_1MS_COUNT];
    struct napper n = {.late_ns = late, .result = &res};
    block_on(rt, "sleep_1ms", napper_poll, rt_coro_drop, &n, sizeof n);
    qsort(late, SLEEP_1MS_COUNT, sizeof *late, compare_i64);
    if (late[0] < 0)
        bench_fail("sleep_1ms: a sleep ended %.1f us before its deadline (timer.h: never early)",
                   (double)-late[0] / 1e3);
    add_extra(&res, "late_p50_us", (double)percentile_i64(late, SLEEP_1MS_COUNT, 50) / 1e3);
    add_extra(&res, "late_p99_us", (double)percentile_i64(late, SLEEP_1MS_COUNT, 99) / 1e3);
    add_extra(&res, "late_max_us", (double)late[SLEEP_1MS_COUNT - 1] / 1e3);
    return res;
}

static uint64_t ops_sleep_1ms(const struct params *p)
{
    (void)p;
    return SLEEP_1MS_COUNT;
}

/* ------------------------------------------------------------------------ */
/* tcp_echo: an echo server on 127.0.0.1, as tasks on the runtime (an        */
/* acceptor, one task per connection that reads up to 4 KiB and writes it    */
/* all back), driven by asyncrt-echo-client in a separate process: C         */
/* connections, M sequential round trips of S bytes each. The client times   */
/* the round trips; ns per op = its total time / (C*M).                      */
/* ------------------------------------------------------------------------ */

/* The server's live tasks: the acceptor counts one until it has stopped, each
 * connection one until its drop. Static, like g_remote_latch, because the
 * last count-down wakes the futex after releasing the waiter. */
static struct thread_latch g_server_latch;

/* In the workload every connection error is a failure; a standalone server
 * (--echo-server) just closes the connection. */
static bool g_echo_strict;

struct echo_conn {
    rt_coro co;
    rt_io *io;
    rt_io_read rd;      /* result: bytes, 0 at end of stream, or -errno */
    rt_io_write_all wr; /* writes them back; keeps its progress across polls */
    int64_t end;        /* what ended the connection: 0, or -errno */
    unsigned char buf[4096];
};

static void echo_conn_drop(void *state)
{
    struct echo_conn *c = state;
    rt_coro_cleanup(&c->co); /* the read or write in flight, if any */
    rt_io_close(c->io);
    thread_latch_count_down(&g_server_latch, 1);
}

static rt_poll echo_conn_poll(void *state, rt_context *cx, void **out)
{
    struct echo_conn *c = state;
    RT_CORO_BEGIN(&c->co);
    for (;;) {
        rt_io_read_init(&c->rd, c->io, c->buf, sizeof c->buf);
        RT_AWAIT(&c->co, cx, &c->rd);
        if (c->rd.result <= 0) {
            c->end = c->rd.result;
            break;
        }
        rt_io_write_all_init(&c->wr, c->io, c->buf, (size_t)c->rd.result);
        RT_AWAIT(&c->co, cx, &c->wr);
        if (c->wr.result < 0) {
            c->end = c->wr.result;
            break;
        }
    }
    if (c->end < 0 && g_echo_strict)
        task_failed("tcp_echo: connection", (int)c->end);
    RT_CORO_END(&c->co, out);
}

struct echo_acceptor {
    rt_coro co;
    rt_io *listener;
    rt_io *stop; /* read end of a pipe: anything readable (end of stream) stops */
    char stop_byte;
    rt_io_read stop_read; /* arm 0: the stop pipe */
    rt_tcp_accept accept; /* arm 1: the next connection */
    rt_select accept_or_stop;
    uint64_t *conns_spawned; /* the caller's count; written by this task only */
};

static void echo_acceptor_drop(void *state)
{
    struct echo_acceptor *a = state;
    rt_coro_cleanup(&a->co); /* the select in flight, and both its arms */
    rt_io_close(a->listener);
    rt_io_close(a->stop);
    thread_latch_count_down(&g_server_latch, 1);
}

static rt_poll echo_acceptor_poll(void *state, rt_context *cx, void **out)
{
    struct echo_acceptor *a = state;
    RT_CORO_BEGIN(&a->co);
    for (;;) {
        /* Ready when asked to stop (the stop pipe, polled first, wins) or
         * when the accept has a result; the other arm is then dropped. */
        rt_io_read_init(&a->stop_read, a->stop, &a->stop_byte, 1);
        rt_tcp_accept_init(&a->accept, a->listener);
        rt_select_init(&a->accept_or_stop, RT_FUTURES(&a->stop_read.future, &a->accept.future));
        RT_AWAIT(&a->co, cx, &a->accept_or_stop);
        if (a->accept_or_stop.index != 1) {
            if (a->accept_or_stop.result < 0)
                task_failed("tcp_echo: reading the stop pipe", (int)a->accept_or_stop.result);
            break;
        }
        if (a->accept.result < 0) {
            task_failed("tcp_echo: rt_tcp_accept", (int)a->accept.result);
            break; /* the client then fails too, and says so */
        }
        /* TCP_NODELAY is on already, as on every accepted connection. */
        thread_latch_add(&g_server_latch, 1);
        struct echo_conn c = {.io = a->accept.conn};
        int err = RT_SPAWN_STATE(NULL, echo_conn_poll, echo_conn_drop, &c, NULL);
        if (err < 0) {
            task_failed("tcp_echo: rt_spawn", err);
            rt_io_close(a->accept.conn);
            thread_latch_count_down(&g_server_latch, 1); /* never zero: we hold one */
            continue;
        }
        (*a->conns_spawned)++;
    }
    RT_CORO_END(&a->co, out);
}

struct echo_server {
    uint16_t port; /* the one bound */
    int stop_fd;   /* write end of the stop pipe: closing it stops the acceptor */
};

/* Listens on 127.0.0.1:port (0: any free port) and spawns the acceptor, which
 * counts the connection tasks it spawns into *conns_spawned. */
static struct echo_server echo_server_start(rt_runtime *rt, uint16_t port, uint64_t *conns_spawned)
{
    struct sockaddr_storage addr;
    socklen_t len;
    int err = rt_net_addr("127.0.0.1", port, &addr, &len);
    if (err < 0)
        bench_fail("tcp_echo: rt_net_addr: %s", rt_strerror(err));
    struct echo_acceptor a = {.conns_spawned = conns_spawned};
    err = rt_tcp_listen(rt, (struct sockaddr *)&addr, len, 1024, RT_NET_REUSEADDR, &a.listener);
    if (err < 0)
        bench_fail("tcp_echo: rt_tcp_listen on 127.0.0.1:%u: %s", port, rt_strerror(err));
    len = sizeof addr;
    err = rt_net_local_addr(a.listener, &addr, &len);
    if (err < 0)
        bench_fail("tcp_echo: rt_net_local_addr: %s", rt_strerror(err));

    int stop[2];
    if (pipe2(stop, O_CLOEXEC) < 0)
        bench_fail("tcp_echo: pipe2: %s", strerror(errno));
    err = rt_io_open(rt, stop[0], &a.stop);
    if (err < 0)
        bench_fail("tcp_echo: rt_io_open (pipe): %s", rt_strerror(err));

    thread_latch_init(&g_server_latch, 1);
    err = RT_SPAWN_STATE(rt, echo_acceptor_poll, echo_acceptor_drop, &a, NULL);
    if (err < 0)
        bench_fail("tcp_echo: rt_spawn: %s", rt_strerror(err));
    return (struct echo_server){ntohs(((struct sockaddr_in *)&addr)->sin_port), stop[1]};
}

/* Stops accepting and waits until every task of the server has finished
 * (the connections end when their clients close them). */
static void echo_server_stop(struct echo_server *s)
{
    close(s->stop_fd);
    thread_latch_wait(&g_server_latch);
}

/* The running client, for the watchdog to kill (0: none). */
static volatile pid_t g_client_pid;

/* Runs the client to its end and returns its stdout (one line) in `line`.
 * Its stderr is ours. Fails the program unless it exits with status 0. */
static void run_echo_client(const struct params *p, uint16_t port, char *line, size_t cap)
{
    char port_s[8], conns_s[24], msgs_s[24], size_s[24];
    snprintf(port_s, sizeof port_s, "%u", port);
    snprintf(conns_s, sizeof conns_s, "%" PRIu64, p->tcp_conns);
    snprintf(msgs_s, sizeof msgs_s, "%" PRIu64, p->tcp_msgs);
    snprintf(size_s, sizeof size_s, "%" PRIu64, p->tcp_size);
    char *args[] = {(char *)p->echo_client, "127.0.0.1", port_s, conns_s, msgs_s, size_s, NULL};

    int out[2];
    if (pipe2(out, O_CLOEXEC) < 0)
        bench_fail("tcp_echo: pipe2: %s", strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attr;
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGPIPE);
    if (posix_spawn_file_actions_init(&actions) != 0 ||
        posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO) != 0 ||
        posix_spawnattr_init(&attr) != 0 || posix_spawnattr_setsigmask(&attr, &none) != 0 ||
        posix_spawnattr_setsigdefault(&attr, &defaults) != 0 ||
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF) != 0)
        bench_fail("tcp_echo: posix_spawn set-up failed");
    extern char **environ;
    pid_t pid;
    int err = posix_spawn(&pid, p->echo_client, &actions, &attr, args, environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(out[1]);
    if (err != 0)
        bench_fail("tcp_echo: cannot run %s: %s", p->echo_client, strerror(err));
    g_client_pid = pid;

    size_t used = 0;
    for (;;) {
        char sink[256];
        char *to = used + 1 < cap ? line + used : sink;
        size_t room = used + 1 < cap ? cap - 1 - used : sizeof sink;
        ssize_t n = read(out[0], to, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (to == line + used)
            used += (size_t)n;
    }
    line[used] = '\0';
    close(out[0]);

    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            bench_fail("tcp_echo: waitpid: %s", strerror(errno));
    g_client_pid = 0;
    if (WIFSIGNALED(status))
        bench_fail("tcp_echo: the client (%s) was killed by signal %d", p->echo_client,
                   WTERMSIG(status));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        bench_fail("tcp_echo: the client (%s) exited with status %d", p->echo_client,
                   WEXITSTATUS(status));
}

/* The value of ` name=` in the client's line. */
static double echo_field(const char *line, const char *name)
{
    size_t len = strlen(name);
    for (const char *at = strstr(line, name); at; at = strstr(at + 1, name)) {
        if (at > line && at[-1] == ' ' && at[len] == '=') {
            char *end;
            double v = strtod(at + len + 1, &end);
            if (end != at + len + 1)
                return v;
        }
    }
    bench_fail("tcp_echo: no %s= in the client's output: '%s'", name, line);
}

/* --tcp-busy: tasks that keep every worker busy with CPU work (50 us per
 * poll, then a yield) while the server answers, to measure how long ready
 * sockets wait when no worker is idle. Not part of the specified workload. */
static atomic_bool g_busy_stop;

static rt_poll busy_task_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)out;
    if (atomic_load_explicit(&g_busy_stop, memory_order_relaxed))
        return RT_READY;
    int64_t until = rt_now_ns() + 50000;
    while (rt_now_ns() < until)
        ;
    rt_waker_wake_by_ref(rt_context_waker(cx));
    return RT_PENDING;
}

static struct rep_result run_tcp_echo(rt_runtime *rt, const struct params *p)
{
    struct rep_result res = {.tasks_spawned = 1}; /* the acceptor */
    uint64_t conns = 0;
    struct echo_server server = echo_server_start(rt, 0, &conns);
    rt_task *busy[64];
    atomic_store(&g_busy_stop, false);
    for (uint64_t i = 0; i < p->tcp_busy; i++) {
        int err = rt_spawn(rt, busy_task_poll, NULL, NULL, 0, &busy[i]);
        if (err < 0)
            bench_fail("tcp_echo: rt_spawn (busy task): %s", rt_strerror(err));
    }
    char line[512];
    run_echo_client(p, server.port, line, sizeof line);
    atomic_store(&g_busy_stop, true);
    for (uint64_t i = 0; i < p->tcp_busy; i++)
        if (rt_task_wait(busy[i], -1, NULL, NULL) < 0)
            bench_fail("tcp_echo: a busy task did not finish");
    echo_server_stop(&server);
    res.tasks_spawned += conns + p->tcp_busy;

    if (strncmp(line, "echo ", 5) != 0)
        bench_fail("tcp_echo: unexpected output from the client: '%s'", line);
    if (echo_field(line, "conns") != (double)p->tcp_conns ||
        echo_field(line, "msgs") != (double)p->tcp_msgs)
        bench_fail("tcp_echo: the client did other work than asked: '%s'", line);
    if (conns != p->tcp_conns)
        bench_fail("tcp_echo: the server accepted %" PRIu64
                   " connections, the client opened %" PRIu64,
                   conns, p->tcp_conns);
    res.elapsed_ns = (uint64_t)(echo_field(line, "total_s") * 1e9 + 0.5);
    add_extra(&res, "rtt_p50_us", echo_field(line, "rtt_p50_us"));
    add_extra(&res, "rtt_p99_us", echo_field(line, "rtt_p99_us"));
    return res;
}

/* ------------------------------------------------------------------------ */
/* The workload table                                                        */
/* ------------------------------------------------------------------------ */

struct workload {
    const char *name;
    /* One repetition; exits the process on any failure. NULL: not written yet. */
    struct rep_result (*run)(rt_runtime *rt, const struct params *p);
    uint64_t (*ops)(const struct params *p);
};

static uint64_t ops_spawn(const struct params *p)
{
    return p->spawn_n;
}
static uint64_t ops_yield_many(const struct params *p)
{
    return p->yield_tasks * p->yields;
}
static uint64_t ops_chained_spawn(const struct params *p)
{
    return p->chain;
}
static uint64_t ops_fork_join(const struct params *p)
{
    return fork_join_tasks(p->fib_n);
}
static uint64_t ops_timers(const struct params *p)
{
    return p->timers_n;
}
static uint64_t ops_tcp_echo(const struct params *p)
{
    return p->tcp_conns * p->tcp_msgs;
}

static uint64_t ops_ping_pong(const struct params *p)
{
    return p->pairs * p->rounds;
}

static uint64_t ops_select(const struct params *p)
{
    return p->select_tasks / 2 * 2 * p->rounds;
}

/* ------------------------------------------------------------------------ */
/* The fiber workloads (fiber_bench.c): the same work as fibers.            */
/* ------------------------------------------------------------------------ */

static struct rep_result run_fiber_spawn(rt_runtime *rt, const struct params *p)
{
    return (struct rep_result){.elapsed_ns = fiber_bench_spawn(rt, p->spawn_n),
                               .tasks_spawned = 1 + p->spawn_n};
}

static struct rep_result run_fiber_spawn_remote(rt_runtime *rt, const struct params *p)
{
    return (struct rep_result){.elapsed_ns = fiber_bench_spawn_remote(rt, p->spawn_n),
                               .tasks_spawned = p->spawn_n};
}

static struct rep_result run_fiber_yield(rt_runtime *rt, const struct params *p)
{
    return (struct rep_result){.elapsed_ns = fiber_bench_yield(rt, p->yield_tasks, p->yields),
                               .tasks_spawned = 1 + p->yield_tasks};
}

static struct rep_result run_fiber_ping_pong(rt_runtime *rt, const struct params *p)
{
    return (struct rep_result){.elapsed_ns = fiber_bench_ping_pong(rt, p->pairs, p->rounds),
                               .tasks_spawned = 1 + 2 * p->pairs};
}

static struct rep_result run_fiber_chained_spawn(rt_runtime *rt, const struct params *p)
{
    return (struct rep_result){.elapsed_ns = fiber_bench_chained_spawn(rt, p->chain),
                               .tasks_spawned = 1 + p->chain};
}

static struct rep_result run_fiber_fork_join(rt_runtime *rt, const struct params *p)
{
    uint64_t value = 0;
    struct rep_result res = {.elapsed_ns = fiber_bench_fork_join(rt, p->fib_n, &value),
                             .tasks_spawned = fork_join_tasks(p->fib_n)};
    if (value != fib_plain(p->fib_n))
        bench_fail("fiber_fork_join: fib(%" PRIu64 ") computed as %" PRIu64, p->fib_n, value);
    return res;
}

/* Fibers in a 10-ary tree `depth` levels below its root, root included. */
static uint64_t skynet_fibers(uint64_t depth)
{
    uint64_t n = 1, level = 1;
    for (uint64_t d = 0; d < depth; d++) {
        level *= 10;
        n += level;
    }
    return n;
}

static struct rep_result run_fiber_skynet(rt_runtime *rt, const struct params *p)
{
    uint64_t sum = 0;
    struct rep_result res = {.elapsed_ns = fiber_bench_skynet(rt, p->skynet_depth, &sum),
                             .tasks_spawned = skynet_fibers(p->skynet_depth)};
    uint64_t leaves = 1;
    for (uint64_t d = 0; d < p->skynet_depth; d++)
        leaves *= 10;
    if (sum != leaves * (leaves - 1) / 2)
        bench_fail("fiber_skynet: sum %" PRIu64 ", expected %" PRIu64, sum,
                   leaves * (leaves - 1) / 2);
    return res;
}

static uint64_t ops_skynet(const struct params *p)
{
    return skynet_fibers(p->skynet_depth);
}

/* In their documented order, which is also the order they run in. */
static const struct workload WORKLOADS[] = {
    {"spawn_local", run_spawn_local, ops_spawn},
    {"spawn_remote", run_spawn_remote, ops_spawn},
    {"yield_many", run_yield_many, ops_yield_many},
    {"ping_pong", run_ping_pong, ops_ping_pong},
    {"chained_spawn", run_chained_spawn, ops_chained_spawn},
    {"fork_join", run_fork_join, ops_fork_join},
    {"timers", run_timers, ops_timers},
    {"sleep_1ms", run_sleep_1ms, ops_sleep_1ms},
    {"tcp_echo", run_tcp_echo, ops_tcp_echo},
    {"select", run_select, ops_select},
    {"select_fair", run_select_fair, ops_select},
    {"fiber_spawn", run_fiber_spawn, ops_spawn},
    {"fiber_spawn_remote", run_fiber_spawn_remote, ops_spawn},
    {"fiber_yield", run_fiber_yield, ops_yield_many},
    {"fiber_ping_pong", run_fiber_ping_pong, ops_ping_pong},
    {"fiber_chained_spawn", run_fiber_chained_spawn, ops_chained_spawn},
    {"fiber_fork_join", run_fiber_fork_join, ops_fork_join},
    {"fiber_skynet", run_fiber_skynet, ops_skynet},
};
#define N_WORKLOADS (sizeof WORKLOADS / sizeof WORKLOADS[0])

/* ------------------------------------------------------------------------ */
/* Measuring                                                                */
/* ------------------------------------------------------------------------ */

/* Watchdog: a repetition that never signals (a lost wake-up, a lost task)
 * ends the run with a message naming it, rather than hanging until CI kills
 * the job. The message is prepared before each repetition because the signal
 * handler may only call async-signal-safe functions. */
static char g_watchdog_msg[160];

static void watchdog_fired(int sig)
{
    (void)sig;
    pid_t client = g_client_pid;
    if (client > 0)
        kill(client, SIGKILL); /* leave no client running */
    ssize_t ignored = write(STDERR_FILENO, g_watchdog_msg, strlen(g_watchdog_msg));
    (void)ignored;
    _exit(1);
}

/* One measured repetition. */
struct rep_sample {
    double ns_per_op;
    struct rep_result result;
};

static int compare_samples(const void *a, const void *b)
{
    double x = ((const struct rep_sample *)a)->ns_per_op;
    double y = ((const struct rep_sample *)b)->ns_per_op;
    return (x > y) - (x < y);
}

/* Tasks spawned by all repetitions so far, for the check after shutdown. */
static uint64_t g_tasks_spawned;

static struct summary measure(rt_runtime *rt, const struct workload *w, const struct params *p,
                              unsigned reps, unsigned rep_timeout_s, bool verbose)
{
    uint64_t ops = w->ops(p);
    struct rep_sample *samples = calloc(reps, sizeof *samples);
    if (!samples)
        bench_fail("out of memory");

    for (unsigned rep = 0; rep <= reps; rep++) { /* rep 0 is the warm-up */
        snprintf(g_watchdog_msg, sizeof g_watchdog_msg,
                 PROG ": error: %s repetition %u did not finish within %u s (hang?)\n", w->name,
                 rep, rep_timeout_s);
        alarm(rep_timeout_s);
        struct rep_result r = w->run(rt, p);
        alarm(0);

        if (atomic_load(&g_task_failures) != 0)
            bench_fail("%s repetition %u: a task failed (see above)", w->name, rep);
        g_tasks_spawned += r.tasks_spawned;
        double per_op = (double)r.elapsed_ns / (double)ops;
        if (verbose) {
            fprintf(stderr, "# %s %s %u: %.3f ms, %.1f ns/op", w->name,
                    rep == 0 ? "warm-up" : "rep", rep, (double)r.elapsed_ns / 1e6, per_op);
            for (unsigned i = 0; i < r.n_extras; i++)
                fprintf(stderr, " %s=%.1f", r.extras[i].name, r.extras[i].value);
            fputc('\n', stderr);
        }
        if (rep > 0)
            samples[rep - 1] = (struct rep_sample){per_op, r};
    }

    qsort(samples, reps, sizeof *samples, compare_samples);
    struct summary s = {
        .workload = w->name,
        .workers = rt_runtime_workers(rt),
        .ops = ops,
        .median_ns_per_op =
            reps % 2 ? samples[reps / 2].ns_per_op
                     : (samples[reps / 2 - 1].ns_per_op + samples[reps / 2].ns_per_op) / 2,
        .min_ns_per_op = samples[0].ns_per_op,
        .max_ns_per_op = samples[reps - 1].ns_per_op,
    };
    /* The extra fields are those of the median repetition (the lower middle
     * one for an even count), so that they belong to one real run. */
    const struct rep_result *mid = &samples[(reps - 1) / 2].result;
    for (unsigned i = 0; i < mid->n_extras; i++)
        s.extras[i] = mid->extras[i];
    s.n_extras = mid->n_extras;
    free(samples);
    return s;
}

/* ------------------------------------------------------------------------ */
/* Output                                                                   */
/* ------------------------------------------------------------------------ */

static void print_line(const struct summary *s)
{
    printf("bench %s runtime=asyncrt workers=%u ops=%" PRIu64
           " median_ns_per_op=%.1f min_ns_per_op=%.1f max_ns_per_op=%.1f",
           s->workload, s->workers, s->ops, s->median_ns_per_op, s->min_ns_per_op,
           s->max_ns_per_op);
    for (unsigned i = 0; i < s->n_extras; i++)
        printf(" %s=%.1f", s->extras[i].name, s->extras[i].value);
    putchar('\n');
    fflush(stdout);
}

static void write_json(const char *path, const struct summary *s, size_t n)
{
    FILE *f = fopen(path, "w");
    if (!f)
        bench_fail("cannot write %s: %s", path, strerror(errno));
    fputs("[\n", f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f,
                "  {\"workload\": \"%s\", \"runtime\": \"asyncrt\", \"workers\": %u, "
                "\"ops\": %" PRIu64 ", \"median_ns_per_op\": %.1f, \"min_ns_per_op\": %.1f, "
                "\"max_ns_per_op\": %.1f",
                s[i].workload, s[i].workers, s[i].ops, s[i].median_ns_per_op, s[i].min_ns_per_op,
                s[i].max_ns_per_op);
        for (unsigned k = 0; k < s[i].n_extras; k++)
            fprintf(f, ", \"%s\": %.1f", s[i].extras[k].name, s[i].extras[k].value);
        fputs(i + 1 < n ? "},\n" : "}\n", f);
    }
    fputs("]\n", f);
    if (ferror(f) | (fclose(f) != 0))
        bench_fail("cannot write %s", path);
}

/* ------------------------------------------------------------------------ */
/* Command line                                                             */
/* ------------------------------------------------------------------------ */

static const char USAGE[] =
    "usage: " PROG " [options]\n"
    "       " PROG " --echo-server PORT [--workers W]\n"
    "  --only NAME[,NAME...]  run only these workloads (default: all)\n"
    "  --workers W            worker threads (default: online CPUs)\n"
    "  --reps R               measured repetitions, after 1 warm-up (default 5)\n"
    "  --json FILE            also write the figures to FILE as a JSON array\n"
    "  --spawn-n N            spawn_local/spawn_remote: tasks (default 100000)\n"
    "  --yield-tasks T        yield_many: tasks (default 1000)\n"
    "  --yields Y             yield_many: yields per task (default 1000)\n"
    "  --pairs P              ping_pong: pairs of tasks (default 1000)\n"
    "  --rounds R             ping_pong, select: round trips per pair (default 100)\n"
    "  --chain D              chained_spawn: chain length (default 100000)\n"
    "  --fib N                fork_join: fib(N) (default 27)\n"
    "  --skynet-depth D       fiber_skynet: levels of the 10-ary tree (default 6)\n"
    "  --timers-n N           timers: sleeping tasks (default 100000)\n"
    "  --select-tasks T       select: tasks, in pairs (default 1000)\n"
    "  --tcp-conns C          tcp_echo: connections (default 64)\n"
    "  --tcp-msgs M           tcp_echo: round trips per connection (default 10000)\n"
    "  --tcp-size S           tcp_echo: bytes per message (default 64)\n"
    "  --tcp-busy N           tcp_echo: N tasks keep the workers busy meanwhile, 50 us\n"
    "                         of CPU per poll (default 0; not the specified workload)\n"
    "  --echo-client PATH     tcp_echo: the load generator (default: the\n"
    "                         asyncrt-echo-client next to this program)\n"
    "  --idle-fibers N        only start N fibers that each wait on a channel\n"
    "                         receive and print their memory (rss_kib,\n"
    "                         rss_per_fiber_b)\n"
    "  --echo-server PORT     only serve echo on 127.0.0.1:PORT (0: any free\n"
    "                         port) with the tcp_echo server, printing\n"
    "                         'listening 127.0.0.1:PORT', until SIGINT/SIGTERM\n"
    "  --rep-timeout S        fail a repetition that takes over S seconds\n"
    "                         (default 60; 0: no limit)\n"
    "  --verbose              per-repetition times and runtime metrics on stderr\n"
    "  --poll-timing          run with rt_config.poll_timing (per-task poll times and\n"
    "                         the per-worker histograms; docs/debugging.md)\n"
    "  --trace FILE           record a trace of the whole run (asyncrt/trace.h) and\n"
    "                         write it to FILE at the end (docs/tracing.md)\n"
    "  --help                 this text\n"
    "workloads: spawn_local spawn_remote yield_many ping_pong chained_spawn fork_join\n"
    "           timers tcp_echo\n";

static _Noreturn void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n%s", USAGE);
    va_end(ap);
    exit(2);
}

static uint64_t parse_count(const char *flag, const char *text, uint64_t min, uint64_t max)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-' || v < min || v > max)
        usage_error("%s needs an integer from %" PRIu64 " to %" PRIu64 ", not '%s'", flag, min, max,
                    text);
    return v;
}

struct options {
    unsigned workers;
    unsigned reps;
    unsigned rep_timeout_s;
    bool verbose;
    const char *trace; /* --trace FILE, or NULL */
    bool poll_timing;  /* --poll-timing */
    const char *json;
    int echo_server_port; /* -1: run the workloads */
    uint64_t idle_fibers; /* --idle-fibers N: measure their memory instead */
    bool selected[N_WORKLOADS];
    struct params params;
};

/* Marks the workloads named in a comma-separated list. */
static void select_workloads(struct options *o, const char *list)
{
    char *copy = strdup(list);
    if (!copy)
        bench_fail("out of memory");
    char *save = NULL;
    for (char *name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < N_WORKLOADS && strcmp(WORKLOADS[i].name, name) != 0)
            i++;
        if (i == N_WORKLOADS)
            usage_error("unknown workload '%s'", name);
        if (!WORKLOADS[i].run)
            usage_error("workload '%s' is not written yet", name);
        o->selected[i] = true;
    }
    free(copy);
}

/* asyncrt-echo-client in this program's own directory. */
static const char *default_echo_client(const char *argv0)
{
    static char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0 || (size_t)n >= sizeof path - 1)
        n = (ssize_t)snprintf(path, sizeof path, "%s", argv0);
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0;
    if (snprintf(path + dir, sizeof path - dir, "asyncrt-echo-client") >= (int)(sizeof path - dir))
        bench_fail("path too long: %s", path);
    return path;
}

static void parse_args(int argc, char **argv, struct options *o)
{
    enum {
        OPT_ONLY = 256,
        OPT_WORKERS,
        OPT_REPS,
        OPT_JSON,
        OPT_SPAWN_N,
        OPT_YIELD_TASKS,
        OPT_YIELDS,
        OPT_PAIRS,
        OPT_ROUNDS,
        OPT_CHAIN,
        OPT_FIB,
        OPT_SKYNET_DEPTH,
        OPT_TIMERS_N,
        OPT_SELECT_TASKS,
        OPT_TCP_CONNS,
        OPT_TCP_MSGS,
        OPT_TCP_SIZE,
        OPT_TCP_BUSY,
        OPT_ECHO_CLIENT,
        OPT_ECHO_SERVER,
        OPT_REP_TIMEOUT,
        OPT_VERBOSE,
        OPT_TRACE,
        OPT_POLL_TIMING,
        OPT_IDLE_FIBERS,
        OPT_HELP
    };
    static const struct option longopts[] = {
        {"only", required_argument, NULL, OPT_ONLY},
        {"workers", required_argument, NULL, OPT_WORKERS},
        {"reps", required_argument, NULL, OPT_REPS},
        {"json", required_argument, NULL, OPT_JSON},
        {"spawn-n", required_argument, NULL, OPT_SPAWN_N},
        {"yield-tasks", required_argument, NULL, OPT_YIELD_TASKS},
        {"yields", required_argument, NULL, OPT_YIELDS},
        {"pairs", required_argument, NULL, OPT_PAIRS},
        {"rounds", required_argument, NULL, OPT_ROUNDS},
        {"chain", required_argument, NULL, OPT_CHAIN},
        {"fib", required_argument, NULL, OPT_FIB},
        {"skynet-depth", required_argument, NULL, OPT_SKYNET_DEPTH},
        {"timers-n", required_argument, NULL, OPT_TIMERS_N},
        {"select-tasks", required_argument, NULL, OPT_SELECT_TASKS},
        {"tcp-conns", required_argument, NULL, OPT_TCP_CONNS},
        {"tcp-msgs", required_argument, NULL, OPT_TCP_MSGS},
        {"tcp-size", required_argument, NULL, OPT_TCP_SIZE},
        {"tcp-busy", required_argument, NULL, OPT_TCP_BUSY},
        {"echo-client", required_argument, NULL, OPT_ECHO_CLIENT},
        {"echo-server", required_argument, NULL, OPT_ECHO_SERVER},
        {"rep-timeout", required_argument, NULL, OPT_REP_TIMEOUT},
        {"verbose", no_argument, NULL, OPT_VERBOSE},
        {"trace", required_argument, NULL, OPT_TRACE},
        {"poll-timing", no_argument, NULL, OPT_POLL_TIMING},
        {"idle-fibers", required_argument, NULL, OPT_IDLE_FIBERS},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };

    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    *o = (struct options){
        .workers = cpus > 0 ? (unsigned)cpus : 1,
        .reps = 5,
        .rep_timeout_s = 60,
        .echo_server_port = -1,
        .params = {.spawn_n = 100000,
                   .yield_tasks = 1000,
                   .yields = 1000,
                   .pairs = 1000,
                   .rounds = 100,
                   .chain = 100000,
                   .fib_n = 27,
                   .skynet_depth = 6,
                   .timers_n = 100000,
                   .select_tasks = 1000,
                   .tcp_conns = 64,
                   .tcp_msgs = 10000,
                   .tcp_size = 64},
    };
    bool any_only = false;

    opterr = 0; /* our own message, then the usage */
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_ONLY:
            select_workloads(o, optarg);
            any_only = true;
            break;
        case OPT_WORKERS:
            o->workers = parse_count("--workers", optarg, 1, RT_MAX_WORKERS);
            break;
        case OPT_REPS:
            o->reps = parse_count("--reps", optarg, 1, 1000000);
            break;
        case OPT_JSON:
            o->json = optarg;
            break;
        case OPT_SPAWN_N:
            o->params.spawn_n = parse_count("--spawn-n", optarg, 1, 1u << 30);
            break;
        case OPT_YIELD_TASKS:
            o->params.yield_tasks = parse_count("--yield-tasks", optarg, 1, 1u << 30);
            break;
        case OPT_YIELDS:
            o->params.yields = parse_count("--yields", optarg, 1, 1u << 30);
            break;
        case OPT_PAIRS:
            o->params.pairs = parse_count("--pairs", optarg, 1, 1u << 24);
            break;
        case OPT_ROUNDS:
            o->params.rounds = parse_count("--rounds", optarg, 1, 1u << 30);
            break;
        case OPT_CHAIN:
            o->params.chain = parse_count("--chain", optarg, 1, 1u << 30);
            break;
        /* fib(40) already means 331 million tasks a repetition. */
        case OPT_FIB:
            o->params.fib_n = parse_count("--fib", optarg, 0, 40);
            break;
        case OPT_SKYNET_DEPTH:
            o->params.skynet_depth = parse_count("--skynet-depth", optarg, 1, 7);
            break;
        case OPT_TIMERS_N:
            o->params.timers_n = parse_count("--timers-n", optarg, 1, 1u << 24);
            break;
        case OPT_SELECT_TASKS:
            o->params.select_tasks = parse_count("--select-tasks", optarg, 2, 1u << 24);
            break;
        case OPT_TCP_CONNS:
            o->params.tcp_conns = parse_count("--tcp-conns", optarg, 1, 10000);
            break;
        case OPT_TCP_MSGS:
            o->params.tcp_msgs = parse_count("--tcp-msgs", optarg, 1, 1u << 30);
            break;
        case OPT_TCP_SIZE:
            o->params.tcp_size = parse_count("--tcp-size", optarg, 1, 1u << 20);
            break;
        case OPT_TCP_BUSY:
            o->params.tcp_busy = parse_count("--tcp-busy", optarg, 0, 64);
            break;
        case OPT_ECHO_CLIENT:
            o->params.echo_client = optarg;
            break;
        case OPT_ECHO_SERVER:
            o->echo_server_port = (int)parse_count("--echo-server", optarg, 0, 65535);
            break;
        case OPT_REP_TIMEOUT:
            o->rep_timeout_s = parse_count("--rep-timeout", optarg, 0, 1000000);
            break;
        case OPT_VERBOSE:
            o->verbose = true;
            break;
        case OPT_IDLE_FIBERS:
            o->idle_fibers = parse_count("--idle-fibers", optarg, 1, 100000000);
            break;
        case OPT_TRACE:
            o->trace = optarg;
            break;
        case OPT_POLL_TIMING:
            o->poll_timing = true;
            break;
        case OPT_HELP:
            fputs(USAGE, stdout);
            exit(0);
        default:
            if (optopt)
                usage_error("option '%s' needs a value", argv[optind - 1]);
            usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        usage_error("unexpected argument '%s'", argv[optind]);
    if (o->params.yield_tasks * o->params.yields > (uint64_t)1 << 40)
        usage_error("--yield-tasks times --yields is too large");
    if (o->params.tcp_conns * o->params.tcp_msgs > (uint64_t)1 << 30)
        usage_error("--tcp-conns times --tcp-msgs is too large");
    bool any_selected = false;
    for (size_t i = 0; i < N_WORKLOADS; i++) {
        if (!any_only)
            o->selected[i] = WORKLOADS[i].run != NULL;
        any_selected |= o->selected[i];
    }
    if (!any_selected)
        usage_error("--only names no workload");
    if (!o->params.echo_client)
        o->params.echo_client = default_echo_client(argv[0]);
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

/* After shutdown the metrics are exact: every task this program spawned must
 * have run to completion exactly once, and none may have been cancelled. */
static void check_final_metrics(rt_runtime *rt, int cancelled_at_shutdown)
{
    if (cancelled_at_shutdown < 0)
        bench_fail("rt_runtime_shutdown: %s", rt_strerror(cancelled_at_shutdown));
    if (cancelled_at_shutdown > 0)
        bench_fail("%d tasks were still unfinished at shutdown", cancelled_at_shutdown);
    rt_metrics m;
    int err = rt_metrics_read(rt, &m, sizeof m);
    if (err < 0)
        bench_fail("rt_metrics_read: %s", rt_strerror(err));
    if (m.spawned != g_tasks_spawned || m.completed != g_tasks_spawned || m.cancelled != 0 ||
        m.alive != 0)
        bench_fail("runtime metrics after shutdown: spawned=%" PRIu64 " completed=%" PRIu64
                   " cancelled=%" PRIu64 " alive=%" PRIu64 ", but this program spawned %" PRIu64
                   " tasks, all of which finished",
                   m.spawned, m.completed, m.cancelled, m.alive, g_tasks_spawned);
}

/* --echo-server PORT: the tcp_echo server alone, until SIGINT or SIGTERM. */
static int echo_server_mode(const struct options *o)
{
    /* Blocked before the runtime's threads exist, so they inherit the mask and
     * only sigwait() below receives these signals. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = o->workers;
    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err < 0)
        bench_fail("rt_runtime_new (%u workers): %s", o->workers, rt_strerror(err));
    static uint64_t conns; /* outlives the acceptor, which may be cancelled */
    struct echo_server server = echo_server_start(rt, (uint16_t)o->echo_server_port, &conns);
    printf("listening 127.0.0.1:%u\n", server.port);
    fflush(stdout);

    int sig;
    while (sigwait(&stop, &sig) != 0)
        ;
    close(server.stop_fd); /* stop accepting; open connections are cancelled below */
    err = rt_runtime_free(rt);
    if (err < 0)
        bench_fail("rt_runtime_free: %s", rt_strerror(err));
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    parse_args(argc, argv, &o);
    if (o.echo_server_port >= 0)
        return echo_server_mode(&o);
    g_echo_strict = true;
    for (size_t i = 0; i < N_WORKLOADS; i++)
        if (o.selected[i] && WORKLOADS[i].run == run_tcp_echo &&
            access(o.params.echo_client, X_OK) != 0)
            bench_fail("tcp_echo needs the echo client: %s: %s (see --echo-client)",
                       o.params.echo_client, strerror(errno));

    struct sigaction sa = {.sa_handler = watchdog_fired};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);

    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = o.workers;
    cfg.poll_timing = o.poll_timing ? 1 : 0;
    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err < 0)
        bench_fail("rt_runtime_new (%u workers): %s", o.workers, rt_strerror(err));
    if (o.idle_fibers > 0) {
        fiber_bench_idle(rt, o.idle_fibers, o.workers);
        rt_runtime_free(rt);
        return 0;
    }
    if (o.trace != NULL && (err = rt_trace_start(rt, o.trace)) < 0)
        bench_fail("rt_trace_start %s: %s", o.trace, rt_strerror(err));

    struct summary summaries[N_WORKLOADS];
    size_t n_summaries = 0;
    for (size_t i = 0; i < N_WORKLOADS; i++) {
        if (!o.selected[i])
            continue;
        summaries[n_summaries] =
            measure(rt, &WORKLOADS[i], &o.params, o.reps, o.rep_timeout_s, o.verbose);
        print_line(&summaries[n_summaries]);
        n_summaries++;
    }

    if (o.trace != NULL && (err = rt_trace_stop(rt)) < 0)
        bench_fail("rt_trace_stop %s: %s", o.trace, rt_strerror(err));
    int cancelled = rt_runtime_shutdown(rt);
    if (o.verbose)
        rt_metrics_print(rt, stderr);
    check_final_metrics(rt, cancelled);
    err = rt_runtime_free(rt);
    if (err < 0)
        bench_fail("rt_runtime_free: %s", rt_strerror(err));

    if (o.json)
        write_json(o.json, summaries, n_summaries);
    return 0;
}
