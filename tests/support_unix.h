/* What the Unix socket suites (test_unix.c, test_unix_fds.c) share: a
 * temporary directory for socket files, abstract names, tasks that await an
 * operation, and streams set up in one call. support_unix.c has the
 * functions. */
#ifndef RT_TESTS_SUPPORT_UNIX_H
#define RT_TESTS_SUPPORT_UNIX_H

#include "support.h"

#include <stdbool.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Signalled whenever a waiter (start_waiter) waits. */
extern struct event pending;

void make_dir(char dir[static 32]);
void remove_dir(const char *dir);
void path_in(char *out, size_t size, const char *dir, const char *file);
void abstract_name(char *out, size_t size, const char *what);
bool exists(const char *path);
rt_poll await_op_poll(void *state, rt_context *cx, void **out);
void run_op(rt_runtime *rt, rt_future *op);
rt_poll waiter_poll(void *state, rt_context *cx, void **out);
void waiter_drop(void *state);
void abort_waiter(rt_task *t);
void write_io(rt_runtime *rt, rt_io *io, const char *s);
void expect_io(rt_runtime *rt, rt_io *io, const char *want);
int64_t read_once(rt_runtime *rt, rt_io *io);
void expect_own_credentials(rt_io *io);
void expect_local_name(rt_io *io, const char *name);

rt_task *start_waiter(rt_runtime *rt, rt_future *op);
rt_io *listen_on(rt_runtime *rt, const char *name, unsigned flags);
rt_io *connect_to(rt_runtime *rt, const char *name);
rt_io *accept_from(rt_runtime *rt, rt_io *listener);

#endif
