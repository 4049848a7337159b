/* Copies standard input through a child process to standard output:
 *
 *   some-command | ./pipe_through CMD [ARGS...] | other-command
 *
 * runs CMD with its standard input and output connected to pipes, copies
 * this program's input into the first and the second to this program's
 * output (two tasks, concurrently), and exits with CMD's exit status (128 +
 * the signal number when a signal ended it; 127 when it could not be
 * started). A standard descriptor that is not a pipe or a socket (a
 * terminal, a file) is handed to CMD as it is instead of copied. When the
 * reader of the output goes away (`| head -n1`), CMD gets SIGPIPE on its
 * next write, as it would in a shell pipeline. */
#define _POSIX_C_SOURCE 200809L /* S_ISSOCK */

#include <asyncrt.h>

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

/* Copies one descriptor to another until the end of the stream or an
 * error, then closes both: closing the destination lets the reader
 * downstream see the end, and closing the source when writing failed (the
 * reader went away, as `| head -n1` does) makes whoever writes into it get
 * SIGPIPE, as in a shell pipeline, instead of blocking on a full pipe. The
 * task owns both descriptors. */
struct copy {
    rt_coro co;
    rt_io *from, *to;
    rt_io_copy cp;
    char buf[16384];
};

static void copy_drop(void *state)
{
    struct copy *c = state;
    rt_coro_cleanup(&c->co);
    rt_io_close(c->from);
    rt_io_close(c->to);
}

static rt_poll copy_poll(void *state, rt_context *cx, void **out)
{
    struct copy *c = state;
    RT_CORO_BEGIN(&c->co);
    rt_io_copy_init(&c->cp, c->from, c->to, c->buf, sizeof c->buf);
    RT_AWAIT(&c->co, cx, &c->cp);
    RT_CORO_END(&c->co, out);
}

/* Spawns a copy that owns `from` and `to` (either may be NULL: nothing to
 * copy, and what is given is closed) and prepares *join to wait for it. */
static void copy_spawn(rt_io *from, rt_io *to, rt_task_join *join)
{
    struct copy c = {.from = from, .to = to};
    rt_task *t;
    if (from == NULL || to == NULL || RT_SPAWN_STATE(NULL, copy_poll, copy_drop, &c, &t) < 0) {
        copy_drop(&c); /* a join left zeroed is finished at once by join_all */
        return;
    }
    rt_task_join_init(join, t);
}

/* Runs the child and the two copies; returns the exit status to use. */
struct pipeline {
    rt_coro co;
    rt_process *child;
    rt_io *in, *out; /* this program's, when copied */
    rt_task_join feed, drain;
    rt_join_all copies;
    rt_process_exited exit;
};

static void pipeline_drop(void *state)
{
    struct pipeline *p = state;
    rt_coro_cleanup(&p->co);
    RT_DROP(&p->feed);
    RT_DROP(&p->drain);
    rt_process_free(p->child);
    rt_io_close(p->in); /* NULL once a copy owns it */
    rt_io_close(p->out);
}

static rt_poll pipeline_poll(void *state, rt_context *cx, void **out)
{
    struct pipeline *p = state;
    RT_CORO_BEGIN(&p->co);
    rt_io *child_in = NULL, *child_out = NULL;
    rt_process_take_stdio(p->child, 0, &child_in);
    rt_process_take_stdio(p->child, 1, &child_out);
    copy_spawn(p->in, child_in, &p->feed);
    copy_spawn(child_out, p->out, &p->drain);
    p->in = p->out = NULL; /* the copies' now */
    rt_join_all_init(&p->copies, RT_FUTURES(&p->feed.future, &p->drain.future), 0);
    RT_AWAIT(&p->co, cx, &p->copies);
    rt_process_exited_init(&p->exit, p->child);
    RT_AWAIT(&p->co, cx, &p->exit);
    if (p->exit.result < 0)
        RT_RETURN(&p->co, out, (intptr_t)127);
    RT_RETURN(&p->co, out, (intptr_t)(p->exit.signal != 0 ? 128 + p->exit.signal : p->exit.code));
    RT_CORO_END(&p->co, out);
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
    int err = rt_runtime_new(NULL, &rt);
    if (err < 0) {
        fprintf(stderr, "pipe_through: %s\n", rt_strerror(err));
        return 127;
    }
    struct pipeline p = {0};
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = (const char *const *)(argv + 1);
    if (copied(0) && rt_io_open(rt, 0, &p.in) == 0)
        o.stdin_mode = RT_STDIO_PIPE;
    if (copied(1) && rt_io_open(rt, 1, &p.out) == 0)
        o.stdout_mode = RT_STDIO_PIPE;
    err = rt_process_spawn(rt, &o, &p.child);
    void *status = (void *)(intptr_t)127;
    if (err == 0)
        err = rt_block_on(rt, pipeline_poll, pipeline_drop, &p, sizeof p, &status, NULL);
    if (err < 0)
        fprintf(stderr, "pipe_through: %s: %s\n", argv[1], rt_strerror(err));
    if (err < 0) { /* the pipeline never ran: all still ours */
        rt_process_free(p.child);
        rt_io_close(p.in);
        rt_io_close(p.out);
    }
    rt_runtime_free(rt);
    return (int)(intptr_t)status;
}
