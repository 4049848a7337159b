/* The file suites' fixtures (support_fs.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_fs.h"

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the temporary directory ------------------------------------------------ */

char dir[64];

int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* After every test: a test that failed half-way leaves no directory behind
 * either; then the leak check. */
void fs_fini(void)
{
    if (dir[0] != '\0')
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    fail_on_leaks();
}

void make_dir(void)
{
    strcpy(dir, "/tmp/asyncrt-fs-XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
    umask(022);
}

/* A path in the directory, in one of a few rotating buffers. */
const char *in_dir(const char *name)
{
    static char paths[8][PATH_MAX];
    static unsigned next;
    char *p = paths[next++ % 8];
    snprintf(p, PATH_MAX, "%s/%s", dir, name);
    return p;
}

void remove_dir(void)
{
    cr_assert_eq(nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
    struct stat st;
    cr_assert_eq(stat(dir, &st), -1, "the temporary directory is still there");
    dir[0] = '\0';
}

/* ---- awaiting an operation in a task ---------------------------------------- */

/* A task that awaits one operation prepared by the test, signalling
 * `pending` (if any) whenever it waits, and `dropped` (if any) when its
 * drop runs (after it finished, too). */
struct awaiter {
    rt_coro co;
    rt_future *op;
    struct event *pending;
    struct event *dropped;
};

rt_poll awaiter_poll(void *state, rt_context *cx, void **out)
{
    struct awaiter *a = state;
    RT_CORO_BEGIN(&a->co);
    RT_AWAIT_POLL(&a->co, a->pending != NULL ? note_pending(rt_future_poll(a->op, cx), a->pending)
                                             : rt_future_poll(a->op, cx));
    RT_CORO_END(&a->co, out);
}

void awaiter_drop(void *state)
{
    struct awaiter *a = state;
    rt_future_drop(a->op);
    if (a->dropped != NULL)
        event_signal(a->dropped);
}

rt_task *spawn_awaiter(rt_runtime *rt, rt_future *op, struct event *pending, struct event *dropped)
{
    struct awaiter a = {.op = op, .pending = pending, .dropped = dropped};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, awaiter_poll, awaiter_drop, &a, &t), 0);
    return t;
}

/* Awaits op in a task and returns its result. */
int64_t run_op(rt_runtime *rt, rt_future *op)
{
    rt_task *t = spawn_awaiter(rt, op, NULL, NULL);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert(rt_future_is_done(op));
    return op->result;
}

/* Spawns a task awaiting op and returns once it waits. */
rt_task *start_waiting(rt_runtime *rt, rt_future *op, struct event *dropped)
{
    static struct event pending = EVENT_INIT;
    unsigned long seen = event_count(&pending);
    rt_task *t = spawn_awaiter(rt, op, &pending, dropped);
    cr_assert(event_wait_for(&pending, seen + 1));
    return t;
}

/* Aborts a task waiting in op and checks that the drop reached op. */
void abort_waiting(rt_task *t, rt_future *op)
{
    rt_task_cancel(t);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(rt_future_is_done(op));
    cr_assert_eq(op->result, -ECANCELED);
}

/* ---- the operations, one call each ------------------------------------------ */

int64_t open_file(rt_runtime *rt, const char *path, int flags, unsigned mode, rt_file **out)
{
    rt_file_open op;
    cr_assert_eq(rt_file_open_init(&op, rt, path, flags, mode), 0);
    int64_t r = run_op(rt, &op.future);
    cr_assert_eq(op.job, NULL);
    if (r == 0)
        cr_assert_not_null(op.file);
    else
        cr_assert_null(op.file);
    if (out != NULL)
        *out = op.file;
    else if (op.file != NULL)
        rt_file_close(op.file);
    return r;
}

/* A read (offset < 0: at the file position). */
int64_t read_at(rt_runtime *rt, rt_file *f, void *buf, size_t len, int64_t offset)
{
    rt_file_read op;
    if (offset < 0)
        cr_assert_eq(rt_file_read_init(&op, f, buf, len), 0);
    else
        cr_assert_eq(rt_file_pread_init(&op, f, buf, len, offset), 0);
    return run_op(rt, &op.future);
}

int64_t write_at(rt_runtime *rt, rt_file *f, const void *buf, size_t len, int64_t offset)
{
    rt_file_write op;
    if (offset < 0)
        cr_assert_eq(rt_file_write_init(&op, f, buf, len), 0);
    else
        cr_assert_eq(rt_file_pwrite_init(&op, f, buf, len, offset), 0);
    return run_op(rt, &op.future);
}

int64_t stat_path(rt_runtime *rt, const char *path, struct stat *st)
{
    rt_fs_stat op;
    cr_assert_eq(rt_fs_stat_init(&op, rt, path), 0);
    int64_t r = run_op(rt, &op.future);
    if (st != NULL)
        *st = op.st;
    return r;
}

int64_t stat_file(rt_runtime *rt, rt_file *f, struct stat *st)
{
    rt_fs_stat op;
    cr_assert_eq(rt_file_stat_init(&op, f), 0);
    int64_t r = run_op(rt, &op.future);
    if (st != NULL)
        *st = op.st;
    return r;
}

int64_t sync_file(rt_runtime *rt, rt_file *f, bool data_only)
{
    rt_fs_op op;
    cr_assert_eq(rt_file_sync_init(&op, f, data_only), 0);
    return run_op(rt, &op.future);
}

int64_t make_directory(rt_runtime *rt, const char *path, unsigned mode)
{
    rt_fs_op op;
    cr_assert_eq(rt_fs_mkdir_init(&op, rt, path, mode), 0);
    return run_op(rt, &op.future);
}

int64_t remove_directory(rt_runtime *rt, const char *path)
{
    rt_fs_op op;
    cr_assert_eq(rt_fs_rmdir_init(&op, rt, path), 0);
    return run_op(rt, &op.future);
}

int64_t unlink_path(rt_runtime *rt, const char *path)
{
    rt_fs_op op;
    cr_assert_eq(rt_fs_unlink_init(&op, rt, path), 0);
    return run_op(rt, &op.future);
}

int64_t rename_path(rt_runtime *rt, const char *from, const char *to)
{
    rt_fs_op op;
    cr_assert_eq(rt_fs_rename_init(&op, rt, from, to), 0);
    return run_op(rt, &op.future);
}

/* Reads a whole file; *data is the caller's to free (NULL on error). */
int64_t read_whole(rt_runtime *rt, const char *path, size_t limit, char **data, size_t *size)
{
    rt_fs_read_file op;
    cr_assert_eq(rt_fs_read_file_init(&op, rt, path, limit), 0);
    int64_t r = run_op(rt, &op.future);
    if (r >= 0) {
        cr_assert_not_null(op.data);
        cr_assert_eq(op.size, (size_t)r);
        cr_assert_eq(op.data[op.size], '\0', "no final 0 byte");
    } else {
        cr_assert_null(op.data);
    }
    *data = op.data;
    *size = op.size;
    return r;
}

/* The runtime of the tests that do not need pool settings. */
rt_runtime *plain_runtime(void)
{
    return new_runtime(2);
}

/* A pool of one thread: jobs run one at a time, in the order queued. */
rt_runtime *one_thread_pool(void)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.blocking_threads = 1;
    return new_runtime_config(&cfg);
}

/* A job that holds its pool thread until `go` is signalled. */
struct event held_started = EVENT_INIT;
struct event go = EVENT_INIT;

void *held_job(void *arg)
{
    event_signal(&held_started);
    cr_assert(event_wait_for(&go, 1));
    return arg;
}

void *quick_job(void *arg)
{
    return arg;
}

/* With a pool of one thread: returns once every job queued before has
 * ended, its release included (the pool runs them in order, and a job's
 * release runs before its completion). */
void pool_barrier(rt_runtime *rt)
{
    rt_task *t;
    cr_assert_eq(rt_spawn_blocking(rt, quick_job, NULL, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
}

void write_fd_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        cr_assert_gt(n, 0, "write: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

void read_fd_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        cr_assert_gt(n, 0, "read: %s", n < 0 ? strerror(errno) : "end of stream");
        p += n;
        len -= (size_t)n;
    }
}

unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 131 + i / 4099);
}
