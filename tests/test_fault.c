/* Fault injection: real scenarios run once for every resource request they
 * make, with that request failed, and again with every request from it on
 * failed (builds with -Dfault_injection=true; src/base/fault.h).
 *
 * Each case runs in a process of its own (fault_case.c, which says what it
 * checks), so that a crash, a hang or a leak belongs to exactly one case and
 * LeakSanitizer sees a process with nothing else in it. A case that runs past
 * CASE_DEADLINE_S is killed and reported as a hang.
 *
 * The request counter is shared by all the runtime's threads, so the Nth
 * request is not always the same call; the cases cover positions in a run,
 * and each report names the call that failed first. */
#define _GNU_SOURCE /* pipe2 */
#include "support.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault_report.h"

#define CASE_DEADLINE_S 15

extern char **environ;

/* Reads the case's report into *rep (*got counts the bytes so far) until
 * the pipe reaches its end, which happens when the case exits. False when
 * timeout_ms passes first. */
static bool read_report(int fd, struct fault_report *rep, size_t *got, int timeout_ms)
{
    int64_t deadline = rt_now_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        int64_t left_ms = (deadline - rt_now_ns()) / 1000000;
        if (left_ms <= 0)
            return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)left_ms);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        char extra[64];
        ssize_t n = *got < sizeof *rep ? read(fd, (char *)rep + *got, sizeof *rep - *got)
                                       : read(fd, extra, sizeof extra);
        if (n == 0)
            return true; /* end of file: the case has exited */
        if (n > 0 && *got < sizeof *rep)
            *got += (size_t)n;
    }
}

/* Runs one case in a process of its own; returns its report, with the
 * problem filled in for a crash, a leak or a hang. */
static struct fault_report spawn_case(const char *scenario, uint64_t nth, bool persistent)
{
    struct fault_report rep = {0};
    const char *exe = getenv("FAULT_CASE");
    cr_assert_not_null(exe, "FAULT_CASE names the fault_case program (tests/meson.build)");
    char n[32];
    snprintf(n, sizeof n, "%llu", (unsigned long long)nth);
    char *argv[] = {(char *)exe, (char *)scenario, n, persistent ? "--persistent" : NULL, NULL};
    int fds[2];
    cr_assert_eq(pipe2(fds, O_CLOEXEC), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], FAULT_REPORT_FD);
    pid_t pid;
    int err = posix_spawn(&pid, exe, &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    cr_assert_eq(err, 0, "posix_spawn %s: %s", exe, strerror(err));
    /* The report pipe's end of file says the case has exited (it holds the
     * only write end): wait for that, not for time to pass. */
    size_t got = 0;
    bool hung = !read_report(fds[0], &rep, &got, CASE_DEADLINE_S * 1000);
    if (hung) {
        /* SIGTERM first: the case then reports the request it failed. */
        kill(pid, SIGTERM);
        if (!read_report(fds[0], &rep, &got, 2000))
            kill(pid, SIGKILL);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    if (hung)
        snprintf(rep.problem, sizeof rep.problem, "hung for %d s", CASE_DEADLINE_S);
    else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT)
        snprintf(rep.problem, sizeof rep.problem, "aborted (a sanitizer's report is above)");
    else if (got != sizeof rep || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char reported[128];
        snprintf(reported, sizeof reported, "%.100s", got == sizeof rep ? rep.problem : "");
        snprintf(rep.problem, sizeof rep.problem, "%s %d%s%s%s",
                 WIFSIGNALED(status) ? "killed by signal" : "exit status",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                 WIFEXITED(status) && WEXITSTATUS(status) == 23 ? " (LeakSanitizer)" : "",
                 reported[0] != '\0' ? "; " : "", reported);
    }
    return rep;
}

/* Every case of one scenario: once without failures to count its requests,
 * then each position failed once and failed from there on. */
static void run_scenario(const char *name)
{
    struct fault_report clean = spawn_case(name, 0, false);
    cr_assert_str_empty(clean.problem, "%s without faults: %s", name, clean.problem);
    cr_assert_gt(clean.calls, 0);
    uint64_t cases = 0, bad = 0, failures = 0;
    /* Distinct first-failed sites, for the coverage line. */
    char sites[128][96];
    unsigned nsites = 0;
    for (int mode = 0; mode < 2; mode++) {
        for (uint64_t n = 1; n <= clean.calls; n++) {
            struct fault_report rep = spawn_case(name, n, mode == 1);
            cases++;
            failures += rep.failed;
            if (rep.failed > 0) {
                unsigned i = 0;
                while (i < nsites && strcmp(sites[i], rep.site) != 0)
                    i++;
                if (i == nsites && nsites < 128)
                    snprintf(sites[nsites++], sizeof sites[0], "%s", rep.site);
            }
            if (rep.problem[0] != '\0') {
                bad++;
                fprintf(stderr,
                        "fault injection: %s, request %llu failed %s: first failed at %s: %s\n",
                        name, (unsigned long long)n, mode == 1 ? "and every later one" : "once",
                        rep.site, rep.problem);
            }
        }
    }
    fprintf(stderr,
            "fault injection: %s: %llu requests in a clean run, %llu cases (each failed once and "
            "from there on), %llu requests failed, %u distinct call sites failed, %llu cases "
            "went wrong\n",
            name, (unsigned long long)clean.calls, (unsigned long long)cases,
            (unsigned long long)failures, nsites, (unsigned long long)bad);
    cr_expect_eq(bad, 0, "%s: %llu of %llu cases went wrong (details above)", name,
                 (unsigned long long)bad, (unsigned long long)cases);
}

TestSuite(fault, .timeout = 1800);

Test(fault, runtime_start_and_stop)
{
    run_scenario("runtime");
}

Test(fault, spawning_with_joins_aborts_and_foreign_waits)
{
    run_scenario("spawn");
}

Test(fault, sleeps_timeouts_and_intervals)
{
    run_scenario("timers");
}

Test(fault, a_tcp_exchange)
{
    run_scenario("tcp");
}

Test(fault, channels_and_oneshots)
{
    run_scenario("channel");
}

Test(fault, a_task_group)
{
    run_scenario("group");
}

Test(fault, the_blocking_pool)
{
    run_scenario("blocking");
}

Test(fault, shutdown_with_work_in_flight)
{
    run_scenario("shutdown");
}

Test(fault, fibers_whose_stacks_cannot_be_mapped)
{
    run_scenario("fiber");
}

Test(fault, a_pipe_adopted_with_rt_io_open)
{
    run_scenario("pipe");
}

Test(fault, a_line_through_buffers_and_a_signal_to_a_listener)
{
    run_scenario("lines");
}

Test(fault, a_child_process_with_both_pipes)
{
    run_scenario("process");
}

Test(fault, a_descriptor_passed_over_a_unix_socket_pair)
{
    run_scenario("passing");
}

Test(fault, task_dumps_on_a_runtime_with_every_diagnostic_on)
{
    run_scenario("diag");
}
