/* What a task dump costs a busy runtime: N tasks wait on a notify while
 * one yielding task per worker measures the longest gap between its polls.
 * The dumps run from the main thread, back to back, for the same time as a
 * quiet phase without them, and the gaps of both phases are compared.
 * Also how long a dump takes, and how long the copy of every registry
 * takes (rt_runtime_tasks stopped at its first task: the copy under the
 * registries' locks, then one look).
 *
 *   asyncrt-dump-bench [--tasks N] [--workers W] [--dumps D]
 *
 * One line per figure on stdout, "dump key=value ...". */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <asyncrt.h>

struct waiter {
    rt_coro co;
    rt_notify *n;
    rt_notified got;
};

static rt_poll waiter_poll(void *p, rt_context *cx, void **out)
{
    struct waiter *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_notified_init(&s->got, s->n);
    RT_AWAIT(&s->co, cx, &s->got);
    RT_CORO_END(&s->co, out);
}

/* Yields until told to stop, keeping the longest gap between two polls. */
static atomic_bool stop_ticking;
static atomic_llong max_gap_ns;
static atomic_llong ticks;

struct ticker {
    rt_coro co;
    int64_t last;
};

static rt_poll ticker_poll(void *p, rt_context *cx, void **out)
{
    struct ticker *s = p;
    int64_t now = rt_now_ns();
    if (s->last != 0) {
        long long gap = now - s->last, seen = atomic_load(&max_gap_ns);
        while (gap > seen && !atomic_compare_exchange_weak(&max_gap_ns, &seen, gap))
            ;
    }
    s->last = now;
    atomic_fetch_add(&ticks, 1);
    if (atomic_load(&stop_ticking)) {
        *out = NULL;
        return RT_READY;
    }
    return rt_yield(cx);
}

static int stop_at_first(const rt_task_info *t, void *arg)
{
    (void)t, (void)arg;
    return 1;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, int err)
{
    fprintf(stderr, "asyncrt-dump-bench: %s: %s\n", what, rt_strerror(err));
    exit(1);
}

int main(int argc, char **argv)
{
    long tasks = 100000, workers = 2, dumps = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--tasks") == 0)
            tasks = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--workers") == 0)
            workers = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--dumps") == 0)
            dumps = atol(argv[i + 1]);
    }
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = (unsigned)workers;
    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err < 0)
        die("runtime", err);
    rt_notify *n;
    if ((err = rt_notify_new(&n)) < 0)
        die("notify", err);
    for (long i = 0; i < tasks; i++) {
        struct waiter w = {.n = n};
        if ((err = rt_spawn(rt, waiter_poll, rt_coro_drop, &w, sizeof w, NULL)) < 0)
            die("spawn", err);
    }
    /* Every waiter waits once it has been polled (its one poll). */
    for (;;) {
        uint64_t polls = 0;
        for (long w = 0; w < workers; w++) {
            rt_worker_metrics wm;
            rt_worker_metrics_read(rt, (unsigned)w, &wm, sizeof wm);
            polls += wm.polls;
        }
        if (polls >= (uint64_t)tasks)
            break;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }

    /* The copy alone, then whole dumps, with only the waiters alive. */
    int64_t *copy = calloc((size_t)dumps, sizeof(int64_t));
    int64_t *whole = calloc((size_t)dumps, sizeof(int64_t));
    FILE *null = fopen("/dev/null", "w");
    if (copy == NULL || whole == NULL || null == NULL)
        die("memory", -ENOMEM);
    for (long i = 0; i < dumps; i++) {
        int64_t t0 = now_ns();
        rt_runtime_tasks(rt, stop_at_first, NULL);
        int64_t t1 = now_ns();
        if ((err = rt_runtime_dump(rt, null)) < 0)
            die("dump", err);
        int64_t t2 = now_ns();
        copy[i] = t1 - t0;
        whole[i] = t2 - t1;
    }
    qsort(copy, (size_t)dumps, sizeof(int64_t), cmp_i64);
    qsort(whole, (size_t)dumps, sizeof(int64_t), cmp_i64);
    printf("dump tasks=%ld workers=%ld copy_median_ms=%.3f copy_max_ms=%.3f "
           "dump_median_ms=%.3f dump_max_ms=%.3f\n",
           tasks, workers, copy[dumps / 2] / 1e6, copy[dumps - 1] / 1e6, whole[dumps / 2] / 1e6,
           whole[dumps - 1] / 1e6);

    /* Busy workers: one ticker each; a quiet phase, then the same time with
     * dumps back to back. */
    rt_task *tick[64];
    long nt = workers < 64 ? workers : 64;
    for (long i = 0; i < nt; i++) {
        struct ticker t = {0};
        if ((err = rt_spawn(rt, ticker_poll, NULL, &t, sizeof t, &tick[i])) < 0)
            die("spawn", err);
    }
    int64_t phase = whole[dumps / 2] * dumps;
    if (phase < 200000000)
        phase = 200000000;
    struct timespec quiet = {phase / 1000000000, phase % 1000000000};
    nanosleep(&quiet, NULL);
    atomic_store(&max_gap_ns, 0);
    long long ticks_before = atomic_load(&ticks);
    nanosleep(&quiet, NULL);
    long long quiet_gap = atomic_load(&max_gap_ns),
              quiet_ticks = atomic_load(&ticks) - ticks_before;
    atomic_store(&max_gap_ns, 0);
    ticks_before = atomic_load(&ticks);
    int64_t until = now_ns() + phase;
    long done = 0;
    while (now_ns() < until) {
        if ((err = rt_runtime_dump(rt, null)) < 0)
            die("dump", err);
        done++;
    }
    long long busy_gap = atomic_load(&max_gap_ns), busy_ticks = atomic_load(&ticks) - ticks_before;
    atomic_store(&stop_ticking, true);
    for (long i = 0; i < nt; i++)
        rt_task_wait(tick[i], -1, NULL, NULL);
    printf("dump load=yielders phase_ms=%.0f dumps=%ld max_gap_quiet_ms=%.3f "
           "max_gap_dumping_ms=%.3f polls_quiet=%lld polls_dumping=%lld\n",
           phase / 1e6, done, quiet_gap / 1e6, busy_gap / 1e6, quiet_ticks, busy_ticks);

    fclose(null);
    free(copy);
    free(whole);
    rt_notify_all(n);
    rt_runtime_free(rt);
    rt_notify_drop(n);
    return 0;
}
