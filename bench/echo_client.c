/* asyncrt-echo-client: the load generator of the tcp_echo workload
 * (docs/benchmarks.md), a plain C program that knows nothing of asyncrt.
 *
 *   asyncrt-echo-client HOST PORT CONNS MSGS SIZE [THREADS]
 *
 * Opens CONNS TCP connections (TCP_NODELAY) to HOST:PORT, a loopback address.
 * Each connection then does MSGS sequential round trips: write one SIZE-byte
 * message, read until SIZE bytes have come back, compare them with what was
 * sent, start the next. Each message's bytes depend on the connection and the
 * message number, so a byte from a wrong connection or an earlier message is
 * caught. Prints one line on stdout:
 *
 *   echo conns=C msgs=M size=S total_s=<x> rtt_p50_us=<x> rtt_p99_us=<x>
 *        rtt_max_us=<x> us_per_rt=<x>
 *
 * total_s: wall time from the start of the first timed round trip to the end
 * of the last; us_per_rt = total_s / (C*M) in microseconds. A round trip's
 * time runs from just before its first write to the read of its last byte
 * (CLOCK_MONOTONIC); percentiles are nearest-rank over all C*M of them.
 * Exits 1 on any error, a mismatch or 10 s without progress; 2 on bad usage.
 *
 * Kept cheap so that it measures the server, not itself:
 * - THREADS threads (default: min(CONNS, online CPUs); on 2 CPUs one thread
 *   alone was the bottleneck, 1.5x slower than two), each owning every
 *   THREADS-th connection through its own epoll instance: nothing shared on
 *   the hot path, and one epoll_wait serves a batch of connections;
 * - per round trip, one send() and usually one recv(); EPOLLOUT is asked for
 *   only while a message is partly written;
 * - nothing allocated once the clock runs;
 * - each connection first does one untimed round trip, so that the server has
 *   accepted every connection before the clock starts. */
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROG "asyncrt-echo-client"
#define STALL_MS 10000 /* no progress for this long is an error */

struct conn {
    int fd;
    unsigned id;
    uint64_t seq;       /* number of the message in flight (0: the untimed one) */
    uint64_t remaining; /* timed round trips not yet finished */
    size_t sent, got;   /* bytes of the current message written / read back */
    bool want_out;      /* EPOLLOUT requested */
    uint64_t t0;        /* when the current message's first write began */
    uint64_t *rtt;      /* this connection's MSGS slots in the RTT array */
    unsigned char *tx, *rx;
};

struct worker {
    pthread_t thread;
    struct conn **conns;
    unsigned n_conns;
    int ep;
};

static size_t g_size;
static uint64_t g_msgs;
static pthread_barrier_t g_start;

static _Noreturn void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t parse_count(const char *what, const char *text, uint64_t min, uint64_t max)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text || *end || text[0] == '-' || v < min || v > max) {
        fprintf(stderr,
                PROG ": %s must be an integer from %" PRIu64 " to %" PRIu64 ", not '%s'\n"
                     "usage: " PROG " HOST PORT CONNS MSGS SIZE [THREADS]\n",
                what, min, max, text);
        exit(2);
    }
    return v;
}

/* The bytes of message `seq` on connection `id`. */
static void fill_message(struct conn *c)
{
    uint64_t x = ((c->seq + 1) * 0x9e3779b97f4a7c15u ^ ((uint64_t)c->id << 32)) | 1;
    for (size_t i = 0; i < g_size; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        c->tx[i] = (unsigned char)x;
    }
}

static void set_events(struct worker *w, struct conn *c, bool want_out)
{
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(w->ep, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
    c->want_out = want_out;
}

/* Writes what the socket takes of the current message. */
static void send_some(struct worker *w, struct conn *c)
{
    while (c->sent < g_size) {
        ssize_t n = send(c->fd, c->tx + c->sent, g_size - c->sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            die("connection %u: send: %s", c->id, strerror(errno));
        }
        c->sent += (size_t)n;
    }
    bool want_out = c->sent < g_size;
    if (want_out != c->want_out)
        set_events(w, c, want_out);
}

static void start_message(struct worker *w, struct conn *c)
{
    c->seq++;
    c->sent = c->got = 0;
    fill_message(c);
    c->t0 = now_ns();
    send_some(w, c);
}

/* Reads what has come back; returns true when the connection has finished
 * its last round trip. */
static bool receive_some(struct worker *w, struct conn *c)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->rx + c->got, g_size - c->got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return false;
            die("connection %u: recv: %s", c->id, strerror(errno));
        }
        if (n == 0)
            die("connection %u: the server closed it after %" PRIu64 " of %" PRIu64 " round trips",
                c->id, g_msgs - c->remaining, g_msgs);
        if (c->got + (size_t)n > c->sent)
            die("connection %u: the server sent back more than it received", c->id);
        c->got += (size_t)n;
        if (c->got < g_size)
            continue;

        uint64_t t1 = now_ns();
        if (memcmp(c->rx, c->tx, g_size) != 0)
            die("connection %u: message %" PRIu64 " came back altered", c->id, c->seq);
        c->rtt[g_msgs - c->remaining] = t1 - c->t0;
        if (--c->remaining == 0)
            return true;
        start_message(w, c);
    }
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct epoll_event events[64];
    unsigned active = w->n_conns;

    pthread_barrier_wait(&g_start);
    for (unsigned i = 0; i < w->n_conns; i++)
        start_message(w, w->conns[i]);
    while (active > 0) {
        int n = epoll_wait(w->ep, events, 64, STALL_MS);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait: %s", strerror(errno));
        }
        if (n == 0)
            die("no reply for %d ms (%u connections of this thread unfinished)", STALL_MS, active);
        for (int i = 0; i < n; i++) {
            struct conn *c = events[i].data.ptr;
            if (c->remaining == 0)
                continue; /* finished: a late event */
            if (events[i].events & EPOLLOUT)
                send_some(w, c);
            if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                active -= receive_some(w, c);
        }
    }
    return NULL;
}

/* Blocking: connect, TCP_NODELAY, one untimed round trip, then non-blocking. */
static void open_conn(struct conn *c, const struct addrinfo *ai)
{
    c->fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (c->fd < 0)
        die("socket: %s", strerror(errno));
    struct timeval limit = {.tv_sec = STALL_MS / 1000};
    int one = 1;
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) < 0 ||
        setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit) < 0 ||
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        die("setsockopt: %s", strerror(errno));
    if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) < 0)
        die("connection %u: connect: %s", c->id, strerror(errno));

    fill_message(c); /* seq 0 */
    for (size_t done = 0; done < g_size;) {
        ssize_t n = send(c->fd, c->tx + done, g_size - done, MSG_NOSIGNAL);
        if (n < 0 && errno != EINTR)
            die("connection %u: send: %s", c->id, strerror(errno));
        done += n > 0 ? (size_t)n : 0;
    }
    for (size_t done = 0; done < g_size;) {
        ssize_t n = recv(c->fd, c->rx + done, g_size - done, 0);
        if (n == 0)
            die("connection %u: the server closed it during set-up", c->id);
        if (n < 0 && errno != EINTR)
            die("connection %u: recv: %s", c->id, strerror(errno));
        done += n > 0 ? (size_t)n : 0;
    }
    if (memcmp(c->rx, c->tx, g_size) != 0)
        die("connection %u: the set-up message came back altered", c->id);

    struct timeval none = {0};
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none) < 0 ||
        setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none) < 0)
        die("setsockopt: %s", strerror(errno));
    int fl = fcntl(c->fd, F_GETFL);
    if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        die("fcntl: %s", strerror(errno));
}

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least pct % of them at or below. */
static uint64_t percentile(const uint64_t *sorted, size_t n, double pct)
{
    size_t rank = (size_t)((pct / 100.0) * (double)n + 0.999999999);
    rank = rank < 1 ? 1 : rank > n ? n : rank;
    return sorted[rank - 1];
}

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: " PROG " HOST PORT CONNS MSGS SIZE [THREADS]\n");
        return 2;
    }
    const char *host = argv[1], *port = argv[2];
    parse_count("PORT", port, 1, 65535);
    unsigned n_conns = (unsigned)parse_count("CONNS", argv[3], 1, 100000);
    g_msgs = parse_count("MSGS", argv[4], 1, 1u << 30);
    g_size = (size_t)parse_count("SIZE", argv[5], 1, 1u << 20);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned n_threads = cpus > 1 ? (unsigned)cpus : 1;
    if (argc == 7)
        n_threads = (unsigned)parse_count("THREADS", argv[6], 1, 1024);
    if (n_threads > n_conns)
        n_threads = n_conns;
    if ((uint64_t)n_conns * g_msgs > (uint64_t)1 << 32)
        die("CONNS times MSGS is too large");

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai;
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai != 0)
        die("%s: %s", host, gai_strerror(gai));
    if (!is_loopback(ai->ai_addr))
        die("%s is not a loopback address: this client only talks to 127.0.0.0/8 or ::1", host);

    /* Everything is allocated before the clock starts. */
    size_t total = (size_t)n_conns * g_msgs;
    uint64_t *rtt = malloc(total * sizeof *rtt);
    struct conn *conns = calloc(n_conns, sizeof *conns);
    struct worker *workers = calloc(n_threads, sizeof *workers);
    struct conn **by_worker = calloc(n_conns, sizeof *by_worker);
    unsigned char *bufs = malloc(2 * g_size * n_conns);
    if (!rtt || !conns || !workers || !by_worker || !bufs)
        die("out of memory");

    for (unsigned t = 0; t < n_threads; t++) {
        workers[t].conns = by_worker + (size_t)t * (n_conns / n_threads) +
                           (t < n_conns % n_threads ? t : n_conns % n_threads);
        workers[t].ep = epoll_create1(EPOLL_CLOEXEC);
        if (workers[t].ep < 0)
            die("epoll_create1: %s", strerror(errno));
    }
    for (unsigned i = 0; i < n_conns; i++) {
        struct conn *c = &conns[i];
        c->id = i;
        c->remaining = g_msgs;
        c->rtt = rtt + (size_t)i * g_msgs;
        c->tx = bufs + 2 * g_size * i;
        c->rx = c->tx + g_size;
        open_conn(c, ai);
        struct worker *w = &workers[i % n_threads];
        w->conns[w->n_conns++] = c;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(w->ep, EPOLL_CTL_ADD, c->fd, &ev) < 0)
            die("epoll_ctl: %s", strerror(errno));
    }
    freeaddrinfo(ai);

    if (pthread_barrier_init(&g_start, NULL, n_threads + 1) != 0)
        die("pthread_barrier_init failed");
    for (unsigned t = 0; t < n_threads; t++) {
        int err = pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]);
        if (err)
            die("pthread_create: %s", strerror(err));
    }
    pthread_barrier_wait(&g_start);
    uint64_t t0 = now_ns();
    for (unsigned t = 0; t < n_threads; t++)
        pthread_join(workers[t].thread, NULL);
    uint64_t elapsed = now_ns() - t0;

    for (unsigned i = 0; i < n_conns; i++)
        close(conns[i].fd);
    qsort(rtt, total, sizeof *rtt, compare_u64);
    printf("echo conns=%u msgs=%" PRIu64 " size=%zu total_s=%.9f rtt_p50_us=%.1f "
           "rtt_p99_us=%.1f rtt_max_us=%.1f us_per_rt=%.3f\n",
           n_conns, g_msgs, g_size, (double)elapsed / 1e9, (double)percentile(rtt, total, 50) / 1e3,
           (double)percentile(rtt, total, 99) / 1e3, (double)rtt[total - 1] / 1e3,
           (double)elapsed / 1e3 / (double)total);
    if (fflush(stdout) != 0)
        die("cannot write the result: %s", strerror(errno));

    for (unsigned t = 0; t < n_threads; t++)
        close(workers[t].ep);
    pthread_barrier_destroy(&g_start);
    free(bufs);
    free(by_worker);
    free(workers);
    free(conns);
    free(rtt);
    return 0;
}
