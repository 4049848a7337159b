/* The I/O layer's internal interface, shared by io.c (descriptors) and
 * net.c (sockets): the task's half of the readiness protocol (readiness.h
 * has the word and its argument) and registration. Internal, not
 * installed. */
#ifndef RT_SRC_IO_INTERNAL_H
#define RT_SRC_IO_INTERNAL_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <asyncrt/io.h>

#include "common.h"
#include "operation.h"
#include "readiness.h"

/* RT_READY (with the tick seen) when direction `dir` is ready, or, with
 * `try_unknown`, not known to block; else stores the context's waker for it
 * and returns RT_PENDING. Operations pass try_unknown = true. */
rt_poll rt__io_poll_ready(rt_io *io, unsigned dir, bool try_unknown, rt_context *cx,
                          uint32_t *tick);
/* After EAGAIN: forgets readiness of `dir` unless an event came since `tick`. */
void rt__io_clear_ready(rt_io *io, unsigned dir, uint32_t tick);
/* After a transfer's system call failed, with errno still its error: true
 * when the caller should try again (EINTR; or EAGAIN, after which readiness
 * of `dir` is forgotten unless an event came since `tick`, so the next
 * rt__io_poll_ready waits for one), false when *result now holds -errno and
 * the caller should report it. Inline: every transfer's loop ends in it. */
static inline bool rt__io_retry_after_error(rt_io *io, unsigned dir, uint32_t tick, ssize_t *result)
{
    int e = errno; /* read first: nothing below may change it */
    if (e == EINTR)
        return true;
    if (e != EAGAIN && e != EWOULDBLOCK) {
        *result = -e;
        return false;
    }
    RT__DEBUG_YIELD(); /* widens the window between EAGAIN and the clear */
    rt__io_clear_ready(io, dir, tick);
    return true;
}
/* One attempt at taking a connection from a listening socket (TCP or Unix,
 * net.c): RT_READY with *err 0, *conn a new registered rt_io and the peer's
 * address in *peer / *peer_len, or with *err < 0 (what each error leaves:
 * net.h, rt_tcp_accept); else RT_PENDING with cx's waker stored. */
rt_poll rt__io_accept(rt_io *listener, rt_context *cx, rt_io **conn, struct sockaddr_storage *peer,
                      socklen_t *peer_len, int *err);

/* Starts an I/O operation's header: `vtable`, or finished with -EINVAL when
 * its arguments are not `valid` (returns 0 or -EINVAL, as the inits do). */
static inline int rt__io_op_init(rt_future *f, const rt_future_vtable *vtable, bool valid)
{
    f->vtable = vtable;
    f->result = 0;
    if (!valid) {
        rt__future_finish(f, -EINVAL);
        return -EINVAL;
    }
    return 0;
}

/* After a short read or write on TCP: the same, unless `dir` is sticky. */
void rt__io_clear_after_short(rt_io *io, unsigned dir, uint32_t tick);

/* Registers an already non-blocking, close-on-exec descriptor (used by
 * net.c for the sockets it creates): a socket (writes use MSG_NOSIGNAL) or
 * not, and a TCP socket (see "Short transfers") or not. On failure the
 * caller keeps fd. */
int rt__io_adopt(rt_runtime *rt, int fd, bool is_socket, bool is_tcp, rt_io **out);

/* rt__io_adopt in two steps, for a caller that must have the memory before
 * it takes the descriptor (accept: a connection taken from the kernel cannot
 * be given back). rt__io_alloc returns a zeroed rt_io or NULL (ENOMEM); free
 * an unused one with free(). rt__io_register fills it in and registers fd;
 * on failure it frees io and the caller keeps fd. */
rt_io *rt__io_alloc(void);
int rt__io_register(rt_runtime *rt, rt_io *io, int fd, bool is_socket, bool is_tcp);

/* Closes every rt_io still open (rt_runtime_free, after the reactor stopped). */
void rt__io_close_all(rt_runtime *rt);

#endif
