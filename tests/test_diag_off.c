/* A library built without diagnostics (-Ddiagnostics=false): every function
 * of diag.h and trace.h that needs them says -ENOSYS (after the argument
 * checks its header promises), a configuration that asks for a diagnostic
 * is refused with -ENOSYS and starts nothing, ASYNCRT_STALL_MS is ignored,
 * misuse reports (correctness, not diagnosis) still arrive, and a lost
 * wake-up is not reported while workers keep parking and sweeping. Built
 * only in such a build (tests/meson.build). */
#define _GNU_SOURCE
#include "support.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

TestSuite(diag_off, .fini = fail_on_leaks);

static int count_visit(const rt_task_info *info, void *arg)
{
    (void)info;
    (void)arg;
    return 0;
}

Test(diag_off, every_diagnostic_function_says_enosys)
{
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(rt_runtime_tasks(rt, count_visit, NULL), -ENOSYS);
    cr_assert_eq(rt_runtime_tasks(NULL, count_visit, NULL), -EINVAL);
    cr_assert_eq(rt_runtime_tasks(rt, NULL, NULL), -EINVAL);
    cr_assert_eq(rt_runtime_dump(rt, stderr), -ENOSYS);
    cr_assert_eq(rt_runtime_dump(NULL, stderr), -EINVAL);
    cr_assert_eq(rt_runtime_dump(rt, NULL), -EINVAL);
    cr_assert_eq(rt_runtime_dump_fd(rt, 2), -ENOSYS);
    cr_assert_eq(rt_runtime_dump_fd(rt, -1), -EBADF);
    cr_assert_eq(rt_runtime_dump_fd(NULL, 2), -EINVAL);
    cr_assert_eq(rt_trace_start(rt, "/dev/null"), -ENOSYS);
    cr_assert_eq(rt_trace_start(NULL, "/dev/null"), -EINVAL);
    cr_assert_eq(rt_trace_start(rt, NULL), -EINVAL);
    cr_assert_eq(rt_trace_stop(rt), -ENOSYS);
    cr_assert_eq(rt_trace_stop(NULL), -EINVAL);
    finish_runtime(rt, 0);
}

Test(diag_off, a_configuration_asking_for_a_diagnostic_is_refused)
{
    rt_config cfg;
    rt_runtime *rt = (rt_runtime *)1;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.stall_ns = 100 * MS;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -ENOSYS, "a stall watchdog");
    cr_assert_null(rt);
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.poll_timing = 1;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -ENOSYS, "poll timing");
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.dump_signal = SIGQUIT;
    cfg.dump_fd = 2;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -ENOSYS, "a dump on a signal");
    /* The variable is for diagnosing a program: it does not stop one. */
    cr_assert_eq(setenv("ASYNCRT_STALL_MS", "100", 1), 0);
    rt = new_runtime(1);
    cr_assert_eq(unsetenv("ASYNCRT_STALL_MS"), 0);
    finish_runtime(rt, 0);
}

static struct {
    pthread_mutex_t mu;
    int misuse;
    int lost;
} seen = {PTHREAD_MUTEX_INITIALIZER, 0, 0};

static void on_report(const rt_report *rep, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&seen.mu);
    if (rep->kind == RT_REPORT_MISUSE)
        seen.misuse++;
    if (rep->kind == RT_REPORT_LOST_WAKEUP)
        seen.lost++;
    pthread_mutex_unlock(&seen.mu);
}

static rt_runtime *reporting_runtime(void)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.report = on_report;
    return new_runtime_config(&cfg);
}

static rt_poll drop_sender_twice_poll(void *p, rt_context *cx, void **out)
{
    (void)cx;
    rt_chan *ch = *(rt_chan **)p;
    rt_chan_sender_drop(ch);
    rt_chan_sender_drop(ch); /* one more than it holds: misuse */
    *out = NULL;
    return RT_READY;
}

Test(diag_off, misuse_is_still_reported)
{
    rt_runtime *rt = reporting_runtime();
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    cr_assert_eq(rt_block_on(rt, drop_sender_twice_poll, NULL, &ch, sizeof ch, NULL, NULL), 0);
    pthread_mutex_lock(&seen.mu);
    int misuse = seen.misuse;
    pthread_mutex_unlock(&seen.mu);
    cr_assert_eq(misuse, 1, "the release beyond the count was reported %d times", misuse);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* Pending for ever, with no waker kept anywhere: a lost wake-up, which a
 * build with diagnostics would report. */
static rt_poll forgetful_poll(void *p, rt_context *cx, void **out)
{
    (void)p;
    (void)cx;
    (void)out;
    return RT_PENDING;
}

static rt_poll short_poll(void *p, rt_context *cx, void **out)
{
    (void)p;
    (void)cx;
    *out = NULL;
    return RT_READY;
}

Test(diag_off, idle_sweeps_run_and_report_no_lost_wakeup)
{
    rt_runtime *rt = reporting_runtime();
    cr_assert_eq(rt_spawn(rt, forgetful_poll, NULL, NULL, 0, NULL), 0);
    /* Rounds of short tasks with idle time between them: each worker parks
     * (and sweeps) between rounds. */
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 500; i++)
            cr_assert_eq(rt_spawn(rt, short_poll, NULL, NULL, 0, NULL), 0);
        cr_assert_eq(rt_block_on(rt, short_poll, NULL, NULL, 0, NULL, NULL), 0);
        cr_assert(wait_all_workers_parked(rt), "the workers never parked");
    }
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.completed, 20 * 501, "completed %llu", (unsigned long long)m.completed);
    pthread_mutex_lock(&seen.mu);
    int lost = seen.lost;
    pthread_mutex_unlock(&seen.mu);
    cr_assert_eq(lost, 0, "a build without diagnostics reported a lost wake-up");
    finish_runtime(rt, 1); /* the forgetful task, cancelled by shutdown */
}
