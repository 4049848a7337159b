/* asyncrt: asynchronous file descriptors.
 *
 * An rt_io wraps one non-blocking descriptor (a pipe, an eventfd, a socket, a
 * tty...) registered once with the runtime's reactor thread (edge-triggered
 * epoll). Its operations are poll functions: they try the system call and,
 * when it would block, store the context's waker and return RT_PENDING; the
 * reactor wakes the task when the descriptor becomes ready. Reading and
 * writing are tracked separately: one task may wait to read while another
 * waits to write. Each direction keeps one waker: two tasks reading the same
 * rt_io at once replace each other's waker (one of them may then wait until
 * the next event). On a TCP socket, a read or write that moved fewer bytes
 * than asked emptied or filled the kernel's buffer, so the next one in that
 * direction waits for the reactor's next event without a system call that
 * would only say EAGAIN; anything that arrives (or frees space) meanwhile is
 * such an event. After a hang-up, an error or urgent data every call tries
 * its system call again. A socket used with kernel TLS (TCP_ULP) is better
 * read with rt_io_readable and recvmsg(2), whose control messages these
 * calls do not read.
 *
 * Results: operations that transfer bytes write a ssize_t result: the byte
 * count (0 from a read means end of stream) or a negative errno (-EBADF, a
 * peer's -ECONNRESET, -EPIPE on a closed peer: no SIGPIPE is ever raised by a
 * socket write, and the runtime's threads block SIGPIPE for pipes).
 *
 * Ownership: an rt_io owns its descriptor and closes it in rt_io_close, after
 * removing it from epoll (EPOLL_CTL_DEL before close(), since epoll keys on
 * the open file description, which a dup'd descriptor keeps alive). An rt_io
 * belongs to its runtime: rt_runtime_shutdown (and so rt_runtime_free) stops
 * the reactor, then closes and frees those still open, so their pointers are
 * invalid afterwards. Operations on a closed rt_io are not allowed (its memory
 * is freed by the reactor soon after rt_io_close).
 *
 * Abort safety: a task aborted while waiting in any of these polls loses
 * nothing but its stored waker, which the next poller replaces; bytes are only
 * consumed by a poll that returns RT_READY. */
#ifndef ASYNCRT_IO_H
#define ASYNCRT_IO_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "future.h"
#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_io rt_io;

/* Takes ownership of descriptor `fd`, makes it non-blocking and close-on-exec
 * if it was not, and registers it with the reactor of `rt` (NULL means
 * rt_current()). On success *out owns it; on failure the caller still owns fd,
 * with its file status and descriptor flags as they were before the call.
 * Errors: -EBADF (fd not open), -EINVAL (rt NULL outside a task, out NULL),
 * -EPERM (a descriptor epoll cannot watch, such as a regular file), -ENOMEM,
 * -ENOSPC (the kernel's limit on epoll watches), -ESHUTDOWN. Any thread. */
int rt_io_open(rt_runtime *rt, int fd, rt_io **out);

/* The descriptor (still owned by the rt_io); -EBADF for NULL. */
int rt_io_fd(const rt_io *io);

/* RT_READY once the descriptor is readable (or hung up / in error: a read
 * will then report it), else RT_PENDING with the waker stored. Exact: a
 * readiness reported earlier is checked with poll(2) before it is trusted,
 * since the caller may have drained the descriptor with calls of its own. On
 * a descriptor just opened, the first poll may return RT_PENDING and wake one
 * reactor turn later (the kernel reports the initial state then). io or cx
 * NULL: RT_READY (the read that follows reports -EINVAL). */
rt_poll rt_io_readable(rt_io *io, rt_context *cx);

/* RT_READY once the descriptor is writable (or in error), else RT_PENDING.
 * Exact in the same way as rt_io_readable. io or cx NULL: RT_READY (the
 * write that follows reports -EINVAL). */
rt_poll rt_io_writable(rt_io *io, rt_context *cx);

/* Reads up to `len` bytes into buf: RT_READY with *result set (bytes, 0 at
 * end of stream, or -errno), or RT_PENDING until data arrives. io or cx NULL,
 * or buf NULL with len > 0: RT_READY with *result -EINVAL. result NULL:
 * RT_READY at once, nothing read. */
rt_poll rt_io_read(rt_io *io, rt_context *cx, void *buf, size_t len, ssize_t *result);

/* Writes up to `len` bytes from buf: RT_READY with *result set (bytes written,
 * possibly fewer than len, or -errno), or RT_PENDING while the descriptor
 * cannot take any. NULL arguments as rt_io_read (result NULL: nothing
 * written). */
rt_poll rt_io_write(rt_io *io, rt_context *cx, const void *buf, size_t len, ssize_t *result);

/* Writes all `len` bytes from buf, across as many polls as needed. *progress
 * counts the bytes written so far: set it to 0 before the first poll and keep
 * it in the caller's state between polls. RT_READY with *result = len, or
 * with a negative errno (then *progress bytes were written), or RT_PENDING.
 * Abort safety: an aborted write_all has written *progress bytes. NULL
 * arguments as rt_io_read, progress NULL included (-EINVAL). */
rt_poll rt_io_write_all(rt_io *io, rt_context *cx, const void *buf, size_t len, size_t *progress,
                        ssize_t *result);

/* Removes the descriptor from the reactor, closes it and frees the rt_io.
 * Tasks waiting on it are woken (their next poll must not use it: the caller
 * coordinates). Returns 0 or the error of close(2) (the rt_io is freed
 * either way). NULL is a no-op. Any thread. */
int rt_io_close(rt_io *io);

#ifdef __cplusplus
}
#endif
#endif
