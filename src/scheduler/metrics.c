/* Metrics snapshots: per-worker counters (written by their worker) and task
 * totals (kept by the registry shards), summed on demand. */
#include <errno.h>
#include <string.h>

#include "atomic.h"
#include "blocking.h"
#include "runtime_object.h"

/* Copies `have` bytes of a snapshot into a caller struct of `size` bytes,
 * zeroing whatever the caller's (newer) struct has beyond them. */
static void copy_sized(void *dst, size_t size, const void *src, size_t have)
{
    size_t n = size < have ? size : have;
    memcpy(dst, src, n);
    if (size > n)
        memset((char *)dst + n, 0, size - n);
}

static void read_worker(const rt__worker *w, rt_worker_metrics *m)
{
    const rt_worker_metrics *s = &w->stats;
    m->polls = rt__load_relaxed_u64(&s->polls);
    m->steals = rt__load_relaxed_u64(&s->steals);
    m->steal_attempts = rt__load_relaxed_u64(&s->steal_attempts);
    m->injector_batches = rt__load_relaxed_u64(&s->injector_batches);
    m->parks = rt__load_relaxed_u64(&s->parks);
    m->unparks = rt__load_relaxed_u64(&s->unparks);
    m->deque_high_water = rt__load_relaxed_u64(&s->deque_high_water);
    m->spills = rt__load_relaxed_u64(&s->spills);
    m->reactor_yields = rt__load_relaxed_u64(&s->reactor_yields);
    m->lost_wakeups = rt__load_relaxed_u64(&s->lost_wakeups);
    for (unsigned b = 0; b < RT_HIST_BUCKETS; b++) {
        m->poll_ns_hist[b] = rt__load_relaxed_u64(&s->poll_ns_hist[b]);
        m->sched_delay_hist[b] = rt__load_relaxed_u64(&s->sched_delay_hist[b]);
    }
}

/* One histogram on one line: the non-empty buckets as floor:count. */
static void print_hist(FILE *out, const char *what, const uint64_t *hist)
{
    fprintf(out, "  %s:", what);
    for (unsigned b = 0; b < RT_HIST_BUCKETS; b++) {
        if (hist[b] == 0)
            continue;
        uint64_t floor = rt_hist_bucket_floor_ns(b);
        if (floor >= 1000000)
            fprintf(out, " >=%llums:%llu", (unsigned long long)(floor / 1000000),
                    (unsigned long long)hist[b]);
        else if (floor >= 1000)
            fprintf(out, " >=%lluus:%llu", (unsigned long long)(floor / 1000),
                    (unsigned long long)hist[b]);
        else
            fprintf(out, " <1us:%llu", (unsigned long long)hist[b]);
    }
    fputc('\n', out);
}

RT_EXPORT int rt_metrics_read(rt_runtime *rt, rt_metrics *m, size_t size)
{
    if (rt == NULL || m == NULL)
        return -EINVAL;
    rt_metrics snap = {0};
    snap.workers = rt->nworkers;
    for (unsigned i = 0; i < rt->nworkers; i++) {
        const rt__worker *w = &rt->workers[i];
        snap.spawned += rt__load_relaxed_u64(&w->registry.spawned);
        snap.completed += rt__load_relaxed_u64(&w->completed);
        snap.cancelled += rt__load_relaxed_u64(&w->cancelled);
        snap.lost_wakeups += rt__load_relaxed_u64(&w->stats.lost_wakeups);
    }
    snap.stalls = rt__load_relaxed_u64(&rt->stalls);
    snap.fibers_abandoned = rt__load_relaxed_u64(&rt->fibers_abandoned);
    snap.fiber_stack_deepest = rt__load_relaxed_u64(&rt->fiber_stack_deepest);
    for (unsigned i = 0; i < rt->nforeign; i++)
        snap.spawned += rt__load_relaxed_u64(&rt->foreign[i].registry.spawned);
    snap.cancelled += rt__load_relaxed_u64(&rt->shutdown_cancelled);
    rt__blocking_pool_stats(rt->blocking, &snap.blocking_threads, &snap.blocking_jobs);
    snap.blocking_abandoned = rt__load_relaxed_u64(&rt->blocking_abandoned);
    snap.reactor_turns = rt__load_relaxed_u64(&rt->reactor.turns);
    snap.reactor_io_events = rt__load_relaxed_u64(&rt->reactor.io_events);
    snap.reactor_naps = rt__load_relaxed_u64(&rt->reactor.naps);
    /* Counters are read one after another, so a running runtime can show a
     * task finished before its spawn is counted: clamp. */
    uint64_t finished = snap.completed + snap.cancelled;
    snap.alive = snap.spawned > finished ? snap.spawned - finished : 0;
    copy_sized(m, size, &snap, sizeof(snap));
    return 0;
}

RT_EXPORT int rt_worker_metrics_read(rt_runtime *rt, unsigned index, rt_worker_metrics *m,
                                     size_t size)
{
    if (rt == NULL || m == NULL || index >= rt->nworkers)
        return -EINVAL;
    rt_worker_metrics snap;
    read_worker(&rt->workers[index], &snap);
    copy_sized(m, size, &snap, sizeof(snap));
    return 0;
}

RT_EXPORT int rt_metrics_print(rt_runtime *rt, FILE *out)
{
    if (rt == NULL || out == NULL)
        return -EINVAL;
    rt_metrics m;
    rt_metrics_read(rt, &m, sizeof(m));
    fprintf(out,
            "asyncrt: %llu workers; tasks spawned %llu, completed %llu, cancelled %llu, "
            "alive %llu\n",
            (unsigned long long)m.workers, (unsigned long long)m.spawned,
            (unsigned long long)m.completed, (unsigned long long)m.cancelled,
            (unsigned long long)m.alive);
    fprintf(out, "blocking pool: %llu threads, %llu jobs, %llu abandoned at shutdown\n",
            (unsigned long long)m.blocking_threads, (unsigned long long)m.blocking_jobs,
            (unsigned long long)m.blocking_abandoned);
    fprintf(out, "reactor: %llu turns, %llu descriptor events, %llu naps\n",
            (unsigned long long)m.reactor_turns, (unsigned long long)m.reactor_io_events,
            (unsigned long long)m.reactor_naps);
    fprintf(out, "%-7s %12s %10s %12s %10s %8s %8s %10s %7s %8s\n", "worker", "polls", "steals",
            "steal_tries", "inj_batch", "parks", "unparks", "deque_max", "spills", "r_yields");
    for (unsigned i = 0; i < rt->nworkers; i++) {
        rt_worker_metrics w;
        read_worker(&rt->workers[i], &w);
        fprintf(out, "%-7u %12llu %10llu %12llu %10llu %8llu %8llu %10llu %7llu %8llu\n", i,
                (unsigned long long)w.polls, (unsigned long long)w.steals,
                (unsigned long long)w.steal_attempts, (unsigned long long)w.injector_batches,
                (unsigned long long)w.parks, (unsigned long long)w.unparks,
                (unsigned long long)w.deque_high_water, (unsigned long long)w.spills,
                (unsigned long long)w.reactor_yields);
    }
    if (m.fiber_stack_deepest > 0 || m.fibers_abandoned > 0)
        fprintf(out, "fibers: deepest stack in use %llu bytes, %llu abandoned at shutdown\n",
                (unsigned long long)m.fiber_stack_deepest, (unsigned long long)m.fibers_abandoned);
    if (m.lost_wakeups > 0 || m.stalls > 0)
        fprintf(out, "diagnostics: %llu lost wake-ups, %llu stalls reported\n",
                (unsigned long long)m.lost_wakeups, (unsigned long long)m.stalls);
    if (rt->config.poll_timing) {
        fprintf(out, "poll durations and scheduling delays (log2 buckets, floor:count):\n");
        for (unsigned i = 0; i < rt->nworkers; i++) {
            rt_worker_metrics w;
            read_worker(&rt->workers[i], &w);
            fprintf(out, "worker %u\n", i);
            print_hist(out, "poll", w.poll_ns_hist);
            print_hist(out, "delay", w.sched_delay_hist);
        }
    }
    return ferror(out) ? -EIO : 0;
}

RT_EXPORT unsigned rt_runtime_workers(const rt_runtime *rt)
{
    return rt != NULL ? rt->nworkers : 0;
}
