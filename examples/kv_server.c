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
#define _POSIX_C_SOURCE 200809L /* sigwait, pthread_sigmask, strdup */

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
    rt_mutex lock; /* held across no await: a task never waits with it */
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
static rt_notify stop_all;   /* every connection and the acceptor wait on it */

/* ---- One connection --------------------------------------------------------- */

#define LINE_MAX_BYTES 1024

struct conn {
    rt_coro co;
    rt_io *io;
    int64_t idle_ns;
    rt_notified stop; /* initialised once, before the first look at `stopping` */
    rt_sleep idle;    /* the idle timer of the current wait for input */
    rt_mutex_lock lock;
    ssize_t got;
    size_t have;             /* bytes in buf */
    size_t used;             /* bytes of the line being answered, newline included */
    char *cmd, *key, *value; /* its words, in buf (the state never moves) */
    char buf[LINE_MAX_BYTES];
    char reply[LINE_MAX_BYTES + 32];
    const char *goodbye; /* the last line, if the server ends the connection */
    size_t progress;
    ssize_t written;
};

static void conn_drop(void *state)
{
    struct conn *c = state;
    rt_mutex_lock_drop(&c->lock); /* the lock is never held across an await */
    rt_notified_drop(&c->stop);
    rt_sleep_drop(&c->idle);
    rt_io_close(c->io);
}

/* Waits for input, the idle timeout or the stop, whichever comes first:
 * RT_READY with c->got set (> 0 data, 0 end of stream, < 0 an error), or
 * with c->goodbye set. */
static rt_poll conn_wait_input(struct conn *c, rt_context *cx)
{
    if (rt_notified_poll(&c->stop, cx) == RT_READY) {
        c->goodbye = "ERR server shutting down\n";
        return RT_READY;
    }
    if (rt_io_read(c->io, cx, c->buf + c->have, sizeof c->buf - c->have, &c->got) == RT_READY)
        return RT_READY;
    int err = 0;
    if (rt_sleep_poll(&c->idle, cx, &err) == RT_READY) {
        c->goodbye = "ERR idle timeout\n";
        return RT_READY;
    }
    return RT_PENDING;
}

/* Splits the line at the start of buf into c->cmd, c->key and c->value.
 * Returns false, with the error reply in c->reply, for a malformed one. */
static bool conn_parse(struct conn *c)
{
    char *save = NULL;
    c->cmd = strtok_r(c->buf, " ", &save);
    c->key = strtok_r(NULL, " ", &save);
    c->value = strtok_r(NULL, " ", &save);
    char *extra = strtok_r(NULL, " ", &save);
    const char *err = NULL;
    if (c->cmd == NULL)
        err = "empty command";
    else if (strcmp(c->cmd, "SET") != 0 && strcmp(c->cmd, "GET") != 0 && strcmp(c->cmd, "DEL") != 0)
        err = "unknown command";
    else if (c->key == NULL || extra != NULL || (strcmp(c->cmd, "SET") == 0) != (c->value != NULL))
        err = "wrong number of arguments";
    if (err == NULL)
        return true;
    snprintf(c->reply, sizeof c->reply, "ERR %s\n", err);
    return false;
}

static rt_poll conn_poll(void *state, rt_context *cx, void **out)
{
    struct conn *c = state;
    RT_CORO_BEGIN(&c->co);
    rt_notified_init(&c->stop, &stop_all);
    for (;;) {
        /* A whole line in the buffer: answer it. */
        char *nl = memchr(c->buf, '\n', c->have);
        if (nl == NULL) {
            if (c->have == sizeof c->buf) {
                c->goodbye = "ERR line too long\n";
                break;
            }
            if (atomic_load(&stopping)) {
                c->goodbye = "ERR server shutting down\n";
                break;
            }
            rt_sleep_init(&c->idle, NULL, c->idle_ns);
            RT_AWAIT(&c->co, conn_wait_input(c, cx));
            rt_sleep_drop(&c->idle);
            if (c->goodbye != NULL || c->got <= 0)
                break;
            c->have += (size_t)c->got;
            continue;
        }
        *nl = '\0';
        if (nl > c->buf && nl[-1] == '\r')
            nl[-1] = '\0';
        c->used = (size_t)(nl - c->buf) + 1;
        if (conn_parse(c)) {
            rt_mutex_lock_init(&c->lock, &map.lock);
            RT_AWAIT(&c->co, rt_mutex_lock_poll(&c->lock, cx));
            rt_mutex_lock_drop(&c->lock);
            map_apply(c->cmd, c->key, c->value, c->reply, sizeof c->reply);
            rt_mutex_unlock(&map.lock);
        }
        /* Drop the line from the buffer, then send the reply. */
        memmove(c->buf, c->buf + c->used, c->have - c->used);
        c->have -= c->used;
        c->progress = 0;
        RT_AWAIT(&c->co,
                 rt_io_write_all(c->io, cx, c->reply, strlen(c->reply), &c->progress, &c->written));
        if (c->written < 0)
            break;
    }
    if (c->goodbye != NULL) {
        c->progress = 0;
        RT_AWAIT(&c->co, rt_io_write_all(c->io, cx, c->goodbye, strlen(c->goodbye), &c->progress,
                                         &c->written));
    }
    RT_CORO_END(&c->co, out);
}

/* ---- The acceptor ------------------------------------------------------------- */

struct acceptor {
    rt_coro co;
    rt_io *listener;
    int64_t idle_ns;
    rt_group *conns; /* discards results: only open connections take memory */
    rt_notified stop;
    rt_io *conn;
    int err;
    rt_sleep pause; /* backing off when out of descriptors */
    rt_group_wait join;
};

static void acceptor_drop(void *state)
{
    struct acceptor *a = state;
    rt_notified_drop(&a->stop);
    rt_sleep_drop(&a->pause);
    rt_group_wait_drop(&a->join);
    rt_group_free(a->conns);
    rt_io_close(a->listener);
}

/* Accepts a connection, or gives up when the server stops. */
static rt_poll accept_or_stop(struct acceptor *a, rt_context *cx)
{
    if (rt_notified_poll(&a->stop, cx) == RT_READY) {
        a->err = -ESHUTDOWN;
        return RT_READY;
    }
    return rt_tcp_accept(a->listener, cx, &a->conn, NULL, NULL, &a->err);
}

static rt_poll acceptor_poll(void *state, rt_context *cx, void **out)
{
    struct acceptor *a = state;
    RT_CORO_BEGIN(&a->co);
    rt_notified_init(&a->stop, &stop_all);
    while (!atomic_load(&stopping)) {
        RT_AWAIT(&a->co, accept_or_stop(a, cx));
        if (a->err == -ESHUTDOWN)
            break;
        if (a->err == -EMFILE || a->err == -ENFILE) {
            /* The connection stays queued: try again in 100 ms. */
            rt_sleep_init(&a->pause, NULL, 100 * 1000000);
            RT_AWAIT(&a->co, rt_sleep_poll(&a->pause, cx, NULL));
            rt_sleep_drop(&a->pause);
            continue;
        }
        if (a->err < 0)
            continue; /* the peer gave up (-ECONNABORTED...): next one */
        struct conn c = {.io = a->conn, .idle_ns = a->idle_ns};
        if (rt_group_spawn(a->conns, NULL, conn_poll, conn_drop, &c, sizeof c, NULL) < 0)
            rt_io_close(a->conn);
    }
    /* Stop accepting, then let every connection say goodbye and end. */
    rt_io_close(a->listener);
    a->listener = NULL;
    rt_group_join_all_init(&a->join, a->conns, -1);
    RT_AWAIT(&a->co, rt_group_wait_poll(&a->join, cx, NULL, NULL));
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

    /* The stop signals go to sigwait below only: blocked before any thread. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = (unsigned)workers;
    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err < 0) {
        fprintf(stderr, "kv_server: rt_runtime_new: %s\n", rt_strerror(err));
        return 1;
    }
    rt_mutex_init(&map.lock);
    rt_notify_init(&stop_all);

    struct sockaddr_storage addr;
    socklen_t len;
    struct acceptor a = {.idle_ns = (int64_t)idle_ms * 1000000};
    rt_group_options opts;
    rt_group_options_init(&opts);
    opts.discard = 1;
    rt_task *acceptor = NULL;
    const char *what = "rt_group_new_ex";
    err = rt_group_new_ex(rt, &opts, &a.conns);
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
        err = RT_SPAWN(rt, acceptor_poll, acceptor_drop, &a, &acceptor); /* owns both now */
    }
    if (err < 0) {
        fprintf(stderr, "kv_server: %s: %s\n", what, rt_strerror(err));
        rt_io_close(a.listener);
        rt_group_free(a.conns);
        rt_runtime_free(rt);
        return 1;
    }
    printf("listening 127.0.0.1:%u\n", ntohs(((struct sockaddr_in *)&addr)->sin_port));
    fflush(stdout);

    int sig;
    while (sigwait(&stop, &sig) != 0)
        ;
    /* Every connection writes its goodbye and ends; the acceptor waits for
     * them. A connection stuck on a peer that reads nothing is cut off by
     * rt_runtime_free after 10 s. */
    atomic_store(&stopping, true);
    rt_notify_all(&stop_all);
    err = rt_task_wait(acceptor, 10 * 1000000000LL, NULL);
    if (err == -ETIMEDOUT)
        rt_task_detach(acceptor);
    err = rt_runtime_free(rt);
    for (unsigned i = 0; i < MAP_BUCKETS; i++) {
        for (struct entry *e = map.buckets[i], *next; e != NULL; e = next) {
            next = e->next;
            free(e->key);
            free(e->value);
            free(e);
        }
    }
    rt_notify_destroy(&stop_all);
    rt_mutex_destroy(&map.lock);
    if (err < 0) {
        fprintf(stderr, "kv_server: rt_runtime_free: %s\n", rt_strerror(err));
        return 1;
    }
    return 0;
}
