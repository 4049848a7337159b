/* Copying through children's pipes with rt_io_copy: a megabyte through cat
 * and back, a reader downstream that goes away after one line (the copy
 * reports the failed write, closing its source ends the child with
 * SIGPIPE at once, as `| head -n1` does in a shell), and the pipes a
 * caller takes out of a process with rt_process_take_stdio. */
#define _GNU_SOURCE /* pipe2 */
#include "support.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(process_pipes, .fini = fail_on_leaks);

/* Copies `from` to `to` and reports the copy's result and write_failed,
 * then closes both descriptors (it owns them), whatever happened. */
struct copier {
    rt_coro co;
    rt_io *from, *to;
    int64_t *result;
    bool *write_failed;
    rt_io_copy cp;
    char buf[4096];
};

static void copier_drop(void *state)
{
    struct copier *c = state;
    rt_coro_cleanup(&c->co);
    rt_io_close(c->from);
    rt_io_close(c->to);
}

static rt_poll copier_poll(void *state, rt_context *cx, void **out)
{
    struct copier *c = state;
    RT_CORO_BEGIN(&c->co);
    rt_io_copy_init(&c->cp, c->from, c->to, c->buf, sizeof c->buf);
    RT_AWAIT(&c->co, cx, &c->cp);
    *c->result = c->cp.result;
    *c->write_failed = c->cp.write_failed;
    cr_assert_eq(c->cp.result < 0 ? (int64_t)c->cp.copied : c->cp.result, (int64_t)c->cp.copied);
    RT_CORO_END(&c->co, out);
}

static rt_task *spawn_copier(rt_runtime *rt, rt_io *from, rt_io *to, int64_t *result,
                             bool *write_failed)
{
    struct copier c = {.from = from, .to = to, .result = result, .write_failed = write_failed};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, copier_poll, copier_drop, &c, &t), 0);
    return t;
}

/* A child with the given modes; argv as for rt_process_options. */
static rt_process *spawn_child(rt_runtime *rt, const char *const *argv, int in, int out)
{
    rt_process_options o;
    rt_process_options_init(&o);
    o.argv = argv;
    o.stdin_mode = in;
    o.stdout_mode = out;
    rt_process *p;
    cr_assert_eq(rt_process_spawn(rt, &o, &p), 0, "spawning %s", argv[0]);
    return p;
}

/* Waits for the child from a task: returns its code, or 1000 + signal. */
struct waiter {
    rt_coro co;
    rt_process *p;
    rt_process_exited exit;
};

static rt_poll waiter_poll(void *state, rt_context *cx, void **out)
{
    struct waiter *w = state;
    RT_CORO_BEGIN(&w->co);
    rt_process_exited_init(&w->exit, w->p);
    RT_AWAIT(&w->co, cx, &w->exit);
    cr_assert_eq(w->exit.result, 0);
    RT_RETURN(&w->co, out, (intptr_t)(w->exit.signal != 0 ? 1000 + w->exit.signal : w->exit.code));
    RT_CORO_END(&w->co, out);
}

static intptr_t wait_child(rt_runtime *rt, rt_process *p)
{
    struct waiter w = {.p = p};
    void *v = NULL;
    cr_assert_eq(block_on_status(rt, waiter_poll, rt_coro_drop, &w, sizeof w, &v), 0);
    return (intptr_t)v;
}

/* A pipe whose read end the test keeps (blocking) and whose write end is
 * an rt_io of rt. */
static rt_io *pipe_to_test(rt_runtime *rt, int *rfd)
{
    int fds[2];
    cr_assert_eq(pipe2(fds, O_CLOEXEC), 0);
    rt_io *io;
    cr_assert_eq(rt_io_open(rt, fds[1], &io), 0);
    *rfd = fds[0];
    return io;
}

Test(process_pipes, a_megabyte_through_cat_and_back_with_rt_io_copy)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    rt_process *cat =
        spawn_child(rt, (const char *const[]){"cat", NULL}, RT_STDIO_PIPE, RT_STDIO_PIPE);
    /* The test writes a megabyte into `in`; one copy feeds it to cat,
     * another copies cat's output into `out`, which the test reads. */
    int in_fds[2];
    cr_assert_eq(pipe2(in_fds, O_CLOEXEC), 0);
    rt_io *in, *child_in, *child_out;
    cr_assert_eq(rt_io_open(rt, in_fds[0], &in), 0);
    cr_assert_eq(rt_process_take_stdio(cat, 0, &child_in), 0);
    cr_assert_eq(rt_process_take_stdio(cat, 1, &child_out), 0);
    int rfd;
    rt_io *out = pipe_to_test(rt, &rfd);
    int64_t feed = 1, drain = 1;
    bool feed_wf = true, drain_wf = true;
    rt_task *f = spawn_copier(rt, in, child_in, &feed, &feed_wf);
    rt_task *d = spawn_copier(rt, child_out, out, &drain, &drain_wf);
    /* Writer and reader on two threads: the pipes hold far less than 1 MB. */
    static char block[65536];
    memset(block, 'x', sizeof block);
    pid_t writer = fork();
    cr_assert_geq(writer, 0);
    if (writer == 0) {
        close(rfd);
        for (int i = 0; i < 16; i++)
            if (write(in_fds[1], block, sizeof block) != (ssize_t)sizeof block)
                _exit(1);
        _exit(0);
    }
    close(in_fds[1]);
    size_t total = 0;
    char buf[65536];
    ssize_t n;
    while ((n = read(rfd, buf, sizeof buf)) > 0)
        total += (size_t)n;
    close(rfd);
    int wstatus;
    cr_assert_eq(waitpid(writer, &wstatus, 0), writer);
    cr_assert(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    cr_assert_eq(task_wait_status(f, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(task_wait_status(d, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(total, 16 * sizeof block);
    cr_assert_eq(feed, (int64_t)(16 * sizeof block), "the feed's result: %lld", (long long)feed);
    cr_assert_eq(drain, (int64_t)(16 * sizeof block), "the drain's result: %lld", (long long)drain);
    cr_assert(!feed_wf && !drain_wf, "write_failed is set at the end of the stream");
    cr_assert_eq(wait_child(rt, cat), 0);
    rt_process_free(cat);
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    finish_runtime(rt, 0);
}

Test(process_pipes, a_reader_gone_downstream_ends_the_child_with_sigpipe_at_once)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    /* seq writes far more than a pipe holds, so it blocks writing unless
     * its reader goes away: the copy's failed write must close its pipe. */
    rt_process *seq = spawn_child(rt, (const char *const[]){"seq", "1", "10000000", NULL},
                                  RT_STDIO_NULL, RT_STDIO_PIPE);
    rt_io *child_out;
    cr_assert_eq(rt_process_take_stdio(seq, 1, &child_out), 0);
    cr_assert_null(rt_process_stdio(seq, 1), "a taken pipe is no longer the process's");
    int rfd;
    rt_io *out = pipe_to_test(rt, &rfd);
    int64_t result = 1;
    bool write_failed = false;
    int64_t start = rt_now_ns();
    rt_task *d = spawn_copier(rt, child_out, out, &result, &write_failed);
    char line[8];
    cr_assert_eq(read(rfd, line, 2), 2);
    cr_assert_eq(memcmp(line, "1\n", 2), 0);
    close(rfd); /* `head -n1` is done */
    cr_assert_eq(task_wait_status(d, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(result, -EPIPE, "the copy ended with %lld", (long long)result);
    cr_assert(write_failed, "the copy does not say that writing failed");
    cr_assert_eq(wait_child(rt, seq), 1000 + SIGPIPE, "the child did not die of SIGPIPE");
    int64_t took = rt_now_ns() - start;
    cr_assert_lt(took, 1 * SEC, "the child took %lld ms to go", (long long)(took / MS));
    rt_process_free(seq);
    cr_assert_eq(count_fds(), fds, "a descriptor was left open");
    finish_runtime(rt, 0);
}

Test(process_pipes, take_stdio_hands_the_pipe_over_once)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    rt_process *cat =
        spawn_child(rt, (const char *const[]){"cat", NULL}, RT_STDIO_PIPE, RT_STDIO_NULL);
    rt_io *io = (rt_io *)&io;
    cr_assert_eq(rt_process_take_stdio(cat, 1, &io), -EBADF, "stdout is not a pipe");
    cr_assert_null(io);
    cr_assert_eq(rt_process_take_stdio(cat, 3, &io), -EINVAL);
    cr_assert_eq(rt_process_take_stdio(NULL, 0, &io), -EINVAL);
    cr_assert_eq(rt_process_take_stdio(cat, 0, NULL), -EINVAL);
    rt_io *taken = NULL;
    cr_assert_eq(rt_process_take_stdio(cat, 0, &taken), 0);
    cr_assert_not_null(taken);
    cr_assert_eq(rt_process_take_stdio(cat, 0, &io), -EBADF, "taken twice");
    cr_assert_null(io);
    cr_assert_eq(rt_process_close_stdio(cat, 0), -EBADF, "closed by the process after a take");
    rt_process_free(cat); /* kills cat, and must leave the taken pipe open */
    cr_assert_eq(count_fds(), fds + 1, "the taken pipe was closed with the process");
    cr_assert_eq(rt_io_close(taken), 0);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(process_pipes, rt_io_copy_init_refuses_bad_arguments)
{
    rt_runtime *rt = new_runtime(1);
    int p[2];
    make_pipe(p);
    rt_io *a, *b;
    cr_assert_eq(rt_io_open(rt, p[0], &a), 0);
    cr_assert_eq(rt_io_open(rt, p[1], &b), 0);
    char buf[4];
    rt_io_copy cp;
    cr_assert_eq(rt_io_copy_init(NULL, a, b, buf, sizeof buf), -EINVAL);
    cr_assert_eq(rt_io_copy_init(&cp, NULL, b, buf, sizeof buf), -EINVAL);
    cr_assert_eq(cp.result, -EINVAL, "a refused copy is finished with its error");
    cr_assert_eq(rt_io_copy_init(&cp, a, NULL, buf, sizeof buf), -EINVAL);
    cr_assert_eq(rt_io_copy_init(&cp, a, b, NULL, sizeof buf), -EINVAL);
    cr_assert_eq(rt_io_copy_init(&cp, a, b, buf, 0), -EINVAL);
    cr_assert_eq(rt_io_copy_init(&cp, a, b, buf, sizeof buf), 0);
    RT_DROP(&cp); /* never polled: dropping is all it needs */
    cr_assert_eq(cp.result, -ECANCELED);
    rt_io_close(a);
    rt_io_close(b);
    finish_runtime(rt, 0);
}
