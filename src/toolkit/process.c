/* Child processes: posix_spawn with the descriptors asked for, a pidfd the
 * reactor watches for the exit, and reaping that always happens (the wait,
 * or rt_process_free, which kills a child still running). A process is used
 * from one task at a time, one wait at a time (`busy`). */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <asyncrt/diag.h>
#include <asyncrt/process.h>

#include "atomic.h"
#include "common.h"
#include "fault.h"
#include "operation.h"
#include "runtime_services.h"

extern char **environ;

/* How often a wait looks at a child it has no pidfd for. */
#define RECHECK_NS (10 * 1000 * 1000)

struct rt_process {
    rt_runtime *rt;   /* whose reactor watches the descriptors */
    pid_t pid;        /* the child */
    rt_io *pidfd;     /* readable once the child ended; NULL without pidfd_open */
    rt_io *stdio[3];  /* the parent's pipe ends, or NULL */
    bool reaped;      /* waited for: pid may belong to another process now */
    int code;         /* exit status, once reaped */
    int signal;       /* the terminating signal, or 0, once reaped */
    const void *busy; /* the unfinished wait, or NULL */
};

RT_EXPORT void rt_process_options_init(rt_process_options *o)
{
    if (o != NULL)
        memset(o, 0, sizeof(*o));
}

/* Records what waitid reported. */
static void record_exit(rt_process *p, const siginfo_t *si)
{
    p->reaped = true;
    if (si->si_code == CLD_EXITED) {
        p->code = si->si_status;
        p->signal = 0;
    } else {
        p->code = 0;
        p->signal = si->si_status;
    }
}

/* Reaps the child if it has ended (block: wait until it has). Returns true
 * once it is reaped (by now or before), false while it runs; an error of
 * waitid other than EINTR (ECHILD: someone else reaped it, when SIGCHLD is
 * ignored) counts as reaped, with *err set. */
static bool reap(rt_process *p, bool block, int *err)
{
    *err = 0;
    if (p->reaped)
        return true;
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | (block ? 0 : WNOHANG)) == 0) {
            if (si.si_pid == 0)
                return false; /* still running */
            record_exit(p, &si);
            return true;
        }
        if (errno == EINTR)
            continue;
        *err = -errno;
        p->reaped = true;
        return true;
    }
}

/* Is a pidfd to be used? ASYNCRT_NO_PIDFD=1 makes the library behave as on a
 * kernel without pidfd_open, so that the fallback can be tested. */
static bool pidfd_wanted(void)
{
    const char *v = getenv("ASYNCRT_NO_PIDFD");
    return v == NULL || strcmp(v, "1") != 0;
}

/* Whether shutdown already closed the runtime's descriptors (ours too). */
static bool descriptors_closed(rt_runtime *rt)
{
    bool closed = !rt__runtime_io_accepted(rt);
    return closed;
}

static void close_all(rt_process *p)
{
    if (descriptors_closed(p->rt))
        return;
    for (int i = 0; i < 3; i++) {
        rt_io_close(p->stdio[i]);
        p->stdio[i] = NULL;
    }
    rt_io_close(p->pidfd);
    p->pidfd = NULL;
}

/* The pipes the child's descriptors need: the parent's ends registered
 * with the reactor, the child's ends in child_end[] (close-on-exec in the
 * parent; the file actions dup2 them onto 0-2 in the child). */
static int make_pipes(rt_process *p, const int modes[3], int child_end[3])
{
    for (int i = 0; i < 3; i++) {
        if (modes[i] != RT_STDIO_PIPE)
            continue;
        int fds[2];
        if (rt__pipe2(fds, O_CLOEXEC) < 0)
            return -errno;
        int parent = i == 0 ? fds[1] : fds[0];
        child_end[i] = i == 0 ? fds[0] : fds[1];
        int err = rt_io_open(p->rt, parent, &p->stdio[i]);
        if (err < 0) {
            close(parent);
            return err;
        }
    }
    return 0;
}

static int file_actions(posix_spawn_file_actions_t *fa, const rt_process_options *o,
                        const int modes[3], const int child_end[3])
{
    int err = 0;
    if (o->cwd != NULL)
        err = posix_spawn_file_actions_addchdir_np(fa, o->cwd);
    for (int i = 0; i < 3 && err == 0; i++) {
        if (modes[i] == RT_STDIO_PIPE)
            err = posix_spawn_file_actions_adddup2(fa, child_end[i], i);
        else if (modes[i] == RT_STDIO_NULL)
            err = posix_spawn_file_actions_addopen(fa, i, "/dev/null", i == 0 ? O_RDONLY : O_WRONLY,
                                                   0);
        else if (modes[i] == RT_STDIO_CLOSE)
            err = posix_spawn_file_actions_addclose(fa, i);
    }
    return -err;
}

/* posix_spawn, with the signal mask emptied and SIGPIPE at its default (a
 * worker's threads block SIGPIPE, and the child would inherit that). */
static int start_child(rt_process *p, const rt_process_options *o, const int modes[3],
                       const int child_end[3])
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    int err = -posix_spawn_file_actions_init(&fa);
    if (err < 0)
        return err;
    err = -posix_spawnattr_init(&attr);
    if (err < 0) {
        posix_spawn_file_actions_destroy(&fa);
        return err;
    }
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    err = file_actions(&fa, o, modes, child_end);
    if (err == 0) {
        char *const *argv = (char *const *)o->argv;
        char *const *envp = o->envp != NULL ? (char *const *)o->envp : environ;
        bool path = strchr(o->argv[0], '/') != NULL;
        err = -(path ? posix_spawn(&p->pid, o->argv[0], &fa, &attr, argv, envp)
                     : posix_spawnp(&p->pid, o->argv[0], &fa, &attr, argv, envp));
    }
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    return err;
}

RT_EXPORT int rt_process_spawn(rt_runtime *rt, const rt_process_options *o, rt_process **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (rt == NULL)
        rt = rt_current_runtime();
    if (rt == NULL || o == NULL || o->argv == NULL || o->argv[0] == NULL)
        return -EINVAL;
    const int modes[3] = {o->stdin_mode, o->stdout_mode, o->stderr_mode};
    for (int i = 0; i < 3; i++)
        if (modes[i] < RT_STDIO_INHERIT || modes[i] > RT_STDIO_CLOSE)
            return -EINVAL;
    rt_process *p = rt__calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->rt = rt;
    int child_end[3] = {-1, -1, -1};
    int err = make_pipes(p, modes, child_end);
    if (err == 0)
        err = start_child(p, o, modes, child_end);
    for (int i = 0; i < 3; i++)
        if (child_end[i] >= 0)
            close(child_end[i]); /* the child has its copies */
    if (err == 0 && pidfd_wanted()) {
        int fd = rt__pidfd_open(p->pid);
        if (fd < 0 && errno != ENOSYS)
            err = -errno;
        else if (fd >= 0 && (err = rt_io_open(rt, fd, &p->pidfd)) < 0)
            close(fd);
    }
    if (err < 0) {
        if (p->pid > 0) { /* started, but cannot be watched: end it */
            kill(p->pid, SIGKILL);
            int ignored;
            reap(p, true, &ignored);
        }
        close_all(p);
        free(p);
        return err;
    }
    *out = p;
    return 0;
}

RT_EXPORT pid_t rt_process_pid(const rt_process *p)
{
    return p != NULL ? p->pid : 0;
}

RT_EXPORT rt_io *rt_process_stdio(rt_process *p, int fd)
{
    return p != NULL && fd >= 0 && fd <= 2 ? p->stdio[fd] : NULL;
}

RT_EXPORT int rt_process_close_stdio(rt_process *p, int fd)
{
    if (p == NULL || fd < 0 || fd > 2)
        return -EINVAL;
    if (p->stdio[fd] == NULL)
        return -EBADF;
    rt_io_close(p->stdio[fd]);
    p->stdio[fd] = NULL;
    return 0;
}

RT_EXPORT int rt_process_take_stdio(rt_process *p, int fd, rt_io **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (p == NULL || fd < 0 || fd > 2)
        return -EINVAL;
    if (p->stdio[fd] == NULL)
        return -EBADF;
    *out = p->stdio[fd];
    p->stdio[fd] = NULL;
    return 0;
}

RT_EXPORT int rt_process_kill(rt_process *p, int signo)
{
    if (p == NULL || signo < 0 || signo >= _NSIG)
        return -EINVAL;
    if (p->reaped)
        return -ESRCH; /* the pid may be another process's now */
    return kill(p->pid, signo) < 0 ? -errno : 0;
}

RT_EXPORT void rt_process_free(rt_process *p)
{
    if (p == NULL)
        return;
    if (!p->reaped) {
        kill(p->pid, SIGKILL);
        int ignored;
        reap(p, true, &ignored);
    }
    close_all(p);
    free(p);
}

static rt_poll wait_finish(rt_future *f, rt_process_exited *op, int64_t result)
{
    rt_process *p = op->process;
    op->code = p->code;
    op->signal = p->signal;
    p->busy = NULL;
    op->process = NULL;
    RT_DROP(&op->recheck);
    return rt__future_finish(f, result);
}

static rt_poll wait_vpoll(rt_future *f, rt_context *cx)
{
    rt_process_exited *op = (rt_process_exited *)f;
    rt_process *p = op->process;
    for (;;) {
        int err;
        if (reap(p, false, &err))
            return wait_finish(f, op, err);
        /* Acquire pairs with the release of `closing` at shutdown, which
         * closes the pidfd afterwards. */
        if (rt__runtime_closing(p->rt))
            return wait_finish(f, op, -ESHUTDOWN);
        if (p->pidfd != NULL) {
            /* Readable once the child has ended; looked at after the waker
             * is stored, so an exit after the waitid above wakes us. */
            rt_io_readable_init(&op->exited, p->pidfd);
            if (RT_POLL_OP(&op->exited, cx) == RT_PENDING)
                return RT_PENDING;
            continue;
        }
        /* No pidfd: look again a little later. */
        if (op->recheck.future.vtable == NULL || rt_future_is_done(&op->recheck.future))
            rt_sleep_init(&op->recheck, p->rt, RECHECK_NS);
        if (RT_POLL_OP(&op->recheck, cx) == RT_PENDING)
            return RT_PENDING;
    }
}

/* A dropped wait loses nothing: the child is reaped by the next wait or by
 * rt_process_free. */
static void wait_vdrop(rt_future *f)
{
    rt_process_exited *op = (rt_process_exited *)f;
    RT_DROP(&op->recheck);
    op->process->busy = NULL;
    op->process = NULL;
}

/* The pid is fixed at the spawn; the exit status is the wait's to find. */
static void wait_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_process_exited *op = (const rt_process_exited *)f;
    info->kind = RT_WAIT_PROCESS;
    info->number = op->process->pid;
    rt__wait_printf(info, "exit of process %lld", (long long)op->process->pid);
}

static const rt_future_vtable wait_vtable = {wait_vpoll, wait_vdrop, wait_vdescribe};

RT_EXPORT int rt_process_exited_init(rt_process_exited *op, rt_process *p)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &wait_vtable;
    int err = p == NULL ? -EINVAL : p->busy != NULL ? -EBUSY : 0;
    if (err < 0) {
        rt__future_finish(&op->future, err);
        return err;
    }
    p->busy = op;
    op->process = p;
    return 0;
}
