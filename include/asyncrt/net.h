/* asyncrt: TCP and UDP over rt_io.
 *
 * Sockets are rt_io objects (see io.h): read, write, write_all and close work
 * on them as on any descriptor. This header adds what is specific to sockets.
 * Every socket the library opens is non-blocking and close-on-exec; socket
 * writes use MSG_NOSIGNAL, so a peer that went away gives -EPIPE, never
 * SIGPIPE. IPv4 and IPv6 addresses are both accepted wherever a struct
 * sockaddr is taken. */
#ifndef ASYNCRT_NET_H
#define ASYNCRT_NET_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "io.h"
#include "timer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options for rt_tcp_listen and rt_udp_bind. */
#define RT_NET_REUSEADDR 1u /* SO_REUSEADDR (the usual choice for servers) */
#define RT_NET_REUSEPORT 2u /* SO_REUSEPORT */
#define RT_NET_V6ONLY 4u    /* IPV6_V6ONLY on an IPv6 socket */

/* Parses "a.b.c.d" or an IPv6 literal plus a port into *addr / *len.
 * Returns 0 or -EINVAL (not an address; ip, addr or len NULL). Any thread. */
int rt_net_addr(const char *ip, uint16_t port, struct sockaddr_storage *addr, socklen_t *len);

/* Creates a TCP socket bound to addr and listening with `backlog`, with the
 * RT_NET_* `flags`. *out owns it. Errors: those of socket/bind/listen
 * (-EADDRINUSE, -EACCES, -EMFILE...), -EINVAL (addr or out NULL, rt NULL
 * outside a task), -ENOMEM, -ESHUTDOWN. rt NULL means rt_current(). Any
 * thread. */
int rt_tcp_listen(rt_runtime *rt, const struct sockaddr *addr, socklen_t len, int backlog,
                  unsigned flags, rt_io **out);

/* Accepts one connection: RT_READY with *err 0 and *conn a new rt_io (owned
 * by the caller; peer address in *peer / *peer_len when not NULL), or RT_READY
 * with *err < 0, or RT_PENDING. The errors, and what becomes of the
 * connection:
 *   -EMFILE / -ENFILE (out of descriptors) and -ENOMEM (no memory for the
 *   rt_io, which is allocated before the connection is taken): the pending
 *   connection stays queued, and the next accept, once resources are free,
 *   takes it;
 *   -ESHUTDOWN (the runtime is shutting down) and the errors of registering
 *   the new descriptor with epoll (-ENOMEM, -ENOSPC: the kernel's limit on
 *   watches): the kernel had already accepted the connection, which is
 *   closed again (its peer sees an orderly close or a reset);
 *   -ECONNABORTED and other errors of accept4(2): that connection is gone.
 * Abort safety: nothing is lost.
 * listener, cx or conn NULL: RT_READY with *err -EINVAL (and *conn NULL when
 * conn is not). err NULL: RT_READY at once, nothing accepted. */
rt_poll rt_tcp_accept(rt_io *listener, rt_context *cx, rt_io **conn, struct sockaddr_storage *peer,
                      socklen_t *peer_len, int *err);

/* A connection attempt, as an operation struct kept in the caller's state. */
typedef struct rt_tcp_connect {
    rt_io *io;        /* the socket while connecting; NULL before and after */
    rt_timeout limit; /* the connect timeout */
    bool has_limit;   /* timeout_ns was > 0 */
    int started;      /* connect(2) issued */
} rt_tcp_connect;

/* Prepares a connection to addr that gives up timeout_ns after this call
 * (<= 0: no limit beyond the kernel's). rt NULL means rt_current(). Returns 0
 * or -EINVAL (op NULL, no runtime). */
int rt_tcp_connect_init(rt_tcp_connect *op, rt_runtime *rt, int64_t timeout_ns);

/* Connects: RT_READY with *err 0 and *conn the connected socket (owned by the
 * caller), or RT_READY with *err < 0 (-ECONNREFUSED, -ETIMEDOUT when the
 * timeout passed, -ENETUNREACH, -EMFILE...), or RT_PENDING. Pass the same
 * addr on every poll. op, cx, addr or conn NULL: RT_READY with *err -EINVAL
 * (and *conn NULL when conn is not); op is left as it was. err NULL: RT_READY
 * at once, nothing done. */
rt_poll rt_tcp_connect_poll(rt_tcp_connect *op, rt_context *cx, const struct sockaddr *addr,
                            socklen_t len, rt_io **conn, int *err);

/* Abandons a connection attempt (closing its socket and timer). Safe after
 * completion too, on a zero-initialised struct, and on NULL (a no-op). Abort
 * safety: the half-open socket is closed. */
void rt_tcp_connect_drop(rt_tcp_connect *op);

/* shutdown(2): how is SHUT_RD, SHUT_WR or SHUT_RDWR. Returns 0 or -errno
 * (-EINVAL for io NULL). */
int rt_tcp_shutdown(rt_io *io, int how);

/* TCP_NODELAY on or off. Returns 0 or -errno (-EINVAL for io NULL). */
int rt_tcp_set_nodelay(rt_io *io, bool on);

/* The socket's own and its peer's address: written to *addr, with its length
 * in *len (an output only). Return 0 or -errno (-ENOTCONN; -EINVAL for io,
 * addr or len NULL). */
int rt_net_local_addr(rt_io *io, struct sockaddr_storage *addr, socklen_t *len);
int rt_net_peer_addr(rt_io *io, struct sockaddr_storage *addr, socklen_t *len);

/* Creates a UDP socket bound to addr (port 0: any free port) with the
 * RT_NET_* flags. *out owns it. Errors as rt_tcp_listen (-EINVAL for addr or
 * out NULL). */
int rt_udp_bind(rt_runtime *rt, const struct sockaddr *addr, socklen_t len, unsigned flags,
                rt_io **out);

/* Sets the default peer of a UDP socket (connect(2)); rt_io_read/write then
 * exchange datagrams with it. Returns 0 or -errno (-EINVAL for io or addr
 * NULL). */
int rt_udp_connect(rt_io *io, const struct sockaddr *addr, socklen_t len);

/* Sends one datagram: RT_READY with *result (bytes or -errno), or RT_PENDING.
 * addr NULL: to the peer set by rt_udp_connect (addr_len is then ignored).
 * io or cx NULL, or buf NULL with len > 0: RT_READY with *result -EINVAL.
 * result NULL: RT_READY at once, nothing sent. */
rt_poll rt_udp_send_to(rt_io *io, rt_context *cx, const void *buf, size_t len,
                       const struct sockaddr *addr, socklen_t addr_len, ssize_t *result);

/* Receives one datagram (truncated to len): RT_READY with *result (bytes or
 * -errno) and the sender in *from / *from_len when not NULL (*from_len is an
 * output only), or RT_PENDING.
 * io or cx NULL, or buf NULL with len > 0: RT_READY with *result -EINVAL.
 * result NULL: RT_READY at once, nothing received. */
rt_poll rt_udp_recv_from(rt_io *io, rt_context *cx, void *buf, size_t len,
                         struct sockaddr_storage *from, socklen_t *from_len, ssize_t *result);

#ifdef __cplusplus
}
#endif
#endif
