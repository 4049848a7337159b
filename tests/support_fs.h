/* What the file suites (test_fs.c, test_fs_drop.c) share: a temporary
 * directory removed at the end (also after a failed test, by fs_fini),
 * tasks that await an operation, each operation in one call, runtimes with
 * a pool of one thread a test can hold, and descriptor helpers.
 * support_fs.c has the functions. */
#ifndef RT_TESTS_SUPPORT_FS_H
#define RT_TESTS_SUPPORT_FS_H

#include "support.h"

#include <stdbool.h>
#include <ftw.h>
#include <sys/stat.h>

extern char dir[64];
extern struct event held_started;
extern struct event go;

int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw);
void fs_fini(void);
void make_dir(void);
const char *in_dir(const char *name);
void remove_dir(void);
rt_poll awaiter_poll(void *state, rt_context *cx, void **out);
void awaiter_drop(void *state);
rt_task *spawn_awaiter(rt_runtime *rt, rt_future *op, struct event *pending, struct event *dropped);
rt_task *start_waiting(rt_runtime *rt, rt_future *op, struct event *dropped);
void abort_waiting(rt_task *t, rt_future *op);
rt_runtime *plain_runtime(void);
rt_runtime *one_thread_pool(void);
void *held_job(void *arg);
void *quick_job(void *arg);
void pool_barrier(rt_runtime *rt);
void write_fd_all(int fd, const void *buf, size_t len);
void read_fd_all(int fd, void *buf, size_t len);

int64_t run_op(rt_runtime *rt, rt_future *op);
int64_t open_file(rt_runtime *rt, const char *path, int flags, unsigned mode, rt_file **out);
int64_t read_at(rt_runtime *rt, rt_file *f, void *buf, size_t len, int64_t offset);
int64_t write_at(rt_runtime *rt, rt_file *f, const void *buf, size_t len, int64_t offset);
int64_t stat_path(rt_runtime *rt, const char *path, struct stat *st);
int64_t stat_file(rt_runtime *rt, rt_file *f, struct stat *st);
int64_t sync_file(rt_runtime *rt, rt_file *f, bool data_only);
int64_t make_directory(rt_runtime *rt, const char *path, unsigned mode);
int64_t remove_directory(rt_runtime *rt, const char *path);
int64_t unlink_path(rt_runtime *rt, const char *path);
int64_t rename_path(rt_runtime *rt, const char *from, const char *to);
int64_t read_whole(rt_runtime *rt, const char *path, size_t limit, char **data, size_t *size);
unsigned char pattern(size_t i);

#endif
