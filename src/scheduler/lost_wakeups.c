/* Lost wake-up detection: before a worker parks, it sweeps its registry and
 * the foreign shards (registry.h, rt__registry_sweep), and reports each
 * waiting task that nothing can wake any more, with what a dump would say of
 * it (dump.c). The worker reaches it through rt_runtime.idle_sweep, so that
 * the idle path depends on no diagnostics code. */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include <asyncrt/diag.h>

#include "atomic.h"
#include "runtime_object.h"

/* Reports the lost wake-ups a sweep found, counts them in w's metrics and
 * drops the reference each entry holds. No lock held. */
static void report_lost(rt__worker *w, rt__registry_entry *lost, unsigned n)
{
    rt_runtime *rt = w->rt;
    rt__reactor_look_begin(&rt->reactor);
    for (unsigned i = 0; i < n; i++) {
        rt_task *t = rt__registry_task(&lost[i]);
        rt_task_info info;
        /* Nothing can wake it, but an abort may have come since: then it
         * is no longer waiting and not worth a report. A dump may be
         * holding it for its own look (it then seems running): that ends
         * in a moment, and the report is made after it. */
        bool ok;
        while ((ok = rt__describe_task(rt, t, lost[i].site, &info, rt__now_ns())) &&
               info.state != RT_TASK_WAITING) {
            uint64_t s = rt__load_acquire_u64(&t->state);
            if ((s & (RT__TASK_NOTIFIED | RT__TASK_COMPLETE | RT__TASK_CANCELLED)) ||
                rt__polling_worker(rt, t) >= 0)
                break;
            sched_yield();
        }
        bool report = ok && info.state == RT_TASK_WAITING;
        /* The name lives in the task: copied, so that the reference can go
         * before the report. Whoever the report tells and then looks at the
         * task sees it as lost, referenced by the runtime alone. */
        char name[RT_TASK_NAME_MAX + 1];
        if (report && info.name != NULL)
            snprintf(name, sizeof name, "%s", info.name);
        rt__task_unref(t, 1);
        if (report) {
            rt__stat_add(&w->stats.lost_wakeups, 1);
            rt_report rep;
            memset(&rep, 0, sizeof rep);
            rep.size = sizeof rep;
            rep.kind = RT_REPORT_LOST_WAKEUP;
            rep.task_id = info.id;
            rep.task_name = info.name != NULL ? name : NULL;
            rep.worker = -1;
            rep.await_file = info.await_file; /* static strings */
            rep.await_line = info.await_line;
            rep.await_function = info.await_function;
            rep.spawned_at = info.spawned_at;
            rt__report(rt, &rep);
        }
    }
    rt__reactor_look_end(&rt->reactor);
}

/* Whether enough polls ran since the last sweep to make a scan of `len`
 * entries cheap per poll (at most ~4 entries scanned per poll). */
static bool sweep_worthwhile(const rt__registry *r, uint64_t polls)
{
    return r->len > 0 && (polls - r->polls_at_sweep) * 4 >= r->len;
}

void rt__lost_wakeup_sweep(rt__worker *w)
{
    /* Lost wake-ups are looked for here, where no lock is held and the
     * worker has nothing better to do, and reported after each sweep. A
     * sweep stores at most RT__LOST_PER_SWEEP of them; one that found that
     * many sweeps again at once (the ones reported are marked and passed
     * over), so that every lost task is reported before the worker parks,
     * however many there are. */
    rt__registry_entry lost[RT__LOST_PER_SWEEP];
    int n;
    uint64_t polls = rt__load_relaxed_u64(&w->stats.polls);
    bool due = sweep_worthwhile(&w->registry, polls);
    while (due) {
        n = rt__registry_sweep(&w->registry, &w->own.cache, lost, RT__LOST_PER_SWEEP);
        /* A sweep skipped for a dump's copy is owed: the count stays. */
        if (n < 0)
            break;
        w->registry.polls_at_sweep = polls;
        if (n > 0)
            report_lost(w, lost, (unsigned)n);
        due = n == RT__LOST_PER_SWEEP;
    }
    /* Foreign-spawned tasks run on every worker: use the total polls. Every
     * worker about to park looks at every shard (a shard swept lately is
     * not worth it and is skipped), so that the last worker to go to sleep
     * sees the state the last polls left, lost wake-ups included. */
    rt_runtime *rt = w->rt;
    uint64_t all = 0;
    for (unsigned i = 0; i < rt->nworkers; i++)
        all += rt__load_relaxed_u64(&rt->workers[i].stats.polls);
    for (unsigned s = 0; s < rt->nforeign; s++) {
        rt__foreign_shard *sh = &rt->foreign[s];
        for (bool first = true;; first = false) {
            if (pthread_mutex_trylock(&sh->lock) != 0)
                break;
            n = -1;
            if (!first || sweep_worthwhile(&sh->registry, all)) {
                n = rt__registry_sweep(&sh->registry, &sh->cache, lost, RT__LOST_PER_SWEEP);
                if (n >= 0)
                    sh->registry.polls_at_sweep = all;
            }
            pthread_mutex_unlock(&sh->lock);
            if (n > 0)
                report_lost(w, lost, (unsigned)n);
            if (n != RT__LOST_PER_SWEEP)
                break;
        }
    }
}
