/* Copies standard input through a child process to standard output:
 *
 *   some-command | ./pipe_through CMD [ARGS...] | other-command
 *
 * runs CMD with its standard input and output connected to pipes, copies
 * this program's input into the first and the second to this program's
 * output (two tasks, concurrently), and exits with CMD's exit status (128 +
 * the signal number when a signal ended it; 127 when it could not be
 * started). A standard descriptor that is not a pipe or a socket (a
 * terminal, a file) is handed to CMD as it is instead of copied. */
#define _POSIX_C_SOURCE 200809L /* S_ISSOCK */

#include <asyncrt.h>

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

/* Copies one descriptor to another until the end of the stream, then
 * closes the destination (so the reader downstream sees the end). */
struct copy {
    rt_coro co;
    rt_io *from, *to;
    rt_process *child; /* close its stdin pipe instead of `to`, if set */
    rt_io_read rd;
    rt_io_write_all wr;
    char buf[16384];
};

static rt_poll copy_poll(void *state, rt_context *cx, void **out)
{
    struct copy *c = state;
    RT_CORO_BEGIN(&c->co);
    for (;;) {
        rt_io_read_init(&c->rd, c->from, c->buf, sizeof c->buf);
        RT_AWAIT(&c->co, cx, &c->rd);
        if (c->rd.result <= 0)
            break;
        rt_io_write_all_init(&c->wr, c->to, c->buf, (size_t)c->rd.result);
        RT_AWAIT(&c->co, cx, &c->wr);
        if (c->wr.result < 0)
            break; /* the reader went away */
    }
    if (c->child != NULL)
        rt_process_close_stdio(c->child, 0);
    RT_CORO_END(&c->co, out);
}

/* Runs the child and the two copies; returns the exit status to use. */
struct pipeline {
    rt_coro co;
    rt_process *child;
    rt_io *in, *out; /* this program's, when copied */
    rt_task_join feed, drain;
    rt_join_all copies;
    rt_process_wait exit;
};

static void pipeline_drop(void *state)
{
    struct pipeline *p = state;
    rt_coro_cleanup(&p->co);
    RT_DROP(&p->feed);
    RT_DROP(&p->drain);
    rt_process_free(p->child);
    rt_io_close(p->in);
    rt_io_close(p->out);
}

static rt_poll pipeline_poll(void *state, rt_context *cx, void **out)
{
    struct pipeline *p = state;
    RT_CORO_BEGIN(&p->co);
    rt_task *t;
    if (p->in != NULL) {
        struct copy c = {.from = p->in, .to = rt_process_stdio(p->child, 0), .child = p->child};
        if (RT_SPAWN(NULL, copy_poll, rt_coro_drop, &c, &t) == 0)
            rt_task_join_init(&p->feed, t);
    }
    if (p->out != NULL) {
        struct copy c = {.from = rt_process_stdio(p->child, 1), .to = p->out};
        if (RT_SPAWN(NULL, copy_poll, rt_coro_drop, &c, &t) == 0)
            rt_task_join_init(&p->drain, t);
    }
    rt_join_all_init(&p->copies, RT_FUTURES(&p->feed.future, &p->drain.future), 0);
    RT_AWAIT(&p->co, cx, &p->copies);
    rt_process_wait_init(&p->exit, p->child);
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
        err = rt_block_on(rt, pipeline_poll, pipeline_drop, &p, sizeof p, &status);
    if (err < 0)
        fprintf(stderr, "pipe_through: %s: %s\n", argv[1], rt_strerror(err));
    if (err < 0 && err != -ECANCELED) { /* the pipeline never ran: all still ours */
        rt_process_free(p.child);
        rt_io_close(p.in);
        rt_io_close(p.out);
    }
    rt_runtime_free(rt);
    return (int)(intptr_t)status;
}
