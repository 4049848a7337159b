/* Black-box tests of rt_spawn_blocking (asyncrt/task.h) and the blocking
 * pool settings of rt_config and rt_metrics: the defaults and invalid
 * settings, results through rt_task_join and rt_task_wait, jobs from workers
 * and from foreign threads, a job never holding a worker, saturation (at
 * most blocking_threads jobs at once, the rest queued in FIFO order), idle
 * threads exiting after blocking_idle_ns, bad arguments, and the cooperative
 * budget outside workers. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_blocking.h"

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

TestSuite(blocking, .timeout = 90, .fini = fail_on_leaks);

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
    rt_task_join join;
    int spawn_rc;
    int k;
    uintptr_t sum;
    int bad;
};

/* Spawns blocking jobs from a task (rt NULL: rt_current_runtime()) and joins them. */
static rt_poll joiner_poll(void *state, rt_context *cx, void **out)
{
    struct joiner *j = *(struct joiner **)state;
    RT_CORO_BEGIN(&j->co);
    for (j->k = 0; j->k < 20; j->k++) {
        j->job = NULL;
        j->spawn_rc = rt_spawn_blocking(NULL, quick_job, (void *)(uintptr_t)(100 * j->k), &j->job);
        if (j->spawn_rc != 0)
            RT_RETURN(&j->co, out, NULL);
        rt_task_join_init(&j->join, j->job);
        RT_AWAIT(&j->co, cx, &j->join);
        if (j->join.result != 0 || j->join.value != (void *)(uintptr_t)(100 * j->k + 1))
            j->bad++;
        j->sum += (uintptr_t)j->join.value;
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
    cr_assert_eq(block_on_status(rt, joiner_poll, NULL, &jp, sizeof jp, &value), 0);
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
            f->wait_rc[i] = task_wait_status(h[i], WAIT_DEADLINE_NS, &f->values[i]);
    return NULL;
}

Test(blocking, result_comes_back_through_wait_from_foreign_threads_with_unique_ids)
{
    rt_runtime *rt = new_runtime_blocking(2, 0, 0, 0);
    /* The test thread itself. */
    rt_task *h = NULL;
    cr_assert_eq(rt_spawn_blocking(rt, quick_job, (void *)(uintptr_t)41, &h), 0);
    uint64_t own_id = rt_task_id(h);
    void *value = NULL;
    cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, &value), 0);
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
    rt_task_join join_job;
    rt_task_join join_task;
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
        rt_task_drop(u->job);
        RT_RETURN(&u->co, out, NULL);
    }
    rt_task_join_init(&u->join_job, u->job);
    rt_task_join_init(&u->join_task, u->task);
    RT_AWAIT(&u->co, cx, &u->join_job);
    RT_AWAIT(&u->co, cx, &u->join_task);
    RT_RETURN(&u->co, out, u->join_job.result == 0 ? u->join_job.value : NULL);
    RT_CORO_END(&u->co, out);
}

Test(blocking, a_job_does_not_hold_a_worker)
{
    rt_runtime *rt = new_runtime_blocking(1, 0, 0, 0);
    struct unblocker u;
    memset(&u, 0, sizeof u);
    rt_task *t = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, unblocker_poll, NULL, &u, &t), 0);
    void *value = NULL;
    int rc = task_wait_status(t, WAIT_DEADLINE_NS, &value);
    if (rc == -ETIMEDOUT) {
        event_signal(&unblock);
        cr_assert_eq(task_wait_status(t, -1, NULL), 0);
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
        cr_assert_eq(task_wait_status(h[i], WAIT_DEADLINE_NS, &value), 0);
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
        cr_assert_eq(task_wait_status(hs[i], WAIT_DEADLINE_NS, NULL), 0);
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
    cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq(value, (void *)10);
    cr_assert_leq(metrics_now(rt).blocking_threads, 1);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.blocking_jobs, 4);
    cr_assert_eq(m.blocking_abandoned, 0);
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
    cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_null(value, "rt_coop_proceed returned false at call %ld in a blocking job",
                   (long)(intptr_t)value);
    finish_runtime(rt, 0);
}

/* ---- rt_spawn_blocking_ex: a release that runs whether the job ran or not ---- */

static struct event ex_gate = EVENT_INIT;
static atomic_int ex_ran, ex_released;

static void *ex_wait_for_gate(void *arg)
{
    (void)arg;
    event_wait_for(&ex_gate, 1);
    return NULL;
}

static void *ex_job(void *arg)
{
    cr_assert_eq(atomic_load(&ex_released), 0, "released before it ran");
    atomic_fetch_add(&ex_ran, 1);
    return arg;
}

static void ex_release(void *arg)
{
    cr_assert_eq(arg, &ex_released);
    atomic_fetch_add(&ex_released, 1);
}

Test(blocking, spawn_blocking_ex_releases_after_the_job_or_instead_of_it)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_threads = 1;
    rt_runtime *rt = new_runtime_config(&cfg);
    rt_task *t;
    cr_assert_eq(rt_spawn_blocking_ex(rt, ex_job, ex_release, &ex_released, &t), 0);
    void *v;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq(v, &ex_released);
    cr_assert_eq(atomic_load(&ex_ran), 1);
    cr_assert_eq(atomic_load(&ex_released), 1, "released once, before the join saw the end");

    /* The only pool thread is busy: the next job waits in the queue, and an
     * abort there releases its argument without running it. */
    rt_task *busy, *queued;
    cr_assert_eq(rt_spawn_blocking(rt, ex_wait_for_gate, NULL, &busy), 0);
    cr_assert_eq(rt_spawn_blocking_ex(rt, ex_job, ex_release, &ex_released, &queued), 0);
    rt_task_cancel(queued);
    cr_assert_eq(task_wait_status(queued, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    event_signal(&ex_gate);
    cr_assert_eq(task_wait_status(busy, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(atomic_load(&ex_ran), 1, "the aborted job never ran");
    cr_assert_eq(atomic_load(&ex_released), 2, "its argument was released");
    cr_assert_eq(rt_spawn_blocking_ex(rt, NULL, ex_release, &ex_released, NULL), -EINVAL);
    cr_assert_eq(atomic_load(&ex_released), 2, "a refused spawn releases nothing");
    finish_runtime(rt, 0);
}
