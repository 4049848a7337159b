/* The Unix socket suites' fixtures (support_unix.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_unix.h"

#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A fresh directory for the test's socket files. */
void make_dir(char dir[static 32])
{
    strcpy(dir, "/tmp/asyncrt-unix-XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

/* Removes the directory, which must be empty by then: a socket file left
 * behind fails the test. */
void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        cr_assert(e->d_name[0] == '.', "%s/%s was left behind", dir, e->d_name);
    closedir(d);
    cr_assert_eq(rmdir(dir), 0, "rmdir %s: %s", dir, strerror(errno));
}

void path_in(char *out, size_t size, const char *dir, const char *file)
{
    int n = snprintf(out, size, "%s/%s", dir, file);
    cr_assert(n > 0 && (size_t)n < size);
}

/* An abstract name no other test process uses. */
void abstract_name(char *out, size_t size, const char *what)
{
    int n = snprintf(out, size, "@asyncrt-test-%ld-%s", (long)getpid(), what);
    cr_assert(n > 0 && (size_t)n < size);
}

bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Awaits one operation prepared by the test. */
struct await_op {
    rt_coro co;
    rt_future *op;
};

rt_poll await_op_poll(void *state, rt_context *cx, void **out)
{
    struct await_op *a = state;
    RT_CORO_BEGIN(&a->co);
    RT_AWAIT_FUTURE(&a->co, cx, a->op);
    RT_CORO_END(&a->co, out);
}

void run_op(rt_runtime *rt, rt_future *op)
{
    struct await_op a = {.op = op};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, await_op_poll, rt_coro_drop, &a, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
}

/* A task that waits in one operation (the test's), signalling `pending`
 * each time it waits; its drop drops the operation. */
struct event pending = EVENT_INIT;

struct waiter {
    rt_coro co;
    rt_future *op;
};

rt_poll waiter_poll(void *state, rt_context *cx, void **out)
{
    struct waiter *w = state;
    RT_CORO_BEGIN(&w->co);
    RT_AWAIT_POLL(&w->co, note_pending(rt_future_poll(w->op, cx), &pending));
    RT_CORO_END(&w->co, out);
}

void waiter_drop(void *state)
{
    struct waiter *w = state;
    rt_future_drop(w->op);
}

/* Starts a waiter on op and returns once it waits. */
rt_task *start_waiter(rt_runtime *rt, rt_future *op)
{
    struct waiter w = {.op = op};
    unsigned long seen = event_count(&pending);
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, waiter_poll, waiter_drop, &w, &t), 0);
    cr_assert(event_wait_for(&pending, seen + 1));
    return t;
}

/* Aborts a waiter and checks that it ended cancelled. */
void abort_waiter(rt_task *t)
{
    rt_task_cancel(t);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), -ECANCELED);
}

rt_io *listen_on(rt_runtime *rt, const char *name, unsigned flags)
{
    rt_io *l = NULL;
    int rc = rt_unix_listen(rt, name, 16, flags, &l);
    cr_assert_eq(rc, 0, "rt_unix_listen %s: %s", name, rt_strerror(rc));
    return l;
}

rt_io *connect_to(rt_runtime *rt, const char *name)
{
    static rt_unix_connect c;
    cr_assert_eq(rt_unix_connect_init(&c, rt, name), 0);
    run_op(rt, &c.future);
    cr_assert_eq(c.result, 0, "connect %s: %s", name, rt_strerror((int)c.result));
    return c.conn;
}

rt_io *accept_from(rt_runtime *rt, rt_io *listener)
{
    static rt_unix_accept a;
    cr_assert_eq(rt_unix_accept_init(&a, listener), 0);
    run_op(rt, &a.future);
    cr_assert_eq(a.result, 0, "accept: %s", rt_strerror((int)a.result));
    return a.conn;
}

void write_io(rt_runtime *rt, rt_io *io, const char *s)
{
    static rt_io_write_all w;
    rt_io_write_all_init(&w, io, s, strlen(s));
    run_op(rt, &w.future);
    cr_assert_eq(w.result, (int64_t)strlen(s));
}

/* Reads exactly strlen(want) bytes and compares them. */
void expect_io(rt_runtime *rt, rt_io *io, const char *want)
{
    static char buf[256];
    static rt_io_read r;
    size_t len = strlen(want), got = 0;
    while (got < len) {
        rt_io_read_init(&r, io, buf + got, len - got);
        run_op(rt, &r.future);
        cr_assert_gt(r.result, 0, "read: %lld", (long long)r.result);
        got += (size_t)r.result;
    }
    cr_assert_eq(memcmp(buf, want, len), 0);
}

int64_t read_once(rt_runtime *rt, rt_io *io)
{
    static char buf[64];
    static rt_io_read r;
    rt_io_read_init(&r, io, buf, sizeof buf);
    run_op(rt, &r.future);
    return r.result;
}

void expect_own_credentials(rt_io *io)
{
    rt_unix_cred cred;
    cr_assert_eq(rt_unix_peer_cred(io, &cred), 0);
    cr_assert_eq(cred.pid, getpid());
    cr_assert_eq(cred.uid, getuid());
    cr_assert_eq(cred.gid, getgid());
}

void expect_local_name(rt_io *io, const char *name)
{
    struct sockaddr_un addr;
    socklen_t len = 1; /* an output only */
    cr_assert_eq(rt_unix_local_addr(io, &addr, &len), 0);
    char got[128];
    cr_assert_eq(rt_unix_addr_name(&addr, len, got, sizeof got), (int)strlen(name));
    cr_assert_str_eq(got, name);
}
