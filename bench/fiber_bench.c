/* The fiber workloads of asyncrt-bench (docs/benchmarks.md, "Fibers"): the
 * stackless workloads' work written as fibers, plus skynet. Each function
 * runs one repetition on the runtime and returns its elapsed nanoseconds;
 * any failure is reported through bench_fail (bench.c) and ends the run.
 * Timing starts and ends inside a root fiber, as the stackless workloads'
 * orchestrator task does, except for fiber_spawn_remote, whose spawner is
 * the calling thread. */
#define _GNU_SOURCE

#include "fiber_bench.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Runs a root fiber from the calling thread and returns what it returned. */
static uint64_t run_root(rt_runtime *rt, const char *what, rt_fiber_fn fn, void *arg)
{
    rt_task *t;
    int err = rt_fiber_spawn(rt, fn, arg, &t);
    if (err < 0)
        bench_fail("%s: rt_fiber_spawn: %s", what, rt_strerror(err));
    void *value = NULL;
    int status = 0;
    err = rt_task_wait(t, -1, &value, &status);
    if (err < 0 || status != 0)
        bench_fail("%s: root fiber: %s", what, rt_strerror(err < 0 ? err : status));
    return (uint64_t)(uintptr_t)value;
}

/* A countdown whose last decrement sends on a channel the waiter receives
 * from (a fiber with rt_chan_recv_await, a thread with rt_chan_recv_wait). */
struct countdown {
    atomic_uint_fast64_t left;
    rt_chan *done;
};

static void countdown_init(struct countdown *c, uint64_t n)
{
    atomic_init(&c->left, n);
    if (rt_chan_new(1, &c->done) < 0)
        bench_fail("rt_chan_new failed");
}

static void countdown_hit(struct countdown *c)
{
    if (atomic_fetch_sub_explicit(&c->left, 1, memory_order_acq_rel) == 1) {
        int err = rt_chan_send_await(c->done, NULL);
        if (err < 0)
            bench_fail("countdown: send: %s", rt_strerror(err));
    }
}

static void countdown_free(struct countdown *c)
{
    rt_chan_sender_drop(c->done);
    rt_chan_receiver_drop(c->done, NULL, NULL);
}

static void *count_down_fiber(void *arg)
{
    countdown_hit(arg);
    return NULL;
}

/* ---- fiber_spawn: a fiber spawns N fibers ---------------------------------*/

struct spawn_args {
    uint64_t n;
};

static void *spawn_root(void *arg)
{
    struct spawn_args *a = arg;
    struct countdown c;
    countdown_init(&c, a->n);
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < a->n; i++) {
        int err = rt_fiber_spawn(NULL, count_down_fiber, &c, NULL);
        if (err < 0)
            bench_fail("fiber_spawn: %s", rt_strerror(err));
    }
    if (rt_chan_recv_await(c.done, NULL) < 0)
        bench_fail("fiber_spawn: receive");
    uint64_t elapsed = now_ns() - t0;
    countdown_free(&c);
    return (void *)(uintptr_t)elapsed;
}

uint64_t fiber_bench_spawn(rt_runtime *rt, uint64_t n)
{
    struct spawn_args a = {n};
    return run_root(rt, "fiber_spawn", spawn_root, &a);
}

/* ---- fiber_spawn_remote: a plain thread spawns N fibers ------------------*/

uint64_t fiber_bench_spawn_remote(rt_runtime *rt, uint64_t n)
{
    struct countdown c;
    countdown_init(&c, n);
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < n; i++) {
        int err = rt_fiber_spawn(rt, count_down_fiber, &c, NULL);
        if (err < 0)
            bench_fail("fiber_spawn_remote: %s", rt_strerror(err));
    }
    if (rt_chan_recv_wait(c.done, -1, NULL) < 0)
        bench_fail("fiber_spawn_remote: receive");
    uint64_t elapsed = now_ns() - t0;
    countdown_free(&c);
    return elapsed;
}

/* ---- fiber_yield: T fibers yield Y times each ----------------------------*/

struct yield_args {
    uint64_t tasks, yields;
    struct countdown c;
};

static void *yielder(void *arg)
{
    struct yield_args *a = arg;
    for (uint64_t i = 0; i < a->yields; i++)
        rt_fiber_yield();
    countdown_hit(&a->c);
    return NULL;
}

static void *yield_root(void *arg)
{
    struct yield_args *a = arg;
    countdown_init(&a->c, a->tasks);
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < a->tasks; i++)
        if (rt_fiber_spawn(NULL, yielder, a, NULL) < 0)
            bench_fail("fiber_yield: spawn");
    if (rt_chan_recv_await(a->c.done, NULL) < 0)
        bench_fail("fiber_yield: receive");
    uint64_t elapsed = now_ns() - t0;
    countdown_free(&a->c);
    return (void *)(uintptr_t)elapsed;
}

uint64_t fiber_bench_yield(rt_runtime *rt, uint64_t tasks, uint64_t yields)
{
    struct yield_args a = {tasks, yields, {0}};
    return run_root(rt, "fiber_yield", yield_root, &a);
}

/* ---- fiber_ping_pong: P pairs, R round trips through two channels --------*/

struct pp_args {
    uint64_t pairs, rounds;
    struct countdown c;
};

struct pp_side {
    struct pp_args *a;
    rt_chan *out, *in;
    bool pinger;
};

static void *pp_fiber(void *arg)
{
    struct pp_side *s = arg;
    for (uint64_t r = 0; r < s->a->rounds; r++) {
        void *token = NULL;
        if (s->pinger) {
            if (rt_chan_send_await(s->out, (void *)(uintptr_t)r) < 0 ||
                rt_chan_recv_await(s->in, &token) < 0 || (uintptr_t)token != r)
                bench_fail("fiber_ping_pong: pinger");
        } else {
            if (rt_chan_recv_await(s->in, &token) < 0 || rt_chan_send_await(s->out, token) < 0)
                bench_fail("fiber_ping_pong: ponger");
        }
    }
    countdown_hit(&s->a->c);
    return NULL;
}

static void *pp_root(void *arg)
{
    struct pp_args *a = arg;
    countdown_init(&a->c, 2 * a->pairs);
    struct pp_side *sides = calloc(2 * a->pairs, sizeof *sides);
    rt_chan **chans = calloc(2 * a->pairs, sizeof *chans);
    if (sides == NULL || chans == NULL)
        bench_fail("fiber_ping_pong: out of memory");
    for (uint64_t i = 0; i < 2 * a->pairs; i++)
        if (rt_chan_new(1, &chans[i]) < 0)
            bench_fail("fiber_ping_pong: rt_chan_new");
    uint64_t t0 = now_ns();
    for (uint64_t i = 0; i < a->pairs; i++) {
        sides[2 * i] = (struct pp_side){a, chans[2 * i], chans[2 * i + 1], true};
        sides[2 * i + 1] = (struct pp_side){a, chans[2 * i + 1], chans[2 * i], false};
        if (rt_fiber_spawn(NULL, pp_fiber, &sides[2 * i], NULL) < 0 ||
            rt_fiber_spawn(NULL, pp_fiber, &sides[2 * i + 1], NULL) < 0)
            bench_fail("fiber_ping_pong: spawn");
    }
    if (rt_chan_recv_await(a->c.done, NULL) < 0)
        bench_fail("fiber_ping_pong: receive");
    uint64_t elapsed = now_ns() - t0;
    for (uint64_t i = 0; i < 2 * a->pairs; i++) {
        rt_chan_sender_drop(chans[i]);
        rt_chan_receiver_drop(chans[i], NULL, NULL);
    }
    free(sides);
    free(chans);
    countdown_free(&a->c);
    return (void *)(uintptr_t)elapsed;
}

uint64_t fiber_bench_ping_pong(rt_runtime *rt, uint64_t pairs, uint64_t rounds)
{
    struct pp_args a = {pairs, rounds, {0}};
    return run_root(rt, "fiber_ping_pong", pp_root, &a);
}

/* ---- fiber_chained_spawn: each fiber spawns the next ---------------------*/

struct chain_args {
    atomic_uint_fast64_t left;
    struct countdown c;
};

static void *chain_link(void *arg)
{
    struct chain_args *a = arg;
    if (atomic_fetch_sub_explicit(&a->left, 1, memory_order_relaxed) > 1) {
        if (rt_fiber_spawn(NULL, chain_link, a, NULL) < 0)
            bench_fail("fiber_chained_spawn: spawn");
    } else {
        countdown_hit(&a->c);
    }
    return NULL;
}

static void *chain_root(void *arg)
{
    struct chain_args *a = arg;
    countdown_init(&a->c, 1);
    uint64_t t0 = now_ns();
    if (rt_fiber_spawn(NULL, chain_link, a, NULL) < 0)
        bench_fail("fiber_chained_spawn: spawn");
    if (rt_chan_recv_await(a->c.done, NULL) < 0)
        bench_fail("fiber_chained_spawn: receive");
    uint64_t elapsed = now_ns() - t0;
    countdown_free(&a->c);
    return (void *)(uintptr_t)elapsed;
}

uint64_t fiber_bench_chained_spawn(rt_runtime *rt, uint64_t depth)
{
    struct chain_args a;
    atomic_init(&a.left, depth);
    return run_root(rt, "fiber_chained_spawn", chain_root, &a);
}

/* ---- fiber_fork_join: fib(n), each call a fiber joining two children ------*/

static void *fib_fiber(void *arg)
{
    uintptr_t n = (uintptr_t)arg;
    if (n < 2)
        return (void *)n;
    rt_task *a, *b;
    if (rt_fiber_spawn(NULL, fib_fiber, (void *)(n - 1), &a) < 0 ||
        rt_fiber_spawn(NULL, fib_fiber, (void *)(n - 2), &b) < 0)
        bench_fail("fiber_fork_join: spawn");
    rt_task_join ja, jb;
    rt_task_join_init(&ja, a);
    rt_task_join_init(&jb, b);
    if (rt_fiber_await(&ja.future) != 0 || rt_fiber_await(&jb.future) != 0)
        bench_fail("fiber_fork_join: join");
    return (void *)((uintptr_t)ja.value + (uintptr_t)jb.value);
}

struct fib_args {
    uint64_t n, value;
};

static void *fib_root(void *arg)
{
    struct fib_args *a = arg;
    uint64_t t0 = now_ns();
    a->value = (uint64_t)(uintptr_t)fib_fiber((void *)(uintptr_t)a->n);
    return (void *)(uintptr_t)(now_ns() - t0);
}

uint64_t fiber_bench_fork_join(rt_runtime *rt, uint64_t n, uint64_t *value)
{
    struct fib_args a = {n, 0};
    uint64_t elapsed = run_root(rt, "fiber_fork_join", fib_root, &a);
    *value = a.value;
    return elapsed;
}

/* ---- fiber_skynet: a 10-ary tree of depth 6 ------------------------------*/

/* A node covers the leaves [first, first + size); size 1 is a leaf. The
 * argument packs both: first * 8 + log10(size) (size <= 10^7). */
static void *skynet_node(void *arg)
{
    uint64_t packed = (uint64_t)(uintptr_t)arg;
    uint64_t first = packed >> 3, log_size = packed & 7;
    if (log_size == 0)
        return (void *)(uintptr_t)first;
    uint64_t child_size = 1;
    for (uint64_t l = 1; l < log_size; l++)
        child_size *= 10;
    rt_fiber_options o;
    rt_fiber_options_init(&o);
    o.stack_size = 16 * 1024;
    rt_task *kids[10];
    for (uint64_t i = 0; i < 10; i++) {
        uint64_t child = ((first + i * child_size) << 3) | (log_size - 1);
        if (rt_fiber_spawn_ex(NULL, &o, skynet_node, (void *)(uintptr_t)child, &kids[i]) < 0)
            bench_fail("fiber_skynet: spawn");
    }
    uint64_t sum = 0;
    for (int i = 0; i < 10; i++) {
        rt_task_join j;
        rt_task_join_init(&j, kids[i]);
        if (rt_fiber_await(&j.future) != 0)
            bench_fail("fiber_skynet: join");
        sum += (uint64_t)(uintptr_t)j.value;
    }
    return (void *)(uintptr_t)sum;
}

struct skynet_args {
    uint64_t depth, sum;
};

static void *skynet_root(void *arg)
{
    struct skynet_args *a = arg;
    uint64_t t0 = now_ns();
    a->sum = (uint64_t)(uintptr_t)skynet_node((void *)(uintptr_t)a->depth);
    return (void *)(uintptr_t)(now_ns() - t0);
}

uint64_t fiber_bench_skynet(rt_runtime *rt, uint64_t depth, uint64_t *sum)
{
    struct skynet_args a = {depth, 0};
    uint64_t elapsed = run_root(rt, "fiber_skynet", skynet_root, &a);
    *sum = a.sum;
    return elapsed;
}

/* ---- --idle-fibers: memory per waiting fiber ------------------------------*/

/* VmRSS of this process in KiB, from /proc/self/status. */
static uint64_t rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        bench_fail("idle_fibers: /proc/self/status: cannot open");
    char line[256];
    uint64_t kib = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %" SCNu64, &kib) == 1)
            break;
    fclose(f);
    return kib;
}

struct idle_args {
    rt_chan *ch;
    atomic_uint_fast64_t waiting;
};

static void *idle_fiber(void *arg)
{
    struct idle_args *a = arg;
    atomic_fetch_add_explicit(&a->waiting, 1, memory_order_relaxed);
    void *v;
    int err = rt_chan_recv_await(a->ch, &v); /* until the channel closes */
    if (err != -EPIPE)
        bench_fail("idle_fibers: receive: %s", rt_strerror(err));
    return NULL;
}

void fiber_bench_idle(rt_runtime *rt, uint64_t n, unsigned workers)
{
    struct idle_args a;
    atomic_init(&a.waiting, 0);
    if (rt_chan_new(1, &a.ch) < 0)
        bench_fail("idle_fibers: rt_chan_new");
    uint64_t before = rss_kib();
    rt_task **handles = malloc(n * sizeof *handles);
    if (handles == NULL)
        bench_fail("idle_fibers: out of memory");
    for (uint64_t i = 0; i < n; i++) {
        int err = rt_fiber_spawn(rt, idle_fiber, &a, &handles[i]);
        if (err < 0)
            bench_fail("idle_fibers: spawn %" PRIu64 ": %s", i, rt_strerror(err));
    }
    /* Every fiber counted itself before it waited; its await follows at
     * once. Give the last ones that moment, without a sleep per fiber. */
    while (atomic_load(&a.waiting) < n)
        sched_yield();
    struct timespec pause = {0, 100 * 1000 * 1000};
    nanosleep(&pause, NULL);
    uint64_t after = rss_kib();
    printf("bench idle_fibers runtime=asyncrt workers=%u ops=%" PRIu64 " rss_kib=%" PRIu64
           " rss_per_fiber_b=%.0f\n",
           workers, n, after, (double)(after - before) * 1024.0 / (double)n);
    fflush(stdout);
    rt_chan_sender_drop(a.ch); /* the end: every receive returns -EPIPE */
    for (uint64_t i = 0; i < n; i++)
        if (rt_task_wait(handles[i], -1, NULL, NULL) < 0)
            bench_fail("idle_fibers: wait");
    free(handles);
    rt_chan_receiver_drop(a.ch, NULL, NULL);
}
