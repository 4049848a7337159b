/* The registration behind an rt_io, shared by io.c (descriptors), net.c
 * (sockets) and reactor.c (events). Internal, not installed.
 *
 * Readiness word (edge-triggered epoll without lost wake-ups, after Tokio's
 * ScheduledIo): bits 0-1 say which directions are believed ready, bits 32-63
 * count events (the tick). Transitions:
 *
 *   reactor event:      ready |= dirs, hung_up |= hup_dirs, tick += 1
 *                                                               (one CAS)
 *   operation, EAGAIN:  ready &= ~dir  only if tick is still the one the
 *                       operation saw when it found dir ready   (one CAS)
 *   short transfer on a stream: the same, and only if dir has not hung up
 *
 * So an edge that arrives after the operation read the readiness but before
 * it cleared it moves the tick, the clear fails, and the operation retries
 * instead of waiting for an edge that already came. An operation that found
 * the direction not ready stores its waker under the slot lock and then
 * reads the readiness again: the reactor sets readiness before it takes the
 * lock to collect wakers, so either the re-read sees the edge or the reactor
 * sees the waker (the lock orders the two).
 *
 * Bits 2-3 are the same two directions, "not known to block": a new
 * registration starts with them set, so the first read or write simply tries
 * its system call instead of waiting for the reactor to report the initial
 * state; EAGAIN clears them with the confirmed bits. rt_io_readable and
 * rt_io_writable ignore them and wait for a real report: the kernel reports a
 * descriptor that is already ready when it is added, so nothing is lost.
 *
 * Short transfers. On a SOCK_STREAM socket the kernel copies as much as it
 * has, or as much as fits: a read that returns fewer bytes than asked emptied
 * the receive buffer, and a short write filled the send buffer. The operation
 * then clears the direction as after EAGAIN (tick-checked), which saves the
 * system call that would only have said EAGAIN: an echo server's second read
 * per message. Nothing is lost, for the same reason as after EAGAIN: the tick
 * was read before the system call, and every later arrival (or freed space)
 * is a new edge that moves it. One exception: an emptied stream whose peer
 * has hung up is not "would block" but at its end, and the hang-up's edge may
 * have come and gone before the read. So the reactor also sets bits 4-5, the
 * directions that hung up (RDHUP, HUP or ERR for reading; HUP or ERR for
 * writing), which nothing ever clears, and a short transfer clears its
 * direction only while that bit is clear, in the same CAS as the tick check.
 * (After EAGAIN the direction is cleared whatever bits 4-5 say: a datagram
 * socket's ERR is not final, and EAGAIN is proof enough.) Tokio does the
 * same for its streams, with the same sticky "closed" readiness. Datagram and
 * SOCK_SEQPACKET sockets return one message per read, terminals one line,
 * and a pipe one packet when its writer set O_DIRECT (which the read end
 * cannot see), so a short read says nothing there: only stream sockets are
 * streams here. */
#ifndef RT_SRC_IO_INTERNAL_H
#define RT_SRC_IO_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <asyncrt/io.h>

#include "spinlock.h"

#define RT__IO_READ 1u
#define RT__IO_WRITE 2u
#define RT__IO_UNKNOWN_SHIFT 2 /* RT__IO_x << 2: not known to block */
#define RT__IO_HUP_SHIFT 4     /* RT__IO_x << 4: that side hung up (sticky) */
#define RT__IO_TICK_SHIFT 32
#define RT__IO_TICK_ONE (1ull << RT__IO_TICK_SHIFT)

struct rt_io {
    int fd;                     /* the owned descriptor; -1 once closed */
    bool is_socket;             /* writes use send(MSG_NOSIGNAL) */
    bool is_stream;             /* a SOCK_STREAM socket: a short read or write
                                   emptied or filled the kernel's buffer */
    rt_runtime *rt;             /* owner of the reactor it is registered with */
    uint64_t readiness;         /* see above */
    rt__spinlock lock;          /* guards the two waker slots and `closed` */
    bool closed;                /* rt_io_close ran; wakers are no longer stored */
    rt_waker reader;            /* the task waiting to read (no-op when none) */
    rt_waker writer;            /* the task waiting to write (no-op when none) */
    struct rt_io *prev, *next;  /* the runtime's list of open rt_io (io_lock) */
    struct rt_io *release_next; /* the reactor's release list */
};

/* RT_READY (with the tick seen) when direction `dir` is ready, or, with
 * `try_unknown`, not known to block; else stores the context's waker for it
 * and returns RT_PENDING. Operations pass try_unknown = true. */
rt_poll rt__io_poll_ready(rt_io *io, unsigned dir, bool try_unknown, rt_context *cx,
                          uint32_t *tick);
/* After EAGAIN: forgets readiness of `dir` unless an event came since `tick`. */
void rt__io_clear_ready(rt_io *io, unsigned dir, uint32_t tick);
/* After a short read or write on a stream: the same, unless `dir` also hung up. */
void rt__io_clear_after_short(rt_io *io, unsigned dir, uint32_t tick);
/* The reactor's side: records an event (`dirs` ready, `hup_dirs` hung up)
 * and hands the wakers to wake out. */
void rt__io_event(rt_io *io, unsigned dirs, unsigned hup_dirs, rt_waker *reader, rt_waker *writer);

/* Registers an already non-blocking, close-on-exec descriptor (used by
 * net.c for the sockets it creates): a socket (writes use MSG_NOSIGNAL), and
 * a stream socket (see "Short transfers") or not. On failure the caller keeps
 * fd. */
int rt__io_adopt(rt_runtime *rt, int fd, bool is_socket, bool is_stream, rt_io **out);

/* Closes every rt_io still open (rt_runtime_free, after the reactor stopped). */
void rt__io_close_all(rt_runtime *rt);

#endif
