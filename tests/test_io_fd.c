/* Black-box tests of the descriptors behind asyncrt/io.h: writing to a pipe
 * nobody reads is -EPIPE and raises no SIGPIPE, rt_io_open's errors (a
 * closed or invalid descriptor, a regular file or directory, NULL arguments,
 * a shut down runtime) leave the descriptor to the caller, rt_io_open makes
 * it non-blocking and close-on-exec and finds the current runtime inside a
 * task, rt_io_close wakes the tasks waiting on it, and freeing a runtime
 * closes its own descriptors and every rt_io still open. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_io.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

TestSuite(io, .timeout = 110, .fini = fail_on_leaks);

/* ---- writing to a pipe nobody reads ------------------------------------------------- */

struct epipe_writer {
    rt_coro co;
    rt_io *io;
    rt_io_write wr;
};

static rt_poll epipe_writer_poll(void *state, rt_context *cx, void **out)
{
    struct epipe_writer *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_io_write_init(&s->wr, s->io, "zz", 2);
    RT_AWAIT(&s->co, cx, &s->wr);
    RT_RETURN(&s->co, out, (intptr_t)s->wr.result);
    RT_CORO_END(&s->co, out);
}

Test(io, write_to_a_pipe_whose_reader_is_gone_is_epipe_and_raises_no_sigpipe)
{
    /* SIGPIPE keeps its default action: a raised SIGPIPE kills this test. */
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    make_pipe(fds);
    rt_io *w = NULL;
    cr_assert_eq(rt_io_open(rt, fds[1], &w), 0);
    close(fds[0]);
    struct epipe_writer s = {.io = w};
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, epipe_writer_poll, rt_coro_drop, &s, sizeof s, &value), 0);
    cr_assert_eq((intptr_t)value, -EPIPE, "write returned %ld", (long)(intptr_t)value);
    cr_assert_eq(rt_io_close(w), 0);
    finish_runtime(rt, 0);
}

/* ---- rt_io_open --------------------------------------------------------------------- */

Test(io, open_of_a_closed_or_invalid_descriptor_is_ebadf_and_leaves_nothing_behind)
{
    rt_runtime *rt = new_runtime(1);
    int before = count_fds();
    rt_io *io = (rt_io *)(uintptr_t)0x1;
    cr_assert_eq(rt_io_open(rt, -1, &io), -EBADF);
    int fds[2];
    make_pipe(fds);
    close(fds[0]);
    close(fds[1]);
    cr_assert_eq(rt_io_open(rt, fds[0], &io), -EBADF, "an fd just closed");
    cr_assert_eq(rt_io_open(rt, 1 << 30, &io), -EBADF, "an fd above any limit");
    cr_assert_eq(count_fds(), before, "a failed rt_io_open left a descriptor open");
    finish_runtime(rt, 0);
}

Test(io, open_of_a_regular_file_or_directory_is_eperm_and_the_caller_keeps_the_fd)
{
    rt_runtime *rt = new_runtime(1);
    char path[] = "/tmp/asyncrt-io-test-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    unlink(path);
    int before = count_fds();
    rt_io *io = NULL;
    cr_assert_eq(rt_io_open(rt, fd, &io), -EPERM);
    cr_assert(fd_is_open(fd), "rt_io_open closed a descriptor it did not take");
    cr_assert_eq(count_fds(), before);
    close(fd);

    int dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    cr_assert_geq(dir, 0);
    cr_assert_eq(rt_io_open(rt, dir, &io), -EPERM, "a directory");
    cr_assert(fd_is_open(dir));
    close(dir);
    finish_runtime(rt, 0);
}

Test(io, open_rejects_null_arguments_and_a_shut_down_runtime_leaving_the_fd_to_the_caller)
{
    rt_runtime *rt = new_runtime(1);
    int fds[2];
    make_pipe(fds);
    rt_io *io = NULL;
    cr_assert_eq(rt_io_open(NULL, fds[0], &io), -EINVAL, "NULL runtime outside a task");
    cr_assert(fd_is_open(fds[0]));
    cr_assert_eq(rt_io_open(rt, fds[0], NULL), -EINVAL, "NULL out");
    cr_assert(fd_is_open(fds[0]));
    cr_assert_eq(rt_runtime_shutdown(rt), 0);
    cr_assert_eq(rt_io_open(rt, fds[0], &io), -ESHUTDOWN);
    cr_assert(fd_is_open(fds[0]));
    cr_assert_eq(rt_io_close(NULL), 0, "rt_io_close(NULL)");
    cr_assert_eq(rt_runtime_free(rt), 0);
    cr_assert(fd_is_open(fds[0]), "rt_runtime_free closed a descriptor it never owned");
    close(fds[0]);
    close(fds[1]);
}

Test(io, open_makes_a_blocking_descriptor_non_blocking_and_close_on_exec)
{
    rt_runtime *rt = new_runtime(1);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    rt_io *io = NULL;
    cr_assert_eq(rt_io_open(rt, fds[0], &io), 0);
    cr_assert_eq(rt_io_fd(io), fds[0]);
    int fl = fcntl(fds[0], F_GETFL);
    int fdfl = fcntl(fds[0], F_GETFD);
    cr_assert(fl >= 0 && (fl & O_NONBLOCK), "O_NONBLOCK not set");
    cr_assert(fdfl >= 0 && (fdfl & FD_CLOEXEC), "FD_CLOEXEC not set");
    cr_assert_eq(rt_io_close(io), 0);
    cr_assert(!fd_is_open(fds[0]));
    close(fds[1]);
    finish_runtime(rt, 0);
}

struct opens_inside {
    rt_coro co;
    int fd;
    int rc;
    rt_io *io;
    unsigned char buf[4];
    rt_io_read rd;
};

static rt_poll opens_inside_poll(void *state, rt_context *cx, void **out)
{
    struct opens_inside *s = state;
    RT_CORO_BEGIN(&s->co);
    s->rc = rt_io_open(NULL, s->fd, &s->io); /* NULL: rt_current_runtime() */
    if (s->rc != 0)
        RT_RETURN(&s->co, out, (intptr_t)s->rc);
    rt_io_read_init(&s->rd, s->io, s->buf, sizeof s->buf);
    RT_AWAIT(&s->co, cx, &s->rd);
    s->rc = rt_io_close(s->io);
    if (s->rc != 0)
        RT_RETURN(&s->co, out, (intptr_t)s->rc);
    RT_RETURN(&s->co, out, (intptr_t)s->rd.result);
    RT_CORO_END(&s->co, out);
}

Test(io, open_with_a_null_runtime_inside_a_task_uses_the_current_runtime)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    make_pipe(fds);
    cr_assert_eq(write(fds[1], "q", 1), 1);
    struct opens_inside s;
    memset(&s, 0, sizeof s);
    s.fd = fds[0];
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, opens_inside_poll, NULL, &s, sizeof s, &value), 0);
    cr_assert_eq((intptr_t)value, 1, "result %ld", (long)(intptr_t)value);
    cr_assert(!fd_is_open(fds[0]));
    close(fds[1]);
    finish_runtime(rt, 0);
}

static pthread_mutex_t close_mu = PTHREAD_MUTEX_INITIALIZER;
static bool close_done;
static struct event close_waiter_pending = EVENT_INIT;

struct close_waiter {
    rt_io *io;
    unsigned polls;
};

static rt_poll close_waiter_poll(void *state, rt_context *cx, void **out)
{
    struct close_waiter *s = state;
    pthread_mutex_lock(&close_mu);
    s->polls++;
    if (close_done) {
        pthread_mutex_unlock(&close_mu);
        *out = (void *)(uintptr_t)s->polls;
        return RT_READY;
    }
    /* A read holds nothing but the waker it leaves in the rt_io: a new one
     * on every poll is fine. */
    unsigned char byte;
    rt_io_read rd;
    rt_io_read_init(&rd, s->io, &byte, 1);
    rt_poll p = RT_POLL_OP(&rd, cx);
    pthread_mutex_unlock(&close_mu);
    if (p == RT_PENDING) {
        event_signal(&close_waiter_pending);
        return RT_PENDING;
    }
    *out = (void *)(uintptr_t)0xBAD; /* nothing was written: the read must wait */
    return RT_READY;
}

Test(io, close_wakes_a_task_waiting_on_the_descriptor)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    make_pipe(fds);
    rt_io *r = NULL;
    cr_assert_eq(rt_io_open(rt, fds[0], &r), 0);
    struct close_waiter s = {r, 0};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, close_waiter_poll, NULL, &s, &task), 0);
    cr_assert(event_wait_for(&close_waiter_pending, 1));
    pthread_mutex_lock(&close_mu);
    close_done = true;
    cr_assert_eq(rt_io_close(r), 0);
    pthread_mutex_unlock(&close_mu);
    void *value = NULL;
    int rc = task_wait_status(task, 5 * SEC, &value);
    if (rc == -ETIMEDOUT) {
        rt_task_cancel(task);
        (void)task_wait_status(task, WAIT_DEADLINE_NS, NULL);
        close(fds[1]);
        finish_runtime(rt, -1);
        cr_assert_fail("rt_io_close did not wake the task waiting on it");
    }
    cr_assert_eq(rc, 0);
    cr_assert_neq((uintptr_t)value, 0xBAD, "the read on an empty pipe did not wait");
    close(fds[1]);
    finish_runtime(rt, 0);
}

/* ---- shutdown with descriptors still open ---------------------------------------------- */

static struct event stuck_pending = EVENT_INIT;
static atomic_int stuck_drops;

struct stuck_reader {
    rt_coro co;
    rt_io *io;
    unsigned char buf[8];
    rt_io_read rd;
};

static rt_poll stuck_reader_poll(void *state, rt_context *cx, void **out)
{
    struct stuck_reader *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_io_read_init(&s->rd, s->io, s->buf, sizeof s->buf);
    RT_AWAIT_POLL(&s->co, note_pending(RT_POLL_OP(&s->rd, cx), &stuck_pending));
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

static void stuck_reader_drop(void *state)
{
    /* The rt_io stays open: the runtime closes it. The read holds nothing
     * but its waker in that rt_io, which the runtime releases with it. */
    (void)state;
    atomic_fetch_add(&stuck_drops, 1);
}

Test(io, runtime_free_closes_its_own_descriptors_and_every_rt_io_still_open)
{
    int before = count_fds();
    rt_runtime *rt = new_runtime(2);
    int fds[3][2];
    rt_io *ios[8];
    int n = 0;
    for (int i = 0; i < 3; i++) {
        make_pipe(fds[i]);
        cr_assert_eq(rt_io_open(rt, fds[i][0], &ios[n++]), 0);
        cr_assert_eq(rt_io_open(rt, fds[i][1], &ios[n++]), 0);
    }
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    cr_assert_geq(efd, 0);
    cr_assert_eq(rt_io_open(rt, efd, &ios[n++]), 0);
    int sv[2];
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    cr_assert_eq(rt_io_open(rt, sv[0], &ios[n++]), 0);
    close(sv[1]);
    /* Two tasks wait on descriptors the test never closes. */
    struct stuck_reader a = {.io = ios[0]};
    struct stuck_reader b = {.io = ios[6]};
    cr_assert_eq(RT_SPAWN_STATE(rt, stuck_reader_poll, stuck_reader_drop, &a, NULL), 0);
    cr_assert_eq(RT_SPAWN_STATE(rt, stuck_reader_poll, stuck_reader_drop, &b, NULL), 0);
    cr_assert(event_wait_for(&stuck_pending, 2));
    cr_assert_gt(count_fds(), before + 8);
    finish_runtime(rt, 2);
    cr_assert_eq(atomic_load(&stuck_drops), 2);
    for (int i = 0; i < 3; i++)
        cr_assert(!fd_is_open(fds[i][0]) && !fd_is_open(fds[i][1]),
                  "pipe %d was left open by rt_runtime_free", i);
    int after = count_fds();
    cr_assert_eq(after, before, "%d descriptors before the runtime, %d after rt_runtime_free",
                 before, after);
}

struct uses_pipe {
    rt_coro co;
    rt_io *r, *w;
    unsigned char buf[4];
    rt_io_write wr;
    rt_io_read rd;
};

static rt_poll uses_pipe_poll(void *state, rt_context *cx, void **out)
{
    struct uses_pipe *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_io_write_init(&s->wr, s->w, "ok", 2);
    RT_AWAIT(&s->co, cx, &s->wr);
    rt_io_read_init(&s->rd, s->r, s->buf, sizeof s->buf);
    RT_AWAIT(&s->co, cx, &s->rd);
    RT_RETURN(&s->co, out, (intptr_t)s->rd.result);
    RT_CORO_END(&s->co, out);
}

Test(io, runtimes_that_did_io_or_none_leave_no_descriptor_behind)
{
    int before = count_fds();
    for (int round = 0; round < 3; round++) {
        rt_runtime *rt = new_runtime(2);
        finish_runtime(rt, 0);
        cr_assert_eq(count_fds(), before, "an idle runtime left %d descriptors open",
                     count_fds() - before);

        rt = new_runtime(2);
        int fds[2];
        rt_io *r, *w;
        open_pipe(rt, &r, &w, fds);
        struct uses_pipe s = {.r = r, .w = w};
        void *value = NULL;
        cr_assert_eq(block_on_status(rt, uses_pipe_poll, rt_coro_drop, &s, sizeof s, &value), 0);
        cr_assert_eq((intptr_t)value, 2);
        if (round == 0) {
            cr_assert_eq(rt_io_close(r), 0);
            cr_assert_eq(rt_io_close(w), 0);
        } /* later rounds leave both to rt_runtime_free */
        finish_runtime(rt, 0);
        cr_assert_eq(count_fds(), before, "round %d: %d descriptors left open", round,
                     count_fds() - before);
    }
}
