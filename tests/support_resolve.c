/* The name-resolution suites' fixtures (support_resolve.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_resolve.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

rt_poll awaiter_poll(void *state, rt_context *cx, void **out)
{
    struct awaiter *a = state;
    if (rt_future_poll(a->op, cx) == RT_PENDING) {
        if (a->pending != NULL)
            event_signal(a->pending);
        return RT_PENDING;
    }
    *out = NULL;
    return RT_READY;
}

void awaiter_drop(void *state)
{
    struct awaiter *a = state;
    rt_future_drop(a->op); /* nothing for a finished one */
    if (a->dropped != NULL)
        event_signal(a->dropped);
}

/* Spawns an awaiter of op and returns once it waits. */
rt_task *start_op(rt_runtime *rt, rt_future *op, struct event *dropped)
{
    static struct event pending = EVENT_INIT;
    unsigned long seen = event_count(&pending);
    struct awaiter a = {op, &pending, dropped};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, awaiter_poll, awaiter_drop, &a, &t), 0);
    cr_assert(event_wait_for(&pending, seen + 1), "the operation never waited");
    return t;
}

/* Runs op to the end in a task. */
void run_op(rt_runtime *rt, rt_future *op)
{
    struct awaiter a = {op, NULL, NULL};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, awaiter_poll, awaiter_drop, &a, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
}

/* A lookup run to the end; the operation is static, so the returned
 * pointer stays valid until the next call. */
rt_resolve *lookup(rt_runtime *rt, const char *host, const char *service, int family,
                   unsigned flags)
{
    static rt_resolve op;
    cr_assert_eq(rt_resolve_init(&op, rt, host, service, family, flags), 0, "%s %s",
                 host ? host : "(null)", service ? service : "(null)");
    run_op(rt, &op.future);
    return &op;
}

rt_runtime *runtime_with_pool(unsigned threads, int64_t shutdown_ns)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.blocking_threads = threads;
    if (shutdown_ns != 0)
        cfg.blocking_shutdown_ns = shutdown_ns;
    return new_runtime_config(&cfg);
}

rt_metrics metrics_of(rt_runtime *rt)
{
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    return m;
}

uint16_t port_of(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)ss)->sin_port);
    return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
}

/* The address as text, for messages. */
const char *text_of(const struct sockaddr_storage *ss, char *buf, size_t len)
{
    const void *bytes = ss->ss_family == AF_INET
                            ? (const void *)&((const struct sockaddr_in *)ss)->sin_addr
                            : (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;
    if (inet_ntop(ss->ss_family, bytes, buf, (socklen_t)len) == NULL)
        snprintf(buf, len, "(family %d)", ss->ss_family);
    return buf;
}

bool is_text(const rt_resolve_addr *a, const char *want)
{
    char buf[INET6_ADDRSTRLEN];
    return strcmp(text_of(&a->addr, buf, sizeof buf), want) == 0;
}

/* Every address is well formed: its family, its length, `port`. */
void check_list(const rt_resolve *op, uint16_t port)
{
    cr_assert_gt(op->result, 0, "%s", rt_resolve_strerror(op->result, op->eai));
    cr_assert_not_null(op->addrs);
    cr_assert_eq(op->addrs->count, (size_t)op->result);
    cr_assert_eq(op->eai, 0);
    for (size_t i = 0; i < op->addrs->count; i++) {
        const rt_resolve_addr *a = &op->addrs->addr[i];
        cr_assert_eq(a->family, a->addr.ss_family);
        cr_assert(a->family == AF_INET || a->family == AF_INET6);
        cr_assert_eq(a->len, a->family == AF_INET ? sizeof(struct sockaddr_in)
                                                  : sizeof(struct sockaddr_in6));
        cr_assert_eq(port_of(&a->addr), port, "address %zu has port %u", i, port_of(&a->addr));
    }
}

/* An entry of a hand-built list. */
rt_resolve_addr entry(const char *ip, uint16_t port)
{
    rt_resolve_addr a;
    memset(&a, 0, sizeof a);
    cr_assert_eq(rt_net_addr(ip, port, &a.addr, &a.len), 0, "%s", ip);
    a.family = a.addr.ss_family;
    return a;
}

/* A TCP socket of the test's own bound to ip, port 0, and listening with
 * `backlog` (< 0: not listening, so that a connection to it is refused).
 * Returns the descriptor; *port is where it is. */
int raw_socket(const char *ip, int backlog, uint16_t *port)
{
    struct sockaddr_storage ss;
    socklen_t len;
    cr_assert_eq(rt_net_addr(ip, 0, &ss, &len), 0);
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    cr_assert_eq(bind(fd, (struct sockaddr *)&ss, len), 0, "bind %s: %s", ip, strerror(errno));
    if (backlog >= 0)
        cr_assert_eq(listen(fd, backlog), 0);
    len = sizeof ss;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
    *port = port_of(&ss);
    return fd;
}

/* A listener nobody accepts from, its backlog filled by one connection
 * (returned in *filler): the kernel drops every later SYN, so a connection
 * attempt to it neither succeeds nor fails. */
int silent_listener(uint16_t *port, int *filler)
{
    int fd = raw_socket("127.0.0.1", 0, port);
    struct sockaddr_storage ss;
    socklen_t len;
    cr_assert_eq(rt_net_addr("127.0.0.1", *port, &ss, &len), 0);
    *filler = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    cr_assert_geq(*filler, 0);
    int rc = connect(*filler, (struct sockaddr *)&ss, len);
    cr_assert(rc == 0 || errno == EINPROGRESS, "connect: %s", strerror(errno));
    struct pollfd p = {*filler, POLLOUT, 0};
    cr_assert_eq(poll(&p, 1, EVENT_DEADLINE_S * 1000), 1, "the filler never connected");
    int err = 0;
    socklen_t el = sizeof err;
    cr_assert_eq(getsockopt(*filler, SOL_SOCKET, SO_ERROR, &err, &el), 0);
    cr_assert_eq(err, 0, "the filler: %s", strerror(err));
    return fd;
}

/* Whether this machine has an IPv6 loopback to listen on. */
bool have_ipv6_loopback(void)
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

/* A blocking job that holds the pool's only thread until `until` is
 * signalled. */
struct event gate_entered = EVENT_INIT;

void *gate_job(void *arg)
{
    event_signal(&gate_entered);
    if (!event_wait_for(arg, 1)) /* no assertion off the test's thread */
        fputs("the gate was never opened\n", stderr);
    return NULL;
}

void *writer_main(void *arg)
{
    struct held *h = arg;
    h->fd = open(h->fifo, O_WRONLY | O_CLOEXEC); /* blocks until a reader opens it */
    event_signal(&h->in);
    return NULL;
}

/* Before the runtime is made (setenv races with getenv in other threads). */
void held_setup(struct held *h)
{
    memset(h, 0, sizeof(*h));
    pthread_mutex_init(&h->in.mu, NULL);
    pthread_cond_init(&h->in.cv, NULL);
    h->fd = -1;
    strcpy(h->dir, "/tmp/asyncrt-resolve-XXXXXX");
    cr_assert_not_null(mkdtemp(h->dir), "mkdtemp: %s", strerror(errno));
    snprintf(h->fifo, sizeof h->fifo, "%s/aliases", h->dir);
    snprintf(h->plain, sizeof h->plain, "%s/empty", h->dir);
    cr_assert_eq(mkfifo(h->fifo, 0600), 0, "mkfifo: %s", strerror(errno));
    int fd = open(h->plain, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(setenv("HOSTALIASES", h->fifo, 1), 0);
    /* The DNS query that follows, once released, gives up within a second
     * or two when no name server answers. */
    cr_assert_eq(setenv("RES_OPTIONS", "timeout:1 attempts:1", 1), 0);
    cr_assert_eq(pthread_create(&h->writer, NULL, writer_main, h), 0);
}

/* True once a lookup is held inside getaddrinfo; false when the C library
 * did not open the FIFO within 10 s (no DNS back end in nsswitch.conf, or
 * a C library that does not read HOSTALIASES). */
bool held_wait(struct held *h)
{
    h->entered = event_wait_for_s(&h->in, 1, 10);
    return h->entered;
}

/* Lets the held lookup go on: the path becomes an empty regular file (for
 * any later open), then the FIFO's writing end closes (end of file for the
 * read in progress). Without a reader, the writer thread is let out. */
void held_release(struct held *h)
{
    if (!h->entered) {
        int r =
            open(h->fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* lets the writer's open return */
        cr_assert_geq(r, 0);
        pthread_join(h->writer, NULL);
        close(r);
    }
    cr_assert_eq(rename(h->plain, h->fifo), 0, "rename: %s", strerror(errno));
    if (h->entered)
        pthread_join(h->writer, NULL);
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
}

void held_cleanup(struct held *h)
{
    unlink(h->fifo);
    cr_assert_eq(rmdir(h->dir), 0, "rmdir %s: %s", h->dir, strerror(errno));
    unsetenv("HOSTALIASES");
    unsetenv("RES_OPTIONS");
}
