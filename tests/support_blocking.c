/* The runtimes, metrics and jobs of support_blocking.h, shared by the
 * blocking-pool suites. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_blocking.h"

rt_runtime *new_runtime_blocking(unsigned workers, unsigned blocking_threads, int64_t idle_ns,
                                 int64_t shutdown_ns)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = workers;
    if (blocking_threads != 0)
        cfg.blocking_threads = blocking_threads;
    if (idle_ns != 0)
        cfg.blocking_idle_ns = idle_ns;
    if (shutdown_ns != 0)
        cfg.blocking_shutdown_ns = shutdown_ns;
    return new_runtime_config(&cfg);
}

rt_metrics metrics_now(rt_runtime *rt)
{
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    return m;
}

bool wait_blocking_threads(rt_runtime *rt, uint64_t threads, int seconds)
{
    const struct timespec step = {0, 1000000};
    for (long i = 0; i < seconds * 1000L; i++) {
        if (metrics_now(rt).blocking_threads == threads)
            return true;
        nanosleep(&step, NULL);
    }
    return metrics_now(rt).blocking_threads == threads;
}

atomic_int running;
atomic_int max_running;
atomic_int ran[MAX_JOBS];
atomic_int start_order[MAX_JOBS];
atomic_int starts;
atomic_int worker_threads_seen;
_Atomic int64_t last_end_ns;
struct event started = EVENT_INIT;
struct event release = EVENT_INIT;
struct event finished = EVENT_INIT;

void *held_job(void *arg)
{
    int i = (int)(intptr_t)arg;
    int now = atomic_fetch_add(&running, 1) + 1;
    int max = atomic_load(&max_running);
    while (now > max && !atomic_compare_exchange_weak(&max_running, &max, now)) {
    }
    atomic_store(&start_order[atomic_fetch_add(&starts, 1)], i);
    if (rt_current_worker() != -1)
        atomic_fetch_add(&worker_threads_seen, 1);
    event_signal(&started);
    bool released = event_wait_for(&release, (unsigned long)i + 1);
    atomic_fetch_sub(&running, 1);
    atomic_fetch_add(&ran[i], 1);
    atomic_store(&last_end_ns, rt_now_ns());
    event_signal(&finished);
    return released ? (void *)(intptr_t)(i * 10 + 1) : NULL;
}

void *quick_job(void *arg)
{
    if (rt_current_worker() != -1)
        atomic_fetch_add(&worker_threads_seen, 1);
    return (void *)((uintptr_t)arg + 1);
}

rt_task *spawn_held(rt_runtime *rt, int i)
{
    rt_task *h = NULL;
    int rc = rt_spawn_blocking(rt, held_job, (void *)(intptr_t)i, &h);
    cr_assert_eq(rc, 0, "rt_spawn_blocking: %s", rt_strerror(rc));
    cr_assert_not_null(h);
    return h;
}
