/* asyncrt: Unix domain sockets over rt_io.
 *
 * Stream listeners, connections and datagram sockets of the AF_UNIX family,
 * named by a filesystem path or by a Linux abstract name, plus what only
 * Unix sockets have: the peer's credentials and descriptors passed in
 * messages (SCM_RIGHTS). Sockets are rt_io objects (see io.h): on a
 * connected stream, rt_io_read, rt_io_write, rt_io_write_all, the bufio
 * reader and writer and rt_io_close work as on any descriptor. Every socket
 * the library opens, and every descriptor it receives, is non-blocking (the
 * sockets) and close-on-exec; writes use MSG_NOSIGNAL, so a peer that went
 * away gives -EPIPE, never SIGPIPE.
 *
 * Names. Every function that takes a name takes a C string:
 * - "@name": the abstract name "name" (Linux only): no file is made, the
 *   name vanishes with the last socket bound to it, and its bytes are those
 *   after the '@', without a terminating NUL (as ss(8) and systemd write
 *   them). A path that really begins with '@' is written "./@...".
 * - anything else: a filesystem path, relative to the current directory
 *   unless it begins with '/'.
 * A name has at most RT_UNIX_NAME_MAX bytes after the '@' (an abstract
 * name) or in all (a path, which sun_path must hold with its terminating
 * NUL); a longer one is -ENAMETOOLONG. The empty name and "@" alone are
 * -EINVAL.
 *
 * Socket files. Binding a path creates a socket file there, which stays
 * after the socket is closed: remove it with unlink(2) when the server
 * stops. Binding over a file that is already there is -EADDRINUSE, unless
 * the caller passes RT_UNIX_UNLINK_STALE and the file is a stale socket
 * (see that flag): the library never removes a file it did not make (a
 * listen or bind that fails after its bind removes the file that bind
 * made). The file's mode follows the umask; binding and connecting look
 * the path up on the calling thread, as any path operation does.
 *
 * Threads: the plain functions from any thread; each operation is polled by
 * one task (or thread polling by hand) at a time, like any operation.
 *
 * Never polled: no operation of this header holds anything before its
 * first poll (rt_unix_connect makes its socket there; rt_unix_send_fds
 * only copies the descriptors' numbers), so one initialised and never
 * polled needs no drop; dropping it (also after its rt_io was closed: see
 * rt_io_close) or initialising it again is safe. */
#ifndef ASYNCRT_UNIX_H
#define ASYNCRT_UNIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include "io.h"
#include "runtime.h"
#include "timer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The longest name: 107 bytes on Linux (sun_path less one byte: the
 * terminating NUL of a path, the leading NUL of an abstract name). */
#define RT_UNIX_NAME_MAX (sizeof(((struct sockaddr_un *)0)->sun_path) - 1)

/* Most descriptors one rt_unix_send_fds carries and one rt_unix_recv_fds
 * keeps (send more in several messages). */
#define RT_UNIX_FDS_MAX 16

/* Option of rt_unix_listen and rt_unix_dgram_bind: when the path is taken
 * (-EADDRINUSE) by a stale socket file, remove it and bind again. Stale
 * means: the file is a socket (lstat(2); a regular file, a directory or a
 * link is never removed) and a connection attempt to it is refused
 * (ECONNREFUSED: no socket is bound to it any more). A live socket keeps
 * its file and the bind is -EADDRINUSE; a live stream listener sees the
 * attempt as one connection that closes at once. Between the check and the
 * new bind another process may take the path; the bind then fails with
 * -EADDRINUSE as usual. Ignored for abstract names, which cannot be stale. */
#define RT_UNIX_UNLINK_STALE 1u

/* ---- Names ------------------------------------------------------------------ */

/* Writes the address of `name` (see "Names" above) to *addr and its length
 * to *len. Errors: -EINVAL (name, addr or len NULL, name "" or "@"),
 * -ENAMETOOLONG (more than RT_UNIX_NAME_MAX bytes). Any thread. */
int rt_unix_addr(const char *name, struct sockaddr_un *addr, socklen_t *len);

/* Writes the name of an address (as a receive's `from`, or
 * rt_unix_local_addr's result) to buf as a NUL-terminated string: "@..."
 * for an abstract name (whose bytes may include NULs: use the returned
 * length), the path for a path, "" for an unnamed socket (a socketpair, a
 * client that bound nothing: len 0, as a receive reports it, or
 * sizeof(sa_family_t)). Returns the name's length without the NUL.
 * Errors: -EINVAL (addr or buf NULL, len 1 or larger than a sockaddr_un,
 * len above 0 and not an AF_UNIX address), -ENOSPC (buf shorter than the
 * name and its NUL; buf then holds "" when size > 0). Any thread. */
int rt_unix_addr_name(const struct sockaddr_un *addr, socklen_t len, char *buf, size_t size);

/* ---- Streams -------------------------------------------------------------- */

/* Creates a stream socket bound to `name` and listening with `backlog`,
 * with the RT_UNIX_* `flags`. *out owns it (rt_io_close; the socket file,
 * for a path, is the caller's to unlink). rt NULL means rt_current_runtime().
 * Errors: -EINVAL (name or out NULL, unknown flags, no runtime, a bad name),
 * -ENAMETOOLONG, -EADDRINUSE (the name is taken: for a path, a file is
 * there, see RT_UNIX_UNLINK_STALE), -ENOENT (a directory of the path does
 * not exist), -EACCES, -EMFILE and the other errors of socket, bind and
 * listen, -ENOMEM, -ESHUTDOWN. On error *out is NULL and no descriptor is
 * left (a socket file its bind made before a later step failed is removed
 * again). Any thread. */
int rt_unix_listen(rt_runtime *rt, const char *name, int backlog, unsigned flags, rt_io **out);

/* Accepting one connection: an operation (see future.h) that finishes with
 * result 0 and `conn` a new rt_io (owned by the caller from then on; the
 * peer's address, usually unnamed, in `peer` / `peer_len`), or a negative
 * errno. The errors, and what becomes of the connection:
 *   -EMFILE / -ENFILE (out of descriptors) and -ENOMEM (no memory for the
 *   rt_io, which is allocated before the connection is taken): the pending
 *   connection stays queued for the next accept;
 *   -ESHUTDOWN and the errors of registering the new descriptor with epoll
 *   (-ENOBUFS: no kernel memory for the watch; -ENOSPC: the limit on
 *   watches): the connection had been taken and is closed again (the peer
 *   reads the end of the stream);
 *   -EBADF (the listener was closed) and other errors of accept4(2).
 * Abort safety: nothing is lost (a connection is only taken by the poll
 * that finishes the operation). */
typedef struct rt_unix_accept {
    RT_FUTURE_HEADER;
    rt_io *listener;         /* the listening socket */
    rt_io *conn;             /* the connection accepted */
    struct sockaddr_un peer; /* its peer's address */
    socklen_t peer_len;      /* that address's length */
} rt_unix_accept;

/* Prepares an accept on `listener`. Errors: -EINVAL (op or listener NULL).
 * Any thread. */
int rt_unix_accept_init(rt_unix_accept *op, rt_io *listener);

/* A connection to a listening stream socket: an operation (see future.h)
 * that finishes with result 0 and `conn` the connected socket (owned by the
 * caller from then on), or a negative errno: -ENOENT (no such path),
 * -ECONNREFUSED (nothing listens there: a stale socket file, an unbound
 * abstract name), -EACCES (no permission to the path), -EPROTOTYPE (a
 * datagram socket there), -EMFILE, -ENOMEM, -ESHUTDOWN. A listener whose
 * backlog is full makes the connect try again after a pause (1 ms,
 * doubling up to 64 ms: the kernel offers no event to wait on) until the
 * listener accepts or goes away; wrap it in an rt_timeout (combine.h) for a
 * time limit. Abort safety: a dropped connect closes its socket (a
 * connection it had made is closed too: the listener's side reads the end
 * of the stream). */
typedef struct rt_unix_connect {
    RT_FUTURE_HEADER;
    rt_runtime *rt;          /* whose reactor registers the socket */
    rt_io *conn;             /* the connected socket */
    int fd;                  /* the socket while connecting, else -1 */
    bool pausing;            /* waiting in `pause` before the next try */
    int64_t backoff_ns;      /* the next pause */
    rt_sleep pause;          /* the pause while the backlog is full */
    struct sockaddr_un addr; /* where to, from the name at init */
    socklen_t addr_len;      /* its length */
} rt_unix_connect;

/* Prepares a connection to `name` (read at init; see "Names"). rt NULL
 * means rt_current_runtime(). Errors: -EINVAL (op or name NULL, no runtime, a bad
 * name), -ENAMETOOLONG. Any thread. */
int rt_unix_connect_init(rt_unix_connect *op, rt_runtime *rt, const char *name);

/* A connected pair of unnamed sockets (socketpair(2)) of `type`:
 * SOCK_STREAM, SOCK_DGRAM or SOCK_SEQPACKET. *a and *b own them. rt NULL
 * means rt_current_runtime(). Errors: -EINVAL (a or b NULL, another type, no
 * runtime), -EMFILE, -ENFILE, -ENOMEM, -ESHUTDOWN; on error both are NULL
 * and no descriptor is left. Any thread. */
int rt_unix_pair(rt_runtime *rt, int type, rt_io **a, rt_io **b);

/* shutdown(2) of a connected socket: how is SHUT_RD, SHUT_WR or SHUT_RDWR
 * (after SHUT_WR the peer reads the end of the stream). Returns 0 or -errno
 * (-ENOTCONN; -EINVAL for io NULL or a bad `how`). Any thread. */
int rt_unix_shutdown(rt_io *io, int how);

/* ---- Credentials and addresses ------------------------------------------------ */

/* The credentials of a peer process, as the kernel recorded them when the
 * connection (or the socketpair) was made: they do not follow later
 * setuid calls of the peer, nor its death. */
typedef struct rt_unix_cred {
    pid_t pid; /* 0 when the peer is in a PID namespace this process cannot see */
    uid_t uid;
    gid_t gid;
} rt_unix_cred;

/* The peer's credentials (SO_PEERCRED) of a connected stream socket, an
 * accepted one or either end of rt_unix_pair, into *cred. Errors: -EINVAL
 * (io or cred NULL), -ENOTCONN (the socket has no peer credentials: never
 * connected, or a datagram socket connected with rt_unix_dgram_connect),
 * -ENOTSOCK, -EBADF. Any thread. */
int rt_unix_peer_cred(rt_io *io, rt_unix_cred *cred);

/* The socket's own and its peer's address: written to *addr, with its
 * length in *len (an output only). rt_unix_addr_name turns either into a
 * name. Errors: -EINVAL (io, addr or len NULL), -ENOTCONN (peer of an
 * unconnected socket), -EBADF, -ENOTSOCK. Any thread. */
int rt_unix_local_addr(rt_io *io, struct sockaddr_un *addr, socklen_t *len);
int rt_unix_peer_addr(rt_io *io, struct sockaddr_un *addr, socklen_t *len);

/* ---- Datagrams -------------------------------------------------------------- */

/* Creates a datagram socket bound to `name` with the RT_UNIX_* flags; name
 * NULL binds an abstract name the kernel chooses (five hex digits), so
 * that replies can reach a client (rt_unix_local_addr tells it). *out owns
 * it (a path's socket file is the caller's to unlink). rt NULL means
 * rt_current_runtime(). Errors as rt_unix_listen. Any thread. */
int rt_unix_dgram_bind(rt_runtime *rt, const char *name, unsigned flags, rt_io **out);

/* Sets the default peer of a datagram socket (connect(2)): rt_io_read and
 * rt_io_write then exchange datagrams with it, and a send_to may pass no
 * address. Returns 0 or -errno: -ENOENT (no such path), -ECONNREFUSED
 * (nothing bound there), -EPROTOTYPE (a stream socket there),
 * -ENAMETOOLONG, -EINVAL (io or name NULL, a bad name). Any thread. */
int rt_unix_dgram_connect(rt_io *io, const char *name);

/* Sending one datagram: an operation (see future.h) that finishes with
 * result the byte count sent (all of it) or a negative errno: -ENOENT /
 * -ECONNREFUSED (nothing bound at the address), -EMSGSIZE (larger than the
 * socket's send buffer), -ENOTCONN (no address and no default peer),
 * -EPERM (the receiver connected to another socket). A send that finds
 * the receiver's queue full waits for the socket's next write event: the
 * default peer's queue draining, or a datagram this socket sent being
 * read; for another address, which may have been filled by other senders,
 * use a time limit (rt_timeout). Abort safety: a dropped send sent
 * nothing. */
typedef struct rt_unix_send_to {
    RT_FUTURE_HEADER;
    rt_io *io;               /* the socket */
    const void *buf;         /* the datagram, owned by the caller */
    size_t len;              /* its length */
    struct sockaddr_un addr; /* where to, copied at init */
    socklen_t addr_len;      /* its length; 0: the default peer */
} rt_unix_send_to;

/* Prepares a send of buf[0..len) to addr (copied: from rt_unix_addr, or a
 * receive's `from`; NULL: to the default peer, addr_len then ignored).
 * Errors: -EINVAL (op or io NULL, buf NULL with len > 0, addr not NULL with
 * addr_len not longer than sun_family or larger than a sockaddr_un). Any
 * thread. */
int rt_unix_send_to_init(rt_unix_send_to *op, rt_io *io, const void *buf, size_t len,
                         const struct sockaddr_un *addr, socklen_t addr_len);

/* Receiving one datagram: an operation that finishes with result the byte
 * count copied into buf (at most len: the rest of a longer datagram is
 * discarded, and `truncated` says so) or a negative errno, and the sender
 * in `from` / `from_len` (an unnamed sender, one that bound no name:
 * from_len 0, and it cannot be answered). Abort safety: nothing is
 * lost (a datagram is only taken by the poll that finishes the operation). */
typedef struct rt_unix_recv_from {
    RT_FUTURE_HEADER;
    rt_io *io;               /* the socket */
    void *buf;               /* where the datagram goes, the caller's */
    size_t len;              /* room in buf */
    bool truncated;          /* the datagram was longer than len */
    struct sockaddr_un from; /* the sender */
    socklen_t from_len;      /* its address's length */
} rt_unix_recv_from;

/* Prepares a receive into buf[0..len). Errors: -EINVAL (op or io NULL, buf
 * NULL with len > 0). Any thread. */
int rt_unix_recv_from_init(rt_unix_recv_from *op, rt_io *io, void *buf, size_t len);

/* ---- Passing descriptors (SCM_RIGHTS) ----------------------------------------- */

/* Sending descriptors with some bytes, on a connected socket (a stream, the
 * ends of rt_unix_pair, a datagram socket with a default peer): an
 * operation (see future.h) that finishes with result the byte count sent
 * (>= 1) or a negative errno. The descriptors travel with the first byte
 * sent: once it finishes with a result >= 1 they have gone (the peer
 * receives duplicates; the caller's stay open and its own), and on a
 * stream a result < len leaves the rest of the bytes to the caller (an
 * rt_io_write_all). The descriptors must stay open until the operation
 * finishes. Errors: -EBADF (one of them is not open), -ETOOMANYREFS (the
 * kernel's limit on descriptors in flight), -EPIPE, -ENOTCONN, the errors
 * of sendmsg(2). Abort safety: a dropped send sent nothing. */
typedef struct rt_unix_send_fds {
    RT_FUTURE_HEADER;
    rt_io *io;                /* the socket */
    const void *buf;          /* the bytes, owned by the caller */
    size_t len;               /* how many (>= 1) */
    int fds[RT_UNIX_FDS_MAX]; /* the descriptors, copied at init */
    size_t nfds;              /* how many */
} rt_unix_send_fds;

/* Prepares a send of buf[0..len) with fds[0..nfds) (the numbers are
 * copied; the descriptors stay the caller's). Errors: -EINVAL (op, io, buf
 * or fds NULL, len 0: a descriptor needs a byte to travel with, nfds 0 or
 * more than RT_UNIX_FDS_MAX, a negative descriptor). Any thread. */
int rt_unix_send_fds_init(rt_unix_send_fds *op, rt_io *io, const void *buf, size_t len,
                          const int *fds, size_t nfds);

/* Receiving bytes and the descriptors that came with them: an operation
 * that finishes with result the byte count (0: the end of the stream, or
 * an empty datagram) and the descriptors received in fds[0..nfds): new
 * descriptors, close-on-exec (MSG_CMSG_CLOEXEC), owned by the caller from
 * then on. At most `max_fds` are kept: any more that came are closed by
 * the library (and any beyond RT_UNIX_FDS_MAX were discarded by the
 * kernel, as are those the process had no room for, EMFILE), and
 * `fds_truncated` says that some were lost. Bytes that came without
 * descriptors are received too (nfds 0). On a stream, a receive ends with
 * the bytes of at most one send that carried descriptors (the kernel
 * stops there), so the descriptors of two sends never arrive together.
 * Errors (nfds 0): -EBADF, -ECONNRESET, the errors of recvmsg(2). Bytes
 * sent with descriptors and read with rt_io_read lose their descriptors
 * (the kernel closes them). Abort safety: nothing is lost (bytes and
 * descriptors are only taken by the poll that finishes the operation). */
typedef struct rt_unix_recv_fds {
    RT_FUTURE_HEADER;
    rt_io *io;                /* the socket */
    void *buf;                /* where the bytes go, the caller's */
    size_t len;               /* room in buf (>= 1) */
    size_t max_fds;           /* descriptors kept at most */
    int fds[RT_UNIX_FDS_MAX]; /* the descriptors received */
    size_t nfds;              /* how many */
    bool fds_truncated;       /* some that came were closed or discarded */
} rt_unix_recv_fds;

/* Prepares a receive into buf[0..len) keeping up to max_fds descriptors.
 * Errors: -EINVAL (op, io or buf NULL, len 0, max_fds 0 or more than
 * RT_UNIX_FDS_MAX). Any thread. */
int rt_unix_recv_fds_init(rt_unix_recv_fds *op, rt_io *io, void *buf, size_t len, size_t max_fds);

#ifdef __cplusplus
}
#endif
#endif
