/* Child processes, for real: /bin/true and /bin/false, cat through pipes,
 * the environment and the working directory, each standard descriptor
 * mode, descriptors that are and are not inherited, a child killed, a
 * program that does not exist, the wait without a pidfd, and no zombie left
 * when the waiting task is aborted or the runtime shuts down. */
#define _GNU_SOURCE /* pipe2, setenv */
#include "support.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

TestSuite(process, .fini = fail_on_leaks);

/* A task that owns a child: writes `input` to its standard input (if
 * piped), closes it, reads its standard output (if piped) to the end, then
 * waits for it. Returns the exit code, or 1000 + the signal; the output is
 * in `out`. The drop frees the process (killing a child still running). */
struct runner {
    rt_coro co;
    rt_process *child;
    const char *input;
    struct event *waiting; /* signalled when the wait is pending */
    rt_io_write_all wr;
    rt_io_read rd;
    rt_process_exited exit;
    char out[256];
    size_t got;
};

static void runner_drop(void *state)
{
    struct runner *r = state;
    rt_coro_cleanup(&r->co);
    RT_DROP(&r->exit);
    rt_process_free(r->child);
}

static rt_poll runner_poll(void *state, rt_context *cx, void **out)
{
    struct runner *r = state;
    RT_CORO_BEGIN(&r->co);
    if (rt_process_stdio(r->child, 0) != NULL) {
        rt_io_write_all_init(&r->wr, rt_process_stdio(r->child, 0), r->input, strlen(r->input));
        RT_AWAIT(&r->co, cx, &r->wr);
        cr_assert_eq(r->wr.result, (int64_t)strlen(r->input));
        cr_assert_eq(rt_process_close_stdio(r->child, 0), 0);
    }
    while (rt_process_stdio(r->child, 1) != NULL) {
        rt_io_read_init(&r->rd, rt_process_stdio(r->child, 1), r->out + r->got,
                        sizeof r->out - 1 - r->got);
        RT_AWAIT(&r->co, cx, &r->rd);
        cr_assert_geq(r->rd.result, 0);
        if (r->rd.result == 0)
            break;
        r->got += (size_t)r->rd.result;
    }
    rt_process_exited_init(&r->exit, r->child);
    RT_AWAIT_POLL(&r->co, note_pending(RT_POLL_OP(&r->exit, cx), r->waiting));
    cr_assert_eq(r->exit.result, 0);
    RT_RETURN(&r->co, out, (intptr_t)(r->exit.signal != 0 ? 1000 + r->exit.signal : r->exit.code));
    RT_CORO_END(&r->co, out);
}

static struct event waiting = EVENT_INIT;

/* Spawns argv with the given modes and runs it in a runner task. */
static rt_task *start(rt_runtime *rt, const char *const *argv, int in, int outm, const char *input)
{
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = argv;
    o.stdin_mode = in;
    o.stdout_mode = outm;
    struct runner r = {.input = input, .waiting = &waiting};
    cr_assert_eq(rt_process_spawn(rt, &o, &r.child), 0, "spawning %s", argv[0]);
    cr_assert_gt(rt_process_pid(r.child), 0);
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, runner_poll, runner_drop, &r, &t), 0);
    return t;
}

static intptr_t finish(rt_task *t)
{
    void *v = NULL;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), 0);
    return (intptr_t)v;
}

/* Runs argv to its end (its output to /dev/null) and returns its exit code;
 * tests that care about output check it in the shell command itself. */
static intptr_t run(rt_runtime *rt, const char *const *argv)
{
    return finish(start(rt, argv, RT_STDIO_INHERIT, RT_STDIO_NULL, ""));
}

Test(process, true_and_false_report_their_exit_codes)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    cr_assert_eq(run(rt, (const char *const[]){"/bin/true", NULL}), 0);
    cr_assert_eq(run(rt, (const char *const[]){"false", NULL}), 1, "found in PATH");
    cr_assert_eq(run(rt, (const char *const[]){"sh", "-c", "exit 42", NULL}), 42);
    cr_assert_eq(count_fds(), fds, "every descriptor of the children was closed");
    finish_runtime(rt, 0);
}

/* cat through both pipes, checked in the shell: the output must be the
 * input, which the task compares itself. */
struct cat_check {
    rt_coro co;
    rt_process *child;
    rt_io_write_all wr;
    rt_io_read rd;
    rt_process_exited exit;
    char out[64];
    size_t got;
};

static void cat_check_drop(void *state)
{
    struct cat_check *c = state;
    rt_coro_cleanup(&c->co);
    rt_process_free(c->child);
}

static rt_poll cat_check_poll(void *state, rt_context *cx, void **out)
{
    static const char text[] = "through a child\nand back\n";
    struct cat_check *c = state;
    RT_CORO_BEGIN(&c->co);
    rt_io_write_all_init(&c->wr, rt_process_stdio(c->child, 0), text, strlen(text));
    RT_AWAIT(&c->co, cx, &c->wr);
    cr_assert_eq(c->wr.result, (int64_t)strlen(text));
    cr_assert_eq(rt_process_close_stdio(c->child, 0), 0);
    cr_assert_eq(rt_process_close_stdio(c->child, 0), -EBADF, "closed already");
    for (;;) {
        rt_io_read_init(&c->rd, rt_process_stdio(c->child, 1), c->out + c->got,
                        sizeof c->out - 1 - c->got);
        RT_AWAIT(&c->co, cx, &c->rd);
        if (c->rd.result <= 0)
            break;
        c->got += (size_t)c->rd.result;
    }
    cr_assert_str_eq(c->out, text);
    rt_process_exited_init(&c->exit, c->child);
    RT_AWAIT(&c->co, cx, &c->exit);
    cr_assert_eq(c->exit.result, 0);
    cr_assert_eq(c->exit.code, 0);
    cr_assert_eq(c->exit.signal, 0);
    RT_CORO_END(&c->co, out);
}

Test(process, cat_through_pipes_gives_back_its_input)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = (const char *const[]){"cat", NULL};
    o.stdin_mode = o.stdout_mode = RT_STDIO_PIPE;
    struct cat_check c = {0};
    cr_assert_eq(rt_process_spawn(rt, &o, &c.child), 0);
    cr_assert_not_null(rt_process_stdio(c.child, 0));
    cr_assert_not_null(rt_process_stdio(c.child, 1));
    cr_assert_null(rt_process_stdio(c.child, 2), "stderr is inherited");
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, cat_check_poll, cat_check_drop, &c, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(process, environment_directory_and_descriptor_modes)
{
    rt_runtime *rt = new_runtime(2);
    rt_process_options o;
    rt_process_options_init(&o);
    /* The environment given replaces the parent's; the directory is set. */
    o.argv =
        (const char *const[]){"/bin/sh", "-c", "test \"$FOO\" = bar && test \"$(pwd)\" = /", NULL};
    o.envp = (const char *const[]){"FOO=bar", "PATH=/usr/bin:/bin", NULL};
    o.cwd = "/";
    o.stdout_mode = RT_STDIO_NULL;
    struct runner r = {.waiting = &waiting};
    cr_assert_eq(rt_process_spawn(rt, &o, &r.child), 0);
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, runner_poll, runner_drop, &r, &t), 0);
    cr_assert_eq(finish(t), 0, "FOO and the directory as given");
    /* Each mode of descriptor 1, seen from the child. */
    const char *const probe[] = {"/bin/sh", "-c", "test -e /proc/self/fd/1", NULL};
    cr_assert_eq(finish(start(rt, probe, RT_STDIO_INHERIT, RT_STDIO_CLOSE, "")), 1,
                 "RT_STDIO_CLOSE closes it");
    cr_assert_eq(finish(start(rt, probe, RT_STDIO_INHERIT, RT_STDIO_NULL, "")), 0);
    cr_assert_eq(
        finish(start(rt, (const char *const[]){"/bin/sh", "-c", "test -c /proc/self/fd/1", NULL},
                     RT_STDIO_INHERIT, RT_STDIO_NULL, "")),
        0, "RT_STDIO_NULL is /dev/null, a character device");
    finish_runtime(rt, 0);
}

Test(process, only_descriptors_without_close_on_exec_are_inherited)
{
    rt_runtime *rt = new_runtime(1);
    int kept[2], hidden[2];
    cr_assert_eq(pipe(kept), 0);
    cr_assert_eq(pipe2(hidden, O_CLOEXEC), 0);
    char script[160];
    snprintf(script, sizeof script, "test -e /proc/self/fd/%d && ! test -e /proc/self/fd/%d",
             kept[0], hidden[0]);
    cr_assert_eq(finish(start(rt, (const char *const[]){"/bin/sh", "-c", script, NULL},
                              RT_STDIO_INHERIT, RT_STDIO_NULL, "")),
                 0, "inherited: the plain pipe only");
    close(kept[0]), close(kept[1]), close(hidden[0]), close(hidden[1]);
    finish_runtime(rt, 0);
}

Test(process, a_killed_child_reports_its_signal)
{
    rt_runtime *rt = new_runtime(2);
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = (const char *const[]){"sleep", "30", NULL};
    struct runner r = {.waiting = &waiting};
    cr_assert_eq(rt_process_spawn(rt, &o, &r.child), 0);
    rt_process *child = r.child;
    unsigned long seen = event_count(&waiting);
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, runner_poll, runner_drop, &r, &t), 0);
    cr_assert(event_wait_for(&waiting, seen + 1), "the wait never waited");
    cr_assert_eq(rt_process_kill(child, SIGTERM), 0);
    cr_assert_eq(finish(t), 1000 + SIGTERM);
    finish_runtime(rt, 0);
}

Test(process, bad_programs_and_arguments_are_refused)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    rt_process_options o;
    rt_process_options_init(&o);
    rt_process *p;
    cr_assert_eq(rt_process_spawn(rt, &o, &p), -EINVAL, "no argv");
    cr_assert_null(p);
#ifndef TEST_UNDER_EMULATOR /* support.h: no exec failure is seen under qemu-user */
    o.argv = (const char *const[]){"/no/such/program", NULL};
    cr_assert_eq(rt_process_spawn(rt, &o, &p), -ENOENT);
    o.argv = (const char *const[]){"no-such-program-in-path", NULL};
    cr_assert_eq(rt_process_spawn(rt, &o, &p), -ENOENT);
    o.argv = (const char *const[]){"/", NULL};
    cr_assert_eq(rt_process_spawn(rt, &o, &p), -EACCES, "a directory");
    o.argv = (const char *const[]){"/bin/true", NULL};
    o.cwd = "/no/such/directory";
    cr_assert_eq(rt_process_spawn(rt, &o, &p), -ENOENT);
    o.cwd = NULL;
#endif
    o.argv = (const char *const[]){"/bin/true", NULL};
    o.stdout_mode = 7;
    cr_assert_eq(rt_process_spawn(rt, &o, &p), -EINVAL);
    o.stdout_mode = RT_STDIO_PIPE;
    cr_assert_eq(rt_process_spawn(rt, NULL, &p), -EINVAL);
    cr_assert_eq(rt_process_spawn(rt, &o, NULL), -EINVAL);
    cr_assert_eq(rt_process_kill(NULL, SIGTERM), -EINVAL);
    cr_assert_eq(rt_process_close_stdio(NULL, 0), -EINVAL);
    cr_assert_null(rt_process_stdio(NULL, 1));
    rt_process_exited w;
    cr_assert_eq(rt_process_exited_init(&w, NULL), -EINVAL);
    cr_assert_eq(w.result, -EINVAL);
    rt_process_free(NULL);
    cr_assert_eq(count_fds(), fds, "a refused spawn left a descriptor");
    finish_runtime(rt, 0);
}

/* No zombie: /proc has no entry for the pid, or one that is not a zombie
 * (the pid may have been reused). */
static void assert_not_a_zombie(pid_t pid)
{
    char path[64], stat[256] = {0};
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    const char *state = n > 0 ? strrchr(stat, ')') : NULL;
    cr_assert(state == NULL || state[2] != 'Z', "pid %d is a zombie: %s", (int)pid, stat);
}

Test(process, no_zombie_when_the_waiting_task_is_aborted_or_shut_down)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    const char *const sleeper[] = {"sleep", "30", NULL};
    unsigned long seen = event_count(&waiting);
    rt_task *t = start(rt, sleeper, RT_STDIO_INHERIT, RT_STDIO_INHERIT, "");
    cr_assert(event_wait_for(&waiting, seen + 1));
    /* The task's state is its own: find the child through /proc instead of
     * the runner's copy. The task is aborted while it waits; its drop
     * kills and reaps the child. */
    rt_task_cancel(t);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(count_fds(), fds);

    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = sleeper;
    struct runner r = {.waiting = &waiting};
    cr_assert_eq(rt_process_spawn(rt, &o, &r.child), 0);
    pid_t pid = rt_process_pid(r.child);
    seen = event_count(&waiting);
    cr_assert_eq(RT_SPAWN_STATE(rt, runner_poll, runner_drop, &r, &t), 0);
    cr_assert(event_wait_for(&waiting, seen + 1));
    rt_task_drop(t);
    shut_down(rt, 1); /* the runner's drop frees the process */
    assert_not_a_zombie(pid);
    cr_assert_eq(rt_runtime_free(rt), 0);
}

Test(process, the_wait_works_without_a_pidfd)
{
    cr_assert_eq(setenv("ASYNCRT_NO_PIDFD", "1", 1), 0);
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(run(rt, (const char *const[]){"sh", "-c", "exit 3", NULL}), 3);
    cr_assert_eq(run(rt, (const char *const[]){"/bin/true", NULL}), 0);
    finish_runtime(rt, 0);
    unsetenv("ASYNCRT_NO_PIDFD");
}

Test(process, freeing_a_running_child_kills_and_reaps_it)
{
    rt_runtime *rt = new_runtime(1);
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = (const char *const[]){"sleep", "30", NULL};
    o.stdout_mode = RT_STDIO_PIPE;
    rt_process *p;
    cr_assert_eq(rt_process_spawn(rt, &o, &p), 0);
    pid_t pid = rt_process_pid(p);
    rt_process_free(p);
    assert_not_a_zombie(pid);
    cr_assert_eq(kill(pid, 0), -1, "the child is gone");
    finish_runtime(rt, 0);
}
