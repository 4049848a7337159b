/* Black-box tests of blocking jobs (rt_spawn_blocking, asyncrt/task.h) that
 * end early: an aborted queued job never runs while a running one keeps its
 * result, shutdown cancels queued jobs and waits for running ones up to
 * blocking_shutdown_ns before abandoning them (or for ever when unbounded),
 * and corner cases: an abort while every thread is busy, an idle time too
 * large for the clock, a job writing to a closed pipe, and a thread that
 * cannot be created. */
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

/* ---- abort ------------------------------------------------------------------ */

static struct event aborted = EVENT_INIT;

struct abort_joiner {
    rt_coro co;
    rt_task *job;
    rt_task_join join;
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
    rt_task_cancel(a->job);
    event_signal(&aborted);
    rt_task_join_init(&a->join, a->job);
    RT_AWAIT(&a->co, cx, &a->join);
    if (a->join.value != NULL)
        RT_RETURN(&a->co, out, (intptr_t)INT_MAX);
    RT_RETURN(&a->co, out, (intptr_t)a->join.result);
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
    cr_assert_eq(RT_SPAWN_STATE(rt, abort_joiner_poll, NULL, &a, &joiner), 0);
    cr_assert(event_wait_for(&aborted, 1));
    rt_task *after = spawn_held(rt, 2);

    rt_task_cancel(queued);
    rt_task_cancel(queued);      /* twice is fine */
    rt_task_cancel(running_job); /* running: cannot be interrupted */
    for (int i = 0; i < 4; i++)
        event_signal(&release);

    void *value = NULL;
    cr_assert_eq(task_wait_status(running_job, WAIT_DEADLINE_NS, &value), 0,
                 "an aborted running job must keep its result");
    cr_assert_eq(value, (void *)1);
    cr_assert_eq(task_wait_status(after, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq(value, (void *)21);
    /* The job after the aborted one has run, so the pool is past it. */
    cr_assert(rt_task_is_finished(queued));
    value = (void *)1;
    cr_assert_eq(task_wait_status(queued, WAIT_DEADLINE_NS, &value), -ECANCELED);
    cr_assert_null(value);
    value = NULL;
    cr_assert_eq(task_wait_status(joiner, WAIT_DEADLINE_NS, &value), 0);
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
    cr_assert_eq(task_wait_status(q1, WAIT_DEADLINE_NS, &value), -ECANCELED);
    cr_assert_null(value);
    cr_assert_eq(task_wait_status(q2, WAIT_DEADLINE_NS, &value), -ECANCELED);

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
    cr_assert_eq(task_wait_status(job, WAIT_DEADLINE_NS, &value), 0,
                 "a job that finished during shutdown keeps its result");
    cr_assert_eq(value, (void *)1);
    rt_metrics m = metrics_now(rt);
    cr_assert_eq(m.blocking_abandoned, 0);
    cr_assert_eq(m.alive, 0);
    cr_assert_eq(rt_runtime_free(rt), 0);
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
    rt_task_cancel(queued);
    void *value = (void *)1;
    cr_assert_eq(task_wait_status(queued, WAIT_DEADLINE_NS, &value), -ECANCELED,
                 "the aborted queued job waited for the busy thread");
    cr_assert_null(value);
    cr_assert_eq(atomic_load(&running), 1, "the held job was disturbed");
    event_signal(&release);
    cr_assert_eq(task_wait_status(held, WAIT_DEADLINE_NS, &value), 0);
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
    cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq(value, (void *)42);
    /* The thread is idle now; the pool must still answer. */
    for (int i = 0; i < 10; i++) {
        cr_assert_eq(rt_spawn_blocking(rt, quick_job, (void *)(uintptr_t)i, &h), 0);
        cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, &value), 0);
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
    cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq((intptr_t)value, -EPIPE);
    close(sigpipe_fds[1]);
    finish_runtime(rt, 0);
}

#if !defined(TEST_HAVE_LSAN) && !defined(TEST_HAVE_TSAN) && !defined(TEST_UNDER_EMULATOR)
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
#if defined(TEST_HAVE_LSAN) || defined(TEST_HAVE_TSAN) || defined(TEST_UNDER_EMULATOR)
    /* The sanitizers reserve terabytes of address space, and qemu-user keeps
     * the limit for itself (support.h): an address-space limit cannot be used
     * to make thread creation fail there. */
    cr_log_info("skipped under a sanitizer or an emulator");
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
    cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq(value, (void *)2);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.blocking_jobs, 1, "the refused job was counted");
#endif
}
