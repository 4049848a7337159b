/* What the net suites (test_net_echo.c, test_net_conn.c, test_net_stress.c)
 * share: loopback addresses and listeners, and tasks that read or write once
 * on an rt_io. support_net.c has the functions. */
#ifndef RT_TESTS_SUPPORT_NET_H
#define RT_TESTS_SUPPORT_NET_H

#include "support.h"

#include <netinet/in.h>
#include <sys/socket.h>

/* The loopback address of `family` (AF_INET or AF_INET6) with `port`. */
void loopback(int family, uint16_t port, struct sockaddr_storage *ss, socklen_t *len);

/* The port of an AF_INET or AF_INET6 address, in host order. */
uint16_t port_of(const struct sockaddr_storage *ss);

/* Same family, address and port. */
bool same_endpoint(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

/* A TCP listener of rt on the loopback address of `family`, port 0. */
rt_io *listen_loopback(rt_runtime *rt, int family, int backlog, struct sockaddr_storage *ss,
                       socklen_t *len);

/* What accept_one found: the accept's result, the connection and its peer. */
struct accept_out {
    int err;
    rt_io *conn;
    struct sockaddr_storage peer;
    socklen_t peer_len;
};

/* The task accept_one spawns: one accept on `listener`, its outcome written
 * to *o. Its state begins with its rt_coro: rt_coro_drop drops an accept
 * still waiting. */
struct accept_once {
    rt_coro co;
    rt_io *listener;
    struct accept_out *o;
    rt_tcp_accept a;
};

rt_poll accept_once_poll(void *state, rt_context *cx, void **out);

/* Accepts one connection on `listener` from a task of rt, within 10 s
 * (err -ETIMEDOUT otherwise). */
struct accept_out accept_one(rt_runtime *rt, rt_io *listener);

/* A blocking client socket connected to `ss` (from the test thread), with
 * 10 s send and receive timeouts. */
int raw_connect(const struct sockaddr_storage *ss, socklen_t len);

/* One operation on an rt_io, as a task: read or write once (at most 64
 * bytes), signalling op_pending whenever it waits. wait_op returns its
 * result: the byte count or -errno. */
enum op_kind { OP_READ, OP_WRITE };

extern struct event op_pending;

rt_task *spawn_op(rt_runtime *rt, rt_io *io, enum op_kind kind, const void *data, size_t len);
intptr_t wait_op(rt_task *task);

#endif
