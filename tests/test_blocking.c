/* Black-box tests of rt_spawn_blocking (asyncrt/task.h) and the blocking
 * pool settings of rt_config and rt_metrics: results through rt_task_join
 * and rt_task_wait, jobs from workers and from foreign threads, saturation
 * (at most blocking_threads jobs at once, the rest queued in FIFO order),
 * idle threads exiting after blocking_idle_ns, aborting a queued job (it
 * never runs), shutdown (queued jobs cancelled, running ones waited for up to
 * blocking_shutdown_ns and then abandoned), and bad arguments. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#define TEST_OWN_FINISH_RUNTIME /* this suite has its own, below */
#include "support.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MS (1000000LL)
#define SEC (1000000000LL)

/* Seconds any wait for an event may take before the test reports a hang. */
#define EVENT_DEADLINE_S 30
/* The same bound, for rt_task_wait calls that must not hang the suite. */
#define WAIT_DEADLINE_NS (30LL * SEC)

TestSuite(blocking, .timeout = 90, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

static rt_runtime *new_runtime_blocking(unsigned workers, unsigned blocking_threads,
                                        int64_t idle_ns, int64_t shutdown_ns)
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
    rt_runtime *rt = NULL;
    int rc = rt_runtime_new(&cfg, &rt);
    cr_assert_eq(rc, 0, "rt_runtime_new failed: %s", rt_strerror(rc));
    cr_assert_not_null(rt);
    return rt;
}

static void finish_runtime_metrics(rt_runtime *rt, int expected_cancelled, rt_metrics *final)
{
    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_geq(cancelled, 0, "rt_runtime_shutdown failed: %s", rt_strerror(cancelled));
    if (expected_cancelled >= 0)
        cr_assert_eq(cancelled, expected_cancelled, "shutdown cancelled %d tasks, expected %d",
                     cancelled, expected_cancelled);
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.alive, 0, "%llu tasks still alive after shutdown", (unsigned long long)m.alive);
    if (final != NULL)
        *final = m;
    cr_assert_eq(rt_runtime_free(rt), 0);
}

static void finish_runtime(rt_runtime *rt, int expected_cancelled)
{
    finish_runtime_metrics(rt, expected_cancelled, NULL);
}

static rt_metrics metrics_now(rt_runtime *rt)
{
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    return m;
}

/* The bounded polling loop this suite allows itself: waits (1 ms steps, at
 * most `seconds`) until the pool reports `threads` threads alive. */
static bool wait_blocking_threads(rt_runtime *rt, uint64_t threads, int seconds)
{
    const struct timespec step = {0, 1000000};
    for (long i = 0; i < seconds * 1000L; i++) {
        if (metrics_now(rt).blocking_threads == threads)
            return true;
        nanosleep(&step, NULL);
    }
    return metrics_now(rt).blocking_threads == threads;
}

/* ---- the jobs ---------------------------------------------------------- */

#define MAX_JOBS 128

/* Job i runs, marks itself started, waits until `release` has been signalled
 * at least i + 1 times, and finishes with i * 10 + 1. */
static atomic_int running;
static atomic_int max_running;
static atomic_int ran[MAX_JOBS];
static atomic_int start_order[MAX_JOBS];
static atomic_int starts;
static atomic_int worker_threads_seen; /* jobs that ran on a worker thread */
static _Atomic int64_t last_end_ns;
static struct event started = EVENT_INIT;
static struct event release = EVENT_INIT;
static struct event finished = EVENT_INIT;

static void *held_job(void *arg)
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

/* Finishes at once with its argument plus one. */
static void *quick_job(void *arg)
{
    if (rt_current_worker() != -1)
        atomic_fetch_add(&worker_threads_seen, 1);
    return (void *)((uintptr_t)arg + 1);
}

static rt_task *spawn_held(rt_runtime *rt, int i)
{
    rt_task *h = NULL;
    int rc = rt_spawn_blocking(rt, held_job, (void *)(intptr_t)i, &h);
    cr_assert_eq(rc, 0, "rt_spawn_blocking: %s", rt_strerror(rc));
    cr_assert_not_null(h);
    return h;
}

static rt_poll trivial_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = NULL;
    return RT_READY;
}

/* ---- configuration --------------------------------------------------------- */

Test(blocking, config_defaults_and_invalid_pool_settings)
{
    rt_config cfg;
    memset(&cfg, 0xAB, sizeof cfg);
    rt_config_init(&cfg);
    cr_assert_eq(cfg.budget, 128);
    cr_assert_eq(cfg.blocking_threads, 512);
    cr_assert_eq(cfg.blocking_idle_ns, 10 * SEC);
    cr_assert_eq(cfg.blocking_shutdown_ns, 10 * SEC);

    rt_runtime *rt = (rt_runtime *)(uintptr_t)1;
    cfg.workers = 1;
    cfg.blocking_threads = 0;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -EINVAL, "blocking_threads 0");
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_idle_ns = 0;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -EINVAL, "blocking_idle_ns 0");
    cfg.blocking_idle_ns = -1;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -EINVAL, "blocking_idle_ns < 0");

    /* A negative shutdown wait means "for ever" and is accepted. */
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_shutdown_ns = -1;
    rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), 0);
    rt_metrics m = metrics_now(rt);
    cr_assert_eq(m.blocking_threads, 0, "the pool starts threads on demand only");
    cr_assert_eq(m.blocking_jobs, 0);
    cr_assert_eq(m.blocking_abandoned, 0);
    finish_runtime(rt, 0);
}

/* ---- results ------------------------------------------------------------------- */

struct joiner {
    rt_coro co;
    rt_task *job;
    int spawn_rc;
    int status;
    void *value;
    int k;
    uintptr_t sum;
    int bad;
};

/* Spawns blocking jobs from a task (rt NULL: rt_current()) and joins them. */
static rt_poll joiner_poll(void *state, rt_context *cx, void **out)
{
    struct joiner *j = *(struct joiner **)state;
    RT_CORO_BEGIN(&j->co);
    for (j->k = 0; j->k < 20; j->k++) {
        j->job = NULL;
        j->spawn_rc = rt_spawn_blocking(NULL, quick_job, (void *)(uintptr_t)(100 * j->k), &j->job);
        if (j->spawn_rc != 0)
            RT_RETURN(&j->co, out, NULL);
        j->status = INT_MIN;
        RT_AWAIT(&j->co, rt_task_join(j->job, cx, &j->value, &j->status));
        if (j->status != 0 || j->value != (void *)(uintptr_t)(100 * j->k + 1))
            j->bad++;
        j->sum += (uintptr_t)j->value;
    }
    RT_RETURN(&j->co, out, 1);
    RT_CORO_END(&j->co, out);
}

Test(blocking, result_comes_back_through_join_from_a_task)
{
    rt_runtime *rt = new_runtime_blocking(2, 0, 0, 0);
    struct joiner j;
    memset(&j, 0, sizeof j);
    struct joiner *jp = &j;
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, joiner_poll, NULL, &jp, sizeof jp, &value), 0);
    cr_assert_eq(j.spawn_rc, 0, "rt_spawn_blocking from a task: %s", rt_strerror(j.spawn_rc));
    cr_assert_eq(value, (void *)1);
    cr_assert_eq(j.bad, 0, "%d joins returned a wrong value or status", j.bad);
    cr_assert_eq(atomic_load(&worker_threads_seen), 0, "a blocking job ran on a worker thread");
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.blocking_jobs, 20);
    cr_assert_eq(m.spawned, 1, "blocking jobs must not be counted as spawned tasks");
    cr_assert_eq(m.completed, 1);
}

struct foreign_jobs {
    rt_runtime *rt;
    int first;
    int rc[25];
    int wait_rc[25];
    void *values[25];
    uint64_t ids[25];
};

static void *foreign_jobs_thread(void *arg)
{
    struct foreign_jobs *f = arg;
    rt_task *h[25];
    for (int i = 0; i < 25; i++) {
        f->rc[i] = rt_spawn_blocking(f->rt, quick_job, (void *)(uintptr_t)(f->first + i), &h[i]);
        if (f->rc[i] == 0)
            f->ids[i] = rt_task_id(h[i]);
    }
    for (int i = 0; i < 25; i++)
        if (f->rc[i] == 0)
            f->wait_rc[i] = rt_task_wait(h[i], WAIT_DEADLINE_NS, &f->values[i]);
    return NULL;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

Test(blocking, result_comes_back_through_wait_from_foreign_threads_with_unique_ids)
{
    rt_runtime *rt = new_runtime_blocking(2, 0, 0, 0);
    /* The test thread itself. */
    rt_task *h = NULL;
    cr_assert_eq(rt_spawn_blocking(rt, quick_job, (void *)(uintptr_t)41, &h), 0);
    uint64_t own_id = rt_task_id(h);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq(value, (void *)(uintptr_t)42);

    /* Three more foreign threads at once. */
    struct foreign_jobs f[3];
    pthread_t threads[3];
    for (int t = 0; t < 3; t++) {
        memset(&f[t], 0, sizeof f[t]);
        f[t].rt = rt;
        f[t].first = 1000 * (t + 1);
        cr_assert_eq(pthread_create(&threads[t], NULL, foreign_jobs_thread, &f[t]), 0);
    }
    for (int t = 0; t < 3; t++)
        pthread_join(threads[t], NULL);
    uint64_t ids[1 + 3 * 25];
    ids[0] = own_id;
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < 25; i++) {
            cr_assert_eq(f[t].rc[i], 0, "spawn: %s", rt_strerror(f[t].rc[i]));
            cr_assert_eq(f[t].wait_rc[i], 0, "wait: %s", rt_strerror(f[t].wait_rc[i]));
            cr_assert_eq(f[t].values[i], (void *)(uintptr_t)(f[t].first + i + 1));
            ids[1 + t * 25 + i] = f[t].ids[i];
        }
    }
    qsort(ids, 1 + 3 * 25, sizeof ids[0], compare_u64);
    cr_assert_neq(ids[0], 0, "a blocking job got id 0");
    for (int i = 1; i < 1 + 3 * 25; i++)
        cr_assert_neq(ids[i], ids[i - 1], "two blocking jobs share the id %llu",
                      (unsigned long long)ids[i]);
    cr_assert_eq(atomic_load(&worker_threads_seen), 0);

    /* A detached job runs too. */
    cr_assert_eq(rt_spawn_blocking(rt, held_job, (void *)(intptr_t)0, NULL), 0);
    event_signal(&release);
    cr_assert(event_wait_for(&finished, 1), "the detached job never ran");

    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.blocking_jobs, 1 + 3 * 25 + 1);
    cr_assert_eq(m.spawned, 0);
}

/* ---- the pool keeps workers free --------------------------------------------- */

static struct event unblock = EVENT_INIT;

static void *waits_for_unblock(void *arg)
{
    (void)arg;
    return event_wait_for(&unblock, 1) ? (void *)7 : NULL;
}

static rt_poll signals_unblock_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    event_signal(&unblock);
    *out = NULL;
    return RT_READY;
}

struct unblocker {
    rt_coro co;
    rt_task *job;
    rt_task *task;
    void *value;
    int status;
};

/* On a one-worker runtime: a blocking job that waits for a task, and that
 * task. A job run on the worker would keep the task from ever running. */
static rt_poll unblocker_poll(void *state, rt_context *cx, void **out)
{
    struct unblocker *u = state;
    RT_CORO_BEGIN(&u->co);
    if (rt_spawn_blocking(NULL, waits_for_unblock, NULL, &u->job) != 0)
        RT_RETURN(&u->co, out, NULL);
    if (rt_spawn(NULL, signals_unblock_poll, NULL, NULL, 0, &u->task) != 0) {
        event_signal(&unblock);
        rt_task_detach(u->job);
        RT_RETURN(&u->co, out, NULL);
    }
    RT_AWAIT(&u->co, rt_task_join(u->job, cx, &u->value, &u->status));
    RT_AWAIT(&u->co, rt_task_join(u->task, cx, NULL, NULL));
    RT_RETURN(&u->co, out, u->status == 0 ? u->value : NULL);
    RT_CORO_END(&u->co, out);
}

Test(blocking, a_job_does_not_hold_a_worker)
{
    rt_runtime *rt = new_runtime_blocking(1, 0, 0, 0);
    struct unblocker u;
    memset(&u, 0, sizeof u);
    rt_task *t = NULL;
    cr_assert_eq(RT_SPAWN(rt, unblocker_poll, NULL, &u, &t), 0);
    void *value = NULL;
    int rc = rt_task_wait(t, WAIT_DEADLINE_NS, &value);
    if (rc == -ETIMEDOUT) {
        event_signal(&unblock);
        cr_assert_eq(rt_task_wait(t, -1, NULL), 0);
        cr_assert_fail("the blocking job held the only worker");
    }
    cr_assert_eq(rc, 0);
    cr_assert_eq(value, (void *)7);
    finish_runtime(rt, 0);
}

/* ---- saturation ------------------------------------------------------------- */

#define SAT_JOBS 6

Test(blocking, at_most_blocking_threads_jobs_run_at_once_and_the_rest_queue_fifo)
{
    rt_runtime *rt = new_runtime_blocking(2, 2, 0, 0);
    rt_task *h[SAT_JOBS];
    for (int i = 0; i < SAT_JOBS; i++)
        h[i] = spawn_held(rt, i);
    cr_assert(event_wait_for(&started, 2));
    rt_metrics m = metrics_now(rt);
    cr_assert_eq(m.blocking_jobs, SAT_JOBS);
    cr_assert_eq(m.blocking_threads, 2, "%llu pool threads for 2 running jobs (max 2)",
                 (unsigned long long)m.blocking_threads);
    /* FIFO: the first two jobs are the ones running. */
    int a = atomic_load(&start_order[0]);
    int b = atomic_load(&start_order[1]);
    cr_assert((a == 0 && b == 1) || (a == 1 && b == 0), "jobs %d and %d started first", a, b);

    /* Each job finished frees one thread, which takes the oldest queued job. */
    for (int k = 0; k < SAT_JOBS - 2; k++) {
        event_signal(&release); /* releases job k */
        cr_assert(event_wait_for(&started, (unsigned long)k + 3));
        cr_assert_eq(atomic_load(&start_order[k + 2]), k + 2,
                     "after job %d finished, job %d started instead of job %d", k,
                     atomic_load(&start_order[k + 2]), k + 2);
        cr_assert_leq(metrics_now(rt).blocking_threads, 2);
    }
    event_signal(&release);
    event_signal(&release);
    for (int i = 0; i < SAT_JOBS; i++) {
        void *value = NULL;
        cr_assert_eq(rt_task_wait(h[i], WAIT_DEADLINE_NS, &value), 0);
        cr_assert_eq(value, (void *)(intptr_t)(i * 10 + 1));
    }
    cr_assert_eq(atomic_load(&max_running), 2, "%d jobs ran at once with blocking_threads 2",
                 atomic_load(&max_running));
    cr_assert_eq(atomic_load(&starts), SAT_JOBS);
    m = metrics_now(rt);
    cr_assert_leq(m.blocking_threads, 2);
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.blocking_jobs, SAT_JOBS);
    cr_assert_eq(m.blocking_abandoned, 0);
    for (int i = 0; i < SAT_JOBS; i++)
        cr_assert_eq(atomic_load(&ran[i]), 1);
}

/* ---- idle threads exit ------------------------------------------------------- */

Test(blocking, idle_threads_exit_after_blocking_idle_ns)
{
    const int64_t idle_ns = 50 * MS;
    rt_runtime *rt = new_runtime_blocking(1, 4, idle_ns, 0);

    /* Three jobs at once on a fresh pool need three threads, and no more
     * (threads are made on demand). */
    rt_task *hs[3];
    for (int i = 0; i < 3; i++)
        hs[i] = spawn_held(rt, 0);
    cr_assert(event_wait_for(&started, 3));
    uint64_t threads = metrics_now(rt).blocking_threads;
    cr_assert_eq(threads, 3, "%llu pool threads for 3 jobs on a fresh pool",
                 (unsigned long long)threads);
    event_signal(&release);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(rt_task_wait(hs[i], WAIT_DEADLINE_NS, NULL), 0);
    int64_t last_end = atomic_load(&last_end_ns);

    cr_assert(wait_blocking_threads(rt, 0, 10), "%llu pool threads still alive after 10 s idle",
              (unsigned long long)metrics_now(rt).blocking_threads);
    int64_t gone = rt_now_ns();
    cr_assert_geq(gone - last_end, idle_ns,
                  "the threads exited %lld ns after their last job, before blocking_idle_ns",
                  (long long)(gone - last_end));

    /* The pool starts threads again on demand. */
    rt_task *h = NULL;
    cr_assert_eq(rt_spawn_blocking(rt, quick_job, (void *)9, &h), 0);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq(value, (void *)10);
    cr_assert_leq(metrics_now(rt).blocking_threads, 1);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.blocking_jobs, 4);
    cr_assert_eq(m.blocking_abandoned, 0);
}

/* ---- abort ------------------------------------------------------------------ */

static struct event aborted = EVENT_INIT;

struct abort_joiner {
    rt_coro co;
    rt_task *job;
    void *value;
    int status;
};

/* Spawns a job that queues behind the held one, aborts it and joins it. */
static rt_poll abort_joiner_poll(void *state, rt_context *cx, void **out)
{
    struct abort_joiner *a = state;
    RT_CORO_BEGIN(&a->co);
    if (rt_spawn_blocking(NULL, held_job, (void *)(intptr_t)3, &a->job) != 0) {
        event_signal(&aborted);
        RT_RETURN(&a->co, out, (intptr_t)INT_MIN);
    }
    rt_task_abort(a->job);
    event_signal(&aborted);
    a->status = INT_MIN;
    RT_AWAIT(&a->co, rt_task_join(a->job, cx, &a->value, &a->status));
    if (a->value != NULL)
        RT_RETURN(&a->co, out, (intptr_t)INT_MAX);
    RT_RETURN(&a->co, out, (intptr_t)a->status);
    RT_CORO_END(&a->co, out);
}

Test(blocking, an_aborted_queued_job_never_runs_and_a_running_one_keeps_its_result)
{
    rt_runtime *rt = new_runtime_blocking(2, 1, 0, 0);
    rt_task *running_job = spawn_held(rt, 0);
    cr_assert(event_wait_for(&started, 1));
    rt_task *queued = spawn_held(rt, 1);
    struct abort_joiner a;
    memset(&a, 0, sizeof a);
    rt_task *joiner = NULL;
    cr_assert_eq(RT_SPAWN(rt, abort_joiner_poll, NULL, &a, &joiner), 0);
    cr_assert(event_wait_for(&aborted, 1));
    rt_task *after = spawn_held(rt, 2);

    rt_task_abort(queued);
    rt_task_abort(queued);      /* twice is fine */
    rt_task_abort(running_job); /* running: cannot be interrupted */
    for (int i = 0; i < 4; i++)
        event_signal(&release);

    void *value = NULL;
    cr_assert_eq(rt_task_wait(running_job, WAIT_DEADLINE_NS, &value), 0,
                 "an aborted running job must keep its result");
    cr_assert_eq(value, (void *)1);
    cr_assert_eq(rt_task_wait(after, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq(value, (void *)21);
    /* The job after the aborted one has run, so the pool is past it. */
    cr_assert(rt_task_is_finished(queued));
    value = (void *)1;
    cr_assert_eq(rt_task_wait(queued, WAIT_DEADLINE_NS, &value), -ECANCELED);
    cr_assert_null(value);
    value = NULL;
    cr_assert_eq(rt_task_wait(joiner, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq((intptr_t)value, -ECANCELED, "the task joining an aborted queued job got %ld",
                 (long)(intptr_t)value);

    cr_assert_eq(atomic_load(&ran[0]), 1);
    cr_assert_eq(atomic_load(&ran[1]), 0, "the aborted queued job ran");
    cr_assert_eq(atomic_load(&ran[2]), 1);
    cr_assert_eq(atomic_load(&ran[3]), 0, "the job aborted by a task ran");
    cr_assert_eq(atomic_load(&starts), 2);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.blocking_jobs, 4);
}

/* ---- shutdown --------------------------------------------------------------- */

Test(blocking, shutdown_cancels_queued_jobs_and_abandons_a_job_stuck_past_the_wait)
{
    const int64_t wait_ns = 100 * MS;
    rt_runtime *rt = new_runtime_blocking(2, 1, 0, wait_ns);
    /* Job 0 runs (detached) until the test releases it, long after shutdown. */
    cr_assert_eq(rt_spawn_blocking(rt, held_job, (void *)(intptr_t)0, NULL), 0);
    cr_assert(event_wait_for(&started, 1));
    /* Jobs 1 and 2 queue behind it with handles, job 3 detached. */
    rt_task *q1 = spawn_held(rt, 1);
    rt_task *q2 = spawn_held(rt, 2);
    cr_assert_eq(rt_spawn_blocking(rt, held_job, (void *)(intptr_t)3, NULL), 0);

    int64_t t0 = rt_now_ns();
    int cancelled = rt_runtime_shutdown(rt);
    int64_t took = rt_now_ns() - t0;
    cr_assert_geq(cancelled, 0, "shutdown: %s", rt_strerror(cancelled));
    cr_log_info("shutdown reported %d cancelled tasks (3 queued blocking jobs)", cancelled);
    cr_assert_geq(took, wait_ns, "shutdown gave up on the running job after %lld ns only",
                  (long long)took);
    cr_assert_lt(took, 5 * SEC, "shutdown took %lld ns with blocking_shutdown_ns 100 ms",
                 (long long)took);
    cr_assert_eq(atomic_load(&ran[0]), 0, "the stuck job cannot have finished");

    rt_metrics m = metrics_now(rt);
    cr_assert_eq(m.blocking_abandoned, 1, "blocking_abandoned %llu",
                 (unsigned long long)m.blocking_abandoned);
    cr_assert_eq(m.blocking_jobs, 4);
    cr_assert_eq(m.alive, 0);
    cr_assert_eq(m.blocking_threads, 1, "the abandoned job's thread is still alive: %llu",
                 (unsigned long long)m.blocking_threads);

    /* No more jobs now. */
    rt_task *h = (rt_task *)(uintptr_t)1;
    cr_assert_eq(rt_spawn_blocking(rt, quick_job, NULL, &h), -ESHUTDOWN);
    cr_assert_eq(rt_spawn_blocking(rt, quick_job, NULL, NULL), -ESHUTDOWN);
    cr_assert_eq(metrics_now(rt).blocking_jobs, 4, "a refused job was counted");

    /* The queued jobs were cancelled. */
    void *value = (void *)1;
    cr_assert_eq(rt_task_wait(q1, WAIT_DEADLINE_NS, &value), -ECANCELED);
    cr_assert_null(value);
    cr_assert_eq(rt_task_wait(q2, WAIT_DEADLINE_NS, &value), -ECANCELED);

    /* Let the abandoned job finish, and its thread exit. */
    for (int i = 0; i < 4; i++)
        event_signal(&release);
    cr_assert(event_wait_for(&finished, 1));
    cr_assert(wait_blocking_threads(rt, 0, 10), "the abandoned job's thread never went away");
    cr_assert_eq(atomic_load(&ran[0]), 1);
    cr_assert_eq(atomic_load(&ran[1]), 0, "a job queued at shutdown ran");
    cr_assert_eq(atomic_load(&ran[2]), 0, "a job queued at shutdown ran");
    cr_assert_eq(atomic_load(&ran[3]), 0, "a job queued at shutdown ran");
    cr_assert_eq(atomic_load(&starts), 1);
    cr_assert_eq(metrics_now(rt).blocking_abandoned, 1);
    cr_assert_eq(rt_runtime_free(rt), 0);
}

struct shutdown_thread {
    rt_runtime *rt;
    int rc;
    int64_t returned_ns;
};

static struct event shutdown_began = EVENT_INIT;

/* Never finishes, and wakes nothing: only a cancellation ends it. */
static rt_poll pending_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    (void)out;
    return RT_PENDING;
}

static void signal_drop(void *state)
{
    (void)state;
    event_signal(&shutdown_began);
}

static void *shutdown_thread(void *arg)
{
    struct shutdown_thread *s = arg;
    s->rc = rt_runtime_shutdown(s->rt);
    s->returned_ns = rt_now_ns();
    return NULL;
}

Test(blocking, shutdown_waits_for_a_running_job_when_the_wait_is_unbounded)
{
    rt_runtime *rt = new_runtime_blocking(1, 2, 0, -1);
    rt_task *job = spawn_held(rt, 0);
    cr_assert(event_wait_for(&started, 1));

    /* A task that never finishes: shutdown cancels it (its drop signals)
     * before it waits for the blocking pool, so the signal says the
     * shutdown has begun and refuses spawns. */
    cr_assert_eq(rt_spawn(rt, pending_poll, signal_drop, NULL, 0, NULL), 0);
    struct shutdown_thread s = {rt, INT_MIN, 0};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, shutdown_thread, &s), 0);
    cr_assert(event_wait_for(&shutdown_began, 1), "shutdown never cancelled the pending task");
    cr_assert_eq(rt_spawn(rt, trivial_poll, NULL, NULL, 0, NULL), -ESHUTDOWN);
    int64_t released_at = rt_now_ns();
    event_signal(&release);
    pthread_join(thread, NULL);
    cr_assert_geq(s.rc, 0, "shutdown: %s", rt_strerror(s.rc));
    cr_assert_geq(s.returned_ns, released_at, "shutdown returned before the job was released");
    cr_assert_eq(atomic_load(&ran[0]), 1, "shutdown returned before the running job finished");
    void *value = NULL;
    cr_assert_eq(rt_task_wait(job, WAIT_DEADLINE_NS, &value), 0,
                 "a job that finished during shutdown keeps its result");
    cr_assert_eq(value, (void *)1);
    rt_metrics m = metrics_now(rt);
    cr_assert_eq(m.blocking_abandoned, 0);
    cr_assert_eq(m.alive, 0);
    cr_assert_eq(rt_runtime_free(rt), 0);
}

/* ---- bad arguments ------------------------------------------------------------ */

Test(blocking, fn_null_and_no_runtime_are_einval)
{
    rt_runtime *rt = new_runtime_blocking(1, 0, 0, 0);
    rt_task *h = (rt_task *)(uintptr_t)1;
    cr_assert_eq(rt_spawn_blocking(rt, NULL, NULL, &h), -EINVAL);
    cr_assert_eq(rt_spawn_blocking(rt, NULL, NULL, NULL), -EINVAL);
    cr_assert_eq(rt_spawn_blocking(NULL, quick_job, NULL, &h), -EINVAL, "rt NULL outside a task");
    cr_assert_eq(rt_current_worker(), -1);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.blocking_jobs, 0);
    cr_assert_eq(m.blocking_threads, 0);
    cr_assert_eq(atomic_load(&worker_threads_seen), 0);
}

Test(blocking, spawn_after_shutdown_is_eshutdown_and_runs_nothing)
{
    rt_runtime *rt = new_runtime_blocking(1, 0, 0, 0);
    cr_assert_eq(rt_runtime_shutdown(rt), 0);
    rt_task *h = NULL;
    cr_assert_eq(rt_spawn_blocking(rt, held_job, (void *)(intptr_t)0, &h), -ESHUTDOWN);
    cr_assert_eq(rt_spawn_blocking(rt, held_job, (void *)(intptr_t)0, NULL), -ESHUTDOWN);
    rt_metrics m = metrics_now(rt);
    cr_assert_eq(m.blocking_jobs, 0);
    cr_assert_eq(m.blocking_threads, 0);
    cr_assert_eq(atomic_load(&starts), 0);
    cr_assert_eq(rt_runtime_free(rt), 0);
}

/* ---- the cooperative budget outside workers ------------------------------------ */

static void *coop_job(void *arg)
{
    (void)arg;
    rt_context cx = rt_context_from_waker(rt_waker_noop());
    for (int i = 0; i < 1000; i++)
        if (!rt_coop_proceed(&cx))
            return (void *)(intptr_t)(i + 1);
    return NULL;
}

Test(blocking, coop_proceed_is_always_true_in_a_blocking_job)
{
    rt_runtime *rt = new_runtime_blocking(1, 0, 0, 0);
    rt_task *h = NULL;
    cr_assert_eq(rt_spawn_blocking(rt, coop_job, NULL, &h), 0);
    void *value = (void *)1;
    cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_null(value, "rt_coop_proceed returned false at call %ld in a blocking job",
                   (long)(intptr_t)value);
    finish_runtime(rt, 0);
}

/* ---- corner cases ------------------------------------------------------------- */

Test(blocking, an_aborted_queued_job_completes_at_once_while_every_thread_is_busy)
{
    /* One thread, held by job 0: job 1 waits in the queue. Its abort must
     * complete it now, not when the held job lets the thread go. */
    rt_runtime *rt = new_runtime_blocking(1, 1, 0, 0);
    rt_task *held = spawn_held(rt, 0);
    cr_assert(event_wait_for(&started, 1));
    rt_task *queued = spawn_held(rt, 1);
    rt_task_abort(queued);
    void *value = (void *)1;
    cr_assert_eq(rt_task_wait(queued, WAIT_DEADLINE_NS, &value), -ECANCELED,
                 "the aborted queued job waited for the busy thread");
    cr_assert_null(value);
    cr_assert_eq(atomic_load(&running), 1, "the held job was disturbed");
    event_signal(&release);
    cr_assert_eq(rt_task_wait(held, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq(value, (void *)1);
    cr_assert_eq(atomic_load(&ran[1]), 0, "the aborted job ran");
    finish_runtime(rt, 0);
}

Test(blocking, an_idle_time_too_large_for_the_clock_neither_spins_nor_blocks_shutdown)
{
    /* INT64_MAX cannot be added to the clock: the idle thread must wait
     * without a deadline rather than fail its timed wait in a loop while
     * holding the pool's lock (which hung metrics and shutdown). */
    rt_runtime *rt = new_runtime_blocking(1, 2, INT64_MAX, 0);
    rt_task *h = NULL;
    cr_assert_eq(rt_spawn_blocking(rt, quick_job, (void *)41, &h), 0);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq(value, (void *)42);
    /* The thread is idle now; the pool must still answer. */
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(rt_spawn_blocking(rt, quick_job, (void *)(uintptr_t)i, &h), 0);
        cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, &value), 0);
        cr_assert_eq(value, (void *)(uintptr_t)(i + 1));
    }
    /* Without a usable deadline the idle threads simply stay. */
    rt_metrics m = metrics_now(rt);
    cr_assert_geq(m.blocking_threads, 1);
    finish_runtime(rt, 0);
}

static int sigpipe_fds[2];

/* Writes to a pipe whose read end is closed: EPIPE, not death by SIGPIPE. */
static void *write_to_closed_pipe(void *arg)
{
    (void)arg;
    ssize_t n = write(sigpipe_fds[1], "x", 1);
    return (void *)(intptr_t)(n < 0 ? -errno : n);
}

Test(blocking, a_job_writing_to_a_closed_pipe_gets_epipe_whoever_spawned_it)
{
    /* The test thread (a foreign thread) has SIGPIPE unblocked and the
     * default action (death): the pool thread must not inherit that. */
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    cr_assert_eq(pipe(sigpipe_fds), 0);
    close(sigpipe_fds[0]);
    rt_runtime *rt = new_runtime_blocking(1, 1, 0, 0);
    rt_task *h = NULL;
    cr_assert_eq(rt_spawn_blocking(rt, write_to_closed_pipe, NULL, &h), 0);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq((intptr_t)value, -EPIPE);
    close(sigpipe_fds[1]);
    finish_runtime(rt, 0);
}

#if !defined(TEST_HAVE_LSAN) && !defined(TEST_HAVE_TSAN)
/* Reads VmSize from /proc/self/status, in bytes (0 if unreadable). */
static unsigned long long vm_size_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmSize: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}
#endif

Test(blocking, a_thread_that_cannot_be_created_is_an_error_not_a_hang)
{
#if defined(TEST_HAVE_LSAN) || defined(TEST_HAVE_TSAN)
    /* The sanitizers reserve terabytes of address space: an address-space
     * limit cannot be used to make thread creation fail there. */
    cr_log_info("skipped under a sanitizer");
#else
    rt_runtime *rt = new_runtime_blocking(1, 4, 0, 0);
    /* The runtime's threads map their malloc arenas as they start (glibc
     * maps twice the size, then unmaps the excess): measured during that,
     * the address space would shrink again under the limit and leave room
     * for a thread. Once the worker is parked, they have all started. */
    cr_assert(wait_all_workers_parked(rt), "the worker never parked");
    /* No pool thread exists yet. Leave no room for a thread's stack: the
     * pool's pthread_create fails, and with no thread to take the job the
     * spawn must say so rather than queue a job nobody will ever run. */
    struct rlimit old;
    cr_assert_eq(getrlimit(RLIMIT_AS, &old), 0);
    unsigned long long vm = vm_size_bytes();
    cr_assert_gt(vm, 0);
    struct rlimit tight = {vm + (1ull << 20), old.rlim_max};
    cr_assert_eq(setrlimit(RLIMIT_AS, &tight), 0);
    rt_task *h = (rt_task *)1;
    int rc = rt_spawn_blocking(rt, quick_job, NULL, &h);
    cr_assert_eq(setrlimit(RLIMIT_AS, &old), 0);
    cr_assert_eq(rc, -EAGAIN, "rt_spawn_blocking with no thread possible: %s", rt_strerror(rc));
    cr_assert_null(h);
    /* With room again, the pool works. */
    cr_assert_eq(rt_spawn_blocking(rt, quick_job, (void *)1, &h), 0);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq(value, (void *)2);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.blocking_jobs, 1, "the refused job was counted");
#endif
}
