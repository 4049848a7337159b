/* The stall watchdog (rt_config.stall_ns): a thread that samples every
 * worker a few times per threshold and reports a poll that has run longer
 * than it, once, then again each time it has run that much longer.
 *
 * The polls pay nothing for it: the watchdog reads what the worker writes
 * anyway, its counts of polls and drops (each counted once over) and
 * `current` (relaxed loads, a moment old). A worker whose counts and
 * current task have not changed between samples is still in the same
 * poll. To name the task the watchdog looks it up in the
 * registries by address, which gives it a reference if the task is still
 * there, and then checks that the poll count has still not moved: if it
 * has, the poll ended meanwhile and nothing is reported. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <asyncrt/coro.h>
#include <asyncrt/diag.h>

#include "atomic.h"
#include "fault.h"
#include "diagnostics.h"
#include "current.h"
#include "runtime_services.h"

/* What the watchdog last saw of one worker. */
typedef struct watch_sample {
    rt_task *task;     /* the task it was polling, or NULL */
    uint64_t polls;    /* its poll count then */
    int64_t since_ns;  /* when this poll was first seen */
    int64_t report_at; /* how long the poll must have run for the next report */
} watch_sample;

struct rt__watchdog {
    rt_runtime *rt;
    int64_t stall_ns;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* CLOCK_MONOTONIC */
    bool stop;           /* under lock */
    watch_sample *samples;
};

/* The polls and the drops of cancelled tasks the worker has finished: the
 * same between two samples only while one poll (or drop) goes on. */
static uint64_t runs_ended(rt__worker *w)
{
    return rt__load_relaxed_u64(&w->stats.polls) + rt__load_relaxed_u64(&w->cancelled);
}

static void report_stall(struct rt__watchdog *wd, unsigned index, const watch_sample *s,
                         int64_t ran)
{
    rt_runtime *rt = wd->rt;
    rt__worker *w = rt__runtime_worker(rt, index);
    const char *site = NULL;
    if (!rt__find_task_ref(rt, s->task, &site))
        return;
    /* The reference keeps the task readable; the count says whether it is
     * still the same poll (not a new task at the same address). */
    if (runs_ended(w) == s->polls &&
        rt__load_relaxed_ptr((void *const *)&w->own.current) == s->task) {
        const rt_coro_site *origin = rt__load_relaxed_ptr((void *const *)&w->poll_origin_site);
        rt_report rep;
        memset(&rep, 0, sizeof rep);
        rep.size = sizeof rep;
        rep.kind = RT_REPORT_STALL;
        rep.task_id = s->task->id;
        rep.task_name = rt_task_name(s->task);
        rep.worker = (int)index;
        rep.duration_ns = ran;
        rep.await_line = (int)rt__load_relaxed_u32(&w->poll_origin_line);
        if (origin != NULL && rep.await_line > 0) {
            rep.await_file = origin->file;
            rep.await_function = origin->function;
        } else {
            rep.await_line = 0;
        }
        rep.spawned_at = site;
        rt__runtime_count_stall(rt);
        rt__report(rt, &rep);
    }
    rt__task_unref(s->task, 1);
}

static void sample_workers(struct rt__watchdog *wd)
{
    rt_runtime *rt = wd->rt;
    int64_t now = rt__now_ns();
    for (unsigned i = 0; i < rt_runtime_workers(rt); i++) {
        rt__worker *w = rt__runtime_worker(rt, i);
        watch_sample *s = &wd->samples[i];
        rt_task *cur = rt__load_relaxed_ptr((void *const *)&w->own.current);
        uint64_t polls = runs_ended(w);
        if (cur == NULL || cur != s->task || polls != s->polls) {
            s->task = cur;
            s->polls = polls;
            s->since_ns = now;
            s->report_at = wd->stall_ns;
            continue;
        }
        int64_t ran = now - s->since_ns;
        if (ran >= s->report_at) {
            report_stall(wd, i, s, ran);
            s->report_at += wd->stall_ns;
        }
    }
}

static void *watchdog_main(void *arg)
{
    struct rt__watchdog *wd = arg;
    int64_t period = wd->stall_ns / 4 > 1000000 ? wd->stall_ns / 4 : 1000000;
    pthread_mutex_lock(&wd->lock);
    while (!wd->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t until = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + period;
        ts.tv_sec = until / 1000000000;
        ts.tv_nsec = until % 1000000000;
        while (!wd->stop && pthread_cond_timedwait(&wd->cond, &wd->lock, &ts) != ETIMEDOUT)
            ;
        if (wd->stop)
            break;
        pthread_mutex_unlock(&wd->lock);
        sample_workers(wd);
        pthread_mutex_lock(&wd->lock);
    }
    pthread_mutex_unlock(&wd->lock);
    return NULL;
}

int rt__watchdog_start(rt_runtime *rt, int64_t stall_ns, struct rt__watchdog **out)
{
    *out = NULL;
    struct rt__watchdog *wd = rt__calloc(1, sizeof(*wd));
    if (wd == NULL)
        return -ENOMEM;
    wd->rt = rt;
    wd->stall_ns = stall_ns;
    wd->samples = rt__calloc(rt_runtime_workers(rt), sizeof(*wd->samples));
    if (wd->samples == NULL) {
        free(wd);
        return -ENOMEM;
    }
    int err = rt__pthread_mutex_init(&wd->lock, NULL);
    if (err != 0)
        goto fail_lock;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    err = rt__pthread_cond_init(&wd->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (err != 0)
        goto fail_cond;
    err = rt__pthread_create(&wd->thread, NULL, watchdog_main, wd);
    if (err != 0)
        goto fail_thread;
    pthread_setname_np(wd->thread, "asyncrt-watch");
    *out = wd;
    return 0;

fail_thread:
    pthread_cond_destroy(&wd->cond);
fail_cond:
    pthread_mutex_destroy(&wd->lock);
fail_lock:
    free(wd->samples);
    free(wd);
    return -err;
}

void rt__watchdog_stop(struct rt__watchdog *wd)
{
    if (wd == NULL)
        return;
    pthread_mutex_lock(&wd->lock);
    wd->stop = true;
    pthread_cond_signal(&wd->cond);
    pthread_mutex_unlock(&wd->lock);
    pthread_join(wd->thread, NULL);
    pthread_cond_destroy(&wd->cond);
    pthread_mutex_destroy(&wd->lock);
    free(wd->samples);
    free(wd);
}
