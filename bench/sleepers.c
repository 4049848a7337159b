/* asyncrt-sleepers: N tasks sleeping at once, and what each one costs.
 *
 *   asyncrt-sleepers [--tasks N] [--sleep-ms MS] [--workers W]
 *
 * Spawns N tasks that each sleep MS milliseconds (default: 1,000,000 tasks,
 * 2,000 ms), measures the process's resident memory once every task is
 * asleep (each counts itself on its first poll, before its timer is armed:
 * the figure is taken after all N have armed theirs), waits until every task
 * woke up, and prints one line:
 *
 *   sleepers tasks=N workers=W bytes_per_sleeping_task=B spawn_ms=S total_ms=T
 *            late_max_ms=L
 *
 * Exits 1 if a task never wakes up (a bounded wait) or wakes early. */
#define _GNU_SOURCE

#include <asyncrt.h>

#include <getopt.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct sleeper {
    rt_coro co;   /* resume point */
    rt_sleep nap; /* the sleep */
};

static atomic_ulong asleep;  /* tasks whose timer is armed */
static atomic_ulong awake;   /* tasks whose sleep finished */
static atomic_long late_max; /* worst lateness seen, ns */
static atomic_bool early;    /* a sleep finished before its deadline */

static void sleeper_drop(void *state)
{
    RT_DROP(&((struct sleeper *)state)->nap);
}

static rt_poll sleeper_poll(void *state, rt_context *cx, void **out)
{
    struct sleeper *s = state;
    RT_CORO_BEGIN(&s->co);
    if (RT_POLL_OP(&s->nap, cx) == RT_PENDING) {
        atomic_fetch_add(&asleep, 1);
        RT_AWAIT(&s->co, cx, &s->nap);
    }
    if (s->nap.result != 0) {
        fprintf(stderr, "sleep failed: %s\n", rt_strerror((int)s->nap.result));
        exit(1);
    }
    int64_t late = rt_now_ns() - s->nap.deadline_ns;
    if (late < 0)
        atomic_store(&early, true);
    long prev = atomic_load(&late_max);
    while (late > prev && !atomic_compare_exchange_weak(&late_max, &prev, late))
        ;
    atomic_fetch_add(&awake, 1);
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

/* Resident set size in bytes, from /proc/self/statm. */
static long resident_bytes(void)
{
    long pages_total = 0, pages_resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld %ld", &pages_total, &pages_resident) != 2)
        pages_resident = -1;
    fclose(f);
    return pages_resident * sysconf(_SC_PAGESIZE);
}

/* Waits (sleeping 1 ms between looks) until *counter reaches target or
 * limit_ms passes; returns whether it got there. A benchmark, not a test:
 * the main thread has nothing better to wait on. */
static int wait_for(atomic_ulong *counter, unsigned long target, long limit_ms)
{
    for (long waited = 0; atomic_load(counter) < target; waited++) {
        if (waited >= limit_ms)
            return 0;
        usleep(1000);
    }
    return 1;
}

int main(int argc, char **argv)
{
    unsigned long tasks = 1000000;
    long sleep_ms = 2000;
    unsigned workers = 0;
    static const struct option opts[] = {{"tasks", required_argument, NULL, 't'},
                                         {"sleep-ms", required_argument, NULL, 's'},
                                         {"workers", required_argument, NULL, 'w'},
                                         {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 't')
            tasks = strtoul(optarg, NULL, 10);
        else if (c == 's')
            sleep_ms = strtol(optarg, NULL, 10);
        else if (c == 'w')
            workers = (unsigned)strtoul(optarg, NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--tasks N] [--sleep-ms MS] [--workers W]\n", argv[0]);
            return 2;
        }
    }
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = workers;
    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err < 0) {
        fprintf(stderr, "rt_runtime_new: %s\n", rt_strerror(err));
        return 1;
    }
    long before = resident_bytes();
    int64_t t0 = rt_now_ns();
    for (unsigned long i = 0; i < tasks; i++) {
        struct sleeper s = {0};
        rt_sleep_init(&s.nap, rt, sleep_ms * 1000000);
        err = RT_SPAWN_STATE(rt, sleeper_poll, sleeper_drop, &s, NULL);
        if (err < 0) {
            fprintf(stderr, "rt_spawn: %s\n", rt_strerror(err));
            return 1;
        }
    }
    int64_t t1 = rt_now_ns();
    if (!wait_for(&asleep, tasks, sleep_ms)) {
        fprintf(stderr, "only %lu of %lu tasks fell asleep in time: use a longer --sleep-ms\n",
                atomic_load(&asleep), tasks);
        return 1;
    }
    long during = resident_bytes();
    if (!wait_for(&awake, tasks, sleep_ms + 60000)) {
        fprintf(stderr, "only %lu of %lu sleepers woke up\n", atomic_load(&awake), tasks);
        return 1;
    }
    int64_t t2 = rt_now_ns();
    printf("sleepers tasks=%lu workers=%u bytes_per_sleeping_task=%.0f spawn_ms=%.1f "
           "total_ms=%.1f late_max_ms=%.2f\n",
           tasks, rt_runtime_workers(rt), (double)(during - before) / (double)tasks,
           (double)(t1 - t0) / 1e6, (double)(t2 - t0) / 1e6, (double)atomic_load(&late_max) / 1e6);
    rt_runtime_free(rt);
    if (atomic_load(&early)) {
        fprintf(stderr, "a sleep finished before its deadline\n");
        return 1;
    }
    return 0;
}
