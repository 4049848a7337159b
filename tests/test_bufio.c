/* Buffered reading and writing over real pipes: lines split at every byte
 * boundary, line endings, the end of the stream with and without a last
 * delimiter, lines longer than the buffer, exact reads across refills, a
 * read dropped half-way that loses nothing, small writes gathered and
 * flushed, writes larger than the buffer, and one operation at a time. */
#include "support.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

TestSuite(bufio, .fini = fail_on_leaks);

/* make_pipe's descriptors are non-blocking: the test's own end blocks, so
 * that it waits for the task under test instead of polling. */
static void make_blocking(int fd)
{
    cr_assert_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK), 0);
}

/* A pipe whose read end is an rt_io of rt; the test writes to *wfd. */
static rt_io *pipe_reader(rt_runtime *rt, int *wfd)
{
    int fds[2];
    make_pipe(fds);
    make_blocking(fds[1]);
    rt_io *io;
    cr_assert_eq(rt_io_open(rt, fds[0], &io), 0);
    *wfd = fds[1];
    return io;
}

static void write_all_fd(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        cr_assert_gt(n, 0);
        p += n;
        len -= (size_t)n;
    }
}

/* ---- lines ------------------------------------------------------------------- */

/* The lines of INPUT and what each read reports. */
static const char INPUT[] = "alpha\nbe\r\nta\n\ngamma";
static const char *const LINES[] = {"alpha", "be", "ta", "", "gamma"};
static const int64_t RESULTS[] = {6, 4, 3, 1, 5, 0};

/* Reads lines until the end of the stream, checking each against the
 * table, and signals `pending` whenever it waits for more input. */
struct line_task {
    rt_coro co;
    rt_reader *reader;
    struct event *pending;
    rt_read_until line;
    unsigned count;
};

static rt_poll line_task_poll(void *state, rt_context *cx, void **out)
{
    struct line_task *t = state;
    RT_CORO_BEGIN(&t->co);
    for (t->count = 0;; t->count++) {
        rt_read_line_init(&t->line, t->reader);
        RT_AWAIT_POLL(&t->co, note_pending(RT_POLL_OP(&t->line, cx), t->pending));
        cr_assert_lt(t->count, sizeof RESULTS / sizeof RESULTS[0]);
        cr_assert_eq(t->line.result, RESULTS[t->count], "line %u: %lld", t->count,
                     (long long)t->line.result);
        if (t->line.result == 0)
            break;
        cr_assert_eq(t->line.len, strlen(LINES[t->count]));
        cr_assert_eq(memcmp(t->line.data, LINES[t->count], t->line.len), 0);
    }
    RT_CORO_END(&t->co, out);
}

static void line_task_drop(void *state)
{
    struct line_task *t = state;
    RT_DROP(&t->line);
}

Test(bufio, lines_split_at_every_byte_boundary_come_out_whole)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    size_t len = strlen(INPUT);
    static struct event pending = EVENT_INIT;
    for (size_t split = 0; split <= len; split++) {
        int wfd;
        rt_io *io = pipe_reader(rt, &wfd);
        rt_reader *r;
        cr_assert_eq(rt_reader_new(io, 16, &r), 0); /* compacts and refills often */
        struct line_task t = {.reader = r, .pending = &pending};
        unsigned long seen = event_count(&pending);
        rt_task *task;
        cr_assert_eq(RT_SPAWN_STATE(rt, line_task_poll, line_task_drop, &t, &task), 0);
        cr_assert(event_wait_for(&pending, seen + 1)); /* waits on the empty pipe */
        seen = event_count(&pending);
        write_all_fd(wfd, INPUT, split);
        if (split > 0) /* the first part is read before the rest comes */
            cr_assert(event_wait_for(&pending, seen + 1));
        write_all_fd(wfd, INPUT + split, len - split);
        close(wfd);
        cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), 0, "split at %zu", split);
        rt_reader_free(r);
        rt_io_close(io);
    }
    cr_assert_eq(count_fds(), fds, "every pipe was closed");
    finish_runtime(rt, 0);
}

/* Awaits one operation prepared by the test. */
struct await_op {
    rt_coro co;
    rt_future *op;
};

static rt_poll await_op_poll(void *state, rt_context *cx, void **out)
{
    struct await_op *a = state;
    RT_CORO_BEGIN(&a->co);
    RT_AWAIT_FUTURE(&a->co, cx, a->op);
    RT_CORO_END(&a->co, out);
}

static void run_op(rt_runtime *rt, rt_future *op)
{
    struct await_op a = {.op = op};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, await_op_poll, rt_coro_drop, &a, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
}

Test(bufio, a_line_longer_than_the_buffer_is_emsgsize_and_can_be_skipped)
{
    rt_runtime *rt = new_runtime(1);
    int wfd;
    rt_io *io = pipe_reader(rt, &wfd);
    rt_reader *r;
    cr_assert_eq(rt_reader_new(io, 16, &r), 0);
    write_all_fd(wfd, "0123456789abcdefXYZ\nok\n", 23);
    static rt_read_until line;
    rt_read_line_init(&line, r);
    run_op(rt, &line.future);
    cr_assert_eq(line.result, -EMSGSIZE);
    cr_assert_eq(rt_reader_buffered(r), 16, "nothing was consumed");
    cr_assert_eq(rt_reader_discard(r, 16), 16);
    rt_read_line_init(&line, r);
    run_op(rt, &line.future);
    cr_assert_eq(line.result, 4, "the rest of the long line");
    cr_assert_eq(memcmp(line.data, "XYZ", 3), 0);
    rt_read_until_init(&line, r, 'k');
    run_op(rt, &line.future);
    cr_assert_eq(line.result, 2);
    cr_assert_eq(memcmp(line.data, "ok", 2), 0);
    cr_assert_eq(line.len, 2, "len is the length for a delimiter other than a newline");
    close(wfd);
    rt_read_line_init(&line, r);
    run_op(rt, &line.future);
    cr_assert_eq(line.result, 1, "the last piece: the newline after ok");
    rt_read_line_init(&line, r);
    run_op(rt, &line.future);
    cr_assert_eq(line.result, 0, "the end of the stream");
    rt_reader_free(r);
    rt_io_close(io);
    finish_runtime(rt, 0);
}

Test(bufio, a_dropped_read_loses_no_byte)
{
    rt_runtime *rt = new_runtime(1);
    int wfd;
    rt_io *io = pipe_reader(rt, &wfd);
    rt_reader *r;
    cr_assert_eq(rt_reader_new(io, 64, &r), 0);
    write_all_fd(wfd, "hel", 3);
    static rt_read_until line;
    static rt_timeout limit;
    rt_read_line_init(&line, r);
    rt_timeout_init(&limit, rt, &line.future, 5 * MS);
    run_op(rt, &limit.future);
    cr_assert_eq(limit.result, -ETIMEDOUT);
    cr_assert_eq(line.result, -ECANCELED);
    cr_assert_eq(rt_reader_buffered(r), 3, "the bytes read stay buffered");
    write_all_fd(wfd, "lo\n", 3);
    rt_read_line_init(&line, r);
    run_op(rt, &line.future);
    cr_assert_eq(line.result, 6);
    cr_assert_eq(memcmp(line.data, "hello\n", 6), 0);
    close(wfd);
    rt_reader_free(r);
    rt_io_close(io);
    finish_runtime(rt, 0);
}

Test(bufio, peek_shows_the_bytes_after_a_line_without_consuming_them)
{
    rt_runtime *rt = new_runtime(1);
    int wfd;
    rt_io *io = pipe_reader(rt, &wfd);
    rt_reader *r;
    cr_assert_eq(rt_reader_new(io, 64, &r), 0);
    size_t n = 99;
    cr_assert_null(rt_reader_peek(NULL, &n));
    cr_assert_eq(n, 0);
    cr_assert_not_null(rt_reader_peek(r, &n));
    cr_assert_eq(n, 0, "nothing read yet");
    write_all_fd(wfd, "GET a\nGET b\nGE", 14);
    static rt_read_until line;
    rt_read_line_init(&line, r);
    cr_assert_null(rt_reader_peek(r, &n), "not while an operation is unfinished");
    cr_assert_eq(n, 0);
    run_op(rt, &line.future);
    cr_assert_eq(line.result, 6);
    const char *p = rt_reader_peek(r, &n);
    cr_assert_eq(n, 8);
    cr_assert_eq(memcmp(p, "GET b\nGE", 8), 0);
    cr_assert_eq(memcmp(line.data, "GET a\n", 6), 0, "the line handed out is still there");
    rt_read_line_init(&line, r);
    run_op(rt, &line.future);
    cr_assert_eq(line.result, 6, "peeking consumed nothing");
    p = rt_reader_peek(r, &n);
    cr_assert_eq(n, 2, "%zu bytes: %.*s", n, (int)n, p);
    cr_assert_eq(memcmp(p, "GE", 2), 0);
    close(wfd);
    rt_reader_free(r);
    rt_io_close(io);
    finish_runtime(rt, 0);
}

/* ---- exact reads --------------------------------------------------------------- */

#define BIG (256 * 1024)

struct feeder {
    int fd;
    size_t len;
};

static unsigned char pattern_at(size_t i)
{
    return (unsigned char)(i * 31 + i / 251);
}

static void *feed(void *arg)
{
    struct feeder *f = arg;
    static unsigned char chunk[4096];
    for (size_t off = 0; off < f->len;) {
        size_t n = f->len - off < sizeof chunk ? f->len - off : sizeof chunk;
        for (size_t i = 0; i < n; i++)
            chunk[i] = pattern_at(off + i);
        write_all_fd(f->fd, chunk, n);
        off += n;
    }
    close(f->fd);
    return NULL;
}

struct exact_task {
    rt_coro co;
    rt_reader *reader;
    size_t total;
    unsigned char piece[1000];
    rt_read_exact exact;
};

static rt_poll exact_task_poll(void *state, rt_context *cx, void **out)
{
    struct exact_task *t = state;
    RT_CORO_BEGIN(&t->co);
    for (;;) {
        rt_read_exact_init(&t->exact, t->reader, t->piece, sizeof t->piece);
        RT_AWAIT(&t->co, cx, &t->exact);
        cr_assert_geq(t->exact.result, 0);
        for (int64_t i = 0; i < t->exact.result; i++)
            cr_assert_eq(t->piece[i], pattern_at(t->total + (size_t)i), "byte %zu",
                         t->total + (size_t)i);
        t->total += (size_t)t->exact.result;
        if ((size_t)t->exact.result < sizeof t->piece)
            break; /* the stream ended */
    }
    RT_RETURN(&t->co, out, t->total);
    RT_CORO_END(&t->co, out);
}

Test(bufio, exact_reads_cross_refills_and_stop_short_at_the_end)
{
    rt_runtime *rt = new_runtime(2);
    int wfd;
    rt_io *io = pipe_reader(rt, &wfd);
    rt_reader *r;
    cr_assert_eq(rt_reader_new(io, 300, &r), 0); /* smaller than one piece */
    struct exact_task t = {.reader = r};
    rt_task *task;
    cr_assert_eq(RT_SPAWN_STATE(rt, exact_task_poll, rt_coro_drop, &t, &task), 0);
    struct feeder f = {wfd, BIG};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, feed, &f), 0);
    void *total;
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, &total), 0);
    cr_assert_eq((uintptr_t)total, BIG);
    pthread_join(th, NULL);
    rt_reader_free(r);
    rt_io_close(io);
    finish_runtime(rt, 0);
}

/* ---- writing ------------------------------------------------------------------- */

struct drain {
    int fd;
    size_t got;
    bool bad;
};

static void *drain_fd(void *arg)
{
    struct drain *d = arg;
    unsigned char buf[4096];
    for (;;) {
        ssize_t n = read(d->fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != pattern_at(d->got + (size_t)i))
                d->bad = true;
        d->got += (size_t)n;
    }
    return NULL;
}

struct writer_task {
    rt_coro co;
    rt_writer *writer;
    size_t off;
    unsigned char small[7];
    unsigned char *big; /* a write larger than the buffer, once */
    rt_writer_write write;
    rt_writer_flush flush;
};

static rt_poll writer_task_poll(void *state, rt_context *cx, void **out)
{
    struct writer_task *t = state;
    RT_CORO_BEGIN(&t->co);
    while (t->off < BIG / 2) {
        for (size_t i = 0; i < sizeof t->small; i++)
            t->small[i] = pattern_at(t->off + i);
        rt_writer_write_init(&t->write, t->writer, t->small, sizeof t->small);
        RT_AWAIT(&t->co, cx, &t->write);
        cr_assert_eq(t->write.result, (int64_t)sizeof t->small);
        t->off += sizeof t->small;
    }
    rt_writer_write_init(&t->write, t->writer, t->big + t->off, BIG - t->off);
    RT_AWAIT(&t->co, cx, &t->write);
    cr_assert_eq(t->write.result, (int64_t)(BIG - t->off));
    rt_writer_flush_init(&t->flush, t->writer);
    RT_AWAIT(&t->co, cx, &t->flush);
    cr_assert_geq(t->flush.result, 0);
    cr_assert_eq(rt_writer_buffered(t->writer), 0);
    RT_CORO_END(&t->co, out);
}

Test(bufio, small_writes_are_gathered_and_big_ones_go_straight_through)
{
    rt_runtime *rt = new_runtime(2);
    int before = count_fds();
    int fds[2];
    make_pipe(fds);
    rt_io *io;
    cr_assert_eq(rt_io_open(rt, fds[1], &io), 0);
    rt_writer *w;
    cr_assert_eq(rt_writer_new(io, 64, &w), 0);
    unsigned char *big = malloc(BIG);
    cr_assert_not_null(big);
    for (size_t i = 0; i < BIG; i++)
        big[i] = pattern_at(i);
    make_blocking(fds[0]);
    struct drain d = {.fd = fds[0]};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, drain_fd, &d), 0);
    struct writer_task t = {.writer = w, .big = big};
    rt_task *task;
    cr_assert_eq(RT_SPAWN_STATE(rt, writer_task_poll, rt_coro_drop, &t, &task), 0);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), 0);
    rt_writer_free(w);
    rt_io_close(io); /* the end of the stream for the drain */
    pthread_join(th, NULL);
    close(fds[0]);
    cr_assert_eq(d.got, BIG);
    cr_assert(!d.bad, "the bytes arrived out of order or changed");
    cr_assert_eq(count_fds(), before);
    free(big);
    finish_runtime(rt, 0);
}

/* ---- arguments and one operation at a time -------------------------------------- */

Test(bufio, bad_arguments_and_a_second_operation_are_refused)
{
    rt_runtime *rt = new_runtime(1);
    int wfd;
    rt_io *io = pipe_reader(rt, &wfd);
    rt_reader *r;
    cr_assert_eq(rt_reader_new(NULL, 0, &r), -EINVAL);
    cr_assert_null(r);
    cr_assert_eq(rt_reader_new(io, 8, &r), -EINVAL, "smaller than the minimum");
    cr_assert_eq(rt_reader_new(io, 0, NULL), -EINVAL);
    cr_assert_eq(rt_reader_new(io, 0, &r), 0);
    rt_read_until a, b;
    cr_assert_eq(rt_read_until_init(&a, r, 256), -EINVAL);
    cr_assert_eq(a.result, -EINVAL);
    cr_assert_eq(rt_read_until_init(&a, NULL, '\n'), -EINVAL);
    cr_assert_eq(rt_read_line_init(&a, r), 0);
    cr_assert_eq(rt_read_line_init(&b, r), -EBUSY, "one operation at a time");
    rt_read_exact e;
    cr_assert_eq(rt_read_exact_init(&e, r, NULL, 4), -EINVAL);
    cr_assert_eq(rt_read_exact_init(&e, r, &e, 4), -EBUSY);
    cr_assert_eq(rt_reader_discard(r, 1), 0, "not while an operation is unfinished");
    RT_DROP(&a);
    cr_assert_eq(rt_read_line_init(&b, r), 0, "free again once the first was dropped");
    RT_DROP(&b);
    rt_reader_free(r);
    rt_reader_free(NULL);
    cr_assert_eq(rt_reader_buffered(NULL), 0);

    rt_writer *w;
    cr_assert_eq(rt_writer_new(io, RT_BUFIO_MAX + 1, &w), -EINVAL);
    cr_assert_eq(rt_writer_new(io, 16, &w), 0);
    rt_writer_write wa;
    rt_writer_flush fl;
    cr_assert_eq(rt_writer_write_init(&wa, w, NULL, 1), -EINVAL);
    cr_assert_eq(rt_writer_write_init(&wa, NULL, "x", 1), -EINVAL);
    cr_assert_eq(rt_writer_write_init(&wa, w, "x", 1), 0);
    cr_assert_eq(rt_writer_flush_init(&fl, w), -EBUSY);
    RT_DROP(&wa);
    cr_assert_eq(rt_writer_buffered(w), 0, "a write dropped before its poll copied nothing");
    cr_assert_eq(rt_writer_flush_init(&fl, NULL), -EINVAL);
    rt_writer_free(w);
    rt_writer_free(NULL);
    close(wfd);
    rt_io_close(io);
    finish_runtime(rt, 0);
}
