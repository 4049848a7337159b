/* Black-box tests of asyncrt/net.h with real sockets on the loopback
 * interface only (127.0.0.1 and ::1; nothing ever leaves the machine):
 * address parsing, listening on port 0, two listeners sharing a port with
 * SO_REUSEPORT, accept/connect/echo round trips inside tasks over IPv4 and
 * IPv6 (with IPV6_V6ONLY when asked), and UDP round trips. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_net.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

TestSuite(net, .timeout = 280, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* Whether this machine can bind ::1. */
static bool have_ipv6_loopback(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof a);
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* ---- rt_net_addr -------------------------------------------------------- */

Test(net, addr_parses_ipv4_and_ipv6_literals_and_rejects_anything_else)
{
    struct sockaddr_storage ss;
    socklen_t len = 0;
    cr_assert_eq(rt_net_addr("127.0.0.1", 8080, &ss, &len), 0);
    cr_assert_eq(ss.ss_family, AF_INET);
    cr_assert_eq(len, sizeof(struct sockaddr_in));
    const struct sockaddr_in *v4 = (const struct sockaddr_in *)&ss;
    cr_assert_eq(v4->sin_port, htons(8080));
    cr_assert_eq(v4->sin_addr.s_addr, htonl(INADDR_LOOPBACK));

    cr_assert_eq(rt_net_addr("10.20.30.40", 0, &ss, &len), 0);
    cr_assert_eq(((const struct sockaddr_in *)&ss)->sin_addr.s_addr, htonl(0x0A141E28));
    cr_assert_eq(rt_net_addr("0.0.0.0", 65535, &ss, &len), 0);
    cr_assert_eq(((const struct sockaddr_in *)&ss)->sin_port, htons(65535));

    len = 0;
    cr_assert_eq(rt_net_addr("::1", 443, &ss, &len), 0);
    cr_assert_eq(ss.ss_family, AF_INET6);
    cr_assert_eq(len, sizeof(struct sockaddr_in6));
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&ss;
    cr_assert_eq(v6->sin6_port, htons(443));
    cr_assert_eq(memcmp(&v6->sin6_addr, &in6addr_loopback, sizeof in6addr_loopback), 0);

    cr_assert_eq(rt_net_addr("fe80::1:2", 1, &ss, &len), 0);
    cr_assert_eq(ss.ss_family, AF_INET6);
    cr_assert_eq(rt_net_addr("::ffff:10.1.2.3", 1, &ss, &len), 0);
    cr_assert_eq(ss.ss_family, AF_INET6);
    cr_assert_eq(rt_net_addr("::", 0, &ss, &len), 0);

    static const char *const bad[] = {
        "",         "256.0.0.1",         "1.2.3",   "1.2.3.4.5", "localhost",    "::g", "1.2.3.4 ",
        " 1.2.3.4", "1:2:3:4:5:6:7:8:9", "12345::", "abc",       "127.0.0.1:80",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(rt_net_addr(bad[i], 80, &ss, &len), -EINVAL, "\"%s\" was accepted", bad[i]);
    cr_assert_eq(rt_net_addr(NULL, 80, &ss, &len), -EINVAL, "NULL ip");
    cr_assert_eq(rt_net_addr("127.0.0.1", 80, NULL, &len), -EINVAL, "NULL addr");
    cr_assert_eq(rt_net_addr("127.0.0.1", 80, &ss, NULL), -EINVAL, "NULL len");
}

/* ---- listening ------------------------------------------------------------ */

Test(net, listen_on_port_0_and_local_addr_reports_the_chosen_port)
{
    rt_runtime *rt = new_runtime(1);
    int before = count_fds();
    struct sockaddr_storage ss;
    socklen_t len;
    rt_io *l = listen_loopback(rt, AF_INET, 16, &ss, &len);
    cr_assert_eq(ss.ss_family, AF_INET);
    cr_assert_eq(len, sizeof(struct sockaddr_in));
    cr_assert_eq(((struct sockaddr_in *)&ss)->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    /* The kernel agrees, and the socket really listens. */
    struct sockaddr_in k;
    socklen_t klen = sizeof k;
    cr_assert_eq(getsockname(rt_io_fd(l), (struct sockaddr *)&k, &klen), 0);
    cr_assert_eq(ntohs(k.sin_port), port_of(&ss));
    int listening = 0;
    socklen_t ilen = sizeof listening;
    cr_assert_eq(getsockopt(rt_io_fd(l), SOL_SOCKET, SO_ACCEPTCONN, &listening, &ilen), 0);
    cr_assert(listening);
    int fl = fcntl(rt_io_fd(l), F_GETFL);
    cr_assert(fl & O_NONBLOCK, "the listener is blocking");
    cr_assert(fcntl(rt_io_fd(l), F_GETFD) & FD_CLOEXEC, "the listener is not close-on-exec");

    /* A listener has no peer. */
    struct sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    cr_assert_eq(rt_net_peer_addr(l, &peer, &plen), -ENOTCONN);

    /* The same port again, without RT_NET_REUSEPORT: in use. */
    rt_io *dup = NULL;
    cr_assert_eq(rt_tcp_listen(rt, (struct sockaddr *)&ss, len, 16, RT_NET_REUSEADDR, &dup),
                 -EADDRINUSE);
    cr_assert_eq(rt_io_close(l), 0);
    cr_assert_eq(count_fds(), before);
    finish_runtime(rt, 0);
}

Test(net, reuseport_lets_two_listeners_share_a_port)
{
    rt_runtime *rt = new_runtime(1);
    struct sockaddr_storage any, ss;
    socklen_t any_len, len = sizeof ss;
    loopback(AF_INET, 0, &any, &any_len);
    rt_io *a = NULL, *b = NULL;
    cr_assert_eq(rt_tcp_listen(rt, (struct sockaddr *)&any, any_len, 8,
                               RT_NET_REUSEADDR | RT_NET_REUSEPORT, &a),
                 0);
    cr_assert_eq(rt_net_local_addr(a, &ss, &len), 0);
    int rc =
        rt_tcp_listen(rt, (struct sockaddr *)&ss, len, 8, RT_NET_REUSEADDR | RT_NET_REUSEPORT, &b);
    cr_assert_eq(rc, 0, "second SO_REUSEPORT listener: %s", rt_strerror(rc));
    int on = 0;
    socklen_t olen = sizeof on;
    cr_assert_eq(getsockopt(rt_io_fd(b), SOL_SOCKET, SO_REUSEPORT, &on, &olen), 0);
    cr_assert(on);
    cr_assert_eq(rt_io_close(a), 0);
    cr_assert_eq(rt_io_close(b), 0);
    finish_runtime(rt, 0);
}

Test(net, listen_with_a_null_runtime_outside_a_task_is_einval)
{
    struct sockaddr_storage any;
    socklen_t any_len;
    loopback(AF_INET, 0, &any, &any_len);
    int before = count_fds();
    rt_io *l = NULL;
    cr_assert_eq(rt_tcp_listen(NULL, (struct sockaddr *)&any, any_len, 8, 0, &l), -EINVAL);
    rt_io *u = NULL;
    cr_assert_eq(rt_udp_bind(NULL, (struct sockaddr *)&any, any_len, 0, &u), -EINVAL);
    cr_assert_eq(count_fds(), before);
}

/* ---- echo round trips inside tasks ---------------------------------------------- */

#define ECHO_ROUNDS 5
#define ECHO_LEN 48

struct echo_server {
    rt_coro co;
    rt_io *listener;
    rt_io *conn;
    int err;
    ssize_t result;
    size_t echoed;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    rt_tcp_accept acc;
    rt_io_read rd;
    rt_io_write_all wa;
    unsigned char buf[256];
};

/* Accepts one connection and echoes until end of stream; result: the bytes
 * echoed, or -errno. Records the peer address. */
static rt_poll echo_server_poll(void *state, rt_context *cx, void **out)
{
    struct echo_server *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_tcp_accept_init(&s->acc, s->listener);
    RT_AWAIT(&s->co, cx, &s->acc);
    s->err = (int)s->acc.result;
    if (s->err != 0)
        RT_RETURN(&s->co, out, (intptr_t)s->err);
    s->conn = s->acc.conn;
    s->peer = s->acc.peer;
    s->peer_len = s->acc.peer_len;
    for (;;) {
        rt_io_read_init(&s->rd, s->conn, s->buf, sizeof s->buf);
        RT_AWAIT(&s->co, cx, &s->rd);
        s->result = (ssize_t)s->rd.result;
        if (s->result <= 0)
            break;
        rt_io_write_all_init(&s->wa, s->conn, s->buf, (size_t)s->result);
        RT_AWAIT(&s->co, cx, &s->wa);
        s->result = (ssize_t)s->wa.result;
        if (s->result < 0)
            break;
        s->echoed += (size_t)s->result;
    }
    rt_io_close(s->conn);
    s->conn = NULL;
    if (s->result < 0)
        RT_RETURN(&s->co, out, (intptr_t)s->result);
    RT_RETURN(&s->co, out, (intptr_t)s->echoed);
    RT_CORO_END(&s->co, out);
}

static void echo_server_drop(void *state)
{
    struct echo_server *s = state;
    rt_coro_cleanup(&s->co); /* the operation in flight, before its rt_io goes */
    if (s->conn != NULL)
        rt_io_close(s->conn);
    s->conn = NULL;
}

struct echo_client {
    rt_coro co;
    const struct sockaddr_storage *addr;
    socklen_t addr_len;
    rt_tcp_connect op;
    rt_io *conn;
    int err;
    int round;
    size_t got;
    ssize_t result;
    struct sockaddr_storage local, peer;
    socklen_t local_len, peer_len;
    rt_io_write_all wa;
    rt_io_read rd;
    unsigned char msg[ECHO_LEN];
    unsigned char back[ECHO_LEN];
};

/* Connects, does ECHO_ROUNDS round trips, closes; result 0 or -errno
 * (-EILSEQ: the echo differed). Records its own and its peer's address. */
static rt_poll echo_client_poll(void *state, rt_context *cx, void **out)
{
    struct echo_client *c = state;
    RT_CORO_BEGIN(&c->co);
    c->err = rt_tcp_connect_init(&c->op, NULL, (const struct sockaddr *)c->addr, c->addr_len);
    if (c->err != 0)
        RT_RETURN(&c->co, out, (intptr_t)c->err);
    RT_AWAIT(&c->co, cx, &c->op);
    c->err = (int)c->op.result;
    if (c->err != 0)
        RT_RETURN(&c->co, out, (intptr_t)c->err);
    c->conn = c->op.conn;
    c->local_len = sizeof c->local;
    c->peer_len = sizeof c->peer;
    if (rt_net_local_addr(c->conn, &c->local, &c->local_len) != 0 ||
        rt_net_peer_addr(c->conn, &c->peer, &c->peer_len) != 0)
        RT_RETURN(&c->co, out, (intptr_t)-ENOTCONN);
    for (c->round = 0; c->round < ECHO_ROUNDS; c->round++) {
        for (size_t i = 0; i < ECHO_LEN; i++)
            c->msg[i] = (unsigned char)(i * 7 + (size_t)c->round * 13 + 1);
        rt_io_write_all_init(&c->wa, c->conn, c->msg, ECHO_LEN);
        RT_AWAIT(&c->co, cx, &c->wa);
        c->result = (ssize_t)c->wa.result;
        if (c->result != ECHO_LEN)
            RT_RETURN(&c->co, out, (intptr_t)(c->result < 0 ? c->result : -EIO));
        for (c->got = 0; c->got < ECHO_LEN;) {
            rt_io_read_init(&c->rd, c->conn, c->back + c->got, ECHO_LEN - c->got);
            RT_AWAIT(&c->co, cx, &c->rd);
            c->result = (ssize_t)c->rd.result;
            if (c->result <= 0)
                RT_RETURN(&c->co, out, (intptr_t)(c->result < 0 ? c->result : -EPIPE));
            c->got += (size_t)c->result;
        }
        if (memcmp(c->msg, c->back, ECHO_LEN) != 0)
            RT_RETURN(&c->co, out, (intptr_t)-EILSEQ);
    }
    rt_io_close(c->conn);
    c->conn = NULL;
    RT_RETURN(&c->co, out, 0);
    RT_CORO_END(&c->co, out);
}

static void echo_client_drop(void *state)
{
    struct echo_client *c = state;
    /* The operation in flight (a pending connect closes its half-open
     * socket), before the connection goes. */
    rt_coro_cleanup(&c->co);
    if (c->conn != NULL)
        rt_io_close(c->conn);
    c->conn = NULL;
}

static struct echo_server server_result;
static struct echo_client client_result;

static rt_poll echo_server_outer_poll(void *state, rt_context *cx, void **out)
{
    if (echo_server_poll(state, cx, out) != RT_READY)
        return RT_PENDING;
    server_result = *(struct echo_server *)state;
    return RT_READY;
}

static rt_poll echo_client_outer_poll(void *state, rt_context *cx, void **out)
{
    if (echo_client_poll(state, cx, out) != RT_READY)
        return RT_PENDING;
    client_result = *(struct echo_client *)state;
    return RT_READY;
}

static void run_echo(int family)
{
    int before = count_fds();
    rt_runtime *rt = new_runtime(2);
    static struct sockaddr_storage addr;
    socklen_t len;
    rt_io *l = listen_loopback(rt, family, 16, &addr, &len);

    struct echo_server *s = calloc(1, sizeof *s);
    struct echo_client *c = calloc(1, sizeof *c);
    cr_assert(s != NULL && c != NULL);
    s->listener = l;
    c->addr = &addr;
    c->addr_len = len;
    rt_task *server = NULL, *client = NULL;
    cr_assert_eq(rt_spawn(rt, echo_server_outer_poll, echo_server_drop, s, sizeof *s, &server), 0);
    cr_assert_eq(rt_spawn(rt, echo_client_outer_poll, echo_client_drop, c, sizeof *c, &client), 0);
    free(s);
    free(c);
    void *cv = NULL, *sv = NULL;
    cr_assert_eq(task_wait_status(client, WAIT_DEADLINE_NS, &cv), 0, "the client never finished");
    cr_assert_eq(task_wait_status(server, WAIT_DEADLINE_NS, &sv), 0, "the server never finished");
    cr_assert_eq((intptr_t)cv, 0, "client: %s", rt_strerror((int)(intptr_t)cv));
    cr_assert_eq((intptr_t)sv, ECHO_ROUNDS * ECHO_LEN, "server: %ld", (long)(intptr_t)sv);
    cr_assert(same_endpoint(&server_result.peer, &client_result.local),
              "accept's peer address is not the client's local address");
    cr_assert_eq(server_result.peer_len, client_result.local_len);
    cr_assert(same_endpoint(&client_result.peer, &addr),
              "the client's peer address is not the listener's");
    cr_assert_eq(rt_io_close(l), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(count_fds(), before, "descriptors left open");
}

Test(net, accept_connect_and_echo_round_trips_inside_tasks_over_ipv4)
{
    run_echo(AF_INET);
}

Test(net, accept_connect_and_echo_round_trips_inside_tasks_over_ipv6)
{
    if (!have_ipv6_loopback())
        cr_skip("no IPv6 loopback on this machine");
    run_echo(AF_INET6);
}

Test(net, ipv6_listener_with_v6only_sets_the_option)
{
    if (!have_ipv6_loopback())
        cr_skip("no IPv6 loopback on this machine");
    rt_runtime *rt = new_runtime(1);
    struct sockaddr_storage any;
    socklen_t any_len;
    cr_assert_eq(rt_net_addr("::", 0, &any, &any_len), 0);
    rt_io *l = NULL;
    cr_assert_eq(rt_tcp_listen(rt, (struct sockaddr *)&any, any_len, 8, RT_NET_V6ONLY, &l), 0);
    int on = 0;
    socklen_t olen = sizeof on;
    cr_assert_eq(getsockopt(rt_io_fd(l), IPPROTO_IPV6, IPV6_V6ONLY, &on, &olen), 0);
    cr_assert(on, "RT_NET_V6ONLY did not set IPV6_V6ONLY");
    cr_assert_eq(rt_io_close(l), 0);
    finish_runtime(rt, 0);
}

/* ---- UDP
 * ------------------------------------------------------------------------------------------ */

static struct event udp_pending = EVENT_INIT;

struct udp_receiver {
    rt_coro co;
    rt_io *io;
    size_t len;
    ssize_t result;
    struct sockaddr_storage from;
    socklen_t from_len;
    rt_udp_recv_from op;
    unsigned char buf[64];
};

static struct udp_receiver udp_received;

static rt_poll udp_receiver_poll(void *state, rt_context *cx, void **out)
{
    struct udp_receiver *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_udp_recv_from_init(&s->op, s->io, s->buf, s->len);
    RT_AWAIT_POLL(&s->co, note_pending(RT_POLL_OP(&s->op, cx), &udp_pending));
    s->result = (ssize_t)s->op.result;
    s->from = s->op.from;
    s->from_len = s->op.from_len;
    udp_received = *s;
    RT_RETURN(&s->co, out, (intptr_t)s->result);
    RT_CORO_END(&s->co, out);
}

struct udp_sender {
    rt_coro co;
    rt_io *io;
    const struct sockaddr_storage *to; /* NULL: rt_io_write on a connected socket */
    socklen_t to_len;
    size_t len;
    rt_udp_send_to send;
    rt_io_write wr;
    unsigned char buf[64];
};

static rt_poll udp_sender_poll(void *state, rt_context *cx, void **out)
{
    struct udp_sender *s = state;
    RT_CORO_BEGIN(&s->co);
    if (s->to != NULL) {
        rt_udp_send_to_init(&s->send, s->io, s->buf, s->len, (const struct sockaddr *)s->to,
                            s->to_len);
        RT_AWAIT(&s->co, cx, &s->send);
        RT_RETURN(&s->co, out, (intptr_t)s->send.result);
    }
    rt_io_write_init(&s->wr, s->io, s->buf, s->len);
    RT_AWAIT(&s->co, cx, &s->wr);
    RT_RETURN(&s->co, out, (intptr_t)s->wr.result);
    RT_CORO_END(&s->co, out);
}

static intptr_t udp_send(rt_runtime *rt, rt_io *io, const struct sockaddr_storage *to,
                         socklen_t to_len, const char *msg)
{
    struct udp_sender s;
    memset(&s, 0, sizeof s);
    s.io = io;
    s.to = to;
    s.to_len = to_len;
    s.len = strlen(msg);
    memcpy(s.buf, msg, s.len);
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, udp_sender_poll, rt_coro_drop, &s, sizeof s, &value), 0);
    return (intptr_t)value;
}

static rt_task *udp_spawn_receiver(rt_runtime *rt, rt_io *io, size_t len)
{
    struct udp_receiver s;
    memset(&s, 0, sizeof s);
    s.io = io;
    s.len = len;
    rt_task *t = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, udp_receiver_poll, NULL, &s, &t), 0);
    return t;
}

Test(net, udp_bind_send_to_recv_from_and_connect_round_trip_on_127_0_0_1)
{
    rt_runtime *rt = new_runtime(2);
    int before = count_fds();
    struct sockaddr_storage any, a_addr, b_addr;
    socklen_t any_len, a_len = sizeof a_addr, b_len = sizeof b_addr;
    loopback(AF_INET, 0, &any, &any_len);
    rt_io *a = NULL, *b = NULL;
    cr_assert_eq(rt_udp_bind(rt, (struct sockaddr *)&any, any_len, 0, &a), 0);
    cr_assert_eq(rt_udp_bind(rt, (struct sockaddr *)&any, any_len, RT_NET_REUSEADDR, &b), 0);
    cr_assert_eq(rt_net_local_addr(a, &a_addr, &a_len), 0);
    cr_assert_eq(rt_net_local_addr(b, &b_addr, &b_len), 0);
    cr_assert_neq(port_of(&a_addr), 0);
    cr_assert_neq(port_of(&a_addr), port_of(&b_addr));
    int type = 0;
    socklen_t tlen = sizeof type;
    cr_assert_eq(getsockopt(rt_io_fd(a), SOL_SOCKET, SO_TYPE, &type, &tlen), 0);
    cr_assert_eq(type, SOCK_DGRAM);

    /* The receiver waits first, then a datagram arrives. */
    unsigned long seen = event_count(&udp_pending);
    rt_task *rx = udp_spawn_receiver(rt, b, 64);
    cr_assert(event_wait_for(&udp_pending, seen + 1), "recv_from did not wait");
    cr_assert_eq(udp_send(rt, a, &b_addr, b_len, "hello"), 5);
    cr_assert_eq(wait_op(rx), 5);
    cr_assert_eq(memcmp(udp_received.buf, "hello", 5), 0);
    cr_assert(same_endpoint(&udp_received.from, &a_addr), "recv_from reported another sender");

    /* A datagram longer than the buffer is truncated to it. */
    cr_assert_eq(udp_send(rt, a, &b_addr, b_len, "truncated"), 9);
    rx = udp_spawn_receiver(rt, b, 4);
    cr_assert_eq(wait_op(rx), 4);
    cr_assert_eq(memcmp(udp_received.buf, "trun", 4), 0);

    /* Connected: rt_io_write / rt_io_read exchange datagrams with the peer. */
    cr_assert_eq(rt_udp_connect(b, (struct sockaddr *)&a_addr, a_len), 0);
    cr_assert_eq(rt_udp_connect(a, (struct sockaddr *)&b_addr, b_len), 0);
    struct sockaddr_storage p;
    socklen_t plen = sizeof p;
    cr_assert_eq(rt_net_peer_addr(b, &p, &plen), 0);
    cr_assert(same_endpoint(&p, &a_addr));
    cr_assert_eq(udp_send(rt, b, NULL, 0, "pong"), 4);
    rt_task *rd = spawn_op(rt, a, OP_READ, NULL, 64);
    cr_assert_eq(wait_op(rd), 4);
    cr_assert_eq(udp_send(rt, a, NULL, 0, "ping!"), 5);
    rx = udp_spawn_receiver(rt, b, 64);
    cr_assert_eq(wait_op(rx), 5);
    cr_assert(same_endpoint(&udp_received.from, &a_addr));

    cr_assert_eq(rt_io_close(a), 0);
    cr_assert_eq(rt_io_close(b), 0);
    cr_assert_eq(count_fds(), before);
    finish_runtime(rt, 0);
}
