/* asyncrt: asynchronous file descriptors.
 *
 * An rt_io wraps one non-blocking descriptor (a pipe, an eventfd, a socket, a
 * tty...) registered once with the runtime's reactor thread (edge-triggered
 * epoll). Reads, writes and readiness waits are operations (see future.h):
 * their polls try the system call and, when it would block, store the
 * context's waker and return RT_PENDING; the reactor wakes the task when the
 * descriptor becomes ready. Reading and
 * writing are tracked separately: one task may wait to read while another
 * waits to write. Each direction keeps one waker: two tasks reading the same
 * rt_io at once replace each other's waker (one of them may then wait until
 * the next event). On a TCP socket, a read or write that moved fewer bytes
 * than asked emptied or filled the kernel's buffer, so the next one in that
 * direction waits for the reactor's next event without a system call that
 * would only say EAGAIN; anything that arrives (or frees space) meanwhile is
 * such an event. After a hang-up, an error or urgent data every call tries
 * its system call again. A socket used with kernel TLS (TCP_ULP) is better
 * read after a readiness wait (rt_io_readable_init) with recvmsg(2), whose control messages these
 * calls do not read.
 *
 * Results: operations that transfer bytes finish with the byte
 * count (0 from a read means end of stream) or a negative errno (-EBADF, a
 * peer's -ECONNRESET, -EPIPE on a closed peer: no SIGPIPE is ever raised by a
 * socket write, and the runtime's threads block SIGPIPE for pipes).
 *
 * Ownership: an rt_io owns its descriptor and closes it in rt_io_close, after
 * removing it from epoll (EPOLL_CTL_DEL before close(), since epoll keys on
 * the open file description, which a dup'd descriptor keeps alive). An rt_io
 * belongs to its runtime: rt_runtime_shutdown (and so rt_runtime_free) stops
 * the reactor, then closes and frees those still open, so their pointers are
 * invalid afterwards. An operation on a closed rt_io must not be polled (its
 * memory is freed by the reactor soon after rt_io_close); it may still be
 * dropped (see rt_io_close).
 *
 * Abort safety: an operation dropped while it waits loses nothing but its
 * stored waker, which the next poller replaces; bytes are only consumed by a
 * poll that finishes the operation.
 * Never polled: the operations of this header hold nothing, before their
 * first poll or after it (a waiting one's waker is the rt_io's), so one
 * initialised and never polled needs no drop, and dropping it or
 * initialising it again is safe. */
#ifndef ASYNCRT_IO_H
#define ASYNCRT_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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
 * rt_current_runtime()). On success *out owns it; on failure the caller still owns fd,
 * with its file status and descriptor flags as they were before the call.
 * Errors: -EBADF (fd not open), -EINVAL (rt NULL outside a task, out NULL),
 * -EPERM (a descriptor epoll cannot watch, such as a regular file), -ENOMEM,
 * -ENOSPC (the kernel's limit on epoll watches), -ESHUTDOWN. Any thread. */
int rt_io_open(rt_runtime *rt, int fd, rt_io **out);

/* The descriptor (still owned by the rt_io); -EBADF for NULL. */
int rt_io_fd(const rt_io *io);

/* Waiting until the descriptor is readable or writable: an operation (see
 * future.h) that finishes with result 0 once it is (or hung up / in error:
 * the read or write that follows reports it). Exact: a readiness reported
 * earlier is checked with poll(2) before it is trusted, since the caller may
 * have drained the descriptor with calls of its own. On a descriptor just
 * opened, the first poll may wait one reactor turn (the kernel reports the
 * initial state then). */
typedef struct rt_io_ready {
    RT_FUTURE_HEADER;
    rt_io *io;    /* the descriptor */
    int writable; /* 0: readable, 1: writable */
} rt_io_ready;

/* Prepare a wait for readability or writability. Errors: -EINVAL (op or io
 * NULL). */
int rt_io_readable_init(rt_io_ready *op, rt_io *io);
int rt_io_writable_init(rt_io_ready *op, rt_io *io);

/* A read of up to `len` bytes into buf: an operation (see future.h) that
 * finishes with result the byte count (0: end of stream) or a negative
 * errno. */
typedef struct rt_io_read {
    RT_FUTURE_HEADER;
    rt_io *io;  /* the descriptor */
    void *buf;  /* where the bytes go, owned by the caller */
    size_t len; /* room in buf */
} rt_io_read;

/* Prepares a read. Errors: -EINVAL (op or io NULL, buf NULL with len > 0). */
int rt_io_read_init(rt_io_read *op, rt_io *io, void *buf, size_t len);

/* A write of up to `len` bytes from buf: an operation that finishes with
 * result the byte count written (possibly fewer than len) or a negative
 * errno. It waits only while the descriptor cannot take any byte. */
typedef struct rt_io_write {
    RT_FUTURE_HEADER;
    rt_io *io;       /* the descriptor */
    const void *buf; /* the bytes, owned by the caller */
    size_t len;      /* how many */
} rt_io_write;

/* Prepares a write. Errors: -EINVAL (op or io NULL, buf NULL with len > 0). */
int rt_io_write_init(rt_io_write *op, rt_io *io, const void *buf, size_t len);

/* A write of all `len` bytes from buf, across as many polls as needed: an
 * operation that finishes with result len, or a negative errno (`progress`
 * bytes were written by then). Abort safety: a dropped write_all has
 * written `progress` bytes. */
typedef struct rt_io_write_all {
    RT_FUTURE_HEADER;
    rt_io *io;       /* the descriptor */
    const void *buf; /* the bytes, owned by the caller */
    size_t len;      /* how many */
    size_t progress; /* written so far */
} rt_io_write_all;

/* Prepares a write of all len bytes. Errors: -EINVAL (op or io NULL, buf
 * NULL with len > 0). */
int rt_io_write_all_init(rt_io_write_all *op, rt_io *io, const void *buf, size_t len);

/* Copying a stream (Go's io.Copy): an operation that reads from `from` into
 * buf and writes all of it to `to`, until `from` reaches the end of its
 * stream. It finishes with result the number of bytes copied (>= 0) at the
 * end of the stream, or with a negative errno; `write_failed` then says
 * whether writing to `to` failed (-EPIPE: its reader went away) rather than
 * reading from `from`. `copied` counts the bytes written so far.
 * When the destination fails, nothing more is read: close the source then
 * (rt_io_close, or for a child's output the rt_io that
 * rt_process_take_stdio gave you), so that whatever writes into it gets
 * EPIPE or SIGPIPE, as in a shell pipeline, instead of blocking for ever on
 * a full pipe. Neither descriptor is closed by the copy.
 * Abort safety: a dropped copy has written `copied` bytes; bytes it had
 * read and not yet written (at most len) are lost.
 * Each read and write spends budget (rt_coop_proceed), so a long copy lets
 * the other tasks of its worker run. */
typedef struct rt_io_copy {
    RT_FUTURE_HEADER;
    rt_io *from;       /* read until the end of its stream */
    rt_io *to;         /* written */
    char *buf;         /* the caller's buffer */
    size_t cap;        /* its size */
    size_t filled;     /* bytes read into buf and not yet all written */
    size_t written;    /* of them, written */
    uint64_t copied;   /* bytes written to `to` in all */
    bool write_failed; /* the error (result < 0) came from writing to `to` */
} rt_io_copy;

/* Prepares a copy through buf[0..len) (len > 0; 16 KiB or more copies a
 * pipe's worth at a time), which must stay valid until the copy finishes
 * or is dropped. Errors: -EINVAL (op, from, to or buf NULL, len 0). */
int rt_io_copy_init(rt_io_copy *op, rt_io *from, rt_io *to, void *buf, size_t len);

/* Removes the descriptor from the reactor, closes it and frees the rt_io.
 * Tasks waiting on it are woken (their next poll must not use it: the caller
 * coordinates). Operations on it may still be dropped, before or after the
 * rt_io is freed: a drop never touches the caller's rt_io, for the
 * operations of this header, net.h, unix.h and bufio.h alike. Returns 0 or
 * the error of close(2) (the rt_io is freed either way). NULL is a no-op.
 * Any thread. */
int rt_io_close(rt_io *io);

#ifdef __cplusplus
}
#endif
#endif
