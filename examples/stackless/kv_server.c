/* A line-based key-value server: one task per connection, a shared map
 * behind an async mutex, an idle timeout per connection, and a clean stop on
 * a signal that tells every open connection before it goes.
 *
 *   ./kv_server [--port P] [--workers W] [--idle-ms MS]
 *
 * P 0: any free port; W 0: all CPUs; MS: how long a connection may stay
 * silent (default 30000). Prints `listening 127.0.0.1:PORT` once it accepts
 * connections. One command per line, keys and values without spaces:
 *
 *   SET key value  ->  OK
 *   GET key        ->  the value, or NOT_FOUND
 *   DEL key        ->  OK, or NOT_FOUND
 *   anything else  ->  ERR <reason>
 *
 * A connection silent for MS milliseconds gets `ERR idle timeout` and is
 * closed. On SIGINT or SIGTERM every open connection gets
 * `ERR server shutting down`, and the server exits with status 0. */
#define _POSIX_C_SOURCE 200809L /* strtok_r, strdup, pthread_sigmask */

#include <asyncrt.h>

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- The map: string keys and values, guarded by an async mutex ---------- */

#define MAP_BUCKETS 1024

struct entry {
    struct entry *next;
    char *key;
    char *value;
};

static struct {
    rt_mutex *lock; /* held across no await: a task never waits with it */
    struct entry *buckets[MAP_BUCKETS];
} map;

static struct entry **map_slot(const char *key)
{
    unsigned long h = 5381;
    for (const char *p = key; *p; p++)
        h = h * 33 + (unsigned char)*p;
    struct entry **e = &map.buckets[h % MAP_BUCKETS];
    while (*e != NULL && strcmp((*e)->key, key) != 0)
        e = &(*e)->next;
    return e;
}

/* Runs one parsed command against the map (the caller holds its lock) and
 * writes the reply line into out. */
static void map_apply(char *cmd, char *key, char *value, char *out, size_t size)
{
    struct entry **e = map_slot(key);
    if (strcmp(cmd, "GET") == 0) {
        snprintf(out, size, "%s\n", *e != NULL ? (*e)->value : "NOT_FOUND");
    } else if (strcmp(cmd, "DEL") == 0) {
        struct entry *gone = *e;
        if (gone != NULL) {
            *e = gone->next;
            free(gone->key);
            free(gone->value);
            free(gone);
        }
        snprintf(out, size, "%s\n", gone != NULL ? "OK" : "NOT_FOUND");
    } else { /* SET */
        char *copy = strdup(value);
        if (copy != NULL && *e == NULL) {
            struct entry *n = calloc(1, sizeof *n);
            if (n != NULL && (n->key = strdup(key)) != NULL) {
                *e = n;
            } else {
                free(n);
                free(copy);
                copy = NULL;
            }
        }
        if (copy == NULL) {
            snprintf(out, size, "ERR out of memory\n");
            return;
        }
        free((*e)->value);
        (*e)->value = copy;
        snprintf(out, size, "OK\n");
    }
}

/* ---- Stopping ------------------------------------------------------------ */

static atomic_bool stopping; /* set before stop_all is notified */
static rt_notify *stop_all;  /* every connection and the acceptor wait on it */

/* ---- One connection --------------------------------------------------------- */

#define LINE_MAX_BYTES 1024

/* The coroutine record comes first: rt_coro_cleanup drops whatever the task
 * awaits and unlocks the map if it is aborted while holding it. */
struct conn {
    rt_coro co;
    rt_io *io;
    rt_reader *in;  /* lines of input */
    rt_writer *out; /* replies, gathered until no further command is buffered */
    int64_t idle_ns;
    rt_notified stop;                /* the server is stopping */
    rt_read_until line;              /* the next line, */
    rt_select input;                 /* or the stop, */
    rt_timeout idle;                 /* within the idle time */
    rt_mutex_lock lock;              /* the map */
    rt_writer_write wr;              /* a reply, into `out` */
    rt_writer_flush flush;           /* the replies gathered */
    char *cmd, *key, *value, *extra; /* the words of the line */
    char reply[LINE_MAX_BYTES + 32];
    const char *goodbye; /* the last line, if the server ends the connection */
};

static void conn_drop(void *state)
{
    struct conn *c = state;
    rt_coro_cleanup(&c->co);
    rt_reader_free(c->in);
    rt_writer_free(c->out);
    rt_io_close(c->io);
}

/* Splits a line into words; returns the error reply for a malformed one,
 * NULL for a good one. */
static const char *conn_parse(struct conn *c, char *line)
{
    char *save = NULL;
    c->cmd = strtok_r(line, " ", &save);
    c->key = strtok_r(NULL, " ", &save);
    c->value = strtok_r(NULL, " ", &save);
    c->extra = strtok_r(NULL, " ", &save);
    if (c->cmd == NULL)
        return "ERR empty command\n";
    if (strcmp(c->cmd, "SET") != 0 && strcmp(c->cmd, "GET") != 0 && strcmp(c->cmd, "DEL") != 0)
        return "ERR unknown command\n";
    if (c->key == NULL || c->extra != NULL || (strcmp(c->cmd, "SET") == 0) != (c->value != NULL))
        return "ERR wrong number of arguments\n";
    return NULL;
}

static rt_poll conn_poll(void *state, rt_context *cx, void **out)
{
    struct conn *c = state;
    RT_CORO_BEGIN(&c->co);
    if (rt_reader_new(c->io, LINE_MAX_BYTES, &c->in) < 0 || rt_writer_new(c->io, 0, &c->out) < 0)
        RT_RETURN(&c->co, out, NULL);
    for (;;) {
        rt_notified_init(&c->stop, stop_all); /* before the look at `stopping` */
        if (atomic_load(&stopping)) {
            c->goodbye = "ERR server shutting down\n";
            break;
        }
        rt_read_line_init(&c->line, c->in);
        rt_select_init(&c->input, RT_FUTURES(&c->line.future, &c->stop.future));
        rt_timeout_init(&c->idle, NULL, &c->input.future, c->idle_ns);
        RT_AWAIT(&c->co, cx, &c->idle);
        if (c->idle.result == -ETIMEDOUT)
            c->goodbye = "ERR idle timeout\n";
        else if (c->input.index == 1)
            c->goodbye = "ERR server shutting down\n";
        else if (c->line.result == -EMSGSIZE)
            c->goodbye = "ERR line too long\n";
        if (c->goodbye != NULL || c->line.result <= 0 || c->line.data[c->line.result - 1] != '\n')
            break; /* a goodbye, the end of the stream, an error or a last unfinished line */
        c->line.data[c->line.len] = '\0'; /* over the line ending */
        const char *bad = conn_parse(c, c->line.data);
        if (bad != NULL) {
            snprintf(c->reply, sizeof c->reply, "%s", bad);
        } else {
            rt_mutex_lock_init(&c->lock, map.lock);
            RT_AWAIT_HOLD(&c->co, cx, &c->lock);
            map_apply(c->cmd, c->key, c->value, c->reply, sizeof c->reply);
            RT_RELEASE(&c->co, &c->lock);
        }
        rt_writer_write_init(&c->wr, c->out, c->reply, strlen(c->reply));
        RT_AWAIT(&c->co, cx, &c->wr);
        if (c->wr.result < 0)
            break;
        /* Pipelined commands: answer every complete one already read, then
         * send the replies together. */
        size_t n;
        const char *rest = rt_reader_peek(c->in, &n);
        if (memchr(rest, '\n', n) != NULL)
            continue;
        rt_writer_flush_init(&c->flush, c->out);
        RT_AWAIT(&c->co, cx, &c->flush);
        if (c->flush.result < 0)
            break;
    }
    if (c->goodbye != NULL) {
        rt_writer_write_init(&c->wr, c->out, c->goodbye, strlen(c->goodbye));
        RT_AWAIT(&c->co, cx, &c->wr);
    }
    rt_writer_flush_init(&c->flush, c->out); /* what is left, goodbye included */
    RT_AWAIT(&c->co, cx, &c->flush);
    RT_CORO_END(&c->co, out);
}

/* ---- The acceptor ------------------------------------------------------------- */

struct acceptor {
    rt_coro co;
    rt_io *listener;
    int64_t idle_ns;
    rt_group *conns;        /* discards results: only open connections take memory */
    rt_signal *intr, *term; /* the stop signals, listened for from main on */
    rt_signal_recv on_intr, on_term;
    rt_tcp_accept accept;
    rt_select next; /* a connection or a stop signal */
    rt_sleep pause; /* backing off when out of descriptors */
    rt_group_join join;
    rt_timeout grace; /* for the goodbyes */
};

static void acceptor_drop(void *state)
{
    struct acceptor *a = state;
    rt_coro_cleanup(&a->co);
    rt_group_free(a->conns); /* cancels connections still open */
    rt_io_close(a->listener);
    rt_signal_free(a->intr);
    rt_signal_free(a->term);
}

static rt_poll acceptor_poll(void *state, rt_context *cx, void **out)
{
    struct acceptor *a = state;
    RT_CORO_BEGIN(&a->co);
    for (;;) {
        rt_tcp_accept_init(&a->accept, a->listener);
        rt_signal_recv_init(&a->on_intr, a->intr);
        rt_signal_recv_init(&a->on_term, a->term);
        rt_select_init(&a->next,
                       RT_FUTURES(&a->accept.future, &a->on_intr.future, &a->on_term.future));
        RT_AWAIT(&a->co, cx, &a->next);
        if (a->next.index > 0)
            break;
        if (a->accept.result == -EMFILE || a->accept.result == -ENFILE) {
            /* The connection stays queued: try again in 100 ms. */
            rt_sleep_init(&a->pause, NULL, RT_MS(100));
            RT_AWAIT(&a->co, cx, &a->pause);
        } else if (a->accept.result == 0) {
            struct conn c = {.io = a->accept.conn, .idle_ns = a->idle_ns};
            if (rt_group_spawn(a->conns, NULL, conn_poll, conn_drop, &c, sizeof c, NULL) < 0)
                rt_io_close(c.io);
        } /* else the peer gave up (-ECONNABORTED...): next one */
    }
    /* Stop accepting, then let every connection say goodbye and end; one
     * stuck on a peer that reads nothing is cut off after 10 s. */
    rt_io_close(a->listener);
    a->listener = NULL;
    atomic_store(&stopping, true);
    rt_notify_all(stop_all);
    rt_group_join_all_init(&a->join, a->conns);
    rt_timeout_init(&a->grace, NULL, &a->join.future, RT_SEC(10));
    RT_AWAIT(&a->co, cx, &a->grace);
    RT_CORO_END(&a->co, out);
}

/* ---- main ------------------------------------------------------------------------ */

static _Noreturn void usage(const char *why, const char *what)
{
    fprintf(stderr, "kv_server: %s%s\nusage: kv_server [--port P] [--workers W] [--idle-ms MS]\n",
            why, what);
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
    unsigned long port = 0, workers = 0, idle_ms = 30000;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            port = parse_flag("--port", argv[i + 1], 65535);
        else if (strcmp(argv[i], "--workers") == 0)
            workers = parse_flag("--workers", argv[i + 1], RT_MAX_WORKERS);
        else if (strcmp(argv[i], "--idle-ms") == 0)
            idle_ms = parse_flag("--idle-ms", argv[i + 1], 24ul * 3600 * 1000);
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
        fprintf(stderr, "kv_server: rt_runtime_new: %s\n", rt_strerror(err));
        return 1;
    }

    struct sockaddr_storage addr;
    socklen_t len;
    struct acceptor a = {.idle_ns = (int64_t)idle_ms * 1000000};
    rt_group_options opts;
    rt_group_options_init(&opts);
    opts.discard = 1;
    rt_task *acceptor = NULL;
    const char *what = "rt_mutex_new";
    err = rt_mutex_new(&map.lock);
    if (err == 0) {
        what = "rt_notify_new";
        err = rt_notify_new(&stop_all);
    }
    if (err == 0) {
        what = "rt_signal_new";
        err = rt_signal_new(rt, SIGINT, &a.intr);
    }
    if (err == 0)
        err = rt_signal_new(rt, SIGTERM, &a.term);
    if (err == 0) {
        what = "rt_group_new_ex";
        err = rt_group_new_ex(rt, &opts, &a.conns);
    }
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
        err = RT_SPAWN_STATE(rt, acceptor_poll, acceptor_drop, &a, &acceptor); /* owns both now */
    }
    if (err < 0) {
        fprintf(stderr, "kv_server: %s: %s\n", what, rt_strerror(err));
        rt_io_close(a.listener);
        rt_group_free(a.conns);
        rt_signal_free(a.intr);
        rt_signal_free(a.term);
        rt_runtime_free(rt);
        return 1;
    }
    printf("listening 127.0.0.1:%u\n", ntohs(((struct sockaddr_in *)&addr)->sin_port));
    fflush(stdout);

    /* Until SIGINT or SIGTERM has stopped the acceptor and its connections. */
    rt_task_wait(acceptor, -1, NULL, NULL);
    err = rt_runtime_free(rt);
    for (unsigned i = 0; i < MAP_BUCKETS; i++) {
        for (struct entry *e = map.buckets[i], *next; e != NULL; e = next) {
            next = e->next;
            free(e->key);
            free(e->value);
            free(e);
        }
    }
    rt_notify_drop(stop_all);
    rt_mutex_drop(map.lock);
    if (err < 0) {
        fprintf(stderr, "kv_server: rt_runtime_free: %s\n", rt_strerror(err));
        return 1;
    }
    return 0;
}
