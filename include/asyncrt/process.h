/* asyncrt: child processes.
 *
 * rt_process_spawn starts a program with its arguments, environment and
 * working directory, each of its standard input, output and error
 * inherited, connected to /dev/null, closed, or connected to a pipe that
 * the parent uses as an rt_io. Waiting for its exit is an operation (see
 * future.h), driven by a pidfd the reactor watches. A child is always
 * reaped: by the wait, or by rt_process_free, which kills one still
 * running. So no zombie is left, also when the waiting task is aborted or
 * the runtime shuts down (the task's drop frees the process).
 *
 *     rt_process_options o;
 *     rt_process_options_init(&o);
 *     o.argv = (const char *const[]){"cat", NULL};
 *     o.stdin_mode = o.stdout_mode = RT_STDIO_PIPE;
 *     rt_process_spawn(NULL, &o, &s->child);
 *     ... write to rt_process_stdio(s->child, 0), read from
 *         rt_process_stdio(s->child, 1) ...
 *     rt_process_exited_init(&s->exit, s->child);
 *     RT_AWAIT(&s->co, cx, &s->exit);     // s->exit.code, s->exit.signal
 *
 * The child is started with posix_spawn (vfork and exec): it inherits only
 * the descriptors that are not close-on-exec (every descriptor asyncrt
 * opens is), an empty signal mask and SIGPIPE at its default action, even
 * when spawned from a worker (whose threads block SIGPIPE). Where the
 * kernel lacks pidfd_open (before Linux 5.3), the wait checks the child
 * every 10 ms instead.
 * Threads: every function from any thread; one wait at a time per process. */
#ifndef ASYNCRT_PROCESS_H
#define ASYNCRT_PROCESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "future.h"
#include "io.h"
#include "runtime.h"
#include "timer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_process rt_process;

/* What a standard descriptor of the child is. */
#define RT_STDIO_INHERIT 0 /* the parent's */
#define RT_STDIO_NULL 1    /* /dev/null */
#define RT_STDIO_PIPE 2    /* a pipe to the parent: rt_process_stdio */
#define RT_STDIO_CLOSE 3   /* closed */

/* How to start the child. Fill with rt_process_options_init, then set
 * fields; fields are only ever added at the end. The strings are copied by
 * rt_process_spawn (the caller keeps them). */
typedef struct rt_process_options {
    /* The program and its arguments, NULL-terminated; argv[0] names the
     * program: a path if it contains '/', else looked up in PATH. */
    const char *const *argv;
    /* The environment, NULL-terminated "NAME=value" strings; NULL: the
     * parent's. */
    const char *const *envp;
    /* The working directory; NULL: the parent's. */
    const char *cwd;
    /* RT_STDIO_* for descriptors 0, 1 and 2. */
    int stdin_mode;
    int stdout_mode;
    int stderr_mode;
} rt_process_options;

/* Fills *o with the defaults: no argv (which rt_process_spawn refuses), the
 * parent's environment and directory, every descriptor inherited. NULL: a
 * no-op. */
void rt_process_options_init(rt_process_options *o);

/* Starts the child on rt (NULL: rt_current_runtime()). On success *out owns it and
 * its pipes. Errors: -EINVAL (o, argv, argv[0] or out NULL, an unknown
 * RT_STDIO_ mode, no runtime), -ENOENT (no such program, in PATH or at that
 * path), -EACCES, -ENOEXEC and the other errors of posix_spawn and exec,
 * -ENOENT or -ENOTDIR for a cwd that is not a directory (as chdir
 * reports), -EMFILE, -ENOMEM, -ESHUTDOWN. On error no child runs and no
 * descriptor is left open. Any thread. */
int rt_process_spawn(rt_runtime *rt, const rt_process_options *o, rt_process **out);

/* The child's process id (0 for NULL). */
pid_t rt_process_pid(const rt_process *p);

/* The parent's end of the pipe of descriptor fd (0, 1 or 2) when its mode
 * was RT_STDIO_PIPE and it was not closed or taken; else NULL. Owned by
 * the process (rt_process_close_stdio or rt_process_free closes it): do not
 * close it with rt_io_close, or take it first (rt_process_take_stdio). */
rt_io *rt_process_stdio(rt_process *p, int fd);

/* Closes the parent's end of the pipe of descriptor fd early. For the
 * child's input (0), the child then reads the end of its input. For its
 * output (1 or 2), this is how the parent says that the reader of that
 * output went away (a copy of it whose destination failed, say): the
 * child's next write to it raises SIGPIPE, which ends the child (or fails
 * with EPIPE when it ignores SIGPIPE), as in a shell pipeline. A parent
 * that just stops reading instead leaves the child blocked on a full pipe,
 * and waiting for its exit then waits for ever. No operation on the pipe
 * may be unfinished. Returns 0, or -EINVAL (p NULL, fd not 0-2), -EBADF (no
 * such pipe, or closed or taken already). */
int rt_process_close_stdio(rt_process *p, int fd);

/* Takes the parent's end of the pipe of descriptor fd out of the process
 * (Go's StdinPipe / StdoutPipe): *out owns it from now on, and the caller
 * closes it with rt_io_close (which, for an output, tells the child its
 * reader went away, as rt_process_close_stdio does); rt_process_free no
 * longer touches it. So a task that copies the child's output can own the
 * pipe and close it itself, whatever becomes of the process. Returns 0, or
 * -EINVAL (p or out NULL, fd not 0-2; *out NULL), -EBADF (no such pipe, or
 * closed or taken already; *out NULL). */
int rt_process_take_stdio(rt_process *p, int fd, rt_io **out);

/* Sends signo to the child (kill(2)) unless it has been reaped. Returns 0,
 * -ESRCH (reaped already), -EINVAL (p NULL, a bad signo), -EPERM. */
int rt_process_kill(rt_process *p, int signo);

/* Frees the process and closes its pipes. A child not yet reaped is killed
 * (SIGKILL) and reaped first, which waits the moment the kernel takes to
 * end it. Its wait must have finished or been dropped. Call it before
 * rt_runtime_free of the process's runtime (after rt_runtime_shutdown it
 * still frees what the shutdown left). NULL is a no-op. Any thread. */
void rt_process_free(rt_process *p);

/* Waiting for the child to exit: an operation that finishes with result 0
 * once the child ended and was reaped, with `code` its exit status (0-255)
 * when it exited and `signal` the signal that ended it otherwise (0 when it
 * exited), or with a negative errno (-ESHUTDOWN: the runtime shut down).
 * Once reaped, later waits finish at once with the same outcome. Dropped
 * while it waits, it loses nothing: the child is reaped by the next wait or
 * by rt_process_free. */
typedef struct rt_process_exited {
    RT_FUTURE_HEADER;
    rt_process *process; /* NULL once finished or dropped */
    int code;            /* the exit status, when signal is 0 */
    int signal;          /* the signal that ended the child, or 0 */
    rt_io_ready exited;  /* the pidfd readable */
    rt_sleep recheck;    /* without a pidfd: the next look */
} rt_process_exited;

/* Prepares a wait. Errors: -EINVAL (op or p NULL), -EBUSY (another wait on
 * p is unfinished). The init claims p (marks it busy) until the wait
 * finishes or is dropped, so one initialised and never polled must still
 * be dropped (or awaited), before rt_process_free. Otherwise every later
 * wait on p, the same operation initialised again included, is refused
 * with -EBUSY (rt_process_free still kills and reaps the child). */
int rt_process_exited_init(rt_process_exited *op, rt_process *p);

#ifdef __cplusplus
}
#endif
#endif
