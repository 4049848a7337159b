/* The loopback helpers and one-operation tasks of support_net.h, shared by
 * the net suites. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

void loopback(int family, uint16_t port, struct sockaddr_storage *ss, socklen_t *len)
{
    int rc = rt_net_addr(family == AF_INET6 ? "::1" : "127.0.0.1", port, ss, len);
    cr_assert_eq(rc, 0, "rt_net_addr: %s", rt_strerror(rc));
}

uint16_t port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

bool same_endpoint(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family || port_of(a) != port_of(b))
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

rt_io *listen_loopback(rt_runtime *rt, int family, int backlog, struct sockaddr_storage *ss,
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

struct event op_pending = EVENT_INIT;

struct one_op {
    rt_coro co;
    rt_io *io;
    enum op_kind kind;
    size_t len;
    ssize_t result;
    unsigned char buf[64];
    rt_io_read rd;
    rt_io_write wr;
};

/* A read or write holds nothing but the waker it leaves in the rt_io, so the
 * task needs no drop function. */
static rt_poll one_op_poll(void *state, rt_context *cx, void **out)
{
    struct one_op *s = state;
    RT_CORO_BEGIN(&s->co);
    if (s->kind == OP_READ) {
        rt_io_read_init(&s->rd, s->io, s->buf, s->len);
        RT_AWAIT_POLL(&s->co, note_pending(RT_POLL_OP(&s->rd, cx), &op_pending));
        s->result = (ssize_t)s->rd.result;
    } else {
        rt_io_write_init(&s->wr, s->io, s->buf, s->len);
        RT_AWAIT_POLL(&s->co, note_pending(RT_POLL_OP(&s->wr, cx), &op_pending));
        s->result = (ssize_t)s->wr.result;
    }
    RT_RETURN(&s->co, out, (intptr_t)s->result);
    RT_CORO_END(&s->co, out);
}

rt_task *spawn_op(rt_runtime *rt, rt_io *io, enum op_kind kind, const void *data, size_t len)
{
    struct one_op s;
    memset(&s, 0, sizeof s);
    s.io = io;
    s.kind = kind;
    s.len = len;
    if (data != NULL)
        memcpy(s.buf, data, len);
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, one_op_poll, NULL, &s, &task), 0);
    return task;
}

intptr_t wait_op(rt_task *task)
{
    void *value = NULL;
    int rc = task_wait_status(task, WAIT_DEADLINE_NS, &value);
    cr_assert_eq(rc, 0, "the operation never finished: %s", rt_strerror(rc));
    return (intptr_t)value;
}

rt_poll accept_once_poll(void *state, rt_context *cx, void **out)
{
    struct accept_once *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_tcp_accept_init(&s->a, s->listener);
    RT_AWAIT(&s->co, cx, &s->a);
    s->o->err = (int)s->a.result;
    s->o->conn = s->a.conn;
    s->o->peer = s->a.peer;
    s->o->peer_len = s->a.peer_len;
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

struct accept_out accept_one(rt_runtime *rt, rt_io *listener)
{
    struct accept_out o;
    memset(&o, 0, sizeof o);
    o.err = 12345;
    struct accept_once s = {.listener = listener, .o = &o};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, accept_once_poll, rt_coro_drop, &s, &task), 0);
    int rc = task_wait_status(task, 10 * SEC, NULL);
    if (rc == -ETIMEDOUT) {
        rt_task_cancel(task);
        (void)task_wait_status(task, WAIT_DEADLINE_NS, NULL);
        o.err = -ETIMEDOUT;
        return o;
    }
    cr_assert_eq(rc, 0);
    return o;
}

/* A blocking client socket connected to `ss` (from the test thread). */
int raw_connect(const struct sockaddr_storage *ss, socklen_t len)
{
    int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    cr_assert_eq(connect(fd, (const struct sockaddr *)ss, len), 0, "connect: %s", strerror(errno));
    struct timeval tv = {10, 0};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}
