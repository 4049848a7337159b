/* Looking at live tasks from any thread (diag.h): the copy of the
 * registries, holding a waiting task for a look at its coroutine record
 * and operation, and the reports of the lost wake-ups the workers' idle
 * sweeps find (scheduler/lost_wakeups.c).
 *
 * A look never stops the world. Each registry is copied under its lock
 * (registry.h), and every task copied gets a reference, so that it stays
 * allocated after the lock is gone; the owner of the registry only skips a
 * sweep meanwhile, or waits if it must grow the array. A waiting task is
 * held (rt__task_state_hold) only for the few reads of its record; running
 * and queued tasks are described from their state word and the workers'
 * `current`, read with relaxed loads: the picture is a moment apart, never
 * torn. */
#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <asyncrt/coro.h>
#include <asyncrt/diag.h>

#include "atomic.h"
#include "fault.h"
#include "diagnostics.h"
#include "current.h"
#include "runtime_services.h"

/* ---- One task ------------------------------------------------------------- */

/* A copied registry entry: the task (with the copy's reference) and where
 * it was spawned. */
typedef struct snap_entry {
    rt_task *task;
    const char *site;
} snap_entry;

/* The worker whose `current` is t, or -1 (a relaxed look: a moment old). */
static int polling_worker(rt_runtime *rt, rt_task *t)
{
    for (unsigned i = 0; i < rt_runtime_workers(rt); i++)
        if (rt__load_relaxed_ptr((void *const *)&rt__runtime_worker(rt, i)->own.current) == t)
            return (int)i;
    return -1;
}

/* The name of the function at `fn` when the dynamic symbol table has it. */
static const char *symbol_name(const void *fn)
{
    Dl_info info;
    if (dladdr(fn, &info) != 0 && info.dli_sname != NULL && info.dli_saddr == fn)
        return info.dli_sname;
    return NULL;
}

/* The one kind of task with a reader of its own (rt__diag_task_reader_set):
 * the reader is stored before the poll function with a release that the
 * acquire load in read_held pairs with, so that a dump that sees the poll
 * sees its reader. */
static rt__task_reader_fn reader_fn;
static void *reader_poll;

void rt__diag_task_reader_set(rt_poll_fn poll, rt__task_reader_fn fn)
{
    if (rt__load_acquire_ptr((void *const *)&reader_poll) != NULL)
        return;
    reader_fn = fn;
    rt__store_release_ptr(&reader_poll, (void *)poll);
}

/* Reads the coroutine record and the operation in flight of a held task. */
static void read_held(rt_task *t, rt_task_info *info)
{
    /* Acquire: the CORO bit was set by a poll before the release that
     * ended it (or at spawn). */
    if (rt__load_acquire_u64(&t->state) & RT__TASK_CORO) {
        const rt_coro *co = (const rt_coro *)t->future_state;
        if (co->line > 0) {
            info->await_line = co->line;
            info->await_file = co->site != NULL ? co->site->file : NULL;
            info->await_function = co->site != NULL ? co->site->function : NULL;
        }
        if (co->awaiting != NULL) {
            rt_future_describe(co->awaiting, &info->wait);
        } else {
            info->wait.kind = RT_WAIT_OTHER;
            snprintf(info->wait.text, sizeof info->wait.text, "%s",
                     co->line > 0 ? "a poll of its own (RT_AWAIT_POLL or a hand-written wait)"
                                  : "its first poll");
        }
        return;
    }
    void *reader = rt__load_acquire_ptr((void *const *)&reader_poll);
    if (reader != NULL && reader == (void *)t->u.poll) {
        reader_fn(t->future_state, info);
        return;
    }
    const char *fn = symbol_name((const void *)t->u.poll);
    info->wait.kind = RT_WAIT_OTHER;
    if (fn != NULL)
        snprintf(info->wait.text, sizeof info->wait.text, "whatever %s waits for (no coroutine)",
                 fn);
    else
        snprintf(info->wait.text, sizeof info->wait.text,
                 "whatever poll function %p waits for (no coroutine)", (void *)t->u.poll);
}

/* Fills the timing fields of a timed task. */
static void read_timing(rt_task *t, rt_task_info *info, int64_t now)
{
    rt__task_timing *tm = rt__task_timing_of(t);
    info->polls = rt__load_relaxed_u64(&tm->polls);
    info->busy_ns = (int64_t)rt__load_relaxed_u64(&tm->busy_ns);
    uint64_t last_end = rt__load_relaxed_u64(&tm->last_end_ns);
    info->idle_ns = last_end != 0 && (uint64_t)now >= last_end ? now - (int64_t)last_end : -1;
    if (info->state == RT_TASK_RUNNING) {
        uint64_t start = rt__load_relaxed_u64(&tm->poll_start_ns);
        info->running_ns = start != 0 && (uint64_t)now >= start ? now - (int64_t)start : -1;
    }
    uint64_t last_worker = rt__load_relaxed_u64(&tm->last_worker);
    if (info->worker < 0 && last_worker > 0)
        info->worker = (int)(last_worker - 1);
}

/* Describes one copied task; false when it is not to be reported (it
 * finished and nobody holds its handle). The copy's reference is the one
 * the lost wake-up test allows for. */
bool rt__describe_task(rt_runtime *rt, rt_task *t, const char *site, rt_task_info *info,
                       int64_t now)
{
    memset(info, 0, sizeof(*info));
    info->size = sizeof(*info);
    info->id = t->id;
    info->name = rt_task_name(t);
    info->spawned_at = site;
    info->worker = -1;
    info->wait.fd = -1;
    info->idle_ns = -1;
    info->running_ns = -1;
    int pinned = rt__task_pinned(t);
    uint64_t s = rt__load_acquire_u64(&t->state);
    if (s & RT__TASK_COMPLETE) {
        if (!(s & RT__TASK_JOIN_INTEREST))
            return false;
        info->state = RT_TASK_FINISHED;
        snprintf(info->wait.text, sizeof info->wait.text, "finished, waiting to be joined");
    } else if (rt__task_state_hold(t)) {
        info->state = RT_TASK_WAITING;
        info->lost_wakeup = rt__task_lost(s, 1);
        read_held(t, info);
        RT__DEBUG_YIELD(); /* a wake or an abort may come during the hold */
        if (rt__task_state_unhold(t)) {
            /* Woken or aborted during the look: queued now. */
            info->state = RT_TASK_SCHEDULED;
            info->lost_wakeup = false;
            rt__task_note_queued(t);
            rt__schedule(t);
        }
    } else {
        int w = polling_worker(rt, t);
        info->state = w >= 0 ? RT_TASK_RUNNING : RT_TASK_SCHEDULED;
        info->worker = w;
        snprintf(info->wait.text, sizeof info->wait.text, "%s",
                 w >= 0 ? "running" : "in a run queue");
    }
    if (info->worker < 0 && pinned >= 0)
        info->worker = pinned;
    if (info->worker < 0)
        info->worker = rt__task_last_worker(s);
    if (s & RT__TASK_TIMED)
        read_timing(t, info, now);
    return true;
}

/* ---- Copying the registries ---------------------------------------------- */

typedef struct snapshot {
    snap_entry *entries;
    size_t len, cap;
} snapshot;

/* Copies r's entries, with a reference on each task, under r's lock (for a
 * foreign shard, the caller holds the shard's mutex as well). -ENOMEM
 * leaves nothing copied from r. */
static int copy_registry(snapshot *snap, rt__registry *r)
{
    for (;;) {
        /* Room first: no allocation while the owner may wait for the lock. */
        size_t want = snap->len + rt__load_relaxed_u32(&r->len) + 64;
        if (want > snap->cap) {
            snap_entry *grown = rt__realloc(snap->entries, want * sizeof(*grown));
            if (grown == NULL)
                return -ENOMEM;
            snap->entries = grown;
            snap->cap = want;
        }
        rt__spin_lock(&r->lock);
        /* Acquire pairs with the owner's release of len after each append. */
        uint32_t n = rt__load_acquire_u32(&r->len);
        if (snap->len + n > snap->cap) {
            rt__spin_unlock(&r->lock);
            continue; /* it grew meanwhile */
        }
        for (uint32_t i = 0; i < n; i++) {
            rt_task *t = rt__registry_task(&r->entries[i]);
            rt__task_state_ref(t);
            snap->entries[snap->len].task = t;
            snap->entries[snap->len].site = r->entries[i].site;
            snap->len++;
        }
        rt__spin_unlock(&r->lock);
        return 0;
    }
}

static int take_snapshot(rt_runtime *rt, snapshot *snap)
{
    int err = 0;
    for (unsigned i = 0; i < rt_runtime_workers(rt) && err == 0; i++)
        err = copy_registry(snap, &rt__runtime_worker(rt, i)->registry);
    for (unsigned i = 0; i < rt__runtime_foreign_shards(rt) && err == 0; i++) {
        rt__foreign_shard *sh = rt__runtime_foreign_shard(rt, i);
        pthread_mutex_lock(&sh->lock);
        err = copy_registry(snap, &sh->registry);
        pthread_mutex_unlock(&sh->lock);
    }
    return err;
}

static void release_snapshot(snapshot *snap, size_t from)
{
    for (size_t i = from; i < snap->len; i++)
        rt__task_unref(snap->entries[i].task, 1);
    free(snap->entries);
}

/* ---- rt_runtime_tasks ------------------------------------------------------ */

/* Set while this thread runs a visit: a nested look would wait for itself. */
static __thread bool in_visit;

RT_EXPORT int rt_runtime_tasks(rt_runtime *rt, rt_task_visit_fn fn, void *arg)
{
    return rt__runtime_tasks(rt, fn, arg, true);
}

int rt__runtime_tasks(rt_runtime *rt, rt_task_visit_fn fn, void *arg, bool wait)
{
    if (rt == NULL || fn == NULL)
        return -EINVAL;
    if (in_visit || rt__thread_in_shutdown())
        return -EDEADLK;
    /* The lifecycle lock keeps shutdown away: it claims every unfinished
     * task without looking, which must not meet a held one. A caller that
     * must not wait for a shutdown (the reactor and the workers, which
     * shutdown stops) tries until it gets the lock or sees the shutdown
     * begin. */
    /* A task of rt must not wait either: shutdown waits for it to end. */
    rt__worker *self = rt__worker_current();
    if (wait && (self == NULL || self->rt != rt)) {
        pthread_mutex_lock(rt__runtime_lifecycle_lock(rt));
    } else {
        while (pthread_mutex_trylock(rt__runtime_lifecycle_lock(rt)) != 0) {
            if (rt__runtime_closing(rt))
                return -ESHUTDOWN;
            sched_yield();
        }
    }
    if (rt__runtime_shut_down(rt) || rt__runtime_closing(rt)) {
        pthread_mutex_unlock(rt__runtime_lifecycle_lock(rt));
        return -ESHUTDOWN;
    }
    snapshot snap = {NULL, 0, 0};
    int err = take_snapshot(rt, &snap);
    if (err < 0) {
        release_snapshot(&snap, 0);
        pthread_mutex_unlock(rt__runtime_lifecycle_lock(rt));
        return err;
    }
    int64_t now = rt__now_ns();
    int visited = 0, stopped = 0;
    size_t i = 0;
    in_visit = true;
    rt__reactor_look_begin(rt__runtime_reactor(rt));
    for (; i < snap.len && stopped == 0; i++) {
        rt_task_info info;
        if (rt__describe_task(rt, snap.entries[i].task, snap.entries[i].site, &info, now)) {
            visited++;
            stopped = fn(&info, arg);
        }
        rt__task_unref(snap.entries[i].task, 1);
    }
    rt__reactor_look_end(rt__runtime_reactor(rt));
    in_visit = false;
    release_snapshot(&snap, i);
    pthread_mutex_unlock(rt__runtime_lifecycle_lock(rt));
    return stopped != 0 ? stopped : visited;
}

/* ---- Lost wake-ups found by sweeps ------------------------------------------ */

/* The report_lost hook (diag_hooks.h). */
void rt__report_lost(rt__worker *w, rt__registry_entry *lost, unsigned n)
{
    rt_runtime *rt = w->rt;
    rt__reactor_look_begin(rt__runtime_reactor(rt));
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
                polling_worker(rt, t) >= 0)
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
    rt__reactor_look_end(rt__runtime_reactor(rt));
}

/* ---- Finding a running task for the watchdog --------------------------------- */

/* Whether r holds `t`; if so a reference is taken and *site set. Compares
 * pointers only: t may be freed already, and is then never dereferenced. */
static bool find_in_registry(rt__registry *r, rt_task *t, const char **site)
{
    bool found = false;
    rt__spin_lock(&r->lock);
    uint32_t n = rt__load_acquire_u32(&r->len);
    for (uint32_t i = 0; i < n && !found; i++) {
        if (rt__registry_task(&r->entries[i]) == t) {
            rt__task_state_ref(t);
            *site = r->entries[i].site;
            found = true;
        }
    }
    rt__spin_unlock(&r->lock);
    return found;
}

bool rt__find_task_ref(rt_runtime *rt, rt_task *t, const char **site)
{
    for (unsigned i = 0; i < rt_runtime_workers(rt); i++)
        if (find_in_registry(&rt__runtime_worker(rt, i)->registry, t, site))
            return true;
    for (unsigned i = 0; i < rt__runtime_foreign_shards(rt); i++) {
        rt__foreign_shard *sh = rt__runtime_foreign_shard(rt, i);
        pthread_mutex_lock(&sh->lock);
        bool found = find_in_registry(&sh->registry, t, site);
        pthread_mutex_unlock(&sh->lock);
        if (found)
            return true;
    }
    return false;
}
