/* An echo server on a Unix domain socket: one task per connection, each a
 * coroutine that reads up to 4 KiB and writes it all back until the peer
 * closes, and a clean stop on SIGINT or SIGTERM through rt_signal. Shows
 * rt_unix_listen, rt_unix_accept and the peer's credentials
 * (rt_unix_peer_cred); the connections are plain rt_io streams.
 *
 *   ./unix_echo --path PATH [--workers W]   (W 0: all CPUs)
 *
 * PATH is a filesystem path, or "@name" for a Linux abstract name (no file).
 * A socket file left at PATH by a server that died is replaced
 * (RT_UNIX_UNLINK_STALE: only a socket file nobody listens on); a live
 * server's, or any other file, makes it fail. Prints `listening PATH` once
 * it accepts connections, then serves until SIGINT or SIGTERM, removes its
 * socket file and exits with status 0. */

#define _POSIX_C_SOURCE 200809L /* pthread_sigmask */

#include <asyncrt.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    rt_unix_accept accept; /* result, and the connection just accepted */
    rt_sleep pause;        /* backing off when out of descriptors */
};

/* Drops the accept or the pause in flight, then closes the listener. */
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
        rt_unix_accept_init(&a->accept, a->listener);
        RT_AWAIT(&a->co, cx, &a->accept);
        if (a->accept.result == -EMFILE || a->accept.result == -ENFILE) {
            /* The connection stays queued: try again in 100 ms. */
            fprintf(stderr, "unix_echo: accept: %s\n", rt_strerror((int)a->accept.result));
            if (rt_sleep_init(&a->pause, NULL, RT_MS(100)) == 0)
                RT_AWAIT(&a->co, cx, &a->pause);
            continue;
        }
        if (a->accept.result < 0)
            continue; /* that connection is gone: next one */

        rt_unix_cred peer;
        if (rt_unix_peer_cred(a->accept.conn, &peer) == 0)
            fprintf(stderr, "unix_echo: connection from pid %ld uid %ld\n", (long)peer.pid,
                    (long)peer.uid);
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
    fprintf(stderr, "unix_echo: %s%s\nusage: unix_echo --path PATH [--workers W]\n", why, what);
    exit(2);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    unsigned long workers = 0;
    for (int i = 1; i < argc; i += 2) {
        const char *value = argv[i + 1];
        if (value == NULL)
            usage("missing value for ", argv[i]);
        if (strcmp(argv[i], "--path") == 0) {
            path = value;
        } else if (strcmp(argv[i], "--workers") == 0) {
            char *end;
            errno = 0;
            workers = strtoul(value, &end, 10);
            if (errno || end == value || *end || value[0] == '-' || workers > RT_MAX_WORKERS)
                usage("bad value for ", argv[i]);
        } else {
            usage("unknown argument ", argv[i]);
        }
    }
    if (path == NULL)
        usage("missing ", "--path");

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

    struct acceptor a = {0};
    struct stop stop = {0};
    const char *what = "rt_signal_new";
    err = rt_signal_new(rt, SIGINT, &stop.intr);
    if (err == 0)
        err = rt_signal_new(rt, SIGTERM, &stop.term);
    if (err == 0) {
        what = "rt_unix_listen";
        err = rt_unix_listen(rt, path, 1024, RT_UNIX_UNLINK_STALE, &a.listener);
    }
    bool made_file = err == 0 && path[0] != '@';
    if (err == 0) {
        what = "rt_spawn";
        /* The acceptor owns the listener from here on. */
        err = RT_SPAWN_STATE(rt, acceptor_poll, acceptor_drop, &a, NULL);
    }
    if (err < 0) {
        fprintf(stderr, "unix_echo: %s %s: %s\n", what, path, rt_strerror(err));
        rt_io_close(a.listener);
        if (made_file)
            unlink(path);
        rt_signal_free(stop.intr);
        rt_signal_free(stop.term);
        rt_runtime_free(rt);
        return 1;
    }
    printf("listening %s\n", path);
    fflush(stdout);

    err = rt_block_on(rt, stop_poll, rt_coro_drop, &stop, sizeof stop, NULL, NULL);
    /* New clients get ENOENT from here on; the ones connected are closed
     * below. */
    if (made_file && unlink(path) < 0)
        perror("unix_echo: unlink");
    rt_signal_free(stop.intr);
    rt_signal_free(stop.term);
    /* Cancels the accept loop and every connection: their drops close them. */
    rt_runtime_free(rt);
    if (err < 0)
        fprintf(stderr, "unix_echo: waiting for a signal: %s\n", rt_strerror(err));
    return err < 0;
}
