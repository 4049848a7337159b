/* A TCP echo server: one task per connection, each a coroutine that reads up
 * to 4 KiB and writes it all back until the peer closes. Shows rt_tcp_listen,
 * rt_tcp_accept, rt_io_read and rt_io_write_all, and a clean stop on SIGINT or
 * SIGTERM through rt_signal.
 *
 *   ./echo_server [--port P] [--workers W]   (P 0: any free port; W 0: all CPUs)
 *
 * Prints `listening 127.0.0.1:PORT` once it accepts connections, then serves
 * until SIGINT or SIGTERM and exits with status 0. */

#define _POSIX_C_SOURCE 200809L /* pthread_sigmask */

#include <asyncrt.h>

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One connection. Everything used across an await lives here. */
struct conn {
    rt_coro co;
    rt_io *io;
    rt_io_read rd;        /* result: bytes read (0: peer closed, < 0: error) */
    rt_io_write_all echo; /* writes them back; keeps its progress across polls */
    char buf[4096];
};

/* Runs once, whether the connection ended or the task was cancelled: drops
 * the operation in flight (if any), then closes the socket. */
static void conn_drop(void *state)
{
    struct conn *c = state;
    rt_coro_cleanup(&c->co);
    rt_io_close(c->io);
}

static rt_poll conn_poll(void *state, rt_context *cx, void **out)
{
    struct conn *c = state;
    RT_CORO_BEGIN(&c->co);
    for (;;) {
        rt_io_read_init(&c->rd, c->io, c->buf, sizeof c->buf);
        RT_AWAIT(&c->co, cx, &c->rd);
        if (c->rd.result <= 0)
            break; /* end of stream or error: drop closes the socket */
        rt_io_write_all_init(&c->echo, c->io, c->buf, (size_t)c->rd.result);
        RT_AWAIT(&c->co, cx, &c->echo);
        if (c->echo.result < 0)
            break;
    }
    RT_CORO_END(&c->co, out);
}

/* The accept loop: a task that owns the listening socket. */
struct acceptor {
    rt_coro co;
    rt_io *listener;
    rt_tcp_accept accept; /* result, and the connection just accepted */
    rt_sleep pause;       /* backing off when out of descriptors */
};

/* Drops the accept or the pause in flight (which cancels its timer), then
 * closes the listening socket. */
static void acceptor_drop(void *state)
{
    struct acceptor *a = state;
    rt_coro_cleanup(&a->co);
    rt_io_close(a->listener);
}

static rt_poll acceptor_poll(void *state, rt_context *cx, void **out)
{
    struct acceptor *a = state;
    RT_CORO_BEGIN(&a->co);
    for (;;) {
        rt_tcp_accept_init(&a->accept, a->listener);
        RT_AWAIT(&a->co, cx, &a->accept);
        if (a->accept.result == -EMFILE || a->accept.result == -ENFILE) {
            /* The connection stays queued: try again in 100 ms. */
            fprintf(stderr, "echo_server: accept: %s\n", rt_strerror((int)a->accept.result));
            if (rt_sleep_init(&a->pause, NULL, RT_MS(100)) == 0)
                RT_AWAIT(&a->co, cx, &a->pause);
            continue;
        }
        if (a->accept.result < 0)
            continue; /* the peer gave up (-ECONNABORTED...): next one */

        struct conn c = {.io = a->accept.conn};
        if (RT_SPAWN_STATE(NULL, conn_poll, conn_drop, &c, NULL) < 0)
            rt_io_close(a->accept.conn);
    }
    RT_CORO_END(&a->co, out);
}

/* Waits for SIGINT or SIGTERM. The listeners are made by main before the
 * server announces itself, so a signal sent right after is not missed. */
struct stop {
    rt_coro co;
    rt_signal *intr, *term;
    rt_signal_recv on_intr, on_term;
    rt_select either;
};

static rt_poll stop_poll(void *state, rt_context *cx, void **out)
{
    struct stop *s = state;
    RT_CORO_BEGIN(&s->co);
    rt_signal_recv_init(&s->on_intr, s->intr);
    rt_signal_recv_init(&s->on_term, s->term);
    rt_select_init(&s->either, RT_FUTURES(&s->on_intr.future, &s->on_term.future));
    RT_AWAIT(&s->co, cx, &s->either);
    RT_CORO_END(&s->co, out);
}

static _Noreturn void usage(const char *why, const char *what)
{
    fprintf(stderr, "echo_server: %s%s\nusage: echo_server [--port P] [--workers W]\n", why, what);
    exit(2);
}

static unsigned long parse_flag(const char *flag, const char *value, unsigned long max)
{
    char *end;
    errno = 0;
    unsigned long v = value ? strtoul(value, &end, 10) : 0;
    if (!value || errno || end == value || *end || value[0] == '-' || v > max)
        usage("bad or missing value for ", flag);
    return v;
}

int main(int argc, char **argv)
{
    unsigned long port = 0, workers = 0;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            port = parse_flag("--port", argv[i + 1], 65535);
        else if (strcmp(argv[i], "--workers") == 0)
            workers = parse_flag("--workers", argv[i + 1], RT_MAX_WORKERS);
        else
            usage("unknown argument ", argv[i]);
    }

    /* The stop signals are blocked before any thread exists, so every
     * thread inherits the mask: each arrives through the listeners'
     * signalfd rather than the library's handler, which ThreadSanitizer
     * would hold back while a thread sleeps in a system call it does not
     * intercept (see asyncrt/signal.h). */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = (unsigned)workers;
    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err < 0) {
        fprintf(stderr, "rt_runtime_new: %s\n", rt_strerror(err));
        return 1;
    }

    struct sockaddr_storage addr;
    socklen_t len;
    struct acceptor a = {0};
    struct stop stop = {0};
    const char *what = "rt_signal_new";
    err = rt_signal_new(rt, SIGINT, &stop.intr);
    if (err == 0)
        err = rt_signal_new(rt, SIGTERM, &stop.term);
    if (err == 0) {
        what = "rt_net_addr";
        err = rt_net_addr("127.0.0.1", (uint16_t)port, &addr, &len);
    }
    if (err == 0) {
        what = "rt_tcp_listen";
        err = rt_tcp_listen(rt, (struct sockaddr *)&addr, len, 1024, RT_NET_REUSEADDR, &a.listener);
    }
    if (err == 0) {
        what = "rt_net_local_addr";
        len = sizeof addr;
        err = rt_net_local_addr(a.listener, &addr, &len);
    }
    if (err == 0) {
        what = "rt_spawn";
        /* The acceptor owns the listener from here on. */
        err = RT_SPAWN_STATE(rt, acceptor_poll, acceptor_drop, &a, NULL);
    }
    if (err < 0) {
        fprintf(stderr, "echo_server: %s: %s\n", what, rt_strerror(err));
        rt_io_close(a.listener);
        rt_signal_free(stop.intr);
        rt_signal_free(stop.term);
        rt_runtime_free(rt);
        return 1;
    }
    printf("listening 127.0.0.1:%u\n", ntohs(((struct sockaddr_in *)&addr)->sin_port));
    fflush(stdout);

    err = rt_block_on(rt, stop_poll, rt_coro_drop, &stop, sizeof stop, NULL, NULL);
    rt_signal_free(stop.intr);
    rt_signal_free(stop.term);
    /* Cancels the accept loop and every connection: their drops close them. */
    rt_runtime_free(rt);
    if (err < 0)
        fprintf(stderr, "echo_server: waiting for a signal: %s\n", rt_strerror(err));
    return err < 0;
}
