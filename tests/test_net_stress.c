/* Black-box stress test of asyncrt/net.h on the loopback interface: 10,000
 * concurrent echo connections through one runtime, with every descriptor
 * closed at the end. */
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
    rt_io_read rd;
    rt_io_write_all wa;
    unsigned char buf[MANY_MSG * 2];
};

static rt_poll many_server_poll(void *state, rt_context *cx, void **out)
{
    struct many_server *s = state;
    RT_CORO_BEGIN(&s->co);
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
    rt_coro_cleanup(&s->co); /* the operation in flight, before its rt_io goes */
    if (s->conn != NULL)
        rt_io_close(s->conn);
    s->conn = NULL;
}

struct many_acceptor {
    rt_coro co;
    rt_io *listener;
    long accepted;
    int err;
    rt_tcp_accept acc;
};

static rt_poll many_acceptor_poll(void *state, rt_context *cx, void **out)
{
    struct many_acceptor *a = state;
    RT_CORO_BEGIN(&a->co);
    while (a->accepted < many_target) {
        rt_tcp_accept_init(&a->acc, a->listener);
        RT_AWAIT(&a->co, cx, &a->acc);
        a->err = (int)a->acc.result;
        if (a->err == -ECONNABORTED)
            continue;
        if (a->err != 0) {
            many_fail(a->err);
            RT_RETURN(&a->co, out, (intptr_t)a->err);
        }
        struct many_server s;
        memset(&s, 0, sizeof s);
        s.conn = a->acc.conn;
        a->acc.conn = NULL;
        int rc = RT_SPAWN_STATE(NULL, many_server_poll, many_server_drop, &s, NULL);
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
    int err;
    rt_tcp_connect op;
    rt_timeout limit; /* on the connect */
    rt_io *conn;
    size_t got;
    ssize_t result;
    rt_io_write_all wa;
    rt_io_read rd;
    unsigned char msg[MANY_MSG];
    unsigned char back[MANY_MSG];
};

static rt_poll many_client_poll(void *state, rt_context *cx, void **out)
{
    struct many_client *c = state;
    RT_CORO_BEGIN(&c->co);
    c->err = rt_tcp_connect_init(&c->op, NULL, (const struct sockaddr *)&many_addr, many_addr_len);
    if (c->err != 0)
        goto failed;
    c->err = rt_timeout_init(&c->limit, NULL, &c->op.future, 60 * SEC);
    if (c->err != 0)
        goto failed;
    RT_AWAIT(&c->co, cx, &c->limit);
    c->err = (int)c->limit.result;
    if (c->err != 0)
        goto failed;
    c->conn = c->op.conn;
    for (c->round = 0; c->round < MANY_ROUNDS; c->round++) {
        if (c->round == 1) {
            /* Every connection is open before any goes on. */
            atomic_fetch_add(&many_connected, 1);
            event_signal(&many_connected_ev);
            RT_AWAIT_POLL(&c->co, barrier_pass(cx, &c->registered) ? RT_READY : RT_PENDING);
        }
        snprintf((char *)c->msg, sizeof c->msg, "client %05d round %d ..........", c->id, c->round);
        rt_io_write_all_init(&c->wa, c->conn, c->msg, MANY_MSG);
        RT_AWAIT(&c->co, cx, &c->wa);
        c->result = (ssize_t)c->wa.result;
        if (c->result != MANY_MSG) {
            c->err = c->result < 0 ? (int)c->result : -EIO;
            goto failed;
        }
        for (c->got = 0; c->got < MANY_MSG;) {
            rt_io_read_init(&c->rd, c->conn, c->back + c->got, MANY_MSG - c->got);
            RT_AWAIT(&c->co, cx, &c->rd);
            c->result = (ssize_t)c->rd.result;
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
    /* No-ops unless the connect was initialised and never awaited. */
    RT_DROP(&c->limit);
    RT_DROP(&c->op);
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
    /* The operation in flight (a pending connect closes its half-open
     * socket), before the connection goes. */
    rt_coro_cleanup(&c->co);
    RT_DROP(&c->op);
    if (c->conn != NULL)
        rt_io_close(c->conn);
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
    cr_assert_eq(RT_SPAWN_STATE(rt, many_acceptor_poll, rt_coro_drop, &a, &acceptor), 0);

    int64_t start = rt_now_ns();
    for (long i = 0; i < many_target; i++) {
        struct many_client c;
        memset(&c, 0, sizeof c);
        c.id = (int)i;
        cr_assert_eq(RT_SPAWN_STATE(rt, many_client_poll, many_client_drop, &c, NULL), 0);
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
    cr_assert_eq(task_wait_status(acceptor, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq((intptr_t)value, 0);
    cr_assert_eq(rt_io_close(l), 0);
    finish_runtime(rt, 0);
    free(barrier_wakers);
    int after = count_fds();
    cr_assert_eq(after, before, "%d descriptors before, %d after", before, after);
}
