/* asyncrt-soak: a long mixed workload on one runtime that fails when resources leak.
 *
 *   asyncrt-soak [--seconds N] [--workers W] [--connections C] [--seed S]
 *
 * A TCP server and C client connections run in this process, on one runtime,
 * over 127.0.0.1 only (the listener takes port 0). Each client slot is a driver
 * task that runs one client connection after another. A client connects, does
 * 1 to 16 exchanges of 1 byte to 64 KiB (log-uniform sizes), checks every
 * echoed byte and the server's checksum, and closes. All the while:
 * - sleeps: clients nap between exchanges, the server answers late now and then;
 * - timeouts: 1 exchange in 8 reads its answer under a 1-30 ms rt_timeout, and
 *   gives the connection up when it fires;
 * - aborts: 1 connection in 16, client side and server side independently, is
 *   aborted if its task still runs 0-30 ms after it started;
 * - channels: the server hands each request through a bounded rt_chan to one
 *   of four processor tasks, which checksum it and send it back on an
 *   rt_oneshot.
 * Once per second the main thread prints RSS, open descriptors, alive tasks
 * (rt_metrics) and the exchanges and connections completed in that second.
 *
 * The verdict is FAIL (exit 1) on a wrong byte, an unexpected error from the
 * runtime, an exchange stuck for 10 s, no exchange at all for 5 s in a row, more
 * connections closed by the server than server tasks aborted, a shutdown that
 * hangs, a task alive after every task was joined, or a descriptor still open
 * after rt_runtime_free. For growth, the first max(5, n / 5) of the n samples
 * are a warm-up (allocator arenas, socket buffers and task memory fill up then)
 * and are ignored; the rest is cut in thirds, and the maximum of the last third
 * is compared with the maximum of the first third, since maxima over several
 * seconds are stable where single samples of a churning workload are not:
 * - RSS fails above first * 1.10 + 8 MiB;
 * - descriptors fail above first + max(16, C / 2), or at any sample after the
 *   warm-up above (descriptors before the runtime) + 3 C + 32, since a
 *   connection holds at most a client and a server socket, the runtime a few;
 * - alive tasks fail above first + max(16, C / 2), or above 4 C + 32 (per slot
 *   a driver, a client, a server task and maybe a guard, plus five others).
 * Runs with fewer than two samples per third skip the growth verdict. Under
 * AddressSanitizer the RSS part is skipped, since its quarantine of freed
 * memory makes RSS climb for minutes; descriptors and tasks are still judged.
 * The hidden flag `--inject-leak rss|fd|task` leaks 64 KiB of touched memory
 * per 16 client connections, or one descriptor or one never-finishing detached
 * task per 64 connections, to prove that the verdict catches each kind: at the
 * 1000 to 3000 connections per second of a 2-core machine, the growth over a
 * 30 s run is then many times the tolerance. */
#define _GNU_SOURCE

#include <asyncrt.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define SOAK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOAK_ASAN 1
#endif
#endif

#define PROG "asyncrt-soak"
#define MS 1000000LL
#define HDR 8          /* length, then sequence (request) or checksum (answer) */
#define MSG_MAX 65536u /* largest payload */
#define PROCESSORS 4
#define STUCK_NS (10000 * MS) /* an exchange or a connect this slow is a hang */
#define STALL_S 5             /* seconds without an exchange that make a hang */
#define LEAK_BYTES (64 * 1024)
#define LEAK_RSS_EVERY 16 /* connections per leaked block */
#define LEAK_EVERY 64     /* connections per leaked descriptor or task */

enum leak { LEAK_NONE, LEAK_RSS, LEAK_FD, LEAK_TASK };

static struct {
    unsigned seconds, workers, conns;
    uint64_t seed;
    enum leak leak;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    rt_chan *proc[PROCESSORS]; /* to the processors; the acceptor holds a sender */
    atomic_bool stopping;      /* no new connection, no new exchange */
    _Atomic uint64_t started;  /* client connections started */
} g = {.seconds = 30, .workers = 2, .conns = 64, .seed = 1};

/* Counters, written by tasks and read by the main thread. */
static struct {
    _Atomic uint64_t exchanges, conns, client_aborts, server_aborts, timeouts, peer_closed,
        data_errors, errors, stuck, leaked_tasks;
} cnt;

static void *volatile leak_sink; /* keeps the compiler from eliding the leak */

/* Only the first few messages: a broken run would flood stderr otherwise. */
static void note_error(const char *what, long err)
{
    if (cnt.errors++ < 20)
        fprintf(stderr, PROG ": error: %s: %s\n", what, rt_strerror((int)err));
}

static void data_error(const char *what, size_t len)
{
    if (cnt.data_errors++ < 20)
        fprintf(stderr, PROG ": wrong data: %s (message of %zu bytes)\n", what, len);
}

/* splitmix64: cheap, and good enough to pick sizes and fill payloads. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return rng_next(s) % n;
}

static void fill(uint8_t *p, size_t n, uint64_t *s)
{
    for (; n > 0; p += 8, n = n > 8 ? n - 8 : 0) {
        uint64_t v = rng_next(s);
        memcpy(p, &v, n < 8 ? n : 8);
    }
}

static uint32_t checksum(const uint8_t *p, size_t n) /* FNV-1a */
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Arms *s for up to max_ms - 1 ms, one time in `odds`: the occasional nap. */
static bool maybe_nap(rt_sleep *s, uint64_t *rng, uint64_t odds, uint64_t max_ms)
{
    return rng_below(rng, odds) == 0 &&
           rt_sleep_init(s, NULL, (int64_t)rng_below(rng, max_ms) * MS) == 0;
}

/* ---- Futures shared by both sides ----------------------------------------- */

/* Reads exactly `want` bytes: an operation of its own, so that an rt_timeout
 * can wrap it. result: want, 0 at an early end of stream, or -errno. */
struct reader {
    RT_FUTURE_HEADER;
    rt_io_read rd; /* the read in progress */
    rt_io *io;
    uint8_t *buf;
    size_t want, got;
};

static rt_poll reader_poll(rt_future *f, rt_context *cx)
{
    struct reader *r = (struct reader *)f;
    while (r->got < r->want) {
        rt_io_read_init(&r->rd, r->io, r->buf + r->got, r->want - r->got);
        if (RT_POLL_OP(&r->rd, cx) == RT_PENDING)
            return RT_PENDING;
        if (r->rd.result <= 0)
            return rt_future_finish(f, r->rd.result);
        r->got += (size_t)r->rd.result;
    }
    return rt_future_finish(f, (int64_t)r->got);
}

static void reader_drop(rt_future *f)
{
    RT_DROP(&((struct reader *)f)->rd); /* gives back the waker it left in the rt_io */
}

static const rt_future_vtable reader_vtable = {reader_poll, reader_drop, NULL};

static void reader_init(struct reader *r, rt_io *io, uint8_t *buf, size_t want)
{
    *r = (struct reader){.future.vtable = &reader_vtable, .io = io, .buf = buf, .want = want};
}

/* Joins a task, aborting it first if it still runs when the deadline passes:
 * how drivers abort clients, and the acceptor server tasks, mid-exchange. The
 * deadline is a sleep beside the join rather than an rt_timeout around it,
 * since a timeout would drop the join, detaching the child instead of
 * aborting it and seeing it end. */
struct guard {
    rt_task_join join; /* owns the child's handle; result 0, or -ECANCELED when aborted */
    rt_sleep limit;    /* when to abort it */
    bool limited;
    _Atomic uint64_t *aborts; /* counts the children that were cancelled */
};

static void guard_init(struct guard *gd, rt_task *child, int64_t abort_after_ns,
                       _Atomic uint64_t *aborts)
{
    *gd = (struct guard){.aborts = aborts};
    rt_task_join_init(&gd->join, child);
    gd->limited = abort_after_ns >= 0 && rt_sleep_init(&gd->limit, NULL, abort_after_ns) == 0;
}

static rt_poll guard_poll(void *state, rt_context *cx, void **out)
{
    struct guard *gd = state;
    while (RT_POLL_OP(&gd->join, cx) == RT_PENDING) {
        if (!gd->limited || RT_POLL_OP(&gd->limit, cx) == RT_PENDING)
            return RT_PENDING;
        gd->limited = false;
        rt_task_cancel(gd->join.task); /* too slow: cancel it wherever it is */
    }
    RT_DROP(&gd->limit); /* the child ended in time: cancel the timer */
    gd->limited = false;
    if (gd->join.result == -ECANCELED)
        ++*gd->aborts;
    *out = NULL;
    return RT_READY;
}

static void guard_drop(void *state)
{
    struct guard *gd = state;
    RT_DROP(&gd->limit);
    rt_task_cancel(gd->join.task); /* NULL once the join finished: a no-op */
    RT_DROP(&gd->join);            /* detaches the handle if still held */
}

/* 1 connection in 16 is aborted if it still runs after 0-30 ms; -1: never. */
static int64_t abort_after(uint64_t *rng)
{
    return rng_below(rng, 16) == 0 ? (int64_t)rng_below(rng, 30) * MS : -1;
}

/* ---- Server: processors, connections, acceptor ---------------------------- */

/* A request on its way through a processor; until it is sent back, it owns
 * the sending side of the oneshot that brings it back. */
struct job {
    rt_oneshot *reply;
    size_t len;
    uint8_t data[]; /* HDR + len */
};

static void job_free(struct job *j)
{
    if (j != NULL) {
        rt_oneshot_sender_drop(j->reply);
        free(j);
    }
}

static void job_dispose(void *value, void *arg)
{
    (void)arg;
    job_free(value);
}

struct processor {
    rt_coro co;
    rt_chan *ch; /* the receiver */
    rt_chan_recv recv;
};

static void processor_drop(void *state)
{
    struct processor *p = state;
    RT_DROP(&p->recv);
    rt_chan_receiver_drop(p->ch, job_dispose, NULL);
}

static rt_poll processor_poll(void *state, rt_context *cx, void **out)
{
    struct processor *p = state;
    RT_CORO_BEGIN(&p->co);
    for (;;) {
        rt_chan_recv_init(&p->recv, p->ch);
        RT_AWAIT(&p->co, cx, &p->recv);
        if (p->recv.result != 0)
            break; /* -EPIPE: every server connection and the acceptor are gone */
        struct job *j = p->recv.value;
        rt_oneshot *reply = j->reply;
        uint32_t sum = checksum(j->data + HDR, j->len);
        memcpy(j->data + 4, &sum, 4);
        j->reply = NULL;
        if (rt_oneshot_send(reply, j) < 0)
            job_free(j); /* the connection was aborted meanwhile */
    }
    RT_CORO_END(&p->co, out);
}

struct server {
    rt_coro co;
    rt_io *io;
    rt_chan *ch; /* one sender reference, to one processor */
    uint64_t rng;
    uint8_t hdr[HDR];
    struct reader rd;
    struct job *job;   /* owned while not NULL */
    rt_oneshot *reply; /* its receiving side, owned while not NULL */
    rt_oneshot_recv recv;
    rt_chan_send send;
    bool sending; /* send is initialised and not yet awaited to the end */
    rt_sleep delay;
    rt_io_write_all write;
};

static void server_drop(void *state)
{
    struct server *s = state;
    RT_DROP(&s->delay);
    RT_DROP(&s->rd);
    RT_DROP(&s->write);
    RT_DROP(&s->send);
    if (s->sending && s->send.result == 0)
        s->job = NULL; /* the channel took it: the processor frees it */
    RT_DROP(&s->recv);
    if (s->reply != NULL) {
        void *unreceived = NULL;
        rt_oneshot_receiver_drop(s->reply, &unreceived);
        job_free(unreceived);
    }
    job_free(s->job);
    rt_chan_sender_drop(s->ch);
    rt_io_close(s->io);
}

/* A client that closed or reset is how a connection normally ends. */
static bool server_io_ok(int64_t result, const char *what)
{
    if (result < 0 && result != -ECONNRESET && result != -EPIPE)
        note_error(what, result);
    return result > 0;
}

static rt_poll server_poll(void *state, rt_context *cx, void **out)
{
    struct server *s = state;
    RT_CORO_BEGIN(&s->co);
    for (;;) {
        reader_init(&s->rd, s->io, s->hdr, HDR);
        RT_AWAIT(&s->co, cx, &s->rd);
        if (!server_io_ok(s->rd.result, "server: read"))
            break;
        uint32_t len = get32(s->hdr);
        if (len == 0 || len > MSG_MAX) {
            data_error("server: bad request length", len);
            break;
        }
        if ((s->job = malloc(sizeof *s->job + HDR + len)) == NULL) {
            note_error("server: malloc", -ENOMEM);
            break;
        }
        *s->job = (struct job){.len = len};
        memcpy(s->job->data, s->hdr, HDR);
        reader_init(&s->rd, s->io, s->job->data + HDR, len);
        RT_AWAIT(&s->co, cx, &s->rd);
        if (!server_io_ok(s->rd.result, "server: read")) /* an aborted client */
            break;
        int err = rt_oneshot_new(&s->reply);
        if (err < 0) {
            note_error("server: rt_oneshot_new", err);
            break;
        }
        s->job->reply = s->reply;
        rt_chan_send_init(&s->send, s->ch, s->job);
        s->sending = true;
        RT_AWAIT(&s->co, cx, &s->send);
        s->sending = false;
        if (s->send.result != 0) {
            note_error("server: send to a processor", s->send.result);
            break;
        }
        s->job = NULL;
        rt_oneshot_recv_init(&s->recv, s->reply);
        RT_AWAIT(&s->co, cx, &s->recv);
        rt_oneshot_receiver_drop(s->reply, NULL);
        s->reply = NULL;
        if ((s->job = s->recv.value) == NULL) {
            note_error("server: processor's reply", s->recv.result);
            break;
        }
        /* Answer late now and then, so that short client timeouts fire. */
        if (maybe_nap(&s->delay, &s->rng, 16, 50))
            RT_AWAIT(&s->co, cx, &s->delay);
        rt_io_write_all_init(&s->write, s->io, s->job->data, HDR + s->job->len);
        RT_AWAIT(&s->co, cx, &s->write);
        job_free(s->job);
        s->job = NULL;
        if (!server_io_ok(s->write.result, "server: write")) /* a client timed out or aborted */
            break;
    }
    RT_CORO_END(&s->co, out);
}

struct acceptor {
    rt_coro co;
    rt_io *listener;
    rt_tcp_accept accept; /* result, and the connection accepted */
    uint64_t rng;
};

static void acceptor_drop(void *state)
{
    struct acceptor *a = state;
    RT_DROP(&a->accept);
    rt_io_close(a->listener);
    for (int i = 0; i < PROCESSORS; i++)
        rt_chan_sender_drop(g.proc[i]);
}

/* Spawns the task that serves a.accept.conn, and a guard that aborts it when the
 * dice say so; the other server tasks are detached and end on their own. */
static void spawn_server(struct acceptor *a)
{
    struct server s = {.io = a->accept.conn, .ch = g.proc[rng_below(&a->rng, PROCESSORS)]};
    s.rng = rng_next(&a->rng);
    rt_task *h;
    struct guard gd;
    rt_chan_sender_clone(s.ch);
    int err = RT_SPAWN_STATE(NULL, server_poll, server_drop, &s, &h);
    if (err < 0) {
        note_error("rt_spawn (server)", err);
        rt_chan_sender_drop(s.ch);
        rt_io_close(s.io);
        return;
    }
    int64_t after = abort_after(&a->rng);
    if (after < 0) {
        rt_task_drop(h);
        return;
    }
    guard_init(&gd, h, after, &cnt.server_aborts);
    if ((err = RT_SPAWN_STATE(NULL, guard_poll, guard_drop, &gd, NULL)) < 0) {
        note_error("rt_spawn (guard)", err);
        guard_drop(&gd);
    }
}

static rt_poll acceptor_poll(void *state, rt_context *cx, void **out)
{
    struct acceptor *a = state;
    RT_CORO_BEGIN(&a->co);
    for (;;) {
        rt_tcp_accept_init(&a->accept, a->listener);
        RT_AWAIT(&a->co, cx, &a->accept);
        if (a->accept.result == 0)
            spawn_server(a);
        else if (a->accept.result != -ECONNABORTED) /* the main thread stops the run */
            note_error("rt_tcp_accept", a->accept.result);
    }
    RT_CORO_END(&a->co, out);
}

/* ---- Clients and their drivers -------------------------------------------- */

static rt_poll forever_poll(void *state, rt_context *cx, void **out)
{
    (void)state, (void)cx, (void)out;
    return RT_PENDING; /* nothing will ever wake it: a leaked task */
}

static void inject_leak(uint64_t n)
{
    if (g.leak == LEAK_RSS && n % LEAK_RSS_EVERY == 0) {
        void *p = malloc(LEAK_BYTES);
        if (p != NULL)
            memset(p, 0xa5, LEAK_BYTES); /* touched, so that it counts in RSS */
        leak_sink = p;
    } else if (g.leak == LEAK_FD && n % LEAK_EVERY == 0) {
        if (open("/dev/null", O_RDONLY | O_CLOEXEC) < 0)
            note_error("open /dev/null", -errno);
    } else if (g.leak == LEAK_TASK && n % LEAK_EVERY == 0) {
        if (rt_spawn(NULL, forever_poll, NULL, NULL, 0, NULL) == 0)
            cnt.leaked_tasks++;
    }
}

struct client {
    rt_coro co;
    uint64_t rng;
    rt_tcp_connect connect;
    rt_io *io;
    uint8_t *tx, *rx; /* HDR + MSG_MAX each */
    unsigned left;    /* exchanges still to do */
    uint32_t len;
    rt_io_write_all write;
    struct reader rd;
    rt_timeout limit; /* around the connect, then around each answer's read */
    bool short_limit;
    bool failed; /* the exchange in progress has not passed its checks yet */
    rt_sleep nap;
};

static void client_drop(void *state)
{
    struct client *c = state;
    RT_DROP(&c->limit); /* and the connect or read it limits, if unfinished */
    RT_DROP(&c->connect);
    RT_DROP(&c->rd);
    RT_DROP(&c->write);
    RT_DROP(&c->nap);
    rt_io_close(c->io);
    free(c->tx);
    free(c->rx);
}

/* Reports how an exchange went wrong. A server that closed or reset the
 * connection is allowed (server tasks get aborted); the totals are compared
 * at the end. The write's result says whether the request went out; if it
 * did, the limited read's says how the answer went (-ETIMEDOUT, a timer
 * error, or the reader's own result). */
static void client_failed(struct client *c)
{
    bool sent = c->write.result >= 0;
    int64_t res = sent ? c->limit.result : c->write.result;
    if (sent && res == -ETIMEDOUT && c->short_limit)
        cnt.timeouts++; /* the answer may still come: give the connection up */
    else if (sent && res == -ETIMEDOUT)
        cnt.stuck++;
    else if (res == 0 || res == -ECONNRESET || res == -EPIPE)
        cnt.peer_closed++;
    else if (res < 0)
        note_error("client: exchange", res);
    else if (get32(c->rx) != c->len)
        data_error("client: answer of the wrong length", c->len);
    else if (get32(c->rx + 4) != checksum(c->tx + HDR, c->len))
        data_error("client: wrong checksum from the server", c->len);
    else
        data_error("client: echoed bytes differ", c->len);
}

static rt_poll client_poll(void *state, rt_context *cx, void **out)
{
    struct client *c = state;
    RT_CORO_BEGIN(&c->co);
    inject_leak(g.started++);
    c->tx = malloc(HDR + MSG_MAX);
    c->rx = malloc(HDR + MSG_MAX);
    if (c->tx == NULL || c->rx == NULL ||
        rt_tcp_connect_init(&c->connect, NULL, (struct sockaddr *)&g.addr, g.addr_len) < 0 ||
        rt_timeout_init(&c->limit, NULL, &c->connect.future, STUCK_NS) < 0) {
        note_error("client: setup", -ENOMEM);
        RT_RETURN(&c->co, out, NULL);
    }
    RT_AWAIT(&c->co, cx, &c->limit);
    if (c->limit.result < 0) {
        note_error("client: connect", c->limit.result);
        RT_RETURN(&c->co, out, NULL);
    }
    c->io = c->connect.conn;
    rt_tcp_set_nodelay(c->io, rng_below(&c->rng, 2) == 0);
    for (c->left = 1 + (unsigned)rng_below(&c->rng, 16); c->left > 0 && !g.stopping; c->left--) {
        if (maybe_nap(&c->nap, &c->rng, 8, 5))
            RT_AWAIT(&c->co, cx, &c->nap);
        c->failed = true;
        c->len = 1 + (uint32_t)rng_below(&c->rng, (uint64_t)1 << rng_below(&c->rng, 17));
        memcpy(c->tx, &c->len, 4);
        memcpy(c->tx + 4, &c->left, 4);
        fill(c->tx + HDR, c->len, &c->rng);
        rt_io_write_all_init(&c->write, c->io, c->tx, HDR + c->len);
        RT_AWAIT(&c->co, cx, &c->write);
        if (c->write.result < 0)
            break;
        /* 1 answer in 8 gets a short timeout that may fire; the others one so
         * long that firing means a hang. */
        c->short_limit = rng_below(&c->rng, 8) == 0;
        reader_init(&c->rd, c->io, c->rx, HDR + c->len);
        if (rt_timeout_init(&c->limit, NULL, &c->rd.future,
                            c->short_limit ? (int64_t)(1 + rng_below(&c->rng, 30)) * MS
                                           : STUCK_NS) < 0)
            break;
        RT_AWAIT(&c->co, cx, &c->limit);
        /* The reader's result (want bytes when all came), or -ETIMEDOUT. */
        if (c->limit.result <= 0 || get32(c->rx) != c->len ||
            get32(c->rx + 4) != checksum(c->tx + HDR, c->len) ||
            memcmp(c->rx + HDR, c->tx + HDR, c->len) != 0)
            break;
        c->failed = false;
        cnt.exchanges++;
    }
    if (c->failed)
        client_failed(c);
    RT_CORO_END(&c->co, out);
}

/* One client slot: runs connections one after another until the soak stops,
 * aborting a few of them in mid-exchange. */
struct driver {
    rt_coro co;
    uint64_t rng;
    struct guard gd;
    int err;
};

static void driver_drop(void *state)
{
    struct driver *d = state;
    guard_drop(&d->gd);
}

static rt_poll driver_poll(void *state, rt_context *cx, void **out)
{
    struct driver *d = state;
    void *ignored;
    rt_task *child;
    RT_CORO_BEGIN(&d->co);
    while (!g.stopping) {
        struct client c = {.rng = rng_next(&d->rng)};
        if ((d->err = RT_SPAWN_STATE(NULL, client_poll, client_drop, &c, &child)) < 0) {
            note_error("rt_spawn (client)", d->err);
            break;
        }
        guard_init(&d->gd, child, abort_after(&d->rng), &cnt.client_aborts);
        RT_AWAIT_POLL(&d->co, guard_poll(&d->gd, cx, &ignored));
        cnt.conns++;
    }
    RT_CORO_END(&d->co, out);
}

/* ---- Main thread: sampling, shutdown, verdict ------------------------------ */

static char g_reason[256]; /* the first failure */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, PROG ": %s\n", msg);
    if (g_reason[0] == '\0')
        snprintf(g_reason, sizeof g_reason, "%s", msg);
}

static uint64_t rss_kib(void)
{
    unsigned long size = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f != NULL) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
}

static uint64_t open_fds(void)
{
    uint64_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static uint64_t alive_tasks(rt_runtime *rt)
{
    rt_metrics m;
    return rt_metrics_read(rt, &m, sizeof m) == 0 ? m.alive : 0;
}

/* The growth verdict on column k of the samples (described at the top). */
static void judge(const char *what, uint64_t (*v)[3], int k, size_t n, double factor,
                  uint64_t slack, uint64_t bound)
{
    size_t warm = n / 5 > 5 ? n / 5 : 5, third = n > warm ? (n - warm) / 3 : 0;
    uint64_t first = 0, last = 0;
    if (third < 2)
        return;
    for (size_t i = 0; i < third; i++) {
        first = v[warm + i][k] > first ? v[warm + i][k] : first;
        last = v[n - 1 - i][k] > last ? v[n - 1 - i][k] : last;
    }
    uint64_t allowed = (uint64_t)((double)first * factor) + slack;
    if (last > allowed)
        fail("%s grew: max %" PRIu64 " in the first third after warm-up, %" PRIu64
             " in the last (allowed %" PRIu64 ")",
             what, first, last, allowed);
    for (size_t i = warm; i < n; i++)
        if (v[i][k] > bound) {
            fail("%s reached %" PRIu64 " at t=%zu (bound %" PRIu64 ")", what, v[i][k], i + 1,
                 bound);
            break;
        }
}

/* Waits for a top-level task until the deadline, aborting it first if asked
 * to, and anyway once it overstays. */
static void finish(rt_task *h, bool abort_first, int64_t deadline, const char *what)
{
    if (abort_first)
        rt_task_cancel(h);
    int64_t left = deadline - rt_now_ns();
    if (rt_task_wait(h, left > 0 ? left : 0, NULL, NULL) != -ETIMEDOUT)
        return;
    fail("shutdown: %s did not finish in time", what);
    rt_task_cancel(h);
    if (rt_task_wait(h, 5000 * MS, NULL, NULL) == -ETIMEDOUT) {
        fail("shutdown: %s did not finish even when aborted", what);
        rt_task_drop(h);
    }
}

static void on_alarm(int sig)
{
    static const char msg[] = "soak: FAIL watchdog: the run did not end in time\n";
    (void)sig;
    if (write(STDOUT_FILENO, msg, sizeof msg - 1) < 0)
        _exit(1);
    _exit(1);
}

static _Noreturn void usage(const char *why, const char *what)
{
    fprintf(stderr,
            PROG ": %s%s\nusage: " PROG
                 " [--seconds N] [--workers W] [--connections C] [--seed S]\n",
            why, what);
    exit(2);
}

static uint64_t parse_num(const char *flag, const char *value, uint64_t min, uint64_t max)
{
    char *end;
    errno = 0;
    unsigned long long v = value ? strtoull(value, &end, 10) : 0;
    if (!value || errno || end == value || *end || value[0] == '-' || v < min || v > max)
        usage("bad or missing value for ", flag);
    return v;
}

static void parse_args(int argc, char **argv)
{
    for (int i = 1; i < argc; i += 2) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (strcmp(f, "--seconds") == 0)
            g.seconds = (unsigned)parse_num(f, v, 1, 86400);
        else if (strcmp(f, "--workers") == 0)
            g.workers = (unsigned)parse_num(f, v, 0, RT_MAX_WORKERS);
        else if (strcmp(f, "--connections") == 0)
            g.conns = (unsigned)parse_num(f, v, 1, 4096);
        else if (strcmp(f, "--seed") == 0)
            g.seed = parse_num(f, v, 0, UINT64_MAX);
        else if (strcmp(f, "--inject-leak") == 0 && strcmp(v, "rss") == 0)
            g.leak = LEAK_RSS;
        else if (strcmp(f, "--inject-leak") == 0 && strcmp(v, "fd") == 0)
            g.leak = LEAK_FD;
        else if (strcmp(f, "--inject-leak") == 0 && strcmp(v, "task") == 0)
            g.leak = LEAK_TASK;
        else
            usage("unknown or bad argument ", f);
    }
}

static void check(int err, const char *what)
{
    if (err < 0) {
        printf("soak: FAIL setup: %s: %s\n", what, rt_strerror(err));
        exit(1);
    }
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    signal(SIGALRM, on_alarm);
    alarm(g.seconds + 120); /* the shutdown deadlines below add up to less */
    const uint64_t C = g.conns, fds_before = open_fds();
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = g.workers;
    rt_runtime *rt;
    check(rt_runtime_new(&cfg, &rt), "rt_runtime_new");
    uint64_t(*smp)[3] = calloc(g.seconds, sizeof *smp); /* rss_kib, fds, alive_tasks */
    rt_task **drivers = calloc(C, sizeof *drivers), *procs[PROCESSORS], *acceptor;
    check(smp && drivers ? 0 : -ENOMEM, "calloc");

    struct acceptor a = {.rng = g.seed ^ 0xacce};
    check(rt_net_addr("127.0.0.1", 0, &g.addr, &g.addr_len), "rt_net_addr");
    check(rt_tcp_listen(rt, (struct sockaddr *)&g.addr, g.addr_len, 1024, RT_NET_REUSEADDR,
                        &a.listener),
          "rt_tcp_listen");
    check(rt_net_local_addr(a.listener, &g.addr, &g.addr_len), "rt_net_local_addr");
    for (int i = 0; i < PROCESSORS; i++) {
        check(rt_chan_new(16, &g.proc[i]), "rt_chan_new");
        struct processor p = {.ch = g.proc[i]};
        check(RT_SPAWN_STATE(rt, processor_poll, processor_drop, &p, &procs[i]), "rt_spawn");
    }
    check(RT_SPAWN_STATE(rt, acceptor_poll, acceptor_drop, &a, &acceptor), "rt_spawn");
    for (uint64_t i = 0; i < C; i++) {
        struct driver d = {.rng = g.seed * 0x100000001b3u + i};
        check(RT_SPAWN_STATE(rt, driver_poll, driver_drop, &d, &drivers[i]), "rt_spawn");
    }

    /* Sampling, once per second on the monotonic clock. */
    const int64_t t0 = rt_now_ns();
    uint64_t prev_x = 0, prev_c = 0, max[3] = {0};
    unsigned stall = 0;
    size_t n = 0;
    while (n < g.seconds) {
        int64_t wake = t0 + (int64_t)(n + 1) * 1000 * MS;
        struct timespec ts = {.tv_sec = wake / (1000 * MS), .tv_nsec = wake % (1000 * MS)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        uint64_t x = cnt.exchanges, c = cnt.conns;
        smp[n][0] = rss_kib(), smp[n][1] = open_fds(), smp[n][2] = alive_tasks(rt);
        for (int k = 0; k < 3; k++)
            max[k] = smp[n][k] > max[k] ? smp[n][k] : max[k];
        printf("soak t=%zu rss_kib=%" PRIu64 " fds=%" PRIu64 " alive_tasks=%" PRIu64
               " exchanges=%" PRIu64 " conns=%" PRIu64 "\n",
               n + 1, smp[n][0], smp[n][1], smp[n][2], x - prev_x, c - prev_c);
        fflush(stdout);
        stall = x == prev_x ? stall + 1 : 0;
        prev_x = x, prev_c = c, n++;
        if (stall >= STALL_S) {
            fail("hang: no exchange completed for %u s", stall);
            break;
        }
        if (cnt.data_errors || cnt.errors || cnt.stuck)
            break; /* a failure already: stop early, still shutting down cleanly */
    }

    /* The growth verdict first: it is what this program is for. */
#ifndef SOAK_ASAN
    judge("rss_kib", smp, 0, n, 1.10, 8192, UINT64_MAX);
#else
    fprintf(stderr, PROG ": note: RSS growth is not judged under AddressSanitizer\n");
#endif
    uint64_t slack = C / 2 > 16 ? C / 2 : 16;
    judge("fds", smp, 1, n, 1.0, slack, fds_before + 3 * C + 32);
    judge("alive_tasks", smp, 2, n, 1.0, slack, 4 * C + 32);

    /* Clean shutdown. Clients end after their current exchange, and then
     * their drivers; the acceptor goes once no client connects any more; the
     * server tasks end as their clients close, and the processors once every
     * server task and the acceptor are gone (their channels say -EPIPE). */
    g.stopping = true;
    int64_t deadline = rt_now_ns() + 20000 * MS;
    for (uint64_t i = 0; i < C; i++)
        finish(drivers[i], false, deadline, "a client driver");
    finish(acceptor, true, deadline, "the acceptor");
    for (int i = 0; i < PROCESSORS; i++)
        finish(procs[i], false, deadline, "a processor");
    /* Only the leaked tasks may be left; guards and detached server tasks
     * finish on their own, so they get a moment. */
    uint64_t left = alive_tasks(rt);
    for (int i = 0; i < 500 && left != cnt.leaked_tasks; i++) {
        nanosleep(&(struct timespec){.tv_nsec = 10 * MS}, NULL);
        left = alive_tasks(rt);
    }
    if (left != cnt.leaked_tasks)
        fail("%" PRIu64 " tasks still alive after every task was joined", left);
    int err = rt_runtime_free(rt);
    if (err < 0)
        fail("rt_runtime_free: %s", rt_strerror(err));
    uint64_t fds_after = open_fds();
    if (fds_after != fds_before)
        fail("%" PRIu64 " descriptors open after rt_runtime_free, %" PRIu64 " before the runtime",
             fds_after, fds_before);

    if (cnt.data_errors)
        fail("%" PRIu64 " exchanges saw wrong data", (uint64_t)cnt.data_errors);
    if (cnt.stuck)
        fail("%" PRIu64 " exchanges stuck for 10 s", (uint64_t)cnt.stuck);
    if (cnt.errors)
        fail("%" PRIu64 " unexpected errors", (uint64_t)cnt.errors);
    if (cnt.peer_closed > cnt.server_aborts)
        fail("%" PRIu64 " connections closed by the server, only %" PRIu64 " server tasks aborted",
             (uint64_t)cnt.peer_closed, (uint64_t)cnt.server_aborts);
    if (g.seconds >= 10 && n == g.seconds &&
        !(cnt.timeouts && cnt.client_aborts && cnt.server_aborts))
        fail("the traffic did not exercise timeouts and aborts");

    printf("soak: %s%s duration=%zus connections=%" PRIu64 " exchanges=%" PRIu64
           " client_aborts=%" PRIu64 " server_aborts=%" PRIu64 " timeouts=%" PRIu64
           " max_rss_kib=%" PRIu64 " max_fds=%" PRIu64 " max_alive_tasks=%" PRIu64 "\n",
           g_reason[0] ? "FAIL " : "PASS", g_reason, n, (uint64_t)cnt.conns,
           (uint64_t)cnt.exchanges, (uint64_t)cnt.client_aborts, (uint64_t)cnt.server_aborts,
           (uint64_t)cnt.timeouts, max[0], max[1], max[2]);
    free(smp);
    free(drivers);
    return g_reason[0] ? 1 : 0;
}
