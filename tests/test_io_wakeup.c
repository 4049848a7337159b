/* Black-box tests of asyncrt/io.h against lost edge-triggered wake-ups:
 * single-byte hand-offs with a foreign writer, on one worker, on four pairs
 * at once, through eventfds and TCP, many thousand times each; a tight loop
 * of tiny foreign writes reaching the reader whole; two hundred pipes each
 * waking their own reader; and an aborted waiting reader losing no bytes
 * while the next reader is woken. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_io.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

TestSuite(io, .timeout = 110, .fini = fail_on_leaks);

/* ---- lost wake-ups ------------------------------------------------------------------ */

/* "An edge arriving between a read's EAGAIN and its waker registration still
 * wakes the task." Black-box, the window cannot be entered on purpose, so the
 * tests make it likely and make a lost edge fatal: a reader task takes single
 * bytes that a foreign writer sends one at a time, the writer sending the next
 * byte the moment it sees the previous one consumed (spinning, not sleeping),
 * which is exactly when the reader is between its EAGAIN and its waker
 * registration. Several such pairs run at once on more threads than there are
 * cores, so that threads are often preempted inside those windows. Nothing
 * else ever writes, so a missed edge is never rescued by a later one: the
 * pair stops, and the bounded wait turns that into a failure. */
#ifdef TEST_HAVE_TSAN
#define HANDOFFS 8000
#else
#define HANDOFFS 40000
#endif
/* How long one hand-off may take before it counts as a lost wake-up. */
#define HANDOFF_DEADLINE_NS (10LL * SEC)
#define MAX_PAIRS 8

struct handoff_pair {
    int write_fd;
    bool eventfd;
    long n;
    size_t chunk; /* bytes the reader asks for per read (at most READ_CHUNK_MAX) */
    long burst;   /* bytes the writer sends before it waits (1: strict hand-off) */
    rt_io *r;
    rt_task *task;
    pthread_t thread;
    atomic_long consumed; /* bytes the reader task has taken and checked */
    long lost_at;         /* -1, or the hand-off that was never consumed */
    bool reader_stopped;  /* the writer saw the reader task finish early */
    int error;
};

#define READ_CHUNK_MAX 16

struct byte_reader {
    rt_coro co;
    struct handoff_pair *pair;
    long i;
    ssize_t result;
    uint64_t value;
    size_t want; /* this read's length */
    unsigned char bytes[READ_CHUNK_MAX];
    rt_io_read rd; /* the read in flight */
};

/* Reads n bytes, `chunk` at most per read (or n eventfd counts of 1),
 * checking each, and publishes the count after each read. */
static rt_poll byte_reader_poll(void *state, rt_context *cx, void **out)
{
    struct byte_reader *s = state;
    RT_CORO_BEGIN(&s->co);
    for (s->i = 0; s->i < s->pair->n;) {
        if (s->pair->eventfd) {
            rt_io_read_init(&s->rd, s->pair->r, &s->value, sizeof s->value);
            RT_AWAIT(&s->co, cx, &s->rd);
            s->result = (ssize_t)s->rd.result;
            if (s->result != 8 || s->value != 1)
                RT_RETURN(&s->co, out, (intptr_t)(s->result < 0 ? s->result : -EILSEQ));
            s->i++;
        } else {
            s->want = s->pair->chunk;
            if ((long)s->want > s->pair->n - s->i)
                s->want = (size_t)(s->pair->n - s->i);
            rt_io_read_init(&s->rd, s->pair->r, s->bytes, s->want);
            RT_AWAIT(&s->co, cx, &s->rd);
            s->result = (ssize_t)s->rd.result;
            if (s->result <= 0)
                RT_RETURN(&s->co, out, (intptr_t)(s->result < 0 ? s->result : -EILSEQ));
            for (ssize_t k = 0; k < s->result; k++)
                if (s->bytes[k] != pattern((size_t)(s->i + k)))
                    RT_RETURN(&s->co, out, (intptr_t)-EILSEQ);
            s->i += s->result;
        }
        atomic_store_explicit(&s->pair->consumed, s->i, memory_order_release);
    }
    RT_RETURN(&s->co, out, (intptr_t)s->pair->n);
    RT_CORO_END(&s->co, out);
}

static int64_t now_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

/* Writes one byte, waits (spinning, yielding the CPU) until the reader task
 * consumed it, writes the next. With bursts of b bytes, writes b bytes with a
 * yield between them and only then waits until all are consumed: a later
 * byte of the burst may land while the reader is between its read of an
 * earlier one and what it does after, and nothing would rescue its edge. */
static void *handoff_writer_main(void *arg)
{
    struct handoff_pair *h = arg;
    for (long i = 0; i < h->n; i++) {
        ssize_t rc;
        if (h->eventfd) {
            uint64_t one = 1;
            rc = write(h->write_fd, &one, sizeof one);
        } else {
            unsigned char b = pattern((size_t)i);
            rc = write(h->write_fd, &b, 1);
        }
        if (rc <= 0) {
            h->error = errno;
            h->lost_at = i;
            return NULL;
        }
        int64_t give_up = 0;
        if ((i + 1) % h->burst != 0 && i + 1 < h->n) {
            sched_yield();
            continue;
        }
        for (unsigned spins = 0; atomic_load_explicit(&h->consumed, memory_order_acquire) < i + 1;
             spins++) {
            if (spins % 256 == 255) {
                int64_t now = now_mono();
                if (give_up == 0) {
                    give_up = now + HANDOFF_DEADLINE_NS;
                } else if (now > give_up) {
                    h->lost_at = i;
                    return NULL;
                }
                if (rt_task_is_finished(h->task)) { /* the reader gave up */
                    h->reader_stopped = true;
                    h->lost_at = i;
                    return NULL;
                }
            }
            sched_yield();
        }
    }
    return NULL;
}

/* What carries a pair's bytes. */
enum handoff_via { VIA_PIPE, VIA_EVENTFD, VIA_TCP };

static void run_handoffs(unsigned workers, enum handoff_via via, int npairs, long per_pair,
                         size_t chunk, long burst)
{
    bool use_eventfd = via == VIA_EVENTFD;
    rt_runtime *rt = new_runtime(workers);
    static struct handoff_pair pairs[MAX_PAIRS];
    int read_fds[MAX_PAIRS];
    cr_assert_leq(npairs, MAX_PAIRS);
    for (int p = 0; p < npairs; p++) {
        struct handoff_pair *h = &pairs[p];
        memset(h, 0, sizeof *h);
        h->eventfd = use_eventfd;
        h->n = per_pair;
        cr_assert(chunk >= 1 && chunk <= READ_CHUNK_MAX && burst >= 1);
        h->chunk = chunk;
        h->burst = burst;
        h->lost_at = -1;
        atomic_init(&h->consumed, 0);
        if (use_eventfd) {
            int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
            cr_assert_geq(efd, 0);
            read_fds[p] = efd;
            h->write_fd = efd;
        } else {
            int fds[2];
            if (via == VIA_PIPE)
                make_pipe(fds);
            else
                tcp_pair(fds);
            read_fds[p] = fds[0];
            h->write_fd = fds[1];
        }
        cr_assert_eq(rt_io_open(rt, read_fds[p], &h->r), 0);
        struct byte_reader s;
        memset(&s, 0, sizeof s);
        s.pair = h;
        cr_assert_eq(RT_SPAWN_STATE(rt, byte_reader_poll, rt_coro_drop, &s, &h->task), 0);
    }
    for (int p = 0; p < npairs; p++)
        cr_assert_eq(pthread_create(&pairs[p].thread, NULL, handoff_writer_main, &pairs[p]), 0);
    for (int p = 0; p < npairs; p++)
        pthread_join(pairs[p].thread, NULL);

    long lost_pair = -1;
    for (int p = 0; p < npairs; p++)
        if (pairs[p].lost_at >= 0 && lost_pair < 0)
            lost_pair = p;
    for (int p = 0; p < npairs; p++) {
        struct handoff_pair *h = &pairs[p];
        if (h->lost_at >= 0)
            rt_task_cancel(h->task);
        void *value = NULL;
        int rc = task_wait_status(h->task, WAIT_DEADLINE_NS, &value);
        if (lost_pair < 0) {
            cr_assert_eq(rc, 0);
            cr_assert_eq((intptr_t)value, per_pair, "pair %d: reader result %ld (%s)", p,
                         (long)(intptr_t)value,
                         (intptr_t)value < 0 ? rt_strerror((int)(intptr_t)value) : "short");
        }
        cr_assert_eq(rt_io_close(h->r), 0);
        if (!use_eventfd)
            close(h->write_fd);
    }
    finish_runtime(rt, 0);
    if (lost_pair >= 0) {
        struct handoff_pair *h = &pairs[lost_pair];
        cr_assert_fail("pair %ld: hand-off %ld of %ld was not consumed within %lld s (%s)",
                       lost_pair, h->lost_at, per_pair, HANDOFF_DEADLINE_NS / SEC,
                       h->error            ? strerror(h->error)
                       : h->reader_stopped ? "the reader task stopped early"
                                           : "a lost wake-up: the reader was never woken");
    }
}

Test(io, single_byte_handoffs_from_a_foreign_writer_never_lose_a_wakeup)
{
    run_handoffs(2, VIA_PIPE, 1, HANDOFFS / 2, 1, 1);
}

Test(io, single_byte_handoffs_on_one_worker_never_lose_a_wakeup)
{
    run_handoffs(1, VIA_PIPE, 1, HANDOFFS / 4, 1, 1);
}

Test(io, four_concurrent_handoff_pairs_on_four_workers_never_lose_a_wakeup)
{
    run_handoffs(4, VIA_PIPE, 4, HANDOFFS / 4, 1, 1);
}

Test(io, eventfd_handoffs_from_foreign_writers_never_lose_a_wakeup)
{
    run_handoffs(3, VIA_EVENTFD, 3, HANDOFFS / 8, 1, 1);
}

/* Short reads: on TCP the reader asks for 8 bytes and gets the one or two
 * in flight, which empties the socket, so rt_io_read forgets the
 * readiness without waiting for EAGAIN (io_internal.h, "Short transfers").
 * The writer sends bytes in pairs, so the second of a pair often lands
 * between the reader's read(2) of the first and that forgetting: only the
 * tick check keeps its edge, and the writer waits for both. */
Test(io, short_reads_of_tcp_racing_a_foreign_writer_never_lose_a_wakeup)
{
    run_handoffs(2, VIA_TCP, 2, HANDOFFS / 4, 8, 2);
}

/* A foreign writer in a tight loop of tiny writes; the reader must see all. */
#ifdef TEST_HAVE_TSAN
#define TIGHT_TOTAL 50000u
#else
#define TIGHT_TOTAL 200000u
#endif

struct tight_writer {
    int fd;
    int error;
};

static void *tight_writer_main(void *arg)
{
    struct tight_writer *t = arg;
    size_t off = 0;
    unsigned char buf[3];
    while (off < TIGHT_TOTAL) {
        size_t n = 1 + off % 3; /* 1, 2 or 3 bytes */
        if (n > TIGHT_TOTAL - off)
            n = TIGHT_TOTAL - off;
        for (size_t i = 0; i < n; i++)
            buf[i] = pattern(off + i);
        ssize_t rc = write(t->fd, buf, n);
        if (rc > 0) {
            off += (size_t)rc;
        } else if (rc < 0 && errno == EAGAIN) {
            struct pollfd p = {t->fd, POLLOUT, 0};
            if (poll(&p, 1, 10000) == 0) {
                t->error = ETIMEDOUT; /* the reader stopped reading */
                break;
            }
        } else if (!(rc < 0 && errno == EINTR)) {
            t->error = errno;
            break;
        }
    }
    close(t->fd); /* end of stream */
    return NULL;
}

Test(io, tight_loop_of_tiny_foreign_writes_reaches_the_reader_whole)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    make_pipe(fds);
    rt_io *r = NULL;
    cr_assert_eq(rt_io_open(rt, fds[0], &r), 0);
    struct checking_reader *cr = calloc(1, sizeof *cr);
    cr_assert_not_null(cr);
    cr->io = r;
    cr->expected = SIZE_MAX;
    cr->chunk = 5;
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, checking_reader_poll, rt_coro_drop, cr, sizeof *cr, &task), 0);
    free(cr);
    struct tight_writer t = {fds[1], 0};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, tight_writer_main, &t), 0);
    pthread_join(thread, NULL);
    cr_assert_eq(t.error, 0, "writer: %s", strerror(t.error));
    void *value = NULL;
    int rc = task_wait_status(task, WAIT_DEADLINE_NS, &value);
    if (rc == -ETIMEDOUT) {
        rt_task_cancel(task);
        (void)task_wait_status(task, WAIT_DEADLINE_NS, NULL);
        finish_runtime(rt, -1);
        cr_assert_fail("the reader never reached the end of stream: a lost wake-up");
    }
    cr_assert_eq(rc, 0);
    cr_assert_eq((intptr_t)value, (intptr_t)TIGHT_TOTAL, "reader result %ld",
                 (long)(intptr_t)value);
    cr_assert_eq(rt_io_close(r), 0);
    finish_runtime(rt, 0);
}

/* Many pipes, one reader task each, one foreign writer in scrambled order. */
#define MANY_PIPES 200

Test(io, two_hundred_pipes_each_wake_their_own_reader)
{
    rt_runtime *rt = new_runtime(2);
    int before = count_fds();
    static int fds[MANY_PIPES][2];
    static rt_io *readers[MANY_PIPES];
    static rt_task *tasks[MANY_PIPES];
    static unsigned char bufs[MANY_PIPES][8];
    unsigned long seen = event_count(&reader_pending);
    for (int i = 0; i < MANY_PIPES; i++) {
        make_pipe(fds[i]);
        cr_assert_eq(rt_io_open(rt, fds[i][0], &readers[i]), 0);
        struct one_read st = {.io = readers[i], .len = sizeof bufs[i], .buf = bufs[i]};
        cr_assert_eq(RT_SPAWN_STATE(rt, one_read_poll, NULL, &st, &tasks[i]), 0);
    }
    cr_assert(event_wait_for(&reader_pending, seen + MANY_PIPES), "not every reader waited");
    for (int k = 0; k < MANY_PIPES; k++) {
        int i = (k * 7) % MANY_PIPES;
        unsigned char b = (unsigned char)i;
        cr_assert_eq(write(fds[i][1], &b, 1), 1);
    }
    for (int i = 0; i < MANY_PIPES; i++) {
        void *value = NULL;
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, &value), 0, "reader %d", i);
        cr_assert_eq((intptr_t)value, 1);
        cr_assert_eq(bufs[i][0], (unsigned char)i);
        cr_assert_eq(rt_io_close(readers[i]), 0);
        close(fds[i][1]);
    }
    cr_assert_eq(count_fds(), before);
    finish_runtime(rt, 0);
}

/* ---- abort safety ---------------------------------------------------------------------- */

Test(io, aborting_a_waiting_reader_loses_no_bytes_and_the_next_reader_is_woken)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    rt_io *r, *w;
    open_pipe(rt, &r, &w, fds);
    unsigned char first_buf[8] = {0};
    struct one_read first = {.io = r, .len = sizeof first_buf, .buf = first_buf};
    rt_task *t1 = NULL;
    /* Its drop drops the waiting read. */
    cr_assert_eq(RT_SPAWN_STATE(rt, one_read_poll, one_read_drop, &first, &t1), 0);
    cr_assert(event_wait_for(&reader_pending, 1));
    rt_task_cancel(t1);
    cr_assert_eq(task_wait_status(t1, WAIT_DEADLINE_NS, NULL), -ECANCELED);

    unsigned char second_buf[8] = {0};
    struct one_read second = {.io = r, .len = sizeof second_buf, .buf = second_buf};
    rt_task *t2 = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, one_read_poll, NULL, &second, &t2), 0);
    cr_assert(event_wait_for(&reader_pending, 2));
    cr_assert_eq(write(fds[1], "xyz", 3), 3);
    void *value = NULL;
    cr_assert_eq(task_wait_status(t2, WAIT_DEADLINE_NS, &value), 0, "the second reader never woke");
    cr_assert_eq((intptr_t)value, 3, "the second reader got %ld bytes", (long)(intptr_t)value);
    cr_assert_eq(memcmp(second_buf, "xyz", 3), 0);
    cr_assert_eq(first_buf[0], 0, "the aborted reader consumed bytes");
    cr_assert_eq(rt_io_close(r), 0);
    cr_assert_eq(rt_io_close(w), 0);
    finish_runtime(rt, 0);
}

/* rt_io_close wakes the tasks waiting on it. The task and the test share a
 * mutex so that the task never touches the rt_io after the test closed it. */
