/* asyncrt: TCP and UDP over rt_io.
 *
 * Sockets are rt_io objects (see io.h): read, write, write_all and close work
 * on them as on any descriptor. This header adds what is specific to sockets.
 * Every socket the library opens is non-blocking and close-on-exec; socket
 * writes use MSG_NOSIGNAL, so a peer that went away gives -EPIPE, never
 * SIGPIPE. IPv4 and IPv6 addresses are both accepted wherever a struct
 * sockaddr is taken.
 * Never polled: no operation of this header holds anything before its
 * first poll (rt_tcp_connect opens its socket there), so one initialised
 * and never polled needs no drop; dropping it (also after its rt_io was
 * closed: see rt_io_close) or initialising it again is safe.
 *
 * TCP_NODELAY is on for every TCP connection the library makes or accepts,
 * as in Go: a small write leaves at once. With Nagle's algorithm (the
 * kernel's default) a small write waits until the peer has acknowledged the
 * previous one, and a peer that delays its ACKs (Linux: up to 40 ms) makes
 * every reply after the first of a pipelined batch wait that long. A program
 * that writes many small pieces should gather them itself (an rt_writer,
 * bufio.h, flushed once a batch of replies is ready) rather than rely on
 * Nagle's algorithm; one that wants it back sets RT_NET_NAGLE on its
 * listener or calls rt_tcp_set_nodelay(conn, false). */
#ifndef ASYNCRT_NET_H
#define ASYNCRT_NET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "io.h"
#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options for rt_tcp_listen and rt_udp_bind. */
#define RT_NET_REUSEADDR 1u /* SO_REUSEADDR (the usual choice for servers) */
#define RT_NET_REUSEPORT 2u /* SO_REUSEPORT */
#define RT_NET_V6ONLY 4u    /* IPV6_V6ONLY on an IPv6 socket */
/* rt_tcp_listen: keep Nagle's algorithm on the accepted connections (no
 * TCP_NODELAY); ignored by rt_udp_bind. */
#define RT_NET_NAGLE 8u

/* Parses "a.b.c.d" or an IPv6 literal plus a port into *addr / *len.
 * Returns 0 or -EINVAL (not an address; ip, addr or len NULL). Any thread. */
int rt_net_addr(const char *ip, uint16_t port, struct sockaddr_storage *addr, socklen_t *len);

/* Parses "IP:PORT" into *addr / *len, as Go's net.Listen spells an
 * address: an IPv4 address, or an IPv6 one between brackets
 * ("[::1]:8080"), and a decimal port from 0 to 65535. No names: look them
 * up with resolve.h. Returns 0 or -EINVAL. Any thread. */
int rt_net_parse(const char *hostport, struct sockaddr_storage *addr, socklen_t *len);

/* Creates a TCP socket bound to addr and listening with `backlog`, with the
 * RT_NET_* `flags`. Its accepted connections have TCP_NODELAY on, unless
 * RT_NET_NAGLE (a listener that came from rt_io_open passes on nothing, and
 * the accept sets TCP_NODELAY on each connection). *out owns it. Errors:
 * those of socket/bind/listen (-EADDRINUSE, -EACCES, -EMFILE...), -EINVAL
 * (addr or out NULL, rt NULL outside a task), -ENOMEM, -ESHUTDOWN. rt NULL
 * means rt_current_runtime(). Any thread. */
int rt_tcp_listen(rt_runtime *rt, const struct sockaddr *addr, socklen_t len, int backlog,
                  unsigned flags, rt_io **out);

/* rt_tcp_listen on "IP:PORT" (rt_net_parse; port 0: any free one, which
 * rt_net_local_port tells), with a backlog of SOMAXCONN and
 * RT_NET_REUSEADDR. Errors: rt_net_parse's and rt_tcp_listen's (*out NULL
 * then). Any thread. */
int rt_tcp_listen_addr(rt_runtime *rt, const char *hostport, rt_io **out);

/* Accepting one connection: an operation (see future.h) that finishes with
 * result 0 and `conn` a new rt_io (owned by the caller from then on; the
 * peer's address in `peer` / `peer_len`), or a negative errno. The errors,
 * and what becomes of the connection:
 *   -EMFILE / -ENFILE (out of descriptors) and -ENOMEM (no memory for the
 *   rt_io, which is allocated before the connection is taken): the pending
 *   connection stays queued, and the next accept, once resources are free,
 *   takes it;
 *   -ESHUTDOWN (the runtime is shutting down) and the errors of registering
 *   the new descriptor with epoll (-ENOBUFS: the kernel had no memory for
 *   the watch; -ENOSPC: the kernel's limit on watches): the kernel had
 *   already accepted the connection, which is closed again (its peer sees
 *   an orderly close or a reset);
 *   -ECONNABORTED and other errors of accept4(2): that connection is gone.
 * Abort safety: nothing is lost (a connection is only taken by the poll
 * that finishes the operation). */
typedef struct rt_tcp_accept {
    RT_FUTURE_HEADER;
    rt_io *listener;              /* the listening socket */
    rt_io *conn;                  /* the connection accepted */
    struct sockaddr_storage peer; /* its peer's address */
    socklen_t peer_len;           /* that address's length */
} rt_tcp_accept;

/* Prepares an accept on `listener`. Errors: -EINVAL (op or listener NULL). */
int rt_tcp_accept_init(rt_tcp_accept *op, rt_io *listener);

/* A connection attempt: an operation (see future.h) that finishes with
 * result 0 and `conn` the connected socket, TCP_NODELAY on (owned by the
 * caller from then on), or a negative errno (-ECONNREFUSED, -ENETUNREACH, -EMFILE...). For a
 * time limit, wrap it in an rt_timeout (combine.h). Abort safety: a dropped
 * attempt closes its half-open socket. */
typedef struct rt_tcp_connect {
    RT_FUTURE_HEADER;
    rt_runtime *rt;               /* whose reactor registers the socket */
    rt_io *io;                    /* the socket while connecting, else NULL */
    rt_io *conn;                  /* the connected socket */
    struct sockaddr_storage addr; /* where to, copied at init */
    socklen_t addr_len;           /* its length */
} rt_tcp_connect;

/* Prepares a connection to addr (copied). rt NULL means rt_current_runtime().
 * Errors: -EINVAL (op or addr NULL, addr_len 0 or larger than a
 * sockaddr_storage, no runtime). */
int rt_tcp_connect_init(rt_tcp_connect *op, rt_runtime *rt, const struct sockaddr *addr,
                        socklen_t addr_len);

/* shutdown(2): how is SHUT_RD, SHUT_WR or SHUT_RDWR. Returns 0 or -errno
 * (-EINVAL for io NULL). */
int rt_tcp_shutdown(rt_io *io, int how);

/* TCP_NODELAY on (the library's default for its TCP sockets) or off (Nagle's
 * algorithm: small writes wait for the previous one's ACK; see the top of
 * this header). Returns 0 or -errno (-EINVAL for io NULL). */
int rt_tcp_set_nodelay(rt_io *io, bool on);

/* The socket's own and its peer's address: written to *addr, with its length
 * in *len (an output only). Return 0 or -errno (-ENOTCONN; -EINVAL for io,
 * addr or len NULL). */
int rt_net_local_addr(rt_io *io, struct sockaddr_storage *addr, socklen_t *len);
int rt_net_peer_addr(rt_io *io, struct sockaddr_storage *addr, socklen_t *len);

/* The port an IPv4 or IPv6 socket is bound to (>= 0): how a listener bound
 * to port 0 learns its own. Errors: rt_net_local_addr's, -EAFNOSUPPORT
 * (another family). Any thread. */
int rt_net_local_port(rt_io *io);

/* Creates a UDP socket bound to addr (port 0: any free port) with the
 * RT_NET_* flags. *out owns it. Errors as rt_tcp_listen (-EINVAL for addr or
 * out NULL). */
int rt_udp_bind(rt_runtime *rt, const struct sockaddr *addr, socklen_t len, unsigned flags,
                rt_io **out);

/* Sets the default peer of a UDP socket (connect(2)); rt_io_read/write then
 * exchange datagrams with it. Returns 0 or -errno (-EINVAL for io or addr
 * NULL). */
int rt_udp_connect(rt_io *io, const struct sockaddr *addr, socklen_t len);

/* Sending one datagram: an operation (see future.h) that finishes with
 * result the byte count sent or a negative errno. */
typedef struct rt_udp_send_to {
    RT_FUTURE_HEADER;
    rt_io *io;                    /* the socket */
    const void *buf;              /* the datagram, owned by the caller */
    size_t len;                   /* its length */
    struct sockaddr_storage addr; /* where to, copied at init */
    socklen_t addr_len;           /* its length; 0: the connected peer */
} rt_udp_send_to;

/* Prepares a send of buf[0..len) to addr (copied; NULL: to the peer set by
 * rt_udp_connect, addr_len then ignored). Errors: -EINVAL (op or io NULL,
 * buf NULL with len > 0, addr not NULL with addr_len 0 or larger than a
 * sockaddr_storage). */
int rt_udp_send_to_init(rt_udp_send_to *op, rt_io *io, const void *buf, size_t len,
                        const struct sockaddr *addr, socklen_t addr_len);

/* Receiving one datagram (truncated to len): an operation that finishes with
 * result the byte count or a negative errno, and the sender in `from` /
 * `from_len`. */
typedef struct rt_udp_recv_from {
    RT_FUTURE_HEADER;
    rt_io *io;                    /* the socket */
    void *buf;                    /* where the datagram goes, the caller's */
    size_t len;                   /* room in buf */
    struct sockaddr_storage from; /* the sender */
    socklen_t from_len;           /* its address's length */
} rt_udp_recv_from;

/* Prepares a receive into buf[0..len). Errors: -EINVAL (op or io NULL, buf
 * NULL with len > 0). */
int rt_udp_recv_from_init(rt_udp_recv_from *op, rt_io *io, void *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
