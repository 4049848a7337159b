/* Lost wake-up detection: before a worker parks, it sweeps its registry and
 * the foreign shards (registry.h, rt__registry_sweep), which releases the
 * entries of finished tasks and finds each waiting task that nothing can
 * wake any more; those go to the diagnostics' report (src/diag/dump.c,
 * through diag_hooks.h), which says of each what a dump would. */
#include "atomic.h"
#include "diag_hooks.h"
#include "runtime_object.h"

/* Hands what a sweep found to the diagnostics' report (diag_hooks.h), or
 * without them only drops the references the entries hold: a build
 * without diagnostics still sweeps, for the memory of finished tasks, but
 * reports nothing. No lock held. */
static void report_lost(rt__worker *w, rt__registry_entry *lost, unsigned n)
{
    const rt__diag_hooks *h = rt__diag_hooks_get();
    if (h != NULL) {
        h->report_lost(w, lost, n);
        return;
    }
    for (unsigned i = 0; i < n; i++)
        rt__task_unref(rt__registry_task(&lost[i]), 1);
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
