/* Black-box tests of asyncrt/net.h with real sockets on the loopback
 * interface only (127.0.0.1 and ::1; nothing ever leaves the machine):
 * address parsing, listening on port 0, accept/connect/echo inside tasks over
 * IPv4 and IPv6, refused connections, connect timeouts against a listener
 * whose backlog is full, peer close / reset / -EPIPE (SIGPIPE keeps its
 * default action, so a raised SIGPIPE kills the test), -EMFILE on accept with
 * the pending connection kept, TCP options and half-close, UDP, and 10,000
 * concurrent echo connections through one runtime with every descriptor
 * closed at the end. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

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

#define MS (1000000LL)
#define SEC (1000000000LL)

/* Seconds any wait for an event may take before the test reports a hang. */
#define EVENT_DEADLINE_S 30
/* The same bound, for rt_task_wait calls that must not hang the suite. */
#define WAIT_DEADLINE_NS (30LL * SEC)

TestSuite(net, .timeout = 280, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* Open descriptors of this process. */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d, "opendir /proc/self/fd: %s", strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* The highest open descriptor number. */
static int max_fd(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d);
    int top = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        if (fd > top)
            top = fd;
    }
    closedir(d);
    return top;
}

static rt_poll note_pending(rt_poll p, struct event *e)
{
    if (p == RT_PENDING)
        event_signal(e);
    return p;
}

static void loopback(int family, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
    int rc = rt_net_addr(family == AF_INET6 ? "::1" : "127.0.0.1", port, ss, len);
    cr_assert_eq(rc, 0, "rt_net_addr: %s", rt_strerror(rc));
}

static uint16_t port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

/* Same family, address and port. */
static bool same_endpoint(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family || port_of(a) != port_of(b))
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

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

/* A TCP listener of rt on the loopback address of `family`, port 0. */
static rt_io *listen_loopback(rt_runtime *rt, int family, int backlog, struct sockaddr_storage *ss,
                              socklen_t *len)
{
    struct sockaddr_storage any;
    socklen_t any_len;
    loopback(family, 0, &any, &any_len);
    rt_io *l = NULL;
    int rc = rt_tcp_listen(rt, (struct sockaddr *)&any, any_len, backlog, RT_NET_REUSEADDR, &l);
    cr_assert_eq(rc, 0, "rt_tcp_listen: %s", rt_strerror(rc));
    *len = 3; /* an output only: whatever it holds before does not matter */
    rc = rt_net_local_addr(l, ss, len);
    cr_assert_eq(rc, 0, "rt_net_local_addr: %s", rt_strerror(rc));
    cr_assert_neq(port_of(ss), 0);
    return l;
}

/* Accepts one connection (a task). */
struct accept_out {
    int err;
    rt_io *conn;
    struct sockaddr_storage peer;
    socklen_t peer_len;
};

struct accept_once {
    rt_coro co;
    rt_io *listener;
    struct accept_out *o;
};

static rt_poll accept_once_poll(void *state, rt_context *cx, void **out)
{
    struct accept_once *s = state;
    RT_CORO_BEGIN(&s->co);
    s->o->peer_len = sizeof s->o->peer;
    RT_AWAIT(&s->co,
             rt_tcp_accept(s->listener, cx, &s->o->conn, &s->o->peer, &s->o->peer_len, &s->o->err));
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

static struct accept_out accept_one(rt_runtime *rt, rt_io *listener)
{
    struct accept_out o;
    memset(&o, 0, sizeof o);
    o.err = 12345;
    struct accept_once s = {{0}, listener, &o};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, accept_once_poll, NULL, &s, &task), 0);
    int rc = rt_task_wait(task, 10 * SEC, NULL);
    if (rc == -ETIMEDOUT) {
        rt_task_abort(task);
        (void)rt_task_wait(task, WAIT_DEADLINE_NS, NULL);
        o.err = -ETIMEDOUT;
        return o;
    }
    cr_assert_eq(rc, 0);
    return o;
}

/* A blocking client socket connected to `ss` (from the test thread). */
static int raw_connect(const struct sockaddr_storage *ss, socklen_t len)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    cr_assert_eq(connect(fd, (const struct sockaddr *)ss, len), 0, "connect: %s", strerror(errno));
    struct timeval tv = {10, 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

/* A connection whose server side is an rt_io of rt (accepted through
 * rt_tcp_accept) and whose client side is a plain blocking socket. */
static rt_io *tcp_pair(rt_runtime *rt, int family, int *client_fd)
{
    struct sockaddr_storage ss;
    socklen_t len;
    rt_io *l = listen_loopback(rt, family, 8, &ss, &len);
    *client_fd = raw_connect(&ss, len);
    struct accept_out o = accept_one(rt, l);
    cr_assert_eq(o.err, 0, "accept: %s", rt_strerror(o.err));
    cr_assert_not_null(o.conn);
    cr_assert_eq(rt_io_close(l), 0);
    return o.conn;
}

/* One operation on an rt_io, as a task: read or write once. */
enum op_kind { OP_READ, OP_WRITE };

static struct event op_pending = EVENT_INIT;

struct one_op {
    rt_coro co;
    rt_io *io;
    enum op_kind kind;
    size_t len;
    ssize_t result;
    unsigned char buf[64];
};

static rt_poll one_op_poll(void *state, rt_context *cx, void **out)
{
    struct one_op *s = state;
    RT_CORO_BEGIN(&s->co);
    if (s->kind == OP_READ)
        RT_AWAIT(&s->co,
                 note_pending(rt_io_read(s->io, cx, s->buf, s->len, &s->result), &op_pending));
    else
        RT_AWAIT(&s->co,
                 note_pending(rt_io_write(s->io, cx, s->buf, s->len, &s->result), &op_pending));
    RT_RETURN(&s->co, out, (intptr_t)s->result);
    RT_CORO_END(&s->co, out);
}

static rt_task *spawn_op(rt_runtime *rt, rt_io *io, enum op_kind kind, const void *data, size_t len)
{
    struct one_op s;
    memset(&s, 0, sizeof s);
    s.io = io;
    s.kind = kind;
    s.len = len;
    if (data != NULL)
        memcpy(s.buf, data, len);
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, one_op_poll, NULL, &s, &task), 0);
    return task;
}

static intptr_t wait_op(rt_task *task)
{
    void *value = NULL;
    int rc = rt_task_wait(task, WAIT_DEADLINE_NS, &value);
    cr_assert_eq(rc, 0, "the operation never finished: %s", rt_strerror(rc));
    return (intptr_t)value;
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
    size_t progress;
    size_t echoed;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    unsigned char buf[256];
};

/* Accepts one connection and echoes until end of stream; result: the bytes
 * echoed, or -errno. Records the peer address. */
static rt_poll echo_server_poll(void *state, rt_context *cx, void **out)
{
    struct echo_server *s = state;
    RT_CORO_BEGIN(&s->co);
    s->peer_len = sizeof s->peer;
    RT_AWAIT(&s->co, rt_tcp_accept(s->listener, cx, &s->conn, &s->peer, &s->peer_len, &s->err));
    if (s->err != 0)
        RT_RETURN(&s->co, out, (intptr_t)s->err);
    for (;;) {
        RT_AWAIT(&s->co, rt_io_read(s->conn, cx, s->buf, sizeof s->buf, &s->result));
        if (s->result <= 0)
            break;
        s->progress = 0;
        RT_AWAIT(&s->co,
                 rt_io_write_all(s->conn, cx, s->buf, (size_t)s->result, &s->progress, &s->result));
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
    if (s->conn != NULL)
        rt_io_close(s->conn);
    s->conn = NULL;
}

struct echo_client {
    rt_coro co;
    const struct sockaddr_storage *addr;
    socklen_t addr_len;
    rt_tcp_connect op;
    bool op_live;
    rt_io *conn;
    int err;
    int round;
    size_t progress;
    size_t got;
    ssize_t result;
    struct sockaddr_storage local, peer;
    socklen_t local_len, peer_len;
    unsigned char msg[ECHO_LEN];
    unsigned char back[ECHO_LEN];
};

/* Connects, does ECHO_ROUNDS round trips, closes; result 0 or -errno
 * (-EILSEQ: the echo differed). Records its own and its peer's address. */
static rt_poll echo_client_poll(void *state, rt_context *cx, void **out)
{
    struct echo_client *c = state;
    RT_CORO_BEGIN(&c->co);
    c->err = rt_tcp_connect_init(&c->op, NULL, 0);
    if (c->err != 0)
        RT_RETURN(&c->co, out, (intptr_t)c->err);
    c->op_live = true;
    RT_AWAIT(&c->co, rt_tcp_connect_poll(&c->op, cx, (const struct sockaddr *)c->addr, c->addr_len,
                                         &c->conn, &c->err));
    rt_tcp_connect_drop(&c->op);
    c->op_live = false;
    if (c->err != 0)
        RT_RETURN(&c->co, out, (intptr_t)c->err);
    c->local_len = sizeof c->local;
    c->peer_len = sizeof c->peer;
    if (rt_net_local_addr(c->conn, &c->local, &c->local_len) != 0 ||
        rt_net_peer_addr(c->conn, &c->peer, &c->peer_len) != 0)
        RT_RETURN(&c->co, out, (intptr_t)-ENOTCONN);
    for (c->round = 0; c->round < ECHO_ROUNDS; c->round++) {
        for (size_t i = 0; i < ECHO_LEN; i++)
            c->msg[i] = (unsigned char)(i * 7 + (size_t)c->round * 13 + 1);
        c->progress = 0;
        RT_AWAIT(&c->co, rt_io_write_all(c->conn, cx, c->msg, ECHO_LEN, &c->progress, &c->result));
        if (c->result != ECHO_LEN)
            RT_RETURN(&c->co, out, (intptr_t)(c->result < 0 ? c->result : -EIO));
        for (c->got = 0; c->got < ECHO_LEN;) {
            RT_AWAIT(&c->co,
                     rt_io_read(c->conn, cx, c->back + c->got, ECHO_LEN - c->got, &c->result));
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
    if (c->op_live)
        rt_tcp_connect_drop(&c->op);
    if (c->conn != NULL)
        rt_io_close(c->conn);
    c->op_live = false;
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
    cr_assert_eq(rt_task_wait(client, WAIT_DEADLINE_NS, &cv), 0, "the client never finished");
    cr_assert_eq(rt_task_wait(server, WAIT_DEADLINE_NS, &sv), 0, "the server never finished");
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

/* ---- connecting ---------------------------------------------------------------------- */

struct connector {
    rt_coro co;
    const struct sockaddr_storage *addr;
    socklen_t addr_len;
    int64_t timeout;
    rt_tcp_connect op;
    bool op_live;
    rt_io *conn;
    int err;
    int64_t start, end;
};

static struct event connector_pending = EVENT_INIT;
static struct connector connector_result;

/* Connects with the given timeout; stores its final state in
 * connector_result (the connection, if any, is closed). */
static rt_poll connector_poll(void *state, rt_context *cx, void **out)
{
    struct connector *c = state;
    RT_CORO_BEGIN(&c->co);
    c->start = rt_now_ns();
    c->err = rt_tcp_connect_init(&c->op, NULL, c->timeout);
    if (c->err != 0)
        RT_RETURN(&c->co, out, (intptr_t)c->err);
    c->op_live = true;
    c->err = 12345;
    RT_AWAIT(&c->co, note_pending(rt_tcp_connect_poll(&c->op, cx, (const struct sockaddr *)c->addr,
                                                      c->addr_len, &c->conn, &c->err),
                                  &connector_pending));
    c->end = rt_now_ns();
    rt_tcp_connect_drop(&c->op);
    c->op_live = false;
    connector_result = *c;
    if (c->err == 0 && c->conn != NULL) {
        rt_io_close(c->conn);
        c->conn = NULL;
    }
    RT_RETURN(&c->co, out, (intptr_t)c->err);
    RT_CORO_END(&c->co, out);
}

static atomic_int connector_drops;

static void connector_drop(void *state)
{
    struct connector *c = state;
    if (c->op_live)
        rt_tcp_connect_drop(&c->op);
    if (c->conn != NULL)
        rt_io_close(c->conn);
    c->op_live = false;
    c->conn = NULL;
    atomic_fetch_add(&connector_drops, 1);
}

Test(net, connect_drop_accepts_a_zero_initialised_or_never_polled_operation)
{
    rt_tcp_connect op;
    memset(&op, 0, sizeof op);
    rt_tcp_connect_drop(&op);
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(rt_tcp_connect_init(&op, rt, 5 * SEC), 0);
    rt_tcp_connect_drop(&op); /* initialised, never polled */
    cr_assert_eq(rt_tcp_connect_init(&op, NULL, 0), -EINVAL, "NULL runtime outside a task");
    finish_runtime(rt, 0);
}

Test(net, connect_to_a_closed_port_is_econnrefused_and_leaves_no_descriptor)
{
    rt_runtime *rt = new_runtime(2);
    /* A port that is bound (so nobody else takes it) but not listening. */
    int holder = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(holder, 0);
    static struct sockaddr_storage addr;
    socklen_t len;
    loopback(AF_INET, 0, &addr, &len);
    cr_assert_eq(bind(holder, (struct sockaddr *)&addr, len), 0);
    len = sizeof addr;
    cr_assert_eq(getsockname(holder, (struct sockaddr *)&addr, &len), 0);

    int before = count_fds();
    for (int i = 0; i < 2; i++) {
        struct connector c;
        memset(&c, 0, sizeof c);
        c.addr = &addr;
        c.addr_len = len;
        c.timeout = i == 0 ? 0 : 5 * SEC; /* with and without a limit */
        void *value = NULL;
        cr_assert_eq(rt_block_on(rt, connector_poll, connector_drop, &c, sizeof c, &value), 0);
        cr_assert_eq((intptr_t)value, -ECONNREFUSED, "connect gave %s",
                     rt_strerror((int)(intptr_t)value));
        cr_assert_null(connector_result.conn, "a failed connect handed out a connection");
        cr_assert_null(connector_result.op.io, "op.io is not NULL after the attempt");
        cr_assert_lt(connector_result.end - connector_result.start, 2 * SEC);
    }
    cr_assert_eq(count_fds(), before, "a refused connect left a descriptor open");
    close(holder);
    finish_runtime(rt, 0);
}

/* A listener (plain socket, never accepted from) whose accept queue is full,
 * and the client sockets that fill it. */
struct full_listener {
    int fd;
    int fillers[8];
    int nfill;
    struct sockaddr_storage addr;
    socklen_t len;
};

static void full_listener_open(struct full_listener *f)
{
    f->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(f->fd, 0);
    loopback(AF_INET, 0, &f->addr, &f->len);
    cr_assert_eq(bind(f->fd, (struct sockaddr *)&f->addr, f->len), 0);
    cr_assert_eq(listen(f->fd, 0), 0);
    f->len = sizeof f->addr;
    cr_assert_eq(getsockname(f->fd, (struct sockaddr *)&f->addr, &f->len), 0);
    /* The first one or two complete into the queue; the SYNs of the rest
     * are dropped because the queue is full. */
    f->nfill = 4;
    for (int i = 0; i < f->nfill; i++) {
        f->fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        cr_assert_geq(f->fillers[i], 0);
        int rc = connect(f->fillers[i], (struct sockaddr *)&f->addr, f->len);
        cr_assert(rc == 0 || errno == EINPROGRESS, "filler connect: %s", strerror(errno));
    }
}

static void full_listener_close(struct full_listener *f)
{
    for (int i = 0; i < f->nfill; i++)
        close(f->fillers[i]);
    close(f->fd);
}

static void connect_with_timeout_to_full_listener(int64_t timeout)
{
    rt_runtime *rt = new_runtime(2);
    int before = count_fds();
    static struct full_listener f;
    full_listener_open(&f);
    struct connector c;
    memset(&c, 0, sizeof c);
    c.addr = &f.addr;
    c.addr_len = f.len;
    c.timeout = timeout;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, connector_poll, connector_drop, &c, &task), 0);
    void *value = NULL;
    int rc = rt_task_wait(task, 10 * SEC, &value);
    if (rc == -ETIMEDOUT) {
        rt_task_abort(task);
        (void)rt_task_wait(task, WAIT_DEADLINE_NS, NULL);
        full_listener_close(&f);
        finish_runtime(rt, -1);
        cr_assert_fail("a connect with a %lld ns timeout was still pending after 10 s",
                       (long long)timeout);
    }
    cr_assert_eq(rc, 0);
    int err = (int)(intptr_t)value;
    cr_assert(err == -ETIMEDOUT || err == 0, "connect gave %s", rt_strerror(err));
    if (err == -ETIMEDOUT) {
        cr_assert_geq(connector_result.end - connector_result.start, timeout,
                      "timed out after %lld ns, before the %lld ns timeout",
                      (long long)(connector_result.end - connector_result.start),
                      (long long)timeout);
        cr_assert_null(connector_result.conn);
    } else {
        cr_log_info("connect with a %lld ns timeout succeeded against a full backlog",
                    (long long)timeout);
    }
    cr_assert_lt(connector_result.end - connector_result.start, timeout + 2 * SEC);
    cr_assert_null(connector_result.op.io, "op.io is not NULL after the attempt");
    full_listener_close(&f);
    cr_assert_eq(count_fds(), before, "the timed-out connect left its socket open");
    finish_runtime(rt, 0);
}

Test(net, connect_with_200ms_timeout_to_a_full_backlog_times_out_or_connects_without_hanging)
{
    connect_with_timeout_to_full_listener(200 * MS);
}

Test(net, connect_with_1ns_timeout_to_a_full_backlog_times_out_or_connects_without_hanging)
{
    connect_with_timeout_to_full_listener(1);
}

Test(net, aborting_a_pending_connect_closes_its_half_open_socket)
{
    rt_runtime *rt = new_runtime(2);
    int before = count_fds();
    static struct full_listener f;
    full_listener_open(&f);
    struct connector c;
    memset(&c, 0, sizeof c);
    c.addr = &f.addr;
    c.addr_len = f.len;
    c.timeout = 0; /* no limit: only the abort ends it */
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, connector_poll, connector_drop, &c, &task), 0);
    bool pending = event_wait_for_s(&connector_pending, 1, 10);
    rt_task_abort(task);
    int rc = rt_task_wait(task, WAIT_DEADLINE_NS, NULL);
    if (pending)
        cr_assert(rc == -ECANCELED || rc == 0, "wait: %s", rt_strerror(rc));
    cr_assert_eq(atomic_load(&connector_drops), 1);
    full_listener_close(&f);
    cr_assert_eq(count_fds(), before, "the aborted connect left its socket open");
    finish_runtime(rt, 0);
}

/* ---- peer close, reset, EPIPE --------------------------------------------------------- */

Test(net, read_returns_0_after_the_peer_closes)
{
    rt_runtime *rt = new_runtime(2);
    int before = count_fds();
    int peer;
    rt_io *conn = tcp_pair(rt, AF_INET, &peer);
    cr_assert_eq(write(peer, "last", 4), 4);
    rt_task *t = spawn_op(rt, conn, OP_READ, NULL, 64);
    cr_assert_eq(wait_op(t), 4);
    unsigned long seen = event_count(&op_pending);
    t = spawn_op(rt, conn, OP_READ, NULL, 64);
    cr_assert(event_wait_for(&op_pending, seen + 1), "the read did not wait");
    close(peer);
    intptr_t r = wait_op(t);
    cr_assert_eq(r, 0, "read after the peer closed: %ld (%s)", (long)r,
                 r < 0 ? rt_strerror((int)r) : "data");
    cr_assert_eq(rt_io_close(conn), 0);
    cr_assert_eq(count_fds(), before);
    finish_runtime(rt, 0);
}

Test(net, read_returns_econnreset_after_the_peer_resets)
{
    rt_runtime *rt = new_runtime(2);
    int peer;
    rt_io *conn = tcp_pair(rt, AF_INET, &peer);
    unsigned long seen = event_count(&op_pending);
    rt_task *t = spawn_op(rt, conn, OP_READ, NULL, 64);
    cr_assert(event_wait_for(&op_pending, seen + 1), "the read did not wait");
    struct linger lg = {1, 0};
    cr_assert_eq(setsockopt(peer, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    close(peer); /* sends RST */
    intptr_t r = wait_op(t);
    cr_assert_eq(r, -ECONNRESET, "read after a reset: %ld (%s)", (long)r,
                 r < 0 ? rt_strerror((int)r) : "not an error");
    cr_assert_eq(rt_io_close(conn), 0);
    finish_runtime(rt, 0);
}

struct pipe_breaker {
    rt_coro co;
    rt_io *io;
    int writes;
    int resets;
    ssize_t result;
    unsigned char buf[1024];
};

/* Writes until the connection reports an error; -ECONNRESET (the peer's
 * RST) may come first, -EPIPE must come eventually. */
static rt_poll pipe_breaker_poll(void *state, rt_context *cx, void **out)
{
    struct pipe_breaker *s = state;
    RT_CORO_BEGIN(&s->co);
    for (s->writes = 0; s->writes < 100000; s->writes++) {
        RT_AWAIT(&s->co, rt_io_write(s->io, cx, s->buf, sizeof s->buf, &s->result));
        if (s->result == -EPIPE)
            RT_RETURN(&s->co, out, (intptr_t)-EPIPE);
        if (s->result == -ECONNRESET) {
            s->resets++;
            continue;
        }
        if (s->result < 0)
            RT_RETURN(&s->co, out, (intptr_t)s->result);
        RT_YIELD(&s->co, cx); /* let the RST arrive */
    }
    RT_RETURN(&s->co, out, (intptr_t)1);
    RT_CORO_END(&s->co, out);
}

Test(net, writing_to_a_closed_peer_eventually_gives_epipe_and_never_sigpipe)
{
    /* SIGPIPE keeps its default action: a raised SIGPIPE kills this test. */
    rt_runtime *rt = new_runtime(2);
    int peer;
    rt_io *conn = tcp_pair(rt, AF_INET, &peer);
    close(peer);
    struct pipe_breaker *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->io = conn;
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, pipe_breaker_poll, NULL, s, sizeof *s, &value), 0);
    free(s);
    cr_assert_eq((intptr_t)value, -EPIPE, "writes ended with %ld (%s)", (long)(intptr_t)value,
                 (intptr_t)value < 0 ? rt_strerror((int)(intptr_t)value) : "no error at all");
    cr_assert_eq(rt_io_close(conn), 0);
    finish_runtime(rt, 0);
}

/* ---- TCP options and half-close ----------------------------------------------------------- */

Test(net, set_nodelay_turns_tcp_nodelay_on_and_off)
{
    rt_runtime *rt = new_runtime(1);
    int peer;
    rt_io *conn = tcp_pair(rt, AF_INET, &peer);
    int on = -1;
    socklen_t len = sizeof on;
    cr_assert_eq(rt_tcp_set_nodelay(conn, true), 0);
    cr_assert_eq(getsockopt(rt_io_fd(conn), IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
    cr_assert_neq(on, 0, "TCP_NODELAY is off after rt_tcp_set_nodelay(true)");
    cr_assert_eq(rt_tcp_set_nodelay(conn, false), 0);
    len = sizeof on;
    cr_assert_eq(getsockopt(rt_io_fd(conn), IPPROTO_TCP, TCP_NODELAY, &on, &len), 0);
    cr_assert_eq(on, 0, "TCP_NODELAY is on after rt_tcp_set_nodelay(false)");
    close(peer);
    cr_assert_eq(rt_io_close(conn), 0);
    finish_runtime(rt, 0);
}

Test(net, shutdown_wr_makes_the_peer_read_0_and_the_other_direction_keeps_working)
{
    rt_runtime *rt = new_runtime(2);
    int peer;
    rt_io *conn = tcp_pair(rt, AF_INET, &peer);
    cr_assert_eq(rt_tcp_shutdown(conn, SHUT_WR), 0);
    char c;
    cr_assert_eq(read(peer, &c, 1), 0, "the peer did not see the end of stream");
    /* Writing after SHUT_WR: -EPIPE, and no SIGPIPE. */
    rt_task *t = spawn_op(rt, conn, OP_WRITE, "no", 2);
    intptr_t w = wait_op(t);
    cr_assert_eq(w, -EPIPE, "write after SHUT_WR: %ld", (long)w);
    /* The peer can still send. */
    cr_assert_eq(write(peer, "still", 5), 5);
    t = spawn_op(rt, conn, OP_READ, NULL, 64);
    cr_assert_eq(wait_op(t), 5);
    cr_assert_eq(rt_tcp_shutdown(conn, 12345), -EINVAL, "a bad `how`");
    close(peer);
    cr_assert_eq(rt_io_close(conn), 0);
    finish_runtime(rt, 0);
}

/* ---- EMFILE on accept --------------------------------------------------------------------------
 */

Test(net, accept_out_of_descriptors_is_emfile_and_the_connection_waits_for_the_next_accept)
{
    rt_runtime *rt = new_runtime(1);
    struct sockaddr_storage addr;
    socklen_t len;
    rt_io *l = listen_loopback(rt, AF_INET, 8, &addr, &len);
    /* The client socket exists before descriptors run out. */
    int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(client, 0);

    struct rlimit old;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
    struct rlimit low = old;
    low.rlim_cur = (rlim_t)max_fd() + 1;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &low), 0, "setrlimit: %s", strerror(errno));
    /* Fill every hole below the limit. */
    static int fillers[4096];
    int nfill = 0;
    for (;;) {
        int fd = fcntl(client, F_DUPFD_CLOEXEC, 0);
        if (fd < 0)
            break;
        cr_assert_lt(nfill, 4096);
        fillers[nfill++] = fd;
    }
    int dup_errno = errno;

    int crc = connect(client, (struct sockaddr *)&addr, len);
    int connect_errno = errno;
    struct accept_out o = accept_one(rt, l);

    /* Descriptors again. */
    for (int i = 0; i < nfill; i++)
        close(fillers[i]);
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
    cr_assert_eq(dup_errno, EMFILE, "could not exhaust descriptors: %s", strerror(dup_errno));
    cr_assert_eq(crc, 0, "connect: %s", strerror(connect_errno));
    if (o.err == 0 && o.conn != NULL)
        rt_io_close(o.conn);
    cr_assert_eq(o.err, -EMFILE, "accept without descriptors gave %s", rt_strerror(o.err));

    /* The pending connection was kept: the next accept gets it. */
    o = accept_one(rt, l);
    cr_assert_eq(o.err, 0, "accept after descriptors came back: %s%s", rt_strerror(o.err),
                 o.err == -ETIMEDOUT ? " (the listener never woke: readiness lost at EMFILE)" : "");
    struct sockaddr_storage mine;
    socklen_t mine_len = sizeof mine;
    cr_assert_eq(getsockname(client, (struct sockaddr *)&mine, &mine_len), 0);
    cr_assert(same_endpoint(&o.peer, &mine), "accepted another connection than the pending one");
    cr_assert_eq(write(client, "hi", 2), 2);
    rt_task *t = spawn_op(rt, o.conn, OP_READ, NULL, 64);
    cr_assert_eq(wait_op(t), 2);
    cr_assert_eq(rt_io_close(o.conn), 0);
    close(client);
    cr_assert_eq(rt_io_close(l), 0);
    finish_runtime(rt, 0);
}

/* ---- abort safety of accept ---------------------------------------------------------------- */

static struct event acceptor_pending = EVENT_INIT;

static rt_poll announcing_accept_poll(void *state, rt_context *cx, void **out)
{
    return note_pending(accept_once_poll(state, cx, out), &acceptor_pending);
}

Test(net, aborting_a_waiting_accept_loses_no_connection)
{
    rt_runtime *rt = new_runtime(2);
    struct sockaddr_storage addr;
    socklen_t len;
    rt_io *l = listen_loopback(rt, AF_INET, 8, &addr, &len);
    struct accept_out first;
    memset(&first, 0, sizeof first);
    struct accept_once s = {{0}, l, &first};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, announcing_accept_poll, NULL, &s, &task), 0);
    cr_assert(event_wait_for(&acceptor_pending, 1));
    rt_task_abort(task);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    int client = raw_connect(&addr, len);
    struct accept_out o = accept_one(rt, l);
    cr_assert_eq(o.err, 0, "accept after an aborted accept: %s", rt_strerror(o.err));
    cr_assert_null(first.conn, "the aborted accept took a connection");
    cr_assert_eq(rt_io_close(o.conn), 0);
    close(client);
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
    unsigned char buf[64];
};

static struct udp_receiver udp_received;

static rt_poll udp_receiver_poll(void *state, rt_context *cx, void **out)
{
    struct udp_receiver *s = state;
    RT_CORO_BEGIN(&s->co);
    s->from_len = sizeof s->from;
    RT_AWAIT(&s->co, note_pending(rt_udp_recv_from(s->io, cx, s->buf, s->len, &s->from,
                                                   &s->from_len, &s->result),
                                  &udp_pending));
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
    ssize_t result;
    unsigned char buf[64];
};

static rt_poll udp_sender_poll(void *state, rt_context *cx, void **out)
{
    struct udp_sender *s = state;
    RT_CORO_BEGIN(&s->co);
    if (s->to != NULL)
        RT_AWAIT(&s->co, rt_udp_send_to(s->io, cx, s->buf, s->len, (const struct sockaddr *)s->to,
                                        s->to_len, &s->result));
    else
        RT_AWAIT(&s->co, rt_io_write(s->io, cx, s->buf, s->len, &s->result));
    RT_RETURN(&s->co, out, (intptr_t)s->result);
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
    cr_assert_eq(rt_block_on(rt, udp_sender_poll, NULL, &s, sizeof s, &value), 0);
    return (intptr_t)value;
}

static rt_task *udp_spawn_receiver(rt_runtime *rt, rt_io *io, size_t len)
{
    struct udp_receiver s;
    memset(&s, 0, sizeof s);
    s.io = io;
    s.len = len;
    rt_task *t = NULL;
    cr_assert_eq(RT_SPAWN(rt, udp_receiver_poll, NULL, &s, &t), 0);
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

/* ---- 10,000 concurrent connections
 * ------------------------------------------------------------------ */

#define MANY_CONNS 10000
#define MANY_ROUNDS 3
#define MANY_BATCH 500
#define MANY_MSG 32

/* A gate many tasks wait behind; opening it wakes them all. */
static pthread_mutex_t barrier_mu = PTHREAD_MUTEX_INITIALIZER;
static bool barrier_open;
static rt_waker *barrier_wakers;
static size_t barrier_count;

static bool barrier_pass(rt_context *cx, bool *registered)
{
    pthread_mutex_lock(&barrier_mu);
    bool open = barrier_open;
    if (!open && !*registered) {
        barrier_wakers[barrier_count++] = rt_waker_clone(rt_context_waker(cx));
        *registered = true;
    }
    pthread_mutex_unlock(&barrier_mu);
    return open;
}

static void barrier_release(void)
{
    pthread_mutex_lock(&barrier_mu);
    barrier_open = true;
    size_t n = barrier_count;
    barrier_count = 0;
    pthread_mutex_unlock(&barrier_mu);
    for (size_t i = 0; i < n; i++)
        rt_waker_wake(&barrier_wakers[i]);
}

static atomic_long many_connected;
static atomic_long many_clients_done;
static atomic_long many_servers_done;
static atomic_long many_failures;
static atomic_int many_first_error;
static struct event many_connected_ev = EVENT_INIT;
static struct event many_clients_ev = EVENT_INIT;
static struct event many_servers_ev = EVENT_INIT;
static struct sockaddr_storage many_addr;
static socklen_t many_addr_len;
/* MANY_CONNS, or fewer when RLIMIT_NOFILE cannot be raised that far. */
static long many_target = MANY_CONNS;

static void many_fail(int err)
{
    int zero = 0;
    atomic_compare_exchange_strong(&many_first_error, &zero, err == 0 ? -EIO : err);
    atomic_fetch_add(&many_failures, 1);
}

struct many_server {
    rt_coro co;
    rt_io *conn;
    ssize_t result;
    size_t progress;
    unsigned char buf[MANY_MSG * 2];
};

static rt_poll many_server_poll(void *state, rt_context *cx, void **out)
{
    struct many_server *s = state;
    RT_CORO_BEGIN(&s->co);
    for (;;) {
        RT_AWAIT(&s->co, rt_io_read(s->conn, cx, s->buf, sizeof s->buf, &s->result));
        if (s->result <= 0)
            break;
        s->progress = 0;
        RT_AWAIT(&s->co,
                 rt_io_write_all(s->conn, cx, s->buf, (size_t)s->result, &s->progress, &s->result));
        if (s->result < 0)
            break;
    }
    if (s->result < 0)
        many_fail((int)s->result);
    rt_io_close(s->conn);
    s->conn = NULL;
    if (atomic_fetch_add(&many_servers_done, 1) + 1 == many_target)
        event_signal(&many_servers_ev);
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

static void many_server_drop(void *state)
{
    struct many_server *s = state;
    if (s->conn != NULL)
        rt_io_close(s->conn);
    s->conn = NULL;
}

struct many_acceptor {
    rt_coro co;
    rt_io *listener;
    long accepted;
    int err;
    rt_io *conn;
};

static rt_poll many_acceptor_poll(void *state, rt_context *cx, void **out)
{
    struct many_acceptor *a = state;
    RT_CORO_BEGIN(&a->co);
    while (a->accepted < many_target) {
        RT_AWAIT(&a->co, rt_tcp_accept(a->listener, cx, &a->conn, NULL, NULL, &a->err));
        if (a->err == -ECONNABORTED)
            continue;
        if (a->err != 0) {
            many_fail(a->err);
            RT_RETURN(&a->co, out, (intptr_t)a->err);
        }
        struct many_server s;
        memset(&s, 0, sizeof s);
        s.conn = a->conn;
        a->conn = NULL;
        int rc = RT_SPAWN(NULL, many_server_poll, many_server_drop, &s, NULL);
        if (rc != 0) {
            rt_io_close(s.conn);
            many_fail(rc);
            RT_RETURN(&a->co, out, (intptr_t)rc);
        }
        a->accepted++;
    }
    RT_RETURN(&a->co, out, 0);
    RT_CORO_END(&a->co, out);
}

struct many_client {
    rt_coro co;
    int id;
    int round;
    bool registered;
    bool op_live;
    int err;
    rt_tcp_connect op;
    rt_io *conn;
    size_t progress;
    size_t got;
    ssize_t result;
    unsigned char msg[MANY_MSG];
    unsigned char back[MANY_MSG];
};

static rt_poll many_client_poll(void *state, rt_context *cx, void **out)
{
    struct many_client *c = state;
    RT_CORO_BEGIN(&c->co);
    c->err = rt_tcp_connect_init(&c->op, NULL, 60 * SEC);
    if (c->err != 0)
        goto failed;
    c->op_live = true;
    RT_AWAIT(&c->co, rt_tcp_connect_poll(&c->op, cx, (const struct sockaddr *)&many_addr,
                                         many_addr_len, &c->conn, &c->err));
    rt_tcp_connect_drop(&c->op);
    c->op_live = false;
    if (c->err != 0)
        goto failed;
    for (c->round = 0; c->round < MANY_ROUNDS; c->round++) {
        if (c->round == 1) {
            /* Every connection is open before any goes on. */
            atomic_fetch_add(&many_connected, 1);
            event_signal(&many_connected_ev);
            RT_AWAIT(&c->co, barrier_pass(cx, &c->registered) ? RT_READY : RT_PENDING);
        }
        snprintf((char *)c->msg, sizeof c->msg, "client %05d round %d ..........", c->id, c->round);
        c->progress = 0;
        RT_AWAIT(&c->co, rt_io_write_all(c->conn, cx, c->msg, MANY_MSG, &c->progress, &c->result));
        if (c->result != MANY_MSG) {
            c->err = c->result < 0 ? (int)c->result : -EIO;
            goto failed;
        }
        for (c->got = 0; c->got < MANY_MSG;) {
            RT_AWAIT(&c->co,
                     rt_io_read(c->conn, cx, c->back + c->got, MANY_MSG - c->got, &c->result));
            if (c->result <= 0) {
                c->err = c->result < 0 ? (int)c->result : -EPIPE;
                goto failed;
            }
            c->got += (size_t)c->result;
        }
        if (memcmp(c->msg, c->back, MANY_MSG) != 0) {
            c->err = -EILSEQ;
            goto failed;
        }
    }
    rt_io_close(c->conn);
    c->conn = NULL;
    if (atomic_fetch_add(&many_clients_done, 1) + 1 == many_target)
        event_signal(&many_clients_ev);
    RT_RETURN(&c->co, out, NULL);
failed:
    many_fail(c->err);
    if (c->op_live)
        rt_tcp_connect_drop(&c->op);
    c->op_live = false;
    if (c->conn != NULL)
        rt_io_close(c->conn);
    c->conn = NULL;
    /* Count it anyway so the test thread does not wait for it. */
    if (c->round < 1)
        atomic_fetch_add(&many_connected, 1);
    event_signal(&many_connected_ev);
    if (atomic_fetch_add(&many_clients_done, 1) + 1 == many_target)
        event_signal(&many_clients_ev);
    RT_RETURN(&c->co, out, NULL);
    RT_CORO_END(&c->co, out);
}

static void many_client_drop(void *state)
{
    struct many_client *c = state;
    if (c->op_live)
        rt_tcp_connect_drop(&c->op);
    if (c->conn != NULL)
        rt_io_close(c->conn);
    c->op_live = false;
    c->conn = NULL;
}

/* Waits until at least `target` clients are connected (or failed). */
static bool many_wait_connected(long target, int seconds)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += seconds;
    pthread_mutex_lock(&many_connected_ev.mu);
    while (atomic_load(&many_connected) < target) {
        if (pthread_cond_timedwait(&many_connected_ev.cv, &many_connected_ev.mu, &deadline) ==
            ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&many_connected_ev.mu);
    return atomic_load(&many_connected) >= target;
}

Test(net, ten_thousand_concurrent_connections_echo_through_one_runtime)
{
    /* Two descriptors per connection, plus what the process already has. */
    const rlim_t need = 2 * MANY_CONNS + 500;
    struct rlimit lim;
    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &lim), 0);
    if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < need) {
        /* Only a process with CAP_SYS_RESOURCE may raise the hard limit. */
        struct rlimit raised = {need, need};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
            cr_assert_eq(getrlimit(RLIMIT_NOFILE, &lim), 0);
        } else {
            /* Run as many connections as the hard limit allows, if that is
             * still a meaningful number. */
            many_target = ((long)lim.rlim_max - 200) / 2;
            if (many_target < MANY_CONNS / 2)
                cr_skip("RLIMIT_NOFILE hard limit %llu is far below the %llu descriptors needed",
                        (unsigned long long)lim.rlim_max, (unsigned long long)need);
            cr_log_info("RLIMIT_NOFILE hard limit %llu (< %llu): running %ld connections",
                        (unsigned long long)lim.rlim_max, (unsigned long long)need, many_target);
        }
    }
    lim.rlim_cur = lim.rlim_max;
    cr_assert_eq(setrlimit(RLIMIT_NOFILE, &lim), 0);

    barrier_wakers = calloc((size_t)many_target, sizeof *barrier_wakers);
    cr_assert_not_null(barrier_wakers);
    int before = count_fds();
    rt_runtime *rt = new_runtime(2);
    rt_io *l = listen_loopback(rt, AF_INET, 4096, &many_addr, &many_addr_len);
    struct many_acceptor a;
    memset(&a, 0, sizeof a);
    a.listener = l;
    rt_task *acceptor = NULL;
    cr_assert_eq(RT_SPAWN(rt, many_acceptor_poll, NULL, &a, &acceptor), 0);

    int64_t start = rt_now_ns();
    for (long i = 0; i < many_target; i++) {
        struct many_client c;
        memset(&c, 0, sizeof c);
        c.id = (int)i;
        cr_assert_eq(RT_SPAWN(rt, many_client_poll, many_client_drop, &c, NULL), 0);
        /* In batches, so the SYNs never overflow the listen queue. */
        if ((i + 1) % MANY_BATCH == 0)
            cr_assert(many_wait_connected(i + 1, 60), "only %ld of %ld clients connected",
                      atomic_load(&many_connected), i + 1);
    }
    cr_assert(many_wait_connected(many_target, 60));
    int64_t connected_at = rt_now_ns();
    int open_now = count_fds();
    barrier_release();
    bool clients = event_wait_for_s(&many_clients_ev, 1, 120);
    bool servers = clients && event_wait_for_s(&many_servers_ev, 1, 60);
    int64_t done_at = rt_now_ns();
    cr_log_info("%ld connections: connected in %lld ms, echoed and closed in %lld ms more",
                many_target, (long long)((connected_at - start) / MS),
                (long long)((done_at - connected_at) / MS));
    cr_assert_eq(atomic_load(&many_failures), 0, "%ld connections failed (first: %s)",
                 atomic_load(&many_failures), rt_strerror(atomic_load(&many_first_error)));
    cr_assert(clients, "only %ld of %ld clients finished", atomic_load(&many_clients_done),
              many_target);
    cr_assert(servers, "only %ld of %ld servers finished", atomic_load(&many_servers_done),
              many_target);
    cr_assert_geq(open_now, before + 2 * many_target,
                  "only %d descriptors open with every connection established", open_now - before);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(acceptor, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq((intptr_t)value, 0);
    cr_assert_eq(rt_io_close(l), 0);
    finish_runtime(rt, 0);
    free(barrier_wakers);
    int after = count_fds();
    cr_assert_eq(after, before, "%d descriptors before, %d after", before, after);
}
