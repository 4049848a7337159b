/* asyncrt: files and paths, on the blocking pool.
 *
 * epoll cannot watch a regular file (rt_io_open refuses one with -EPERM),
 * and a file's system calls block the thread that makes them. Every
 * operation here therefore makes its system call in a job on the
 * runtime's blocking pool (rt_spawn_blocking_ex, task.h): the call blocks
 * a pool thread, never a worker, and the task awaiting the operation waits
 * for it like for anything else. The pool is the backend because it is
 * portable and needs nothing beyond threads; io_uring is an option to
 * measure later. Reading a whole file is
 *
 *     rt_fs_read_file_init(&s->conf, NULL, "/etc/app.conf", 1 << 20);
 *     RT_AWAIT(&s->co, cx, &s->conf);
 *     if (s->conf.result < 0) // -ENOENT, -EISDIR, -EFBIG (over 1 MiB)...
 *         ...;
 *     parse(s->conf.data, s->conf.size); // then free(s->conf.data)
 *
 * What happens where, for every operation of this header (each an
 * operation of the shape of future.h):
 * - The init checks the arguments and allocates a record it will share
 *   with the job: a copy of each path, a buffer for the bytes (see
 *   RT_FILE_IO_MAX), a reference to the file. It makes no system call and
 *   queues nothing, so an init that succeeded fails later only by the
 *   operation's result.
 * - An operation initialised and never polled holds that record, so it must
 *   still be dropped (or awaited); the drop frees the record, and no job
 *   ever runs. Otherwise the record is leaked (with, for rt_file_open, the
 *   file handle made for it), and so is the reference to the file: the
 *   file's descriptor then stays open after rt_file_close. Initialising the
 *   operation again without a drop leaks them the same way.
 * - The first poll queues one job on the pool of the runtime (the one
 *   given, or the file's); it waits its turn behind busy pool threads
 *   (rt_config.blocking_threads). The poll that finds the job ended
 *   finishes the operation, copying what the job produced into the
 *   operation's fields (and, for a read, into the caller's buffer).
 * - The job works on the record only, never on the operation or on the
 *   caller's memory: whichever of the two lets go of the record last frees
 *   it, so a job may outlive its operation and its task.
 * Abort safety: a dropped operation aborts its job. A job that had not
 *   started never runs: nothing happened. One already running cannot be
 *   interrupted: its system call completes and its effect stays (bytes
 *   written, a file created, renamed or removed, the file position moved by
 *   a read) while its outcome is lost; what it made for the operation (a
 *   descriptor opened, bytes read, a whole file's contents) is released when
 *   it ends, and the caller's memory is never touched after the drop.
 * Shutdown: rt_runtime_shutdown cancels the jobs that have not started (an
 *   operation still polled then finishes with -ESHUTDOWN) and waits for
 *   running ones as rt_config.blocking_shutdown_ns says; a job it abandons
 *   frees its record when it ends.
 * Errors: results are 0 or a count, or a negative errno: the system call's
 *   own, passed through (-ENOENT, -EACCES, -EEXIST, -ENOSPC, -EIO...), and
 *   -EAGAIN (the pool could not start a thread for the job; nothing ran)
 *   and -ESHUTDOWN (the runtime is shutting down or shut down; nothing
 *   ran). Inits return -EINVAL for bad arguments (and leave the operation
 *   finished with it, see future.h), -ENAMETOOLONG for a path of PATH_MAX
 *   bytes or more, -ENOMEM.
 * Threads: an operation is polled by one task (or thread polling by hand)
 *   at a time. Operations on one rt_file may run at the same time, on
 *   different pool threads: reads and writes at explicit offsets (pread,
 *   pwrite) do not disturb each other; those at the file position take
 *   turns in whatever order the kernel sees them. Fields are private but
 *   for the header's result and the named values. */
#ifndef ASYNCRT_FS_H
#define ASYNCRT_FS_H

#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "future.h"
#include "runtime.h"
#include "task.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The record an operation shares with its job (private). */
struct rt__fs_job;

/* Most bytes one read or write moves: the size of the buffer of the job,
 * which its init allocates (as large as the bytes asked for, up to this).
 * A read or write of more moves this many; the caller loops for the rest.
 * rt_fs_read_file reads a whole file of any size up to its own limit. */
#define RT_FILE_IO_MAX ((size_t)1 << 20)

/* ---- Files -----------------------------------------------------------------*/

/* An open file: it owns one descriptor, always opened close-on-exec, and
 * remembers the runtime whose pool runs its operations. Not a directory. */
typedef struct rt_file rt_file;

/* Opening a file: an operation that finishes with result 0 and `file` (the
 * caller's from then on: rt_file_close), or a negative errno: those of
 * open(2) (-ENOENT, -EACCES, -EEXIST for O_CREAT | O_EXCL, -ELOOP for
 * O_NOFOLLOW on a symbolic link, -EMFILE...), and -EISDIR for a directory,
 * whatever the flags (open(2) itself accepts one read-only). Opening a FIFO
 * blocks its pool thread until the other end is opened. Abort safety: a
 * descriptor the job opened for a dropped operation is closed when the job
 * ends; a file it created stays. */
typedef struct rt_file_open {
    RT_FUTURE_HEADER;
    rt_file *file;          /* the file opened; NULL until then */
    struct rt__fs_job *job; /* shared with the job; NULL once finished or dropped */
    rt_task_join join;      /* the job, from the first poll */
} rt_file_open;

/* Prepares to open `path` (copied). flags: O_RDONLY, O_WRONLY or O_RDWR,
 * with any of O_CREAT, O_EXCL, O_TRUNC, O_APPEND, O_NOFOLLOW, O_NOCTTY,
 * O_NOATIME, O_SYNC, O_DSYNC and O_CLOEXEC (added anyway). mode: the
 * permission bits of a file O_CREAT creates (less the umask), at most
 * 07777; ignored without O_CREAT. rt: the runtime whose pool opens the file
 * and runs the file's later operations; NULL means rt_current_runtime().
 * Errors: -EINVAL (op or path NULL, another flag such as O_DIRECTORY,
 * O_PATH, O_NONBLOCK or O_DIRECT, mode out of range, no runtime),
 * -ENAMETOOLONG, -ENOMEM. Any thread. */
int rt_file_open_init(rt_file_open *op, rt_runtime *rt, const char *path, int flags, unsigned mode);

/* Gives up the caller's file. close(2) runs inline, on the calling thread,
 * not on the pool: on a local file system it waits for no disk (errors of
 * the write-back are rt_file_sync's to report, before the close); on a
 * network file system it may flush, so sync first there. Exception: while
 * an operation on the file is unfinished, or its job has not ended, the
 * file stays open for them; the last of them to let go closes it (on a pool
 * thread, or in the poll or drop that lets go), and 0 is returned here.
 * Returns 0, or the error of close(2) when it closed the descriptor here
 * (the descriptor is closed anyway). The caller must not use the file
 * afterwards. NULL: 0. Any thread, also after its runtime was freed. */
int rt_file_close(rt_file *f);

/* The descriptor, still owned by the file: for fcntl, flock, mmap...,
 * never to close. -EBADF for NULL. */
int rt_file_fd(const rt_file *f);

/* A read of up to `len` bytes into buf: an operation that finishes with
 * result the byte count (0: end of file) or a negative errno (-EBADF: the
 * file is not open for reading, -EIO...). It makes one read(2) (pread(2) at
 * an offset), so a regular file gives fewer bytes than asked only at its
 * end, and a FIFO or a terminal what it has. At most RT_FILE_IO_MAX bytes
 * are read (`len` says how many are asked).
 * The job reads into its own buffer; the poll that finishes the operation
 * copies the bytes into buf. So buf must stay valid until the operation
 * finishes or is dropped, and is never written after a drop: bytes that a
 * running job reads then are thrown away (a read at the file position has
 * still moved it). */
typedef struct rt_file_read {
    RT_FUTURE_HEADER;
    rt_file *file;          /* the file, not owned */
    void *buf;              /* where the bytes go, the caller's */
    size_t len;             /* bytes asked for, at most RT_FILE_IO_MAX */
    int64_t offset;         /* where from; -1: the file position, which the read advances */
    struct rt__fs_job *job; /* shared with the job; NULL once finished or dropped */
    rt_task_join join;      /* the job, from the first poll */
} rt_file_read;

/* Prepares a read at the file position, or at `offset` (pread(2): the
 * file position neither used nor moved). len 0 is allowed (result 0, or an
 * error of the file). Errors: -EINVAL (op or f NULL, buf NULL with len > 0,
 * offset < 0), -ENOMEM. Any thread. */
int rt_file_read_init(rt_file_read *op, rt_file *f, void *buf, size_t len);
int rt_file_pread_init(rt_file_read *op, rt_file *f, void *buf, size_t len, int64_t offset);

/* A write of `len` bytes: an operation that finishes with result len (at
 * most RT_FILE_IO_MAX bytes are taken: `len` says how many), or with fewer
 * when an error stopped the job part-way (the next write reports the
 * error), or a negative errno (-EBADF: not open for writing, -ENOSPC,
 * -EDQUOT, -EFBIG, -EIO, -EPIPE for a FIFO without a reader: pool threads
 * block SIGPIPE). The bytes are copied at the init: the caller's buffer may
 * be reused as soon as the init returns. Abort safety: a job already
 * running when the operation is dropped still writes them all. */
typedef struct rt_file_write {
    RT_FUTURE_HEADER;
    rt_file *file;          /* the file, not owned */
    size_t len;             /* bytes taken, at most RT_FILE_IO_MAX */
    int64_t offset;         /* where to; -1: the file position (the end with O_APPEND) */
    struct rt__fs_job *job; /* shared with the job; NULL once finished or dropped */
    rt_task_join join;      /* the job, from the first poll */
} rt_file_write;

/* Prepares a write at the file position, or at `offset` (pwrite(2); on a
 * file opened with O_APPEND, Linux appends whatever the offset). Errors:
 * -EINVAL (op or f NULL, buf NULL with len > 0, offset < 0), -ENOMEM. Any
 * thread. */
int rt_file_write_init(rt_file_write *op, rt_file *f, const void *buf, size_t len);
int rt_file_pwrite_init(rt_file_write *op, rt_file *f, const void *buf, size_t len, int64_t offset);

/* An operation without a value: it finishes with result 0 or a negative
 * errno. Synchronising a file, and the directory operations below. */
typedef struct rt_fs_op {
    RT_FUTURE_HEADER;
    struct rt__fs_job *job; /* shared with the job; NULL once finished or dropped */
    rt_task_join join;      /* the job, from the first poll */
} rt_fs_op;

/* Prepares fsync(2) of the file, or fdatasync(2) with data_only (the data
 * and what is needed to read it back, not every timestamp). Errors of the
 * operation: -EIO (write-back failed: data written before may be lost),
 * -EINVAL (a file that cannot be synchronised, such as a FIFO). Errors of
 * the init: -EINVAL (op or f NULL), -ENOMEM. Any thread. */
int rt_file_sync_init(rt_fs_op *op, rt_file *f, bool data_only);

/* ---- Metadata --------------------------------------------------------------*/

/* Status of a path or a file: an operation that finishes with result 0 and
 * `st` filled in (st_size, st_mode: S_ISREG, S_ISDIR..., st_mtim...), or a
 * negative errno (-ENOENT, -ENOTDIR, -EACCES, -ELOOP...). */
typedef struct rt_fs_stat {
    RT_FUTURE_HEADER;
    struct stat st;         /* the status, once finished with 0 */
    struct rt__fs_job *job; /* shared with the job; NULL once finished or dropped */
    rt_task_join join;      /* the job, from the first poll */
} rt_fs_stat;

/* Prepares stat(2) of `path` (copied; a symbolic link is followed), on the
 * pool of rt (NULL means rt_current_runtime()). Errors: -EINVAL (op or path NULL,
 * no runtime), -ENAMETOOLONG, -ENOMEM. Any thread. */
int rt_fs_stat_init(rt_fs_stat *op, rt_runtime *rt, const char *path);

/* Prepares fstat(2) of an open file. Errors: -EINVAL (op or f NULL),
 * -ENOMEM. Any thread. */
int rt_file_stat_init(rt_fs_stat *op, rt_file *f);

/* ---- Paths -----------------------------------------------------------------
 *
 * Each copies its paths at the init and runs on the pool of rt (NULL means
 * rt_current_runtime()). Errors of the inits: -EINVAL (op or a path NULL, no
 * runtime, mode above 07777), -ENAMETOOLONG, -ENOMEM. Any thread. */

/* mkdir(2) with the permission bits `mode` (less the umask). Errors:
 * -EEXIST (anything exists there already), -ENOENT (a parent is missing),
 * -EACCES... */
int rt_fs_mkdir_init(rt_fs_op *op, rt_runtime *rt, const char *path, unsigned mode);

/* rmdir(2). Errors: -ENOTEMPTY, -ENOTDIR, -ENOENT... */
int rt_fs_rmdir_init(rt_fs_op *op, rt_runtime *rt, const char *path);

/* unlink(2) of a file (a symbolic link itself, not its target). Errors:
 * -ENOENT, -EISDIR (a directory: rt_fs_rmdir), -EACCES... */
int rt_fs_unlink_init(rt_fs_op *op, rt_runtime *rt, const char *path);

/* rename(2): `from` takes the name `to`, replacing what was there
 * atomically (a file replaces a file, a directory an empty directory).
 * Errors: -ENOENT (from missing), -EXDEV (another file system), -EISDIR,
 * -ENOTDIR, -ENOTEMPTY... */
int rt_fs_rename_init(rt_fs_op *op, rt_runtime *rt, const char *from, const char *to);

/* ---- Whole files -----------------------------------------------------------*/

/* Reading a whole file: an operation that opens `path`, reads it to its end
 * and closes it, and finishes with result the size in bytes and `data`
 * (malloc'd, the caller's to free, with a 0 byte after the last one, so a
 * text file is also a string; never NULL on success, even for an empty
 * file) of `size` bytes; or with a negative errno: -EFBIG (more than
 * `limit` bytes: nothing is returned), -EISDIR (a directory), -ENOMEM (no
 * memory for the contents), and the errors of open(2) and read(2). The
 * file is read to its end whatever its size says (files of /proc say 0), a
 * FIFO until its writers close it. Abort safety: a dropped read frees what
 * its job read when the job ends. */
typedef struct rt_fs_read_file {
    RT_FUTURE_HEADER;
    char *data;             /* the contents, the caller's to free; NULL until then */
    size_t size;            /* their length, without the final 0 */
    struct rt__fs_job *job; /* shared with the job; NULL once finished or dropped */
    rt_task_join join;      /* the job, from the first poll */
} rt_fs_read_file;

/* Prepares to read the whole of `path` (copied), of at most `limit` bytes
 * (at most SIZE_MAX / 2), on the pool of rt (NULL means rt_current_runtime()).
 * Errors: -EINVAL (op or path NULL, limit out of range, no runtime),
 * -ENAMETOOLONG, -ENOMEM. Any thread. */
int rt_fs_read_file_init(rt_fs_read_file *op, rt_runtime *rt, const char *path, size_t limit);

#ifdef __cplusplus
}
#endif
#endif
