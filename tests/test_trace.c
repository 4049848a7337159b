/* Black-box tests of the trace recorder (asyncrt/trace.h): a known workload
 * traced from start to stop gives a valid Chrome trace with exactly its
 * polls, its wakes with their flows, balanced slices and named tracks; a
 * trace stopped while tasks keep running is still balanced; shutdown writes
 * an active trace; full buffers drop and count; another runtime's threads
 * record nothing; and the error paths. The file's contents are checked by
 * tests/trace_check.py (TRACE_CHECK, run with TRACE_PYTHON). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <errno.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

TestSuite(trace, .timeout = 300, .fini = fail_on_leaks);

/* ---- helpers ------------------------------------------------------------- */

/* A temporary folder for the trace files of one test. */
struct scratch {
    char dir[64];
    char path[128];
};

static void scratch_init(struct scratch *s)
{
    snprintf(s->dir, sizeof s->dir, "/tmp/asyncrt-trace-XXXXXX");
    cr_assert_not_null(mkdtemp(s->dir), "mkdtemp: %s", strerror(errno));
    snprintf(s->path, sizeof s->path, "%s/trace.json", s->dir);
}

static void scratch_remove(struct scratch *s)
{
    unlink(s->path);
    rmdir(s->dir);
}

/* Runs tests/trace_check.py on `file` with the given options (NULL-ended)
 * and fails the test unless it passes. */
static void check_trace(const char *file, ...)
{
    const char *script = getenv("TRACE_CHECK");
    const char *python = getenv("TRACE_PYTHON");
    if (script == NULL || python == NULL)
        cr_skip_test("TRACE_CHECK and TRACE_PYTHON are not set (run through meson test)");
    const char *argv[32] = {python, script, file};
    int argc = 3;
    va_list ap;
    va_start(ap, file);
    for (const char *a; (a = va_arg(ap, const char *)) != NULL && argc < 31;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    pid_t pid;
    int err = posix_spawn(&pid, python, NULL, NULL, (char *const *)argv, environ);
    cr_assert_eq(err, 0, "posix_spawn %s: %s", python, strerror(err));
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "trace_check.py rejected %s (its reasons are above)", file);
}

static rt_runtime *two_workers(void)
{
    return new_runtime(2);
}

/* The workload: each task sleeps once, then yields YIELDS times. Its polls:
 * one that arms the sleep, one after the timer wakes it, one per yield;
 * every poll is counted, so the expected total is exact whatever happens
 * (a sleep already due at its first poll saves one). */
#define TASKS 32
#define YIELDS 20
#define SLEEP_NS (2 * MS)

struct sleeper {
    rt_sleep sleep;
    atomic_ulong *polls;
    bool armed;
    bool slept;
    int yields;
};

static rt_poll sleeper_poll(void *state, rt_context *cx, void **out)
{
    struct sleeper *t = state;
    atomic_fetch_add(t->polls, 1);
    if (!t->slept) {
        if (!t->armed) {
            /* With a runtime at hand it cannot fail; a failure would make
             * the sleep finish at once, which the count absorbs. */
            (void)rt_sleep_init(&t->sleep, NULL, SLEEP_NS);
            t->armed = true;
        }
        if (RT_POLL_OP(&t->sleep, cx) == RT_PENDING)
            return RT_PENDING;
        t->slept = true;
    }
    if (t->yields < YIELDS) {
        t->yields++;
        return rt_yield(cx);
    }
    *out = NULL;
    return RT_READY;
}

static void sleeper_drop(void *state)
{
    struct sleeper *t = state;
    if (t->armed)
        RT_DROP(&t->sleep);
}

static void spawn_sleepers(rt_runtime *rt, atomic_ulong *polls, rt_task **tasks)
{
    for (int i = 0; i < TASKS; i++) {
        struct sleeper s = {.polls = polls};
        cr_assert_eq(rt_spawn(rt, sleeper_poll, sleeper_drop, &s, sizeof s, &tasks[i]), 0);
    }
}

static void wait_all(rt_task **tasks, int n)
{
    for (int i = 0; i < n; i++)
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, NULL), 0);
}

static void run_sleepers(rt_runtime *rt, atomic_ulong *polls)
{
    rt_task *tasks[TASKS];
    spawn_sleepers(rt, polls, tasks);
    wait_all(tasks, TASKS);
}

static const char *num(char *buf, size_t size, unsigned long n)
{
    snprintf(buf, size, "%lu", n);
    return buf;
}

/* ---- a known workload ------------------------------------------------------- */

Test(trace, records_every_poll_wake_and_flow_of_a_known_workload)
{
    struct scratch sc;
    scratch_init(&sc);
    rt_runtime *rt = two_workers();
    atomic_ulong polls = 0;
    cr_assert_eq(rt_trace_start(rt, sc.path), 0);
    run_sleepers(rt, &polls);
    cr_assert_eq(rt_trace_stop(rt), 0);
    finish_runtime(rt, 0);

    unsigned long n = atomic_load(&polls);
    cr_assert_geq(n, (unsigned long)TASKS * (YIELDS + 1));
    char p[32], s[32];
    /* Every task is woken by its timer (a wake on the reactor's track), at
     * least one of which finds it idle; every such wake is followed by a
     * poll, since every task finishes before the stop. */
    check_trace(sc.path, "--workers", "2", "--polls", num(p, sizeof p, n), "--spawns",
                num(s, sizeof s, TASKS), "--min-wakes", "1", "--min-timer-fires", "1",
                "--every-wake-flows", "--no-drops", (char *)NULL);
    scratch_remove(&sc);
}

/* ---- stopping while tasks run ----------------------------------------------- */

static atomic_bool spin_stop;
static struct event spun = EVENT_INIT;

/* Yields until told to stop, signalling every poll. */
static rt_poll spinner_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    event_signal(&spun);
    if (atomic_load(&spin_stop)) {
        *out = NULL;
        return RT_READY;
    }
    return rt_yield(cx);
}

Test(trace, stops_and_restarts_while_tasks_keep_running)
{
    struct scratch sc;
    scratch_init(&sc);
    /* Smaller buffers than the default, since this makes fifty of them. */
    cr_assert_eq(setenv("ASYNCRT_TRACE_EVENTS", "65536", 1), 0);
    rt_runtime *rt = two_workers();
    rt_task *spinners[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(rt_spawn(rt, spinner_poll, NULL, NULL, 0, &spinners[i]), 0);
    for (int round = 0; round < 4; round++) {
        cr_assert_eq(rt_trace_start(rt, sc.path), 0);
        /* A few hundred polls recorded, then stop in the middle of them. */
        cr_assert(event_wait_for(&spun, event_count(&spun) + 200));
        cr_assert_eq(rt_trace_stop(rt), 0);
        /* Events may have been dropped: the spinners fill the buffers fast
         * if this thread is slow to be scheduled. The file stays sound. */
        check_trace(sc.path, "--workers", "2", (char *)NULL);
    }
    /* Quick cycles with no wait between them: starts and stops racing the
     * workers' events (a thread's cached track from the previous recording,
     * recorders inside a stop's wait). The last file must still be sound. */
    for (int round = 0; round < 50; round++) {
        cr_assert_eq(rt_trace_start(rt, sc.path), 0);
        cr_assert_eq(rt_trace_stop(rt), 0);
    }
    check_trace(sc.path, "--workers", "2", (char *)NULL);
    unsetenv("ASYNCRT_TRACE_EVENTS");
    atomic_store(&spin_stop, true);
    wait_all(spinners, 2);
    finish_runtime(rt, 0);
    scratch_remove(&sc);
}

/* ---- shutdown --------------------------------------------------------------- */

Test(trace, shutdown_stops_and_writes_an_active_trace)
{
    struct scratch sc;
    scratch_init(&sc);
    rt_runtime *rt = two_workers();
    atomic_ulong polls = 0;
    cr_assert_eq(rt_trace_start(rt, sc.path), 0);
    run_sleepers(rt, &polls);
    shut_down(rt, 0);
    /* The shutdown has written it: nothing records any more. */
    cr_assert_eq(rt_trace_stop(rt), -ENOENT);
    cr_assert_eq(rt_trace_start(rt, sc.path), -ESHUTDOWN);
    cr_assert_eq(rt_runtime_free(rt), 0);
    char p[32];
    check_trace(sc.path, "--workers", "2", "--polls", num(p, sizeof p, atomic_load(&polls)),
                "--every-wake-flows", (char *)NULL);
    scratch_remove(&sc);
}

/* ---- full buffers ----------------------------------------------------------- */

Test(trace, full_buffers_drop_and_count_the_rest)
{
    struct scratch sc;
    scratch_init(&sc);
    cr_assert_eq(setenv("ASYNCRT_TRACE_EVENTS", "64", 1), 0);
    rt_runtime *rt = two_workers();
    atomic_ulong polls = 0;
    cr_assert_eq(rt_trace_start(rt, sc.path), 0);
    unsetenv("ASYNCRT_TRACE_EVENTS");
    run_sleepers(rt, &polls);
    cr_assert_eq(rt_trace_stop(rt), 0);
    finish_runtime(rt, 0);
    /* 64 records per worker track hold at most 64 poll starts each, far
     * fewer than the workload's (at least TASKS x (YIELDS + 1)). */
    cr_assert_gt(atomic_load(&polls), 2 * 64);
    check_trace(sc.path, "--workers", "2", "--max-polls", "128", "--drops", (char *)NULL);
    scratch_remove(&sc);
}

/* ---- other runtimes --------------------------------------------------------- */

Test(trace, records_nothing_of_another_runtimes_workers_and_reactor)
{
    struct scratch sc;
    scratch_init(&sc);
    rt_runtime *traced = two_workers();
    rt_runtime *other = two_workers();
    atomic_ulong traced_polls = 0, other_polls = 0;
    cr_assert_eq(rt_trace_start(traced, sc.path), 0);
    /* Only one trace per process, whichever runtime asks. */
    cr_assert_eq(rt_trace_start(other, sc.path), -EBUSY);
    cr_assert_eq(rt_trace_stop(other), -ENOENT);
    rt_task *a[TASKS], *b[TASKS];
    spawn_sleepers(traced, &traced_polls, a);
    spawn_sleepers(other, &other_polls, b);
    wait_all(a, TASKS);
    wait_all(b, TASKS);
    cr_assert_eq(rt_trace_stop(traced), 0);
    finish_runtime(other, 0);
    finish_runtime(traced, 0);
    char p[32], s[32];
    /* The spawns are this thread's, a foreign thread for both runtimes: all
     * of them are on "other threads" (asyncrt/trace.h says why). */
    check_trace(sc.path, "--workers", "2", "--polls", num(p, sizeof p, atomic_load(&traced_polls)),
                "--spawns", num(s, sizeof s, 2 * TASKS), "--every-wake-flows", (char *)NULL);
    scratch_remove(&sc);
}

/* ---- errors ----------------------------------------------------------------- */

Test(trace, rejects_bad_arguments_a_second_trace_and_unwritable_paths)
{
    struct scratch sc;
    scratch_init(&sc);
    rt_runtime *rt = two_workers();
    cr_assert_eq(rt_trace_start(NULL, sc.path), -EINVAL);
    cr_assert_eq(rt_trace_start(rt, NULL), -EINVAL);
    cr_assert_eq(rt_trace_stop(NULL), -EINVAL);
    cr_assert_eq(rt_trace_stop(rt), -ENOENT);

    /* A path that cannot be opened: the error, no file, nothing recording. */
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no-such-folder/trace.json", sc.dir);
    cr_assert_eq(rt_trace_start(rt, missing), -ENOENT);
    cr_assert_eq(rt_trace_start(rt, sc.dir), -EISDIR);
    cr_assert_eq(rt_trace_stop(rt), -ENOENT);
    struct stat st;
    cr_assert_eq(stat(missing, &st), -1);

    /* Then a good one works, and a second start is refused while it runs. */
    cr_assert_eq(rt_trace_start(rt, sc.path), 0);
    cr_assert_eq(rt_trace_start(rt, sc.path), -EBUSY);
    cr_assert_eq(rt_trace_stop(rt), 0);
    cr_assert_eq(rt_trace_stop(rt), -ENOENT);
    check_trace(sc.path, "--workers", "2", "--polls", "0", (char *)NULL);
    finish_runtime(rt, 0);
    scratch_remove(&sc);
}
