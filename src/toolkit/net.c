/* TCP and UDP sockets on the reactor: every socket is created non-blocking
 * and close-on-exec, and registered as an rt_io. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asyncrt/diag.h>
#include <asyncrt/net.h>

#include "operation.h"
#include "fault.h"
#include "io_internal.h"
#include "runtime_services.h"

RT_EXPORT int rt_net_addr(const char *ip, uint16_t port, struct sockaddr_storage *addr,
                          socklen_t *len)
{
    if (ip == NULL || addr == NULL || len == NULL)
        return -EINVAL;
    memset(addr, 0, sizeof(*addr));
    struct sockaddr_in *v4 = (struct sockaddr_in *)addr;
    if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        *len = sizeof(*v4);
        return 0;
    }
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)addr;
    if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        *len = sizeof(*v6);
        return 0;
    }
    return -EINVAL;
}

RT_EXPORT int rt_net_parse(const char *hostport, struct sockaddr_storage *addr, socklen_t *len)
{
    if (hostport == NULL || addr == NULL || len == NULL)
        return -EINVAL;
    const char *colon = strrchr(hostport, ':');
    if (colon == NULL || colon == hostport)
        return -EINVAL;
    /* The port: decimal digits only, 0 to 65535. */
    unsigned long port = 0;
    const char *p = colon + 1;
    if (*p == '\0')
        return -EINVAL;
    for (; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || (port = port * 10 + (unsigned long)(*p - '0')) > 65535)
            return -EINVAL;
    }
    /* The address: IPv4, or IPv6 between brackets (its own colons). */
    const char *ip = hostport;
    size_t ip_len = (size_t)(colon - hostport);
    if (ip[0] == '[') {
        if (ip_len < 2 || ip[ip_len - 1] != ']')
            return -EINVAL;
        ip++;
        ip_len -= 2;
    } else if (memchr(ip, ':', ip_len) != NULL) {
        return -EINVAL; /* an IPv6 address without its brackets */
    }
    char copy[INET6_ADDRSTRLEN];
    if (ip_len == 0 || ip_len >= sizeof copy)
        return -EINVAL;
    memcpy(copy, ip, ip_len);
    copy[ip_len] = '\0';
    return rt_net_addr(copy, (uint16_t)port, addr, len);
}

RT_EXPORT int rt_tcp_listen_addr(rt_runtime *rt, const char *hostport, rt_io **out)
{
    if (out != NULL)
        *out = NULL;
    struct sockaddr_storage addr;
    socklen_t len;
    int err = rt_net_parse(hostport, &addr, &len);
    if (err < 0)
        return err;
    return rt_tcp_listen(rt, (const struct sockaddr *)&addr, len, SOMAXCONN, RT_NET_REUSEADDR, out);
}

/* Whether a socket of this family and type is TCP (socket(2) with protocol
 * 0): what readiness.h's "Short transfers" applies to, and what gets
 * TCP_NODELAY. */
static bool is_tcp(int family, int type)
{
    return type == SOCK_STREAM && (family == AF_INET || family == AF_INET6);
}

/* Turns Nagle's algorithm off. Small writes then leave at once instead of
 * waiting for the peer's ACK of the previous one, which a peer that delays
 * its ACKs (Linux: up to 40 ms) holds back: a request-reply protocol whose
 * replies are written one by one would wait that long for each one after the
 * first of a batch. Go and most servers do the same for every connection. */
static int set_nodelay(int fd, bool on)
{
    int v = on ? 1 : 0;
    return setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v) < 0 ? -errno : 0;
}

/* A new socket of `type` for addr's family, with the RT_NET_* options;
 * TCP sockets get TCP_NODELAY unless RT_NET_NAGLE (a listener's accepted
 * connections inherit it from the listener). */
static int open_socket(const struct sockaddr *addr, int type, unsigned flags)
{
    int fd = rt__socket(addr->sa_family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    if ((is_tcp(addr->sa_family, type) && !(flags & RT_NET_NAGLE) && set_nodelay(fd, true) < 0) ||
        ((flags & RT_NET_REUSEADDR) &&
         setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0) ||
        ((flags & RT_NET_REUSEPORT) &&
         setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0) ||
        ((flags & RT_NET_V6ONLY) && addr->sa_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0)) {
        int err = -errno;
        close(fd);
        return err;
    }
    return fd;
}

/* Registers socket fd, closing it if that fails. */
static int adopt_or_close(rt_runtime *rt, int fd, bool tcp, rt_io **out)
{
    int err = rt__io_adopt(rt, fd, true, tcp, out);
    if (err < 0)
        close(fd);
    return err;
}

static int bound_socket(rt_runtime *rt, const struct sockaddr *addr, socklen_t len, int type,
                        unsigned flags, int backlog, rt_io **out)
{
    if (out == NULL || addr == NULL)
        return -EINVAL;
    *out = NULL;
    if (rt == NULL)
        rt = rt_current_runtime();
    if (rt == NULL)
        return -EINVAL;
    int fd = open_socket(addr, type, flags);
    if (fd < 0)
        return fd;
    if (bind(fd, addr, len) < 0 || (type == SOCK_STREAM && listen(fd, backlog) < 0)) {
        int err = -errno;
        close(fd);
        return err;
    }
    int err = adopt_or_close(rt, fd, is_tcp(addr->sa_family, type), out);
    if (err == 0)
        (*out)->nodelay_inherited = (*out)->is_tcp;
    return err;
}

RT_EXPORT int rt_tcp_listen(rt_runtime *rt, const struct sockaddr *addr, socklen_t len, int backlog,
                            unsigned flags, rt_io **out)
{
    return bound_socket(rt, addr, len, SOCK_STREAM, flags, backlog, out);
}

rt_poll rt__io_accept(rt_io *listener, rt_context *cx, rt_io **conn, struct sockaddr_storage *peer,
                      socklen_t *peer_len, int *err)
{
    /* The connection's rt_io is allocated before accept4 takes the
     * connection from the kernel: a failure then leaves it queued. */
    rt_io *io = NULL;
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(listener, RT__IO_READ, true, cx, &tick) == RT_PENDING) {
            free(io);
            return RT_PENDING;
        }
        if (io == NULL && (io = rt__io_alloc()) == NULL) {
            *err = -ENOMEM;
            return RT_READY;
        }
        socklen_t sl = sizeof *peer;
        int fd =
            rt__accept4(listener->fd, (struct sockaddr *)peer, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            /* A listener of rt_tcp_listen passed its choice on (Linux copies
             * TCP_NODELAY into accepted sockets); one that came from
             * rt_io_open gets the default set on each connection. */
            if (listener->is_tcp && !listener->nodelay_inherited)
                (void)set_nodelay(fd, true); /* only fails for a socket that is not TCP */
            /* Only the registration can fail now (the runtime is shutting
             * down, or epoll has no room or memory for the watch): the
             * connection is closed, as the headers say. epoll's ENOMEM
             * becomes ENOBUFS, so that -ENOMEM always means "the connection
             * stays queued" (the rt_io allocation above). */
            *err = rt__io_register(listener->rt, io, fd, true, listener->is_tcp);
            if (*err < 0) {
                close(fd);
                if (*err == -ENOMEM)
                    *err = -ENOBUFS;
                return RT_READY;
            }
            *conn = io;
            *peer_len = sl;
            return RT_READY;
        }
        int e = errno;
        if (e == EINTR)
            continue;
        if (e == EAGAIN || e == EWOULDBLOCK) {
            rt__io_clear_ready(listener, RT__IO_READ, tick);
            continue;
        }
        /* EMFILE/ENFILE leave the connection queued and the readiness set:
         * the next accept, once descriptors are free, takes it. */
        free(io);
        *err = -e;
        return RT_READY;
    }
}

static rt_poll accept_vpoll(rt_future *f, rt_context *cx)
{
    rt_tcp_accept *op = (rt_tcp_accept *)f;
    int err;
    if (rt__io_accept(op->listener, cx, &op->conn, &op->peer, &op->peer_len, &err) == RT_PENDING)
        return RT_PENDING;
    return rt__future_finish(f, err);
}

/* Descriptors are read through rt_io_fd: a task dump may describe an
 * operation while another thread closes its rt_io (io.h). */
static void accept_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_tcp_accept *op = (const rt_tcp_accept *)f;
    info->kind = RT_WAIT_ACCEPT;
    info->fd = rt_io_fd(op->listener);
    rt__wait_printf(info, "accept on fd %d", info->fd);
}

/* Nothing is held while waiting but the listener's stored waker. */
static const rt_future_vtable accept_vtable = {accept_vpoll, NULL, accept_vdescribe};

RT_EXPORT int rt_tcp_accept_init(rt_tcp_accept *op, rt_io *listener)
{
    if (op == NULL)
        return -EINVAL;
    op->listener = listener;
    op->conn = NULL;
    op->peer_len = 0;
    return rt__io_op_init(&op->future, &accept_vtable, listener != NULL);
}

/* ---- Connect ------------------------------------------------------------------ */

/* Finishes the attempt: hands the socket over, or closes it on error. */
static rt_poll connect_done(rt_tcp_connect *op, int e)
{
    if (e == 0)
        op->conn = op->io;
    else
        rt_io_close(op->io);
    op->io = NULL;
    return rt__future_finish(&op->future, e);
}

/* Opens the socket and starts the handshake: RT_READY when that already
 * decided the outcome, else RT_PENDING with op->io connecting. */
static rt_poll connect_start(rt_tcp_connect *op)
{
    const struct sockaddr *addr = (const struct sockaddr *)&op->addr;
    int fd = open_socket(addr, SOCK_STREAM, 0);
    if (fd < 0)
        return rt__future_finish(&op->future, fd);
    int rc = connect(fd, addr, op->addr_len);
    int e = rc < 0 ? errno : 0;
    if (rc < 0 && e != EINPROGRESS && e != EINTR) {
        close(fd);
        return rt__future_finish(&op->future, -e);
    }
    int aerr = adopt_or_close(op->rt, fd, is_tcp(addr->sa_family, SOCK_STREAM), &op->io);
    if (aerr < 0)
        return rt__future_finish(&op->future, aerr);
    if (rc == 0)
        return connect_done(op, 0);
    /* A connecting socket is writable once its handshake ends: wait for that
     * report (the poll below ignores the initial optimism). */
    return RT_PENDING;
}

static rt_poll connect_vpoll(rt_future *f, rt_context *cx)
{
    rt_tcp_connect *op = (rt_tcp_connect *)f;
    if (op->io == NULL && connect_start(op) == RT_READY)
        return RT_READY;
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(op->io, RT__IO_WRITE, false, cx, &tick) == RT_PENDING)
            return RT_PENDING;
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (getsockopt(op->io->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
            soerr = errno;
        if (soerr != 0)
            return connect_done(op, -soerr);
        struct sockaddr_storage ss;
        socklen_t pl = sizeof ss;
        if (getpeername(op->io->fd, (struct sockaddr *)&ss, &pl) == 0)
            return connect_done(op, 0);
        if (errno != ENOTCONN)
            return connect_done(op, -errno);
        /* Not connected yet after all (an edge for something else). */
        rt__io_clear_ready(op->io, RT__IO_WRITE, tick);
    }
}

/* A dropped attempt closes its half-open socket. */
static void connect_vdrop(rt_future *f)
{
    rt_tcp_connect *op = (rt_tcp_connect *)f;
    if (op->io != NULL) {
        rt_io_close(op->io);
        op->io = NULL;
    }
}

/* Appends "1.2.3.4:80" or "[::1]:80" for a copied address (the
 * operation's own). */
static void describe_addr(rt_wait_info *info, const struct sockaddr_storage *ss, socklen_t len)
{
    char ip[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)ss;
        if (inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof ip) != NULL) {
            rt__wait_printf(info, "%s:%u", ip, (unsigned)ntohs(v4->sin_port));
            return;
        }
    } else if (ss->ss_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)ss;
        if (inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof ip) != NULL) {
            rt__wait_printf(info, "[%s]:%u", ip, (unsigned)ntohs(v6->sin6_port));
            return;
        }
    }
    rt__wait_printf(info, "an address of family %d", (int)ss->ss_family);
}

/* The socket is the operation's own until it finishes; before the first
 * poll there is none yet. */
static void connect_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_tcp_connect *op = (const rt_tcp_connect *)f;
    info->kind = RT_WAIT_CONNECT;
    info->fd = op->io != NULL ? rt_io_fd(op->io) : -1;
    rt__wait_printf(info, "connect to ");
    describe_addr(info, &op->addr, op->addr_len);
    if (info->fd >= 0)
        rt__wait_printf(info, " on fd %d", info->fd);
}

static const rt_future_vtable connect_vtable = {connect_vpoll, connect_vdrop, connect_vdescribe};

RT_EXPORT int rt_tcp_connect_init(rt_tcp_connect *op, rt_runtime *rt, const struct sockaddr *addr,
                                  socklen_t addr_len)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->rt = rt != NULL ? rt : rt_current_runtime();
    bool valid = op->rt != NULL && addr != NULL && addr_len > 0 && addr_len <= sizeof op->addr;
    if (valid) {
        memcpy(&op->addr, addr, addr_len);
        op->addr_len = addr_len;
    }
    return rt__io_op_init(&op->future, &connect_vtable, valid);
}

/* ---- Socket options and addresses ---------------------------------------------- */

RT_EXPORT int rt_tcp_shutdown(rt_io *io, int how)
{
    if (io == NULL)
        return -EINVAL;
    return shutdown(io->fd, how) < 0 ? -errno : 0;
}

RT_EXPORT int rt_tcp_set_nodelay(rt_io *io, bool on)
{
    if (io == NULL)
        return -EINVAL;
    return set_nodelay(io->fd, on);
}

RT_EXPORT int rt_net_local_addr(rt_io *io, struct sockaddr_storage *addr, socklen_t *len)
{
    if (io == NULL || addr == NULL || len == NULL)
        return -EINVAL;
    *len = sizeof(*addr);
    return getsockname(io->fd, (struct sockaddr *)addr, len) < 0 ? -errno : 0;
}

RT_EXPORT int rt_net_local_port(rt_io *io)
{
    struct sockaddr_storage addr;
    socklen_t len;
    int err = rt_net_local_addr(io, &addr, &len);
    if (err < 0)
        return err;
    if (addr.ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)&addr)->sin_port);
    if (addr.ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)&addr)->sin6_port);
    return -EAFNOSUPPORT;
}

RT_EXPORT int rt_net_peer_addr(rt_io *io, struct sockaddr_storage *addr, socklen_t *len)
{
    if (io == NULL || addr == NULL || len == NULL)
        return -EINVAL;
    *len = sizeof(*addr);
    return getpeername(io->fd, (struct sockaddr *)addr, len) < 0 ? -errno : 0;
}

/* ---- UDP ------------------------------------------------------------------------- */

RT_EXPORT int rt_udp_bind(rt_runtime *rt, const struct sockaddr *addr, socklen_t len,
                          unsigned flags, rt_io **out)
{
    return bound_socket(rt, addr, len, SOCK_DGRAM, flags, 0, out);
}

RT_EXPORT int rt_udp_connect(rt_io *io, const struct sockaddr *addr, socklen_t len)
{
    if (io == NULL || addr == NULL)
        return -EINVAL;
    return connect(io->fd, addr, len) < 0 ? -errno : 0;
}

static rt_poll udp_send_vpoll(rt_future *f, rt_context *cx)
{
    rt_udp_send_to *op = (rt_udp_send_to *)f;
    const struct sockaddr *addr = op->addr_len > 0 ? (const struct sockaddr *)&op->addr : NULL;
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(op->io, RT__IO_WRITE, true, cx, &tick) == RT_PENDING)
            return RT_PENDING;
        ssize_t n = sendto(op->io->fd, op->buf, op->len, MSG_NOSIGNAL, addr, op->addr_len);
        if (n < 0 && rt__io_retry_after_error(op->io, RT__IO_WRITE, tick, &n))
            continue;
        return rt__future_finish(f, n);
    }
}

static void udp_send_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_udp_send_to *op = (const rt_udp_send_to *)f;
    info->kind = RT_WAIT_WRITE;
    info->fd = rt_io_fd(op->io);
    rt__wait_printf(info, "send of a %zu-byte datagram on fd %d", op->len, info->fd);
    if (op->addr_len > 0) {
        rt__wait_printf(info, " to ");
        describe_addr(info, &op->addr, op->addr_len);
    }
}

static const rt_future_vtable udp_send_vtable = {udp_send_vpoll, NULL, udp_send_vdescribe};

RT_EXPORT int rt_udp_send_to_init(rt_udp_send_to *op, rt_io *io, const void *buf, size_t len,
                                  const struct sockaddr *addr, socklen_t addr_len)
{
    if (op == NULL)
        return -EINVAL;
    op->io = io;
    op->buf = buf;
    op->len = len;
    op->addr_len = 0;
    bool valid = io != NULL && (buf != NULL || len == 0) &&
                 (addr == NULL || (addr_len > 0 && addr_len <= sizeof op->addr));
    if (valid && addr != NULL) {
        memcpy(&op->addr, addr, addr_len);
        op->addr_len = addr_len;
    }
    return rt__io_op_init(&op->future, &udp_send_vtable, valid);
}

static rt_poll udp_recv_vpoll(rt_future *f, rt_context *cx)
{
    rt_udp_recv_from *op = (rt_udp_recv_from *)f;
    for (;;) {
        uint32_t tick;
        if (rt__io_poll_ready(op->io, RT__IO_READ, true, cx, &tick) == RT_PENDING)
            return RT_PENDING;
        socklen_t sl = sizeof op->from;
        ssize_t n = recvfrom(op->io->fd, op->buf, op->len, 0, (struct sockaddr *)&op->from, &sl);
        if (n >= 0)
            op->from_len = sl;
        else if (rt__io_retry_after_error(op->io, RT__IO_READ, tick, &n))
            continue;
        return rt__future_finish(f, n);
    }
}

static void udp_recv_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_udp_recv_from *op = (const rt_udp_recv_from *)f;
    info->kind = RT_WAIT_READ;
    info->fd = rt_io_fd(op->io);
    rt__wait_printf(info, "receive of a datagram on fd %d", info->fd);
}

static const rt_future_vtable udp_recv_vtable = {udp_recv_vpoll, NULL, udp_recv_vdescribe};

RT_EXPORT int rt_udp_recv_from_init(rt_udp_recv_from *op, rt_io *io, void *buf, size_t len)
{
    if (op == NULL)
        return -EINVAL;
    op->io = io;
    op->buf = buf;
    op->len = len;
    op->from_len = 0;
    return rt__io_op_init(&op->future, &udp_recv_vtable, io != NULL && (buf != NULL || len == 0));
}
