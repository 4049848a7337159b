/* Files and paths on the blocking pool, on real files in a temporary
 * directory: writing and reading back, positional reads and writes, a file
 * larger than a job's buffer read whole and in pieces, stat, rename,
 * unlink, mkdir and rmdir, fsync, and the errors of bad paths and bad
 * arguments. test_fs_drop.c has the operations that end early. */
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

TestSuite(fs, .fini = fs_fini);

/* ---- reading and writing ----------------------------------------------------- */

Test(fs, a_file_written_then_read_back_has_the_same_bytes)
{
    make_dir();
    int fds = count_fds();
    rt_runtime *rt = plain_runtime();
    const char *path = in_dir("hello.txt");
    rt_file *f;
    cr_assert_eq(open_file(rt, path, O_WRONLY | O_CREAT | O_TRUNC, 0600, &f), 0);
    int fd = rt_file_fd(f);
    cr_assert_geq(fd, 0);
    cr_assert(fcntl(fd, F_GETFD) & FD_CLOEXEC, "the descriptor is not close-on-exec");
    static const char text[] = "hello, file\n";
    cr_assert_eq(write_at(rt, f, text, 7, -1), 7);
    cr_assert_eq(write_at(rt, f, text + 7, sizeof text - 8, -1), (int64_t)sizeof text - 8);
    cr_assert_eq(write_at(rt, f, "", 0, -1), 0, "an empty write");
    cr_assert_eq(rt_file_close(f), 0);

    cr_assert_eq(open_file(rt, path, O_RDONLY, 0, &f), 0);
    char buf[64];
    memset(buf, '#', sizeof buf);
    cr_assert_eq(read_at(rt, f, buf, sizeof buf, -1), (int64_t)sizeof text - 1);
    cr_assert_eq(memcmp(buf, text, sizeof text - 1), 0);
    cr_assert_eq(buf[sizeof text - 1], '#', "a byte past the count was written");
    cr_assert_eq(read_at(rt, f, buf, sizeof buf, -1), 0, "the end of the file");
    cr_assert_eq(read_at(rt, f, buf, 0, -1), 0, "an empty read");
    cr_assert_eq(rt_file_close(f), 0);

    /* O_APPEND adds at the end; O_TRUNC empties. */
    cr_assert_eq(open_file(rt, path, O_WRONLY | O_APPEND, 0, &f), 0);
    cr_assert_eq(write_at(rt, f, "more", 4, -1), 4);
    cr_assert_eq(rt_file_close(f), 0);
    char *data;
    size_t size;
    cr_assert_eq(read_whole(rt, path, 1024, &data, &size), (int64_t)sizeof text + 3);
    cr_assert_str_eq(data, "hello, file\nmore");
    free(data);
    cr_assert_eq(open_file(rt, path, O_WRONLY | O_TRUNC, 0, NULL), 0);
    cr_assert_eq(read_whole(rt, path, 0, &data, &size), 0, "an empty file within limit 0");
    cr_assert_str_eq(data, "");
    free(data);

    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir();
}

Test(fs, positional_reads_and_writes_leave_the_file_position_alone)
{
    make_dir();
    int fds = count_fds();
    rt_runtime *rt = plain_runtime();
    rt_file *f;
    cr_assert_eq(open_file(rt, in_dir("sparse"), O_RDWR | O_CREAT | O_EXCL, 0600, &f), 0);
    cr_assert_eq(write_at(rt, f, "BBBB", 4, 100), 4);
    cr_assert_eq(write_at(rt, f, "AAAA", 4, -1), 4, "at the position, still 0");
    cr_assert_eq(write_at(rt, f, "CC", 2, 50), 2);
    struct stat st;
    cr_assert_eq(stat_file(rt, f, &st), 0);
    cr_assert_eq(st.st_size, 104);

    char buf[16];
    cr_assert_eq(read_at(rt, f, buf, 4, 100), 4);
    cr_assert_eq(memcmp(buf, "BBBB", 4), 0);
    cr_assert_eq(read_at(rt, f, buf, 4, 48), 4);
    cr_assert_eq(memcmp(buf, "\0\0CC", 4), 0, "the hole reads as zeros");
    cr_assert_eq(read_at(rt, f, buf, 16, 102), 2, "short at the end of the file");
    cr_assert_eq(read_at(rt, f, buf, 16, 104), 0);
    cr_assert_eq(read_at(rt, f, buf, 16, 1 << 30), 0, "far past the end");
    /* The position is where the one positionless write left it: 4. */
    cr_assert_eq(read_at(rt, f, buf, 3, -1), 3);
    cr_assert_eq(memcmp(buf, "\0\0\0", 3), 0);
    cr_assert_eq(read_at(rt, f, buf, 3, 0), 3);
    cr_assert_eq(memcmp(buf, "AAA", 3), 0);
    cr_assert_eq(rt_file_close(f), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir();
}

Test(fs, a_file_larger_than_a_jobs_buffer_is_read_whole_and_in_pieces)
{
    make_dir();
    int fds = count_fds();
    rt_runtime *rt = plain_runtime();
    const char *path = in_dir("big");
    const size_t total = 3 * RT_FILE_IO_MAX + 17;
    unsigned char *src = malloc(total);
    cr_assert_not_null(src);
    for (size_t i = 0; i < total; i++)
        src[i] = pattern(i);

    /* Written in as many writes as it takes: each takes at most the max. */
    rt_file *f;
    cr_assert_eq(open_file(rt, path, O_RDWR | O_CREAT | O_TRUNC, 0644, &f), 0);
    size_t done = 0;
    unsigned writes = 0;
    while (done < total) {
        rt_file_write w;
        cr_assert_eq(rt_file_write_init(&w, f, src + done, total - done), 0);
        cr_assert_eq(w.len, total - done < RT_FILE_IO_MAX ? total - done : RT_FILE_IO_MAX);
        cr_assert_eq(run_op(rt, &w.future), (int64_t)w.len);
        done += w.len;
        writes++;
    }
    cr_assert_eq(writes, 4);
    cr_assert_eq(sync_file(rt, f, false), 0);

    /* In pieces at the file position: each read gives at most the max. */
    unsigned char *back = malloc(total);
    cr_assert_not_null(back);
    memset(back, 0, total);
    rt_file *r;
    cr_assert_eq(open_file(rt, path, O_RDONLY, 0, &r), 0);
    size_t got = 0;
    unsigned reads = 0;
    for (;;) {
        int64_t n = read_at(rt, r, back + got, total + 100 - got, -1);
        cr_assert_geq(n, 0);
        cr_assert_leq(n, (int64_t)RT_FILE_IO_MAX);
        if (n == 0)
            break;
        got += (size_t)n;
        reads++;
    }
    cr_assert_eq(got, total);
    cr_assert_eq(reads, 4);
    cr_assert_eq(memcmp(back, src, total), 0, "the pieces differ from what was written");

    /* Odd pieces at offsets, straddling the buffer's size. */
    memset(back, 0, total);
    const size_t piece = 777777;
    for (size_t off = 0; off < total; off += piece) {
        size_t want = total - off < piece ? total - off : piece;
        cr_assert_eq(read_at(rt, r, back + off, piece, (int64_t)off), (int64_t)want);
    }
    cr_assert_eq(memcmp(back, src, total), 0, "the positional pieces differ");
    cr_assert_eq(rt_file_close(r), 0);
    cr_assert_eq(rt_file_close(f), 0);

    /* Whole, within a limit of exactly its size, and past a limit one short. */
    char *data;
    size_t size;
    cr_assert_eq(read_whole(rt, path, total, &data, &size), (int64_t)total);
    cr_assert_eq(memcmp(data, src, total), 0, "the whole file differs");
    free(data);
    cr_assert_eq(read_whole(rt, path, total - 1, &data, &size), -EFBIG);

    /* A file whose size says nothing (0 in /proc) grows the buffer as it goes. */
    cr_assert_gt(read_whole(rt, "/proc/self/maps", 64 << 20, &data, &size), 0);
    cr_assert_eq(strlen(data), size);
    free(data);
    cr_assert_eq(read_whole(rt, "/proc/self/maps", 64, &data, &size), -EFBIG);

    free(back);
    free(src);
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir();
}

/* ---- metadata and paths ------------------------------------------------------ */

Test(fs, stat_reports_the_size_and_mode_of_a_path_and_of_an_open_file)
{
    make_dir();
    rt_runtime *rt = plain_runtime();
    const char *path = in_dir("mode640");
    rt_file *f;
    cr_assert_eq(open_file(rt, path, O_WRONLY | O_CREAT | O_EXCL, 0640, &f), 0);
    cr_assert_eq(write_at(rt, f, "12345", 5, -1), 5);
    struct stat by_path, by_file;
    cr_assert_eq(stat_path(rt, path, &by_path), 0);
    cr_assert(S_ISREG(by_path.st_mode));
    cr_assert_eq(by_path.st_mode & 07777, 0640);
    cr_assert_eq(by_path.st_size, 5);
    cr_assert_eq(stat_file(rt, f, &by_file), 0);
    cr_assert_eq(by_file.st_ino, by_path.st_ino);
    cr_assert_eq(by_file.st_dev, by_path.st_dev);
    cr_assert_eq(rt_file_close(f), 0);

    struct stat st;
    cr_assert_eq(stat_path(rt, dir, &st), 0);
    cr_assert(S_ISDIR(st.st_mode));
    cr_assert_eq(stat_path(rt, in_dir("missing"), &st), -ENOENT);
    cr_assert_eq(stat_path(rt, in_dir("mode640/below"), &st), -ENOTDIR);
    cr_assert_eq(symlink("mode640", in_dir("link")), 0);
    cr_assert_eq(stat_path(rt, in_dir("link"), &st), 0, "a link is followed");
    cr_assert_eq(st.st_ino, by_path.st_ino);
    finish_runtime(rt, 0);
    remove_dir();
}

Test(fs, rename_moves_and_replaces_and_unlink_removes)
{
    make_dir();
    rt_runtime *rt = plain_runtime();
    const char *a = in_dir("a"), *b = in_dir("b"), *c = in_dir("c");
    cr_assert_eq(open_file(rt, a, O_WRONLY | O_CREAT, 0600, NULL), 0);
    rt_file *f;
    cr_assert_eq(open_file(rt, c, O_WRONLY | O_CREAT, 0600, &f), 0);
    cr_assert_eq(write_at(rt, f, "cc", 2, -1), 2);
    cr_assert_eq(rt_file_close(f), 0);

    cr_assert_eq(rename_path(rt, a, b), 0);
    cr_assert_eq(stat_path(rt, a, NULL), -ENOENT);
    cr_assert_eq(stat_path(rt, b, NULL), 0);
    struct stat st;
    cr_assert_eq(rename_path(rt, c, b), 0, "replacing a file");
    cr_assert_eq(stat_path(rt, b, &st), 0);
    cr_assert_eq(st.st_size, 2, "b is the former c");
    cr_assert_eq(stat_path(rt, c, NULL), -ENOENT);
    cr_assert_eq(rename_path(rt, a, c), -ENOENT);
    cr_assert_eq(make_directory(rt, in_dir("d"), 0700), 0);
    cr_assert_eq(rename_path(rt, b, in_dir("d")), -EISDIR);

    cr_assert_eq(unlink_path(rt, b), 0);
    cr_assert_eq(stat_path(rt, b, NULL), -ENOENT);
    cr_assert_eq(unlink_path(rt, b), -ENOENT);
    cr_assert_eq(unlink_path(rt, in_dir("d")), -EISDIR);
    cr_assert_eq(remove_directory(rt, in_dir("d")), 0);
    finish_runtime(rt, 0);
    remove_dir();
}

Test(fs, mkdir_makes_a_directory_once_and_rmdir_wants_it_empty)
{
    make_dir();
    rt_runtime *rt = plain_runtime();
    const char *d = in_dir("sub");
    cr_assert_eq(make_directory(rt, d, 0750), 0);
    struct stat st;
    cr_assert_eq(stat_path(rt, d, &st), 0);
    cr_assert(S_ISDIR(st.st_mode));
    cr_assert_eq(st.st_mode & 07777, 0750);
    cr_assert_eq(make_directory(rt, d, 0750), -EEXIST);
    cr_assert_eq(make_directory(rt, in_dir("none/sub"), 0750), -ENOENT);
    cr_assert_eq(open_file(rt, in_dir("sub/file"), O_WRONLY | O_CREAT, 0600, NULL), 0);
    cr_assert_eq(make_directory(rt, in_dir("sub/file"), 0750), -EEXIST, "a file is there");
    cr_assert_eq(remove_directory(rt, d), -ENOTEMPTY);
    cr_assert_eq(remove_directory(rt, in_dir("sub/file")), -ENOTDIR);
    cr_assert_eq(unlink_path(rt, in_dir("sub/file")), 0);
    cr_assert_eq(remove_directory(rt, d), 0);
    cr_assert_eq(stat_path(rt, d, NULL), -ENOENT);
    cr_assert_eq(remove_directory(rt, d), -ENOENT);
    finish_runtime(rt, 0);
    remove_dir();
}

Test(fs, fsync_and_fdatasync_succeed_on_a_file_and_fail_on_a_fifo)
{
    make_dir();
    int fds = count_fds();
    rt_runtime *rt = plain_runtime();
    rt_file *f;
    cr_assert_eq(open_file(rt, in_dir("synced"), O_WRONLY | O_CREAT, 0600, &f), 0);
    cr_assert_eq(write_at(rt, f, "durable", 7, -1), 7);
    cr_assert_eq(sync_file(rt, f, false), 0);
    cr_assert_eq(write_at(rt, f, "!", 1, -1), 1);
    cr_assert_eq(sync_file(rt, f, true), 0);
    cr_assert_eq(rt_file_close(f), 0);

    /* A FIFO opened for reading and writing does not wait for a peer. */
    cr_assert_eq(mkfifo(in_dir("fifo"), 0600), 0);
    cr_assert_eq(open_file(rt, in_dir("fifo"), O_RDWR, 0, &f), 0);
    cr_assert_eq(sync_file(rt, f, false), -EINVAL);
    cr_assert_eq(rt_file_close(f), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir();
}

/* ---- errors ------------------------------------------------------------------- */

Test(fs, bad_paths_and_modes_give_the_systems_errors)
{
    make_dir();
    int fds = count_fds();
    rt_runtime *rt = plain_runtime();
    const char *file = in_dir("file");
    cr_assert_eq(open_file(rt, file, O_WRONLY | O_CREAT, 0600, NULL), 0);
    cr_assert_eq(open_file(rt, in_dir("missing"), O_RDONLY, 0, NULL), -ENOENT);
    cr_assert_eq(open_file(rt, file, O_WRONLY | O_CREAT | O_EXCL, 0600, NULL), -EEXIST);
    cr_assert_eq(open_file(rt, dir, O_RDONLY, 0, NULL), -EISDIR, "a directory read-only");
    cr_assert_eq(open_file(rt, dir, O_RDWR, 0, NULL), -EISDIR);
    cr_assert_eq(open_file(rt, in_dir("file/x"), O_RDONLY, 0, NULL), -ENOTDIR);
    cr_assert_eq(symlink("file", in_dir("link")), 0);
    cr_assert_eq(open_file(rt, in_dir("link"), O_RDONLY | O_NOFOLLOW, 0, NULL), -ELOOP);
    cr_assert_eq(open_file(rt, in_dir("link"), O_RDONLY, 0, NULL), 0);

    /* Reading a file open for writing only, and the other way round. */
    rt_file *w, *r;
    cr_assert_eq(open_file(rt, file, O_WRONLY, 0, &w), 0);
    cr_assert_eq(open_file(rt, file, O_RDONLY, 0, &r), 0);
    char buf[8];
    cr_assert_eq(read_at(rt, w, buf, sizeof buf, -1), -EBADF);
    cr_assert_eq(read_at(rt, w, buf, sizeof buf, 0), -EBADF);
    cr_assert_eq(write_at(rt, r, "x", 1, -1), -EBADF);
    cr_assert_eq(write_at(rt, r, "x", 1, 3), -EBADF);
    cr_assert_eq(rt_file_close(w), 0);
    cr_assert_eq(rt_file_close(r), 0);

    char *data;
    size_t size;
    cr_assert_eq(read_whole(rt, dir, 1024, &data, &size), -EISDIR);
    cr_assert_eq(read_whole(rt, in_dir("missing"), 1024, &data, &size), -ENOENT);
    cr_assert_eq(chmod(file, 0), 0);
    if (geteuid() != 0) { /* root reads anything */
        cr_assert_eq(open_file(rt, file, O_RDONLY, 0, NULL), -EACCES);
        cr_assert_eq(read_whole(rt, file, 1024, &data, &size), -EACCES);
    }
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir();
}

/* Checks that an init refused its arguments with err and left op finished. */
#define ASSERT_REFUSED(op, call, err)                                                              \
    do {                                                                                           \
        memset((op), 0x5a, sizeof(*(op)));                                                         \
        cr_assert_eq((call), (err), "%s", #call);                                                  \
        cr_assert(rt_future_is_done(&(op)->future), "%s left it unfinished", #call);               \
        cr_assert_eq((op)->result, (err));                                                         \
        cr_assert_null((op)->job);                                                                 \
        rt_context cx_ = noop_context();                                                           \
        cr_assert_eq(RT_POLL_OP((op), &cx_), RT_READY);                                            \
        cr_assert_eq((op)->result, (err));                                                         \
        RT_DROP(op); /* a no-op on a finished operation */                                         \
        cr_assert_eq((op)->result, (err));                                                         \
    } while (0)

Test(fs, bad_arguments_are_refused_by_the_inits)
{
    make_dir();
    rt_runtime *rt = plain_runtime();
    rt_file *f;
    cr_assert_eq(open_file(rt, in_dir("f"), O_RDWR | O_CREAT, 0600, &f), 0);
    char buf[4];
    static char long_path[PATH_MAX + 1];
    memset(long_path, 'a', PATH_MAX);

    rt_file_open o;
    ASSERT_REFUSED(&o, rt_file_open_init(&o, rt, NULL, O_RDONLY, 0), -EINVAL);
    ASSERT_REFUSED(&o, rt_file_open_init(&o, NULL, "x", O_RDONLY, 0), -EINVAL); /* no task */
    ASSERT_REFUSED(&o, rt_file_open_init(&o, rt, "x", O_RDONLY | O_DIRECTORY, 0), -EINVAL);
    ASSERT_REFUSED(&o, rt_file_open_init(&o, rt, "x", O_RDONLY | O_NONBLOCK, 0), -EINVAL);
    ASSERT_REFUSED(&o, rt_file_open_init(&o, rt, "x", O_RDONLY | O_PATH, 0), -EINVAL);
    ASSERT_REFUSED(&o, rt_file_open_init(&o, rt, "x", O_ACCMODE, 0), -EINVAL);
    ASSERT_REFUSED(&o, rt_file_open_init(&o, rt, "x", O_WRONLY | O_CREAT, 010000), -EINVAL);
    ASSERT_REFUSED(&o, rt_file_open_init(&o, rt, long_path, O_RDONLY, 0), -ENAMETOOLONG);
    cr_assert_null(o.file);
    cr_assert_eq(rt_file_open_init(NULL, rt, "x", O_RDONLY, 0), -EINVAL);

    rt_file_read rd;
    ASSERT_REFUSED(&rd, rt_file_read_init(&rd, NULL, buf, 4), -EINVAL);
    ASSERT_REFUSED(&rd, rt_file_read_init(&rd, f, NULL, 4), -EINVAL);
    ASSERT_REFUSED(&rd, rt_file_pread_init(&rd, f, buf, 4, -1), -EINVAL);
    cr_assert_eq(rt_file_read_init(NULL, f, buf, 4), -EINVAL);
    cr_assert_eq(rt_file_pread_init(NULL, f, buf, 4, 0), -EINVAL);

    rt_file_write wr;
    ASSERT_REFUSED(&wr, rt_file_write_init(&wr, NULL, "x", 1), -EINVAL);
    ASSERT_REFUSED(&wr, rt_file_write_init(&wr, f, NULL, 1), -EINVAL);
    ASSERT_REFUSED(&wr, rt_file_pwrite_init(&wr, f, "x", 1, -5), -EINVAL);
    cr_assert_eq(rt_file_write_init(NULL, f, "x", 1), -EINVAL);
    cr_assert_eq(rt_file_pwrite_init(NULL, f, "x", 1, 0), -EINVAL);

    rt_fs_op op;
    ASSERT_REFUSED(&op, rt_file_sync_init(&op, NULL, false), -EINVAL);
    ASSERT_REFUSED(&op, rt_fs_mkdir_init(&op, rt, NULL, 0700), -EINVAL);
    ASSERT_REFUSED(&op, rt_fs_mkdir_init(&op, rt, "d", 010000), -EINVAL);
    ASSERT_REFUSED(&op, rt_fs_mkdir_init(&op, NULL, "d", 0700), -EINVAL);
    ASSERT_REFUSED(&op, rt_fs_mkdir_init(&op, rt, long_path, 0700), -ENAMETOOLONG);
    ASSERT_REFUSED(&op, rt_fs_rmdir_init(&op, rt, NULL), -EINVAL);
    ASSERT_REFUSED(&op, rt_fs_unlink_init(&op, rt, NULL), -EINVAL);
    ASSERT_REFUSED(&op, rt_fs_unlink_init(&op, NULL, "u"), -EINVAL);
    ASSERT_REFUSED(&op, rt_fs_rename_init(&op, rt, NULL, "b"), -EINVAL);
    ASSERT_REFUSED(&op, rt_fs_rename_init(&op, rt, "a", NULL), -EINVAL);
    ASSERT_REFUSED(&op, rt_fs_rename_init(&op, rt, "a", long_path), -ENAMETOOLONG);
    cr_assert_eq(rt_file_sync_init(NULL, f, false), -EINVAL);
    cr_assert_eq(rt_fs_mkdir_init(NULL, rt, "d", 0700), -EINVAL);
    cr_assert_eq(rt_fs_rmdir_init(NULL, rt, "d"), -EINVAL);
    cr_assert_eq(rt_fs_unlink_init(NULL, rt, "d"), -EINVAL);
    cr_assert_eq(rt_fs_rename_init(NULL, rt, "a", "b"), -EINVAL);

    rt_fs_stat st;
    ASSERT_REFUSED(&st, rt_fs_stat_init(&st, rt, NULL), -EINVAL);
    ASSERT_REFUSED(&st, rt_fs_stat_init(&st, NULL, "x"), -EINVAL);
    ASSERT_REFUSED(&st, rt_file_stat_init(&st, NULL), -EINVAL);
    cr_assert_eq(rt_fs_stat_init(NULL, rt, "x"), -EINVAL);
    cr_assert_eq(rt_file_stat_init(NULL, f), -EINVAL);

    rt_fs_read_file rf;
    ASSERT_REFUSED(&rf, rt_fs_read_file_init(&rf, rt, NULL, 10), -EINVAL);
    ASSERT_REFUSED(&rf, rt_fs_read_file_init(&rf, NULL, "x", 10), -EINVAL);
    ASSERT_REFUSED(&rf, rt_fs_read_file_init(&rf, rt, "x", SIZE_MAX), -EINVAL);
    cr_assert_null(rf.data);
    cr_assert_eq(rf.size, 0);
    cr_assert_eq(rt_fs_read_file_init(NULL, rt, "x", 10), -EINVAL);

    cr_assert_eq(rt_file_close(NULL), 0);
    cr_assert_eq(rt_file_fd(NULL), -EBADF);

    /* An operation initialised but never polled starts nothing and leaves
     * nothing behind when dropped. */
    rt_fs_op never;
    cr_assert_eq(rt_fs_mkdir_init(&never, rt, in_dir("never"), 0700), 0);
    cr_assert(!rt_future_is_done(&never.future));
    RT_DROP(&never);
    cr_assert_eq(never.result, -ECANCELED);
    cr_assert_eq(stat_path(rt, in_dir("never"), NULL), -ENOENT);
    /* A poll with no context does nothing either. */
    cr_assert_eq(rt_fs_mkdir_init(&never, rt, in_dir("never"), 0700), 0);
    cr_assert_eq(rt_future_poll(&never.future, NULL), RT_READY);
    cr_assert_eq(never.result, -EINVAL);
    cr_assert_eq(run_op(rt, &never.future), 0, "still usable after a poll without context");
    cr_assert_eq(stat_path(rt, in_dir("never"), NULL), 0);

    cr_assert_eq(rt_file_close(f), 0);
    finish_runtime(rt, 0);
    remove_dir();
}
