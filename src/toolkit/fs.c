/* Files and paths on the blocking pool.
 *
 * Every operation owns a record (struct rt__fs_job) that it shares with one
 * job of the pool: the operation holds one reference from its init, and its
 * first poll gives the job a second one (rt_spawn_blocking_ex's release
 * drops it, whether the job ran or was cancelled before it started). The
 * job reads and writes nothing but the record: its copy of the paths, its
 * own buffer, its reference to the file, and the outcome. The operation
 * awaits the job through an rt_task_join kept inside it, which aborts the
 * job when the operation is dropped; whichever side lets go last frees the
 * record, and with it what the job made that nobody took (a descriptor
 * opened, a whole file read).
 *
 * An rt_file is counted too: the caller's handle and every record that
 * names the file hold a reference, so a descriptor is never closed (and its
 * number reused) while a job may still use it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h> /* rename */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asyncrt/diag.h>
#include <asyncrt/fs.h>

#include "atomic.h"
#include "common.h"
#include "fault.h"
#include "operation.h"

struct rt_file {
    uint32_t refs;  /* the caller's handle + each record naming the file */
    int fd;         /* owned; -1 in a handle not yet opened */
    rt_runtime *rt; /* whose pool runs the file's operations */
};

/* What a job does. */
enum fs_kind {
    FS_OPEN,
    FS_READ,
    FS_WRITE,
    FS_SYNC,
    FS_STAT,
    FS_FSTAT,
    FS_MKDIR,
    FS_RMDIR,
    FS_UNLINK,
    FS_RENAME,
    FS_READ_FILE,
};

struct rt__fs_job {
    uint32_t refs;        /* the operation's + the job's, once spawned */
    enum fs_kind kind;    /* what the job does */
    rt_runtime *rt;       /* whose pool runs it */
    rt_file *file;        /* a reference to the file worked on, or NULL */
    rt_file *opened;      /* FS_OPEN: the handle made at init; the job sets its fd */
    const char *path;     /* in tail[] */
    const char *path2;    /* FS_RENAME's target, in tail[] */
    int flags;            /* FS_OPEN */
    unsigned mode;        /* FS_OPEN, FS_MKDIR */
    bool data_only;       /* FS_SYNC */
    int64_t offset;       /* FS_READ, FS_WRITE: -1 for the file position */
    size_t len;           /* FS_READ, FS_WRITE: bytes in buf */
    size_t limit;         /* FS_READ_FILE */
    unsigned char *buf;   /* FS_READ, FS_WRITE: the job's own bytes, in tail[] */
    char *data;           /* FS_READ_FILE: the contents, until the operation takes them */
    size_t size;          /* FS_READ_FILE: their length */
    struct stat st;       /* FS_STAT, FS_FSTAT */
    int64_t result;       /* the job's outcome */
    unsigned char tail[]; /* buf, then the paths */
};

/* ---- Files and records: counted ------------------------------------------ */

static rt_file *file_ref(rt_file *f)
{
    rt__faa_u32(&f->refs, 1);
    return f;
}

/* Drops a reference; the last closes the descriptor. Returns close(2)'s
 * error when it closed it, else 0. */
static int file_unref(rt_file *f)
{
    if (f == NULL || rt__faa_u32(&f->refs, (uint32_t)-1) != 1)
        return 0;
    int rc = 0;
    if (f->fd >= 0 && close(f->fd) < 0)
        rc = -errno;
    free(f);
    return rc;
}

static void job_unref(struct rt__fs_job *job)
{
    if (rt__faa_u32(&job->refs, (uint32_t)-1) != 1)
        return;
    /* A handle the operation did not take: the descriptor the job opened
     * for it, if any, is closed with it. */
    file_unref(job->opened);
    file_unref(job->file);
    free(job->data);
    free(job);
}

/* rt_spawn_blocking_ex's release: the job's reference. */
static void job_release(void *arg)
{
    job_unref(arg);
}

/* A record with room for a buffer of buf_len bytes and copies of the
 * paths. Returns NULL with *err set. */
static struct rt__fs_job *job_new(enum fs_kind kind, rt_runtime *rt, const char *path,
                                  const char *path2, size_t buf_len, int *err)
{
    size_t l1 = 0, l2 = 0;
    if (path != NULL && (l1 = strnlen(path, PATH_MAX)) == PATH_MAX) {
        *err = -ENAMETOOLONG;
        return NULL;
    }
    if (path2 != NULL && (l2 = strnlen(path2, PATH_MAX)) == PATH_MAX) {
        *err = -ENAMETOOLONG;
        return NULL;
    }
    size_t size = sizeof(struct rt__fs_job) + buf_len + (path ? l1 + 1 : 0) + (path2 ? l2 + 1 : 0);
    struct rt__fs_job *job = rt__malloc(size);
    if (job == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    memset(job, 0, sizeof(*job));
    job->refs = 1;
    job->kind = kind;
    job->rt = rt;
    job->offset = -1;
    job->buf = job->tail;
    char *p = (char *)job->tail + buf_len;
    if (path != NULL) {
        memcpy(p, path, l1 + 1);
        job->path = p;
        p += l1 + 1;
    }
    if (path2 != NULL) {
        memcpy(p, path2, l2 + 1);
        job->path2 = p;
    }
    *err = 0;
    return job;
}

/* ---- The jobs: on a pool thread --------------------------------------------- */

/* open(2), retried when a signal interrupts it (a FIFO's open waits). */
static int open_retry(const char *path, int flags, unsigned mode)
{
    int fd;
    do
        fd = rt__open_mode(path, flags | O_CLOEXEC, (mode_t)mode);
    while (fd < 0 && errno == EINTR);
    return fd;
}

/* Opens a file that is not a directory. Returns the descriptor or -errno. */
static int open_file(const char *path, int flags, unsigned mode)
{
    int fd = open_retry(path, flags, mode);
    if (fd < 0)
        return -errno;
    struct stat st;
    int err = 0;
    if (fstat(fd, &st) < 0)
        err = -errno;
    else if (S_ISDIR(st.st_mode))
        err = -EISDIR;
    if (err < 0) {
        close(fd);
        return err;
    }
    return fd;
}

static int64_t do_read(struct rt__fs_job *job)
{
    ssize_t n;
    do
        n = job->offset < 0 ? read(job->file->fd, job->buf, job->len)
                            : pread(job->file->fd, job->buf, job->len, (off_t)job->offset);
    while (n < 0 && errno == EINTR);
    return n < 0 ? -errno : n;
}

/* Writes all len bytes unless an error stops it: the count written then,
 * or -errno when none was. */
static int64_t do_write(struct rt__fs_job *job)
{
    size_t done = 0;
    while (done < job->len) {
        ssize_t n = job->offset < 0 ? write(job->file->fd, job->buf + done, job->len - done)
                                    : pwrite(job->file->fd, job->buf + done, job->len - done,
                                             (off_t)(job->offset + (int64_t)done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return done > 0 ? (int64_t)done : -errno;
        if (n == 0)
            break; /* no progress: report what was written */
        done += (size_t)n;
    }
    return (int64_t)done;
}

/* Reads fd to its end into job->data (with a final 0 byte), refusing more
 * than job->limit bytes. */
static int64_t read_to_end(struct rt__fs_job *job, int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    if (S_ISDIR(st.st_mode))
        return -EISDIR;
    size_t most = job->limit + 1; /* reading this many proves the file too large */
    if (S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size >= most)
        return -EFBIG;
    /* The size it says, plus one byte to see the end (or the final 0). */
    size_t cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
    if (cap > most)
        cap = most;
    char *data = rt__malloc(cap);
    if (data == NULL)
        return -ENOMEM;
    size_t used = 0;
    for (;;) {
        if (used == cap) {
            if (cap == most) {
                free(data);
                return -EFBIG;
            }
            size_t grown = cap <= most / 2 ? cap * 2 : most;
            char *bigger = rt__realloc(data, grown);
            if (bigger == NULL) {
                free(data);
                return -ENOMEM;
            }
            data = bigger;
            cap = grown;
        }
        ssize_t n = read(fd, data + used, cap - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int err = -errno;
            free(data);
            return err;
        }
        if (n == 0)
            break;
        used += (size_t)n;
    }
    if (used == cap) { /* room for the final 0 */
        char *bigger = rt__realloc(data, used + 1);
        if (bigger == NULL) {
            free(data);
            return -ENOMEM;
        }
        data = bigger;
    }
    data[used] = '\0';
    job->data = data;
    job->size = used;
    return (int64_t)used;
}

static int64_t do_read_file(struct rt__fs_job *job)
{
    int fd = open_retry(job->path, O_RDONLY, 0);
    if (fd < 0)
        return -errno;
    int64_t r = read_to_end(job, fd);
    close(fd);
    return r;
}

static int64_t status(int rc)
{
    return rc < 0 ? -errno : 0;
}

/* The job: one system call (or a few), on a pool thread. */
static void *fs_job_run(void *arg)
{
    struct rt__fs_job *job = arg;
    int64_t r = 0;
    switch (job->kind) {
    case FS_OPEN: {
        int fd = open_file(job->path, job->flags, job->mode);
        if (fd >= 0)
            job->opened->fd = fd;
        r = fd < 0 ? fd : 0;
        break;
    }
    case FS_READ:
        r = do_read(job);
        break;
    case FS_WRITE:
        r = do_write(job);
        break;
    case FS_SYNC:
        r = status(job->data_only ? fdatasync(job->file->fd) : fsync(job->file->fd));
        break;
    case FS_STAT:
        r = status(stat(job->path, &job->st));
        break;
    case FS_FSTAT:
        r = status(fstat(job->file->fd, &job->st));
        break;
    case FS_MKDIR:
        r = status(mkdir(job->path, (mode_t)job->mode));
        break;
    case FS_RMDIR:
        r = status(rmdir(job->path));
        break;
    case FS_UNLINK:
        r = status(unlink(job->path));
        break;
    case FS_RENAME:
        r = status(rename(job->path, job->path2));
        break;
    case FS_READ_FILE:
        r = do_read_file(job);
        break;
    }
    job->result = r;
    return NULL;
}

/* ---- The operations' common part ------------------------------------------- */

/* Spawns the job at the first poll, then awaits it: RT_READY with *result
 * the job's outcome, or the error that kept it from running. */
static rt_poll call_poll(struct rt__fs_job *job, rt_task_join *join, rt_context *cx,
                         int64_t *result)
{
    if (join->future.vtable == NULL) {
        /* Not yet visible to any other thread: plain stores. */
        job->refs = 2;
        rt_task *task;
        int err = rt_spawn_blocking_ex(job->rt, fs_job_run, job_release, job, &task);
        if (err < 0) {
            job->refs = 1; /* a refused spawn releases nothing */
            *result = err;
            return RT_READY;
        }
        rt_task_join_init(join, task);
        join->cancel_on_drop = true; /* a dropped operation aborts its job */
    }
    if (RT_POLL_OP(join, cx) == RT_PENDING)
        return RT_PENDING;
    /* The job's release ran before the join saw the end, so the record is
     * the operation's alone now. Cancelled: only a shutdown cancels a job
     * the operation still awaits, before it ran. */
    *result = join->result < 0 ? -ESHUTDOWN : job->result;
    return RT_READY;
}

/* Finishes an operation: lets go of the record first. */
static rt_poll call_finish(rt_future *f, struct rt__fs_job **job, int64_t result)
{
    job_unref(*job);
    *job = NULL;
    return rt__future_finish(f, result);
}

/* Drops an unfinished operation: aborts its job (one not started never
 * runs; its release still runs) and lets go of the record. */
static void call_drop(struct rt__fs_job **job, rt_task_join *join)
{
    RT_DROP(join); /* cancel_on_drop: aborts, then detaches; nothing if never spawned */
    job_unref(*job);
    *job = NULL;
}

/* Starts an operation's header and common part with `job`, or leaves it
 * finished with `err` when job is NULL. Returns 0 or err. */
static int call_init(rt_future *f, const rt_future_vtable *vtable, struct rt__fs_job **slot,
                     rt_task_join *join, struct rt__fs_job *job, int err)
{
    memset(join, 0, sizeof(*join));
    *slot = job;
    f->vtable = vtable;
    f->result = 0;
    if (job == NULL) {
        rt__future_finish(f, err);
        return err;
    }
    return 0;
}

/* What an operation waits for: its job on the blocking pool. The job's
 * kind, paths and file are set at init and never change; its outcome is
 * the pool thread's and is left out. A file's descriptor is fixed while a
 * record holds a reference to it. */
static void call_describe(const struct rt__fs_job *job, rt_wait_info *info)
{
    static const char *const names[] = {
        [FS_OPEN] = "open",     [FS_READ] = "read",      [FS_WRITE] = "write",
        [FS_SYNC] = "sync",     [FS_STAT] = "stat",      [FS_FSTAT] = "stat",
        [FS_MKDIR] = "mkdir",   [FS_RMDIR] = "rmdir",    [FS_UNLINK] = "unlink",
        [FS_RENAME] = "rename", [FS_READ_FILE] = "read",
    };
    info->kind = RT_WAIT_BLOCKING;
    if (job == NULL) {
        rt__wait_printf(info, "file operation on the blocking pool");
        return;
    }
    rt__wait_printf(info, "%s of ", names[job->kind]);
    if (job->file != NULL) {
        info->fd = job->file->fd;
        rt__wait_printf(info, "fd %d", job->file->fd);
    } else {
        rt__wait_printf(info, "%s", job->path != NULL ? job->path : "?");
        if (job->path2 != NULL)
            rt__wait_printf(info, " to %s", job->path2);
    }
    rt__wait_printf(info, " on the blocking pool");
}

/* The runtime of a path operation: rt, or the current one. */
static rt_runtime *runtime_of(rt_runtime *rt)
{
    return rt != NULL ? rt : rt_current_runtime();
}

/* A record for an operation on file f. */
static struct rt__fs_job *file_job(enum fs_kind kind, rt_file *f, size_t buf_len, int *err)
{
    struct rt__fs_job *job = job_new(kind, f->rt, NULL, NULL, buf_len, err);
    if (job != NULL)
        job->file = file_ref(f);
    return job;
}

/* ---- Open and close ---------------------------------------------------------- */

static rt_poll open_vpoll(rt_future *f, rt_context *cx)
{
    rt_file_open *op = (rt_file_open *)f;
    int64_t r;
    if (call_poll(op->job, &op->join, cx, &r) == RT_PENDING)
        return RT_PENDING;
    if (r == 0) {
        op->file = op->job->opened;
        op->job->opened = NULL;
    }
    return call_finish(f, &op->job, r);
}

static void open_vdrop(rt_future *f)
{
    rt_file_open *op = (rt_file_open *)f;
    call_drop(&op->job, &op->join);
}

static void open_vdescribe(const rt_future *f, rt_wait_info *info)
{
    call_describe(((const rt_file_open *)f)->job, info);
}

static const rt_future_vtable open_vtable = {open_vpoll, open_vdrop, open_vdescribe};

/* The flags rt_file_open takes (O_RDONLY is 0). */
#define OPEN_FLAGS                                                                                 \
    (O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_NOFOLLOW | O_NOCTTY | O_NOATIME |       \
     O_SYNC | O_DSYNC | O_CLOEXEC)

RT_EXPORT int rt_file_open_init(rt_file_open *op, rt_runtime *rt, const char *path, int flags,
                                unsigned mode)
{
    if (op == NULL)
        return -EINVAL;
    op->file = NULL;
    rt = runtime_of(rt);
    int err = 0;
    struct rt__fs_job *job = NULL;
    if (path == NULL || rt == NULL || (flags & ~OPEN_FLAGS) != 0 ||
        (flags & O_ACCMODE) == O_ACCMODE || mode > 07777)
        err = -EINVAL;
    else if ((job = job_new(FS_OPEN, rt, path, NULL, 0, &err)) != NULL) {
        job->opened = rt__malloc(sizeof(rt_file));
        if (job->opened == NULL) {
            free(job);
            job = NULL;
            err = -ENOMEM;
        } else {
            job->opened->refs = 1;
            job->opened->fd = -1;
            job->opened->rt = rt;
            job->flags = flags;
            job->mode = mode;
        }
    }
    return call_init(&op->future, &open_vtable, &op->job, &op->join, job, err);
}

RT_EXPORT int rt_file_close(rt_file *f)
{
    return file_unref(f);
}

RT_EXPORT int rt_file_fd(const rt_file *f)
{
    return f != NULL ? f->fd : -EBADF;
}

/* ---- Read and write ---------------------------------------------------------- */

static rt_poll read_vpoll(rt_future *f, rt_context *cx)
{
    rt_file_read *op = (rt_file_read *)f;
    int64_t r;
    if (call_poll(op->job, &op->join, cx, &r) == RT_PENDING)
        return RT_PENDING;
    if (r > 0)
        memcpy(op->buf, op->job->buf, (size_t)r);
    return call_finish(f, &op->job, r);
}

static void read_vdrop(rt_future *f)
{
    rt_file_read *op = (rt_file_read *)f;
    call_drop(&op->job, &op->join);
}

static void read_vdescribe(const rt_future *f, rt_wait_info *info)
{
    call_describe(((const rt_file_read *)f)->job, info);
}

static const rt_future_vtable read_vtable = {read_vpoll, read_vdrop, read_vdescribe};

static size_t io_len(size_t len)
{
    return len < RT_FILE_IO_MAX ? len : RT_FILE_IO_MAX;
}

/* A read at offset (positional), or at the file position. */
static int read_init(rt_file_read *op, rt_file *f, void *buf, size_t len, int64_t offset,
                     bool positional)
{
    if (op == NULL)
        return -EINVAL;
    op->file = f;
    op->buf = buf;
    op->len = io_len(len);
    op->offset = positional ? offset : -1;
    int err = -EINVAL;
    struct rt__fs_job *job = NULL;
    if (f != NULL && (buf != NULL || len == 0) && (!positional || offset >= 0) &&
        (job = file_job(FS_READ, f, op->len, &err)) != NULL) {
        job->len = op->len;
        job->offset = op->offset;
    }
    return call_init(&op->future, &read_vtable, &op->job, &op->join, job, err);
}

RT_EXPORT int rt_file_read_init(rt_file_read *op, rt_file *f, void *buf, size_t len)
{
    return read_init(op, f, buf, len, -1, false);
}

RT_EXPORT int rt_file_pread_init(rt_file_read *op, rt_file *f, void *buf, size_t len,
                                 int64_t offset)
{
    return read_init(op, f, buf, len, offset, true);
}

static rt_poll write_vpoll(rt_future *f, rt_context *cx)
{
    rt_file_write *op = (rt_file_write *)f;
    int64_t r;
    if (call_poll(op->job, &op->join, cx, &r) == RT_PENDING)
        return RT_PENDING;
    return call_finish(f, &op->job, r);
}

static void write_vdrop(rt_future *f)
{
    rt_file_write *op = (rt_file_write *)f;
    call_drop(&op->job, &op->join);
}

static void write_vdescribe(const rt_future *f, rt_wait_info *info)
{
    call_describe(((const rt_file_write *)f)->job, info);
}

static const rt_future_vtable write_vtable = {write_vpoll, write_vdrop, write_vdescribe};

/* A write at offset (positional), or at the file position. */
static int write_init(rt_file_write *op, rt_file *f, const void *buf, size_t len, int64_t offset,
                      bool positional)
{
    if (op == NULL)
        return -EINVAL;
    op->file = f;
    op->len = io_len(len);
    op->offset = positional ? offset : -1;
    int err = -EINVAL;
    struct rt__fs_job *job = NULL;
    if (f != NULL && (buf != NULL || len == 0) && (!positional || offset >= 0) &&
        (job = file_job(FS_WRITE, f, op->len, &err)) != NULL) {
        if (op->len > 0)
            memcpy(job->buf, buf, op->len); /* the caller's buffer is free from here on */
        job->len = op->len;
        job->offset = op->offset;
    }
    return call_init(&op->future, &write_vtable, &op->job, &op->join, job, err);
}

RT_EXPORT int rt_file_write_init(rt_file_write *op, rt_file *f, const void *buf, size_t len)
{
    return write_init(op, f, buf, len, -1, false);
}

RT_EXPORT int rt_file_pwrite_init(rt_file_write *op, rt_file *f, const void *buf, size_t len,
                                  int64_t offset)
{
    return write_init(op, f, buf, len, offset, true);
}

/* ---- Operations without a value: sync and paths ------------------------------- */

static rt_poll fs_op_vpoll(rt_future *f, rt_context *cx)
{
    rt_fs_op *op = (rt_fs_op *)f;
    int64_t r;
    if (call_poll(op->job, &op->join, cx, &r) == RT_PENDING)
        return RT_PENDING;
    return call_finish(f, &op->job, r);
}

static void fs_op_vdrop(rt_future *f)
{
    rt_fs_op *op = (rt_fs_op *)f;
    call_drop(&op->job, &op->join);
}

static void fs_op_vdescribe(const rt_future *f, rt_wait_info *info)
{
    call_describe(((const rt_fs_op *)f)->job, info);
}

static const rt_future_vtable fs_op_vtable = {fs_op_vpoll, fs_op_vdrop, fs_op_vdescribe};

RT_EXPORT int rt_file_sync_init(rt_fs_op *op, rt_file *f, bool data_only)
{
    if (op == NULL)
        return -EINVAL;
    int err = -EINVAL;
    struct rt__fs_job *job = NULL;
    if (f != NULL && (job = file_job(FS_SYNC, f, 0, &err)) != NULL)
        job->data_only = data_only;
    return call_init(&op->future, &fs_op_vtable, &op->job, &op->join, job, err);
}

/* A path operation's record, or NULL with *err set. */
static struct rt__fs_job *path_job(enum fs_kind kind, rt_runtime *rt, const char *path,
                                   const char *path2, int *err)
{
    rt = runtime_of(rt);
    if (path == NULL || rt == NULL || (kind == FS_RENAME && path2 == NULL)) {
        *err = -EINVAL;
        return NULL;
    }
    return job_new(kind, rt, path, path2, 0, err);
}

RT_EXPORT int rt_fs_mkdir_init(rt_fs_op *op, rt_runtime *rt, const char *path, unsigned mode)
{
    if (op == NULL)
        return -EINVAL;
    int err = -EINVAL;
    struct rt__fs_job *job = NULL;
    if (mode <= 07777 && (job = path_job(FS_MKDIR, rt, path, NULL, &err)) != NULL)
        job->mode = mode;
    return call_init(&op->future, &fs_op_vtable, &op->job, &op->join, job, err);
}

RT_EXPORT int rt_fs_rmdir_init(rt_fs_op *op, rt_runtime *rt, const char *path)
{
    if (op == NULL)
        return -EINVAL;
    int err;
    struct rt__fs_job *job = path_job(FS_RMDIR, rt, path, NULL, &err);
    return call_init(&op->future, &fs_op_vtable, &op->job, &op->join, job, err);
}

RT_EXPORT int rt_fs_unlink_init(rt_fs_op *op, rt_runtime *rt, const char *path)
{
    if (op == NULL)
        return -EINVAL;
    int err;
    struct rt__fs_job *job = path_job(FS_UNLINK, rt, path, NULL, &err);
    return call_init(&op->future, &fs_op_vtable, &op->job, &op->join, job, err);
}

RT_EXPORT int rt_fs_rename_init(rt_fs_op *op, rt_runtime *rt, const char *from, const char *to)
{
    if (op == NULL)
        return -EINVAL;
    int err;
    struct rt__fs_job *job = path_job(FS_RENAME, rt, from, to, &err);
    return call_init(&op->future, &fs_op_vtable, &op->job, &op->join, job, err);
}

/* ---- Stat ---------------------------------------------------------------------- */

static rt_poll stat_vpoll(rt_future *f, rt_context *cx)
{
    rt_fs_stat *op = (rt_fs_stat *)f;
    int64_t r;
    if (call_poll(op->job, &op->join, cx, &r) == RT_PENDING)
        return RT_PENDING;
    if (r == 0)
        op->st = op->job->st;
    return call_finish(f, &op->job, r);
}

static void stat_vdrop(rt_future *f)
{
    rt_fs_stat *op = (rt_fs_stat *)f;
    call_drop(&op->job, &op->join);
}

static void stat_vdescribe(const rt_future *f, rt_wait_info *info)
{
    call_describe(((const rt_fs_stat *)f)->job, info);
}

static const rt_future_vtable stat_vtable = {stat_vpoll, stat_vdrop, stat_vdescribe};

RT_EXPORT int rt_fs_stat_init(rt_fs_stat *op, rt_runtime *rt, const char *path)
{
    if (op == NULL)
        return -EINVAL;
    memset(&op->st, 0, sizeof(op->st));
    int err;
    struct rt__fs_job *job = path_job(FS_STAT, rt, path, NULL, &err);
    return call_init(&op->future, &stat_vtable, &op->job, &op->join, job, err);
}

RT_EXPORT int rt_file_stat_init(rt_fs_stat *op, rt_file *f)
{
    if (op == NULL)
        return -EINVAL;
    memset(&op->st, 0, sizeof(op->st));
    int err = -EINVAL;
    struct rt__fs_job *job = f != NULL ? file_job(FS_FSTAT, f, 0, &err) : NULL;
    return call_init(&op->future, &stat_vtable, &op->job, &op->join, job, err);
}

/* ---- Whole files --------------------------------------------------------------- */

static rt_poll read_file_vpoll(rt_future *f, rt_context *cx)
{
    rt_fs_read_file *op = (rt_fs_read_file *)f;
    int64_t r;
    if (call_poll(op->job, &op->join, cx, &r) == RT_PENDING)
        return RT_PENDING;
    if (r >= 0) {
        op->data = op->job->data;
        op->size = op->job->size;
        op->job->data = NULL;
    }
    return call_finish(f, &op->job, r);
}

static void read_file_vdrop(rt_future *f)
{
    rt_fs_read_file *op = (rt_fs_read_file *)f;
    call_drop(&op->job, &op->join);
}

static void read_file_vdescribe(const rt_future *f, rt_wait_info *info)
{
    call_describe(((const rt_fs_read_file *)f)->job, info);
}

static const rt_future_vtable read_file_vtable = {read_file_vpoll, read_file_vdrop,
                                                  read_file_vdescribe};

RT_EXPORT int rt_fs_read_file_init(rt_fs_read_file *op, rt_runtime *rt, const char *path,
                                   size_t limit)
{
    if (op == NULL)
        return -EINVAL;
    op->data = NULL;
    op->size = 0;
    int err = -EINVAL;
    struct rt__fs_job *job = NULL;
    if (limit <= SIZE_MAX / 2 && (job = path_job(FS_READ_FILE, rt, path, NULL, &err)) != NULL)
        job->limit = limit;
    return call_init(&op->future, &read_file_vtable, &op->job, &op->join, job, err);
}
