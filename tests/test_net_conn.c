/* Black-box tests of TCP connections in asyncrt/net.h, on the loopback
 * interface only: connect operations dropped unpolled (alone or inside a
 * timeout) and failed inits, refused connections leaving no descriptor,
 * connect timeouts (an rt_timeout around rt_tcp_connect) against a listener
 * whose backlog is full, an aborted connect closing its half-open socket,
 * peer close / reset / -EPIPE (SIGPIPE keeps its default action, so a raised
 * SIGPIPE kills the test), TCP options and half-close, -EMFILE on accept
 * with the pending connection kept, and an aborted accept losing no
 * connection. */
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

/* ---- connecting ---------------------------------------------------------------------- */

struct connector {
    rt_coro co;
    const struct sockaddr_storage *addr;
    socklen_t addr_len;
    int64_t timeout; /* > 0: an rt_timeout around the connect; else no limit */
    rt_tcp_connect op;
    rt_timeout limit;
    rt_future *awaited; /* &op.future, or &limit.future */
    rt_io *conn;
    int err;
    int64_t start, end;
};

static struct event connector_pending = EVENT_INIT;
static struct connector connector_result;

/* Connects, within the given timeout; stores its final state in
 * connector_result (the connection, if any, is closed). */
static rt_poll connector_poll(void *state, rt_context *cx, void **out)
{
    struct connector *c = state;
    RT_CORO_BEGIN(&c->co);
    c->start = rt_now_ns();
    c->err = rt_tcp_connect_init(&c->op, NULL, (const struct sockaddr *)c->addr, c->addr_len);
    if (c->err != 0)
        RT_RETURN(&c->co, out, (intptr_t)c->err);
    c->awaited = &c->op.future;
    if (c->timeout > 0) {
        c->err = rt_timeout_init(&c->limit, NULL, &c->op.future, c->timeout);
        if (c->err != 0)
            RT_RETURN(&c->co, out, (intptr_t)c->err);
        c->awaited = &c->limit.future;
    }
    c->err = 12345;
    RT_AWAIT_POLL(&c->co, note_pending(rt_future_poll(c->awaited, cx), &connector_pending));
    c->end = rt_now_ns();
    c->err = (int)c->awaited->result;
    c->conn = c->op.conn;
    connector_result = *c;
    if (c->err == 0 && c->conn != NULL) {
        rt_io_close(c->conn);
        c->conn = NULL;
    }
    RT_RETURN(&c->co, out, (intptr_t)c->err);
    RT_CORO_END(&c->co, out);
}

static atomic_int connector_drops;

/* Dropping the timeout drops the connect too; either drop is a no-op on an
 * operation that finished or was never initialised. */
static void connector_drop(void *state)
{
    struct connector *c = state;
    RT_DROP(&c->limit);
    RT_DROP(&c->op);
    if (c->conn != NULL)
        rt_io_close(c->conn);
    c->conn = NULL;
    atomic_fetch_add(&connector_drops, 1);
}

Test(net, connect_drop_accepts_a_zero_initialised_or_never_polled_operation)
{
    rt_tcp_connect op;
    memset(&op, 0, sizeof op);
    RT_DROP(&op);
    rt_runtime *rt = new_runtime(1);
    int before = count_fds();
    struct sockaddr_storage addr;
    socklen_t len;
    loopback(AF_INET, 9, &addr, &len);
    cr_assert_eq(rt_tcp_connect_init(&op, rt, (const struct sockaddr *)&addr, len), 0);
    RT_DROP(&op); /* initialised, never polled */
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_null(op.io);
    /* The same inside a timeout, which the drop of the timeout drops. */
    rt_timeout t;
    cr_assert_eq(rt_tcp_connect_init(&op, rt, (const struct sockaddr *)&addr, len), 0);
    cr_assert_eq(rt_timeout_init(&t, rt, &op.future, 5 * SEC), 0);
    RT_DROP(&t);
    cr_assert_eq(t.result, -ECANCELED);
    cr_assert_eq(op.result, -ECANCELED, "the timeout's drop did not reach the connect");
    cr_assert_eq(count_fds(), before, "a connect dropped unpolled left a descriptor open");

    /* Failed inits leave the operation finished with the error. */
    rt_context cx = noop_context();
    cr_assert_eq(rt_tcp_connect_init(&op, NULL, (const struct sockaddr *)&addr, len), -EINVAL,
                 "NULL runtime outside a task");
    cr_assert_eq(op.result, -EINVAL);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, -EINVAL);
    cr_assert_eq(rt_tcp_connect_init(&op, rt, NULL, len), -EINVAL, "NULL address");
    cr_assert_eq(rt_tcp_connect_init(&op, rt, (const struct sockaddr *)&addr, 0), -EINVAL,
                 "address length 0");
    cr_assert_eq(rt_tcp_connect_init(&op, rt, (const struct sockaddr *)&addr,
                                     (socklen_t)sizeof(struct sockaddr_storage) + 1),
                 -EINVAL, "address longer than a sockaddr_storage");
    cr_assert_eq(op.result, -EINVAL);
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
        c.timeout = i == 0 ? 0 : 5 * SEC; /* without and with a timeout around it */
        void *value = NULL;
        cr_assert_eq(block_on_status(rt, connector_poll, connector_drop, &c, sizeof c, &value), 0);
        cr_assert_eq((intptr_t)value, -ECONNREFUSED, "connect gave %s",
                     rt_strerror((int)(intptr_t)value));
        cr_assert_null(connector_result.conn, "a failed connect handed out a connection");
        cr_assert_null(connector_result.op.io, "op.io is not NULL after the attempt");
        cr_assert_eq(connector_result.op.result, -ECONNREFUSED);
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
    cr_assert_eq(RT_SPAWN_STATE(rt, connector_poll, connector_drop, &c, &task), 0);
    void *value = NULL;
    int rc = task_wait_status(task, 10 * SEC, &value);
    if (rc == -ETIMEDOUT) {
        rt_task_cancel(task);
        (void)task_wait_status(task, WAIT_DEADLINE_NS, NULL);
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
        cr_assert_eq(connector_result.op.result, -ECANCELED,
                     "the timeout did not drop the connect: %lld",
                     (long long)connector_result.op.result);
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
    cr_assert_eq(RT_SPAWN_STATE(rt, connector_poll, connector_drop, &c, &task), 0);
    bool pending = event_wait_for_s(&connector_pending, 1, 10);
    rt_task_cancel(task);
    int rc = task_wait_status(task, WAIT_DEADLINE_NS, NULL);
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
    rt_io_write wr;
    unsigned char buf[1024];
};

/* Writes until the connection reports an error; -ECONNRESET (the peer's
 * RST) may come first, -EPIPE must come eventually. */
static rt_poll pipe_breaker_poll(void *state, rt_context *cx, void **out)
{
    struct pipe_breaker *s = state;
    RT_CORO_BEGIN(&s->co);
    for (s->writes = 0; s->writes < 100000; s->writes++) {
        rt_io_write_init(&s->wr, s->io, s->buf, sizeof s->buf);
        RT_AWAIT(&s->co, cx, &s->wr);
        s->result = (ssize_t)s->wr.result;
        if (s->result == -EPIPE)
            RT_RETURN(&s->co, out, (intptr_t)-EPIPE);
        if (s->result == -ECONNRESET) {
            s->resets++;
            continue;
        }
        if (s->result < 0)
            RT_RETURN(&s->co, out, (intptr_t)s->result);
        RT_CORO_YIELD(&s->co, cx); /* let the RST arrive */
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
    cr_assert_eq(block_on_status(rt, pipe_breaker_poll, rt_coro_drop, s, sizeof *s, &value), 0);
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
    struct accept_once s = {.listener = l, .o = &first};
    rt_task *task = NULL;
    /* rt_coro_drop drops the waiting accept. */
    cr_assert_eq(RT_SPAWN_STATE(rt, announcing_accept_poll, rt_coro_drop, &s, &task), 0);
    cr_assert(event_wait_for(&acceptor_pending, 1));
    rt_task_cancel(task);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    int client = raw_connect(&addr, len);
    struct accept_out o = accept_one(rt, l);
    cr_assert_eq(o.err, 0, "accept after an aborted accept: %s", rt_strerror(o.err));
    cr_assert_null(first.conn, "the aborted accept took a connection");
    cr_assert_eq(rt_io_close(o.conn), 0);
    close(client);
    cr_assert_eq(rt_io_close(l), 0);
    finish_runtime(rt, 0);
}

/* ---- addresses as strings ------------------------------------------------ */

Test(net, parse_reads_ip_colon_port_and_refuses_anything_else)
{
    struct sockaddr_storage addr;
    socklen_t len;
    cr_assert_eq(rt_net_parse("127.0.0.1:8080", &addr, &len), 0);
    cr_assert_eq(addr.ss_family, AF_INET);
    cr_assert_eq(len, sizeof(struct sockaddr_in));
    cr_assert_eq(ntohs(((struct sockaddr_in *)&addr)->sin_port), 8080);
    cr_assert_eq(rt_net_parse("[::1]:65535", &addr, &len), 0);
    cr_assert_eq(addr.ss_family, AF_INET6);
    cr_assert_eq(ntohs(((struct sockaddr_in6 *)&addr)->sin6_port), 65535);
    cr_assert_eq(rt_net_parse("0.0.0.0:0", &addr, &len), 0);
    const char *bad[] = {"127.0.0.1",
                         "127.0.0.1:",
                         ":80",
                         "127.0.0.1:65536",
                         "127.0.0.1:8o",
                         "127.0.0.1:-1",
                         "::1:80",
                         "[::1]80",
                         "[::1:80",
                         "localhost:80",
                         "[]:80",
                         "1.2.3.4.5:80",
                         "127.0.0.1:99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(rt_net_parse(bad[i], &addr, &len), -EINVAL, "%s", bad[i]);
    cr_assert_eq(rt_net_parse(NULL, &addr, &len), -EINVAL);
}

Test(net, listen_addr_listens_where_it_says_and_local_port_tells_the_port)
{
    rt_runtime *rt = new_runtime(1);
    rt_io *listener = (rt_io *)1;
    cr_assert_eq(rt_tcp_listen_addr(rt, "127.0.0.1:65536", &listener), -EINVAL);
    cr_assert_null(listener);
    cr_assert_eq(rt_tcp_listen_addr(rt, "127.0.0.1:0", &listener), 0);
    int port = rt_net_local_port(listener);
    cr_assert_gt(port, 0);
    /* A plain blocking client gets through: it listens on that port. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&to, sizeof to), 0);
    close(fd);
    /* The same port again: taken. */
    char again[32];
    snprintf(again, sizeof again, "127.0.0.1:%d", port);
    rt_io *second = NULL;
    cr_assert_eq(rt_tcp_listen_addr(rt, again, &second), -EADDRINUSE);
    cr_assert_eq(rt_net_local_port(NULL), -EINVAL);
    rt_io_close(listener);
    finish_runtime(rt, 0);
}
