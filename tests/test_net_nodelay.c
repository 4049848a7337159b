/* Black-box tests of the TCP_NODELAY default in asyncrt/net.h, on the
 * loopback interface: connections accepted from rt_tcp_listen, from a
 * listener adopted with rt_io_open and from a listener made with
 * RT_NET_NAGLE, and connections made by rt_tcp_connect. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_net.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(net_nodelay, .timeout = 120, .fini = fail_on_leaks);

/* TCP_NODELAY of a socket: 1 on, 0 off. */
static int nodelay_of(int fd)
{
    int on = -1;
    socklen_t len = sizeof on;
    cr_assert_eq(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, &len), 0, "getsockopt: %s",
                 strerror(errno));
    return on != 0;
}

/* Accepts one connection from `l` and returns its TCP_NODELAY; closes both. */
static int accepted_nodelay(rt_runtime *rt, rt_io *l)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    cr_assert_eq(rt_net_local_addr(l, &ss, &len), 0);
    int client = raw_connect(&ss, len);
    struct accept_out o = accept_one(rt, l);
    cr_assert_eq(o.err, 0, "accept: %s", rt_strerror(o.err));
    int on = nodelay_of(rt_io_fd(o.conn));
    cr_assert_eq(rt_io_close(o.conn), 0);
    close(client);
    return on;
}

Test(net_nodelay, connections_accepted_from_rt_tcp_listen_have_tcp_nodelay_on)
{
    rt_runtime *rt = new_runtime(2);
    for (int family = AF_INET; family != 0; family = family == AF_INET ? AF_INET6 : 0) {
        struct sockaddr_storage ss;
        socklen_t len;
        rt_io *l = listen_loopback(rt, family, 8, &ss, &len);
        cr_assert_eq(accepted_nodelay(rt, l), 1, "family %d: Nagle's algorithm is still on",
                     family);
        cr_assert_eq(rt_io_close(l), 0);
    }
    finish_runtime(rt, 0);
}

Test(net_nodelay, rt_net_nagle_keeps_nagle_on_accepted_connections)
{
    rt_runtime *rt = new_runtime(2);
    struct sockaddr_storage any;
    socklen_t any_len;
    loopback(AF_INET, 0, &any, &any_len);
    rt_io *l = NULL;
    cr_assert_eq(rt_tcp_listen(rt, (struct sockaddr *)&any, any_len, 8, RT_NET_NAGLE, &l), 0);
    cr_assert_eq(accepted_nodelay(rt, l), 0, "RT_NET_NAGLE: TCP_NODELAY was set anyway");
    cr_assert_eq(rt_io_close(l), 0);
    finish_runtime(rt, 0);
}

Test(net_nodelay, connections_accepted_from_an_adopted_listener_have_tcp_nodelay_on)
{
    rt_runtime *rt = new_runtime(2);
    struct sockaddr_storage any;
    socklen_t any_len;
    loopback(AF_INET, 0, &any, &any_len);
    /* A listener made outside the library (socket activation, say). */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&any, any_len), 0);
    cr_assert_eq(listen(fd, 8), 0);
    cr_assert_eq(nodelay_of(fd), 0, "a fresh socket already has TCP_NODELAY");
    rt_io *l = NULL;
    cr_assert_eq(rt_io_open(rt, fd, &l), 0);
    cr_assert_eq(accepted_nodelay(rt, l), 1, "an adopted listener's connection kept Nagle");
    cr_assert_eq(rt_io_close(l), 0);
    finish_runtime(rt, 0);
}

/* Connects to the address it is given and reports the connection's
 * TCP_NODELAY, or the connect's error. */
struct dial {
    rt_coro co;
    struct sockaddr_storage addr;
    socklen_t len;
    rt_tcp_connect op;
};

static rt_poll dial_poll(void *state, rt_context *cx, void **out)
{
    struct dial *d = state;
    RT_CORO_BEGIN(&d->co);
    rt_tcp_connect_init(&d->op, NULL, (struct sockaddr *)&d->addr, d->len);
    RT_AWAIT(&d->co, cx, &d->op);
    if (d->op.result < 0)
        RT_RETURN(&d->co, out, (intptr_t)d->op.result);
    int on = nodelay_of(rt_io_fd(d->op.conn));
    rt_io_close(d->op.conn);
    RT_RETURN(&d->co, out, (intptr_t)on);
    RT_CORO_END(&d->co, out);
}

Test(net_nodelay, rt_tcp_connect_turns_tcp_nodelay_on)
{
    rt_runtime *rt = new_runtime(2);
    struct dial d;
    memset(&d, 0, sizeof d);
    rt_io *l = listen_loopback(rt, AF_INET, 8, &d.addr, &d.len);
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, dial_poll, rt_coro_drop, &d, sizeof d, &value), 0);
    cr_assert_eq((intptr_t)value, 1, "the connection's TCP_NODELAY: %ld", (long)(intptr_t)value);
    struct accept_out o = accept_one(rt, l); /* the server's end of it */
    cr_assert_eq(o.err, 0);
    cr_assert_eq(rt_io_close(o.conn), 0);
    cr_assert_eq(rt_io_close(l), 0);
    finish_runtime(rt, 0);
}
