/* Copies standard input through a child process to standard output, on
 * fibers:
 *
 *   some-command | ./pipe_through CMD [ARGS...] | other-command
 *
 * runs CMD with its standard input and output connected to pipes, copies
 * this program's input into the first and the second to this program's
 * output (two fibers, concurrently), and exits with CMD's exit status (128 +
 * the signal number when a signal ended it; 127 when it could not be
 * started). A standard descriptor that is not a pipe or a socket (a
 * terminal, a file) is handed to CMD as it is instead of copied. When the
 * reader of the output goes away (`| head -n1`), CMD gets SIGPIPE on its
 * next write, as it would in a shell pipeline. */
#define _POSIX_C_SOURCE 200809L /* S_ISSOCK */

#include <asyncrt.h>

#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

/* One direction, which owns both descriptors (either may be NULL: nothing
 * to copy). Closing the destination at the end lets the reader downstream
 * see the end of the stream; closing the source when writing failed (the
 * reader went away) makes whoever writes into it get SIGPIPE instead of
 * blocking on a full pipe. */
struct copy {
    rt_io *from, *to;
};

static void *copy(void *arg)
{
    struct copy *c = arg;
    char buf[16384];
    if (c->from != NULL && c->to != NULL)
        rt_io_copy_await(c->from, c->to, buf, sizeof buf);
    rt_io_close(c->from);
    rt_io_close(c->to);
    return NULL;
}

struct pipe_through {
    rt_process *child;
    rt_io *in, *out; /* this program's, when copied */
};

/* Copies both ways, then waits for the child: returns the exit status. */
static void *run(void *arg)
{
    struct pipe_through *p = arg;
    struct copy feed = {p->in, NULL}, drain = {NULL, p->out};
    rt_process_take_stdio(p->child, 0, &feed.to);
    rt_process_take_stdio(p->child, 1, &drain.from);
    rt_task *feeder = NULL;
    if (rt_fiber_spawn(NULL, copy, &feed, &feeder) < 0) {
        rt_io_close(feed.from); /* no feeder: the child sees the end of its input */
        rt_io_close(feed.to);
    }
    copy(&drain);
    rt_task_join fed;
    if (rt_task_join_init(&fed, feeder) == 0)
        rt_fiber_await(&fed.future); /* feed lives here until the feeder ends */
    rt_process_exited exit;
    rt_process_exited_init(&exit, p->child);
    if (rt_fiber_await(&exit.future) < 0)
        return (void *)127;
    return (void *)(intptr_t)(exit.signal != 0 ? 128 + exit.signal : exit.code);
}

/* Is fd a pipe or a socket, which the reactor can watch? */
static int copied(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: pipe_through CMD [ARGS...]\n");
        return 2;
    }
    rt_runtime *rt;
    struct pipe_through p = {0};
    void *status = (void *)127;
    int err = rt_runtime_new(NULL, &rt);
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = (const char *const *)(argv + 1);
    if (err == 0 && copied(0) && rt_io_open(rt, 0, &p.in) == 0)
        o.stdin_mode = RT_STDIO_PIPE;
    if (err == 0 && copied(1) && rt_io_open(rt, 1, &p.out) == 0)
        o.stdout_mode = RT_STDIO_PIPE;
    if (err == 0 && (err = rt_process_spawn(rt, &o, &p.child)) == 0)
        err = rt_fiber_block_on(rt, NULL, run, &p, &status, NULL);
    if (err < 0)
        fprintf(stderr, "pipe_through: %s: %s\n", argv[1], rt_strerror(err));
    rt_process_free(p.child);
    rt_runtime_free(rt);
    return (int)(intptr_t)status;
}
