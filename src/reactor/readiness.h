/* The registration behind an rt_io and its readiness word: the reactor
 * (reactor.c, record_event) and the I/O layer (io.c, net.c) each do their
 * half of the protocol below. Internal, not installed.
 *
 * Readiness word (edge-triggered epoll without lost wake-ups, after Tokio's
 * ScheduledIo): bits 0-1 say which directions are believed ready, bits 32-63
 * count events (the tick). Transitions:
 *
 *   reactor event:      ready |= dirs, sticky |= sticky_dirs, tick += 1
 *                                                               (one CAS)
 *   operation, EAGAIN:  ready &= ~dir  only if tick is still the one the
 *                       operation saw when it found dir ready   (one CAS)
 *   short transfer on TCP: the same, and only if dir is not sticky
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
 * state; EAGAIN clears them with the confirmed bits. Readiness waits
 * (rt_io_readable_init, rt_io_writable_init) ignore them and wait for a real
 * report: the kernel reports a descriptor that is already ready when it is
 * added, so nothing is lost.
 *
 * Short transfers. On a TCP socket the kernel copies as much as it has, or as
 * much as fits: a read that returns fewer bytes than asked emptied the
 * receive queue, and a short write filled the send buffer. The operation then
 * clears the direction as after EAGAIN (tick-checked), which saves the system
 * call that would only have said EAGAIN: an echo server's second read per
 * message. Nothing is lost, for the same reason as after EAGAIN: the tick was
 * read before the system call, and every later arrival (or freed space) is a
 * new edge that moves it. Tokio does the same for its streams.
 *
 * Exceptions, where a short transfer proves nothing: a peer that hung up (the
 * stream is at its end, not empty, and the hang-up's edge may have come and
 * gone before the read), a socket in error, and urgent data (tcp_recvmsg
 * stops at the urgent mark with more queued behind it). So TCP sockets are
 * registered with EPOLLPRI too, and the reactor sets bits 4-5, the sticky
 * directions: reading after RDHUP, HUP, ERR or PRI; writing after HUP or ERR.
 * Nothing clears them, and a short transfer clears its direction only while
 * that bit is clear, in the same CAS as the tick check: an event recorded
 * before the CAS changed the word, one recorded after sets the direction
 * again. (ERR is not always final, so this only gives up the saving on such
 * a socket. After EAGAIN the direction is cleared whatever bits 4-5 say:
 * EAGAIN is proof.)
 *
 * Only TCP counts. AF_UNIX stream reads also stop early: at a passed file
 * descriptor, between senders with SO_PASSCRED, at out-of-band data. SCTP
 * "stream" sockets return one message per read, as do datagram and seqpacket
 * sockets; terminals return a line; a pipe returns one packet when its writer
 * set O_DIRECT, which the read end cannot see. A user who layers kernel TLS
 * (TCP_ULP) on a socket should read it after a readiness wait (rt_io_readable_init) with recvmsg.
 */
#ifndef RT_SRC_READINESS_H
#define RT_SRC_READINESS_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include <asyncrt/io.h>

#include "spinlock.h"

#define RT__IO_READ 1u
#define RT__IO_WRITE 2u
#define RT__IO_UNKNOWN_SHIFT 2 /* RT__IO_x << 2: not known to block */
#define RT__IO_STICKY_SHIFT 4  /* RT__IO_x << 4: a short transfer proves nothing */
#define RT__IO_TICK_SHIFT 32
#define RT__IO_TICK_ONE (1ull << RT__IO_TICK_SHIFT)

struct rt_io {
    int fd;                     /* the owned descriptor; -1 once closed */
    bool is_socket;             /* writes use send(MSG_NOSIGNAL) */
    bool is_tcp;                /* a TCP socket: a short read or write emptied
                                   or filled the kernel's buffer (see above) */
    bool nodelay_inherited;     /* a TCP listener made by rt_tcp_listen: its
                                   connections inherit its TCP_NODELAY choice */
    rt_runtime *rt;             /* owner of the reactor it is registered with */
    uint64_t readiness;         /* see above */
    rt__spinlock lock;          /* guards the two waker slots and `closed` */
    bool closed;                /* rt_io_close ran; wakers are no longer stored */
    rt_waker reader;            /* the task waiting to read (no-op when none) */
    rt_waker writer;            /* the task waiting to write (no-op when none) */
    struct rt_io *prev, *next;  /* the runtime's list of open rt_io (io_lock) */
    struct rt_io *release_next; /* the reactor's release list */
};

#endif
