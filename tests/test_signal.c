/* Signals sent for real (raise, kill, pthread_kill) to listeners: each
 * listener sees every arrival, arrivals between receives are counted, a
 * signal blocked in every thread still arrives (signalfd), one delivered to a
 * user thread that does not block it still arrives (the handler), a process
 * that started with SIGINT ignored receives it, the previous action comes
 * back with the last listener, and no descriptor is left behind. */
#include "support.h"

#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(signal, .fini = fail_on_leaks);

/* A task that receives from its listener once, reporting each wait, and
 * returns the receive's result; it frees the listener when it ends. */
struct receiver {
    rt_coro co;
    rt_signal *sig;
    struct event *pending;
    rt_signal_recv recv;
};

static void receiver_drop(void *state)
{
    struct receiver *r = state;
    rt_coro_cleanup(&r->co);
    RT_DROP(&r->recv);
    rt_signal_free(r->sig);
}

static rt_poll receiver_poll(void *state, rt_context *cx, void **out)
{
    struct receiver *r = state;
    RT_CORO_BEGIN(&r->co);
    rt_signal_recv_init(&r->recv, r->sig);
    RT_AWAIT_POLL(&r->co, note_pending(RT_POLL_OP(&r->recv, cx), r->pending));
    RT_RETURN(&r->co, out, (intptr_t)r->recv.result);
    RT_CORO_END(&r->co, out);
}

/* Starts a receiver of signo and returns once it waits. */
static rt_task *start_receiver(rt_runtime *rt, int signo)
{
    static struct event pending = EVENT_INIT;
    struct receiver r = {.pending = &pending};
    cr_assert_eq(rt_signal_new(rt, signo, &r.sig), 0);
    unsigned long seen = event_count(&pending);
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, receiver_poll, receiver_drop, &r, &t), 0);
    cr_assert(event_wait_for(&pending, seen + 1));
    return t;
}

static intptr_t receiver_result(rt_task *t)
{
    void *v = NULL;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), 0);
    return (intptr_t)v;
}

/* Awaits one operation prepared by the test. */
struct await_op {
    rt_coro co;
    rt_future *op;
};

static rt_poll await_op_poll(void *state, rt_context *cx, void **out)
{
    struct await_op *a = state;
    RT_CORO_BEGIN(&a->co);
    RT_AWAIT_FUTURE(&a->co, cx, a->op);
    RT_CORO_END(&a->co, out);
}

static void run_op(rt_runtime *rt, rt_future *op)
{
    struct await_op a = {.op = op};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, await_op_poll, rt_coro_drop, &a, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
}

Test(signal, bad_signals_and_arguments_are_einval)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    rt_signal *s;
    const int bad[] = {0, -1, _NSIG, SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE, SIGILL, 32};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(rt_signal_new(rt, bad[i], &s), -EINVAL, "signal %d", bad[i]);
        cr_assert_null(s);
    }
    cr_assert_eq(rt_signal_new(rt, SIGUSR1, NULL), -EINVAL);
    cr_assert_eq(rt_signal_new(NULL, SIGUSR1, &s), -EINVAL, "no runtime on this thread");
    rt_signal_recv op;
    cr_assert_eq(rt_signal_recv_init(&op, NULL), -EINVAL);
    cr_assert_eq(op.result, -EINVAL);
    cr_assert_eq(rt_signal_number(NULL), 0);
    rt_signal_free(NULL);
    cr_assert_eq(count_fds(), fds, "a refused listener left a descriptor");
    finish_runtime(rt, 0);
}

Test(signal, every_listener_sees_every_arrival)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    rt_task *a = start_receiver(rt, SIGUSR1);
    rt_task *b = start_receiver(rt, SIGUSR1);
    cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    cr_assert_geq(receiver_result(a), 1);
    cr_assert_geq(receiver_result(b), 1);
    cr_assert_eq(count_fds(), fds, "the listeners' descriptors are closed");
    finish_runtime(rt, 0);
}

Test(signal, arrivals_between_receives_are_counted_and_a_dropped_receive_loses_none)
{
    rt_runtime *rt = new_runtime(1);
    rt_signal *s;
    cr_assert_eq(rt_signal_new(rt, SIGUSR2, &s), 0);
    cr_assert_eq(rt_signal_number(s), SIGUSR2);
    /* raise() runs the handler on this thread before it returns. */
    for (int i = 0; i < 3; i++)
        cr_assert_eq(raise(SIGUSR2), 0);
    static rt_signal_recv recv;
    static rt_timeout limit;
    rt_signal_recv_init(&recv, s);
    run_op(rt, &recv.future);
    cr_assert_eq(recv.result, 3);
    rt_signal_recv_init(&recv, s);
    rt_timeout_init(&limit, rt, &recv.future, 5 * MS);
    run_op(rt, &limit.future);
    cr_assert_eq(limit.result, -ETIMEDOUT, "nothing arrived since");
    cr_assert_eq(recv.result, -ECANCELED);
    cr_assert_eq(raise(SIGUSR2), 0);
    rt_signal_recv_init(&recv, s);
    run_op(rt, &recv.future);
    cr_assert_eq(recv.result, 1);
    rt_signal_recv second;
    rt_signal_recv_init(&recv, s);
    cr_assert_eq(rt_signal_recv_init(&second, s), -EBUSY, "one receive at a time");
    RT_DROP(&recv);
    rt_signal_free(s);
    finish_runtime(rt, 0);
}

Test(signal, a_signal_blocked_in_every_thread_arrives_through_the_signalfd)
{
    /* Blocked before the runtime exists: its threads inherit the mask, so
     * no thread of the process can run a handler for it. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    cr_assert_eq(pthread_sigmask(SIG_BLOCK, &set, &old), 0);
    rt_runtime *rt = new_runtime(2);
    rt_task *t = start_receiver(rt, SIGUSR1);
    cr_assert_eq(kill(getpid(), SIGUSR1), 0);
    cr_assert_geq(receiver_result(t), 1);
    sigset_t pending;
    cr_assert_eq(sigpending(&pending), 0);
    cr_assert_not(sigismember(&pending, SIGUSR1), "the signalfd took it");
    finish_runtime(rt, 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* A user thread that does not block the signal, and waits to be told to
 * end. */
static struct event user_thread_may_end = EVENT_INIT;

static void *user_thread(void *arg)
{
    (void)arg;
    sigset_t none;
    sigemptyset(&none);
    pthread_sigmask(SIG_SETMASK, &none, NULL);
    event_wait_for(&user_thread_may_end, 1);
    return NULL;
}

Test(signal, a_signal_delivered_to_a_user_thread_arrives_through_the_handler)
{
    rt_runtime *rt = new_runtime(2);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, user_thread, NULL), 0);
    rt_task *t = start_receiver(rt, SIGHUP);
    cr_assert_eq(pthread_kill(th, SIGHUP), 0); /* to that thread only */
    cr_assert_geq(receiver_result(t), 1);
    event_signal(&user_thread_may_end);
    pthread_join(th, NULL);
    finish_runtime(rt, 0);
}

static void users_own_handler(int signo)
{
    (void)signo;
}

Test(signal, the_last_listener_puts_the_previous_action_back)
{
    struct sigaction mine, seen;
    memset(&mine, 0, sizeof mine);
    mine.sa_handler = users_own_handler;
    cr_assert_eq(sigaction(SIGUSR2, &mine, NULL), 0);
    rt_runtime *rt = new_runtime(1);
    rt_signal *a, *b;
    cr_assert_eq(rt_signal_new(rt, SIGUSR2, &a), 0);
    cr_assert_eq(rt_signal_new(rt, SIGUSR2, &b), 0);
    cr_assert_eq(sigaction(SIGUSR2, NULL, &seen), 0);
    cr_assert_neq(seen.sa_handler, users_own_handler, "the library's handler listens");
    rt_signal_free(a);
    cr_assert_eq(sigaction(SIGUSR2, NULL, &seen), 0);
    cr_assert_neq(seen.sa_handler, users_own_handler, "one listener is left");
    rt_signal_free(b);
    cr_assert_eq(sigaction(SIGUSR2, NULL, &seen), 0);
    cr_assert_eq(seen.sa_handler, users_own_handler, "the user's handler is back");
    finish_runtime(rt, 0);
    signal(SIGUSR2, SIG_DFL);
}

Test(signal, a_process_started_with_sigint_ignored_receives_it)
{
    const char *child = getenv("SIGNAL_CHILD");
    cr_assert_not_null(child, "SIGNAL_CHILD names tests/signal_child");
    int out[2];
    cr_assert_eq(pipe(out), 0);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    /* Started as a background job of a shell is: SIGINT ignored. */
    struct sigaction ign, saved;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    cr_assert_eq(sigaction(SIGINT, &ign, &saved), 0);
    pid_t pid;
    char *const argv[] = {(char *)child, NULL};
    int err = posix_spawn(&pid, child, &actions, &attr, argv, NULL);
    sigaction(SIGINT, &saved, NULL);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    cr_assert_eq(err, 0);
    close(out[1]);
    char line[16] = {0};
    ssize_t n = read(out[0], line, sizeof line - 1); /* blocks until `ready` */
    close(out[0]);
    cr_assert_gt(n, 0);
    cr_assert_str_eq(line, "ready\n");
    cr_assert_eq(kill(pid, SIGINT), 0);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFEXITED(status), "the child was killed by signal %d", WTERMSIG(status));
    cr_assert_eq(WEXITSTATUS(status), 0, "signal_child exit status %d", WEXITSTATUS(status));
}

Test(signal, listeners_are_limited_and_the_limit_is_enospc)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    static rt_signal *many[RT_SIGNAL_LISTENERS_MAX];
    for (unsigned i = 0; i < RT_SIGNAL_LISTENERS_MAX; i++)
        cr_assert_eq(rt_signal_new(rt, SIGWINCH, &many[i]), 0, "listener %u", i);
    rt_signal *one_more;
    cr_assert_eq(rt_signal_new(rt, SIGWINCH, &one_more), -ENOSPC);
    cr_assert_null(one_more);
    for (unsigned i = 0; i < RT_SIGNAL_LISTENERS_MAX; i++)
        rt_signal_free(many[i]);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(signal, a_receiver_aborted_or_shut_down_while_waiting_leaves_nothing)
{
    int before = count_fds();
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    rt_task *t = start_receiver(rt, SIGUSR1);
    rt_task_cancel(t);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(count_fds(), fds, "the aborted receiver's drop freed its listener");
    rt_task *u = start_receiver(rt, SIGUSR1);
    rt_task_drop(u);
    /* A listener held by the test across the shutdown, freed after it. */
    rt_signal *held;
    cr_assert_eq(rt_signal_new(rt, SIGUSR2, &held), 0);
    shut_down(rt, 1);
    rt_signal_free(held);
    cr_assert_eq(rt_runtime_free(rt), 0);
    cr_assert_eq(count_fds(), before);
}
