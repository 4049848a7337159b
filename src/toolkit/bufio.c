/* Buffered reading and writing over an rt_io. A reader's buffer holds the
 * bytes read but not yet handed out in [start, end); what an operation
 * hands out stays in place until the next operation begins, which is when
 * the buffer is compacted. Each reader and writer runs one operation at a
 * time (`busy`), from one task, so nothing here is concurrent. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <asyncrt/bufio.h>
#include <asyncrt/diag.h>

#include "common.h"
#include "fault.h"
#include "operation.h"

#define DEFAULT_CAPACITY 8192
#define MIN_CAPACITY 16

struct rt_reader {
    rt_io *io;        /* borrowed */
    size_t capacity;  /* bytes in buf */
    size_t start;     /* first byte not handed out */
    size_t end;       /* one past the last byte read */
    bool eof;         /* the descriptor reported the end of the stream */
    const void *busy; /* the unfinished operation, or NULL */
    char buf[];
};

struct rt_writer {
    rt_io *io;        /* borrowed */
    size_t capacity;  /* bytes in buf */
    size_t len;       /* bytes buffered */
    const void *busy; /* the unfinished operation, or NULL */
    char buf[];
};

static int capacity_of(size_t asked, size_t *capacity)
{
    *capacity = asked == 0 ? DEFAULT_CAPACITY : asked;
    return *capacity < MIN_CAPACITY || *capacity > RT_BUFIO_MAX ? -EINVAL : 0;
}

/* ---- Reader ------------------------------------------------------------------- */

RT_EXPORT int rt_reader_new(rt_io *io, size_t capacity, rt_reader **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    size_t cap;
    if (io == NULL || capacity_of(capacity, &cap) < 0)
        return -EINVAL;
    rt_reader *r = rt__malloc(sizeof(*r) + cap);
    if (r == NULL)
        return -ENOMEM;
    *r = (rt_reader){.io = io, .capacity = cap};
    *out = r;
    return 0;
}

RT_EXPORT void rt_reader_free(rt_reader *r)
{
    free(r);
}

RT_EXPORT size_t rt_reader_buffered(const rt_reader *r)
{
    return r != NULL ? r->end - r->start : 0;
}

RT_EXPORT const char *rt_reader_peek(const rt_reader *r, size_t *len)
{
    if (r == NULL || r->busy != NULL) {
        *len = 0;
        return NULL;
    }
    *len = r->end - r->start;
    return r->buf + r->start;
}

RT_EXPORT size_t rt_reader_discard(rt_reader *r, size_t n)
{
    if (r == NULL || r->busy != NULL)
        return 0;
    size_t gone = n < r->end - r->start ? n : r->end - r->start;
    r->start += gone;
    return gone;
}

/* Claims r for a new operation and moves what is left to the front of the
 * buffer: what the previous operation handed out may be overwritten now. */
static int reader_begin(rt_reader *r, const void *op)
{
    if (r->busy != NULL)
        return -EBUSY;
    r->busy = op;
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    return 0;
}

/* Reads more into the free end of the buffer: RT_READY with *err 0 (bytes
 * added, or the end of the stream now known) or a descriptor error, or
 * RT_PENDING. A read that is pending holds nothing but the waker stored in
 * the rt_io, so it is prepared again on every poll. */
static rt_poll reader_fill(rt_reader *r, rt_io_read *read, rt_context *cx, int64_t *err)
{
    *err = 0;
    rt_io_read_init(read, r->io, r->buf + r->end, r->capacity - r->end);
    if (RT_POLL_OP(read, cx) == RT_PENDING)
        return RT_PENDING;
    if (read->result < 0)
        *err = read->result;
    else if (read->result == 0)
        r->eof = true;
    else
        r->end += (size_t)read->result;
    return RT_READY;
}

static rt_poll reader_finish(rt_future *f, rt_reader **slot, int64_t result)
{
    (*slot)->busy = NULL;
    *slot = NULL;
    return rt__future_finish(f, result);
}

/* Gives the reader back when an unfinished operation is dropped: the bytes
 * it read stay buffered. */
static void reader_release(rt_reader **slot)
{
    if (*slot != NULL)
        (*slot)->busy = NULL;
    *slot = NULL;
}

static rt_poll read_until_vpoll(rt_future *f, rt_context *cx)
{
    rt_read_until *op = (rt_read_until *)f;
    rt_reader *r = op->reader;
    for (;;) {
        char *from = r->buf + r->start;
        char *hit = memchr(from, op->delim, r->end - r->start);
        size_t n = hit != NULL ? (size_t)(hit - from) + 1 : 0;
        if (n == 0 && r->eof)
            n = r->end - r->start; /* the last piece, unterminated (or nothing) */
        if (n > 0 || r->eof) {
            op->data = from;
            op->len = n;
            if (op->delim == '\n' && n > 0 && from[n - 1] == '\n')
                op->len = n >= 2 && from[n - 2] == '\r' ? n - 2 : n - 1;
            r->start += n;
            return reader_finish(f, &op->reader, (int64_t)n);
        }
        if (r->end - r->start == r->capacity)
            return reader_finish(f, &op->reader, -EMSGSIZE); /* nothing consumed */
        if (r->end == r->capacity) {                         /* room only at the front */
            memmove(r->buf, r->buf + r->start, r->end - r->start);
            r->end -= r->start;
            r->start = 0;
        }
        int64_t err;
        if (reader_fill(r, &op->read, cx, &err) == RT_PENDING)
            return RT_PENDING;
        if (err < 0)
            return reader_finish(f, &op->reader, err);
    }
}

static void read_until_vdrop(rt_future *f)
{
    reader_release(&((rt_read_until *)f)->reader);
}

/* A buffered operation waits on its reader's or writer's descriptor, which
 * is fixed (the rt_io is borrowed for the object's life); the buffer's
 * counters are left out. */
static void read_until_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_read_until *op = (const rt_read_until *)f;
    info->kind = RT_WAIT_READ;
    info->fd = rt_io_fd(op->reader->io);
    if (op->delim == '\n')
        rt__wait_printf(info, "buffered read of a line on fd %d", info->fd);
    else if (op->delim >= 0x20 && op->delim < 0x7f)
        rt__wait_printf(info, "buffered read until '%c' on fd %d", op->delim, info->fd);
    else
        rt__wait_printf(info, "buffered read until byte 0x%02x on fd %d", op->delim, info->fd);
}

static const rt_future_vtable read_until_vtable = {read_until_vpoll, read_until_vdrop,
                                                   read_until_vdescribe};

RT_EXPORT int rt_read_until_init(rt_read_until *op, rt_reader *r, int delim)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &read_until_vtable;
    op->delim = delim;
    int err = r == NULL || delim < 0 || delim > 255 ? -EINVAL : reader_begin(r, op);
    if (err < 0) {
        rt__future_finish(&op->future, err);
        return err;
    }
    op->reader = r;
    return 0;
}

RT_EXPORT int rt_read_line_init(rt_read_until *op, rt_reader *r)
{
    return rt_read_until_init(op, r, '\n');
}

static rt_poll read_exact_vpoll(rt_future *f, rt_context *cx)
{
    rt_read_exact *op = (rt_read_exact *)f;
    rt_reader *r = op->reader;
    for (;;) {
        size_t take = r->end - r->start;
        if (take > op->want - op->got)
            take = op->want - op->got;
        memcpy(op->dst + op->got, r->buf + r->start, take);
        op->got += take;
        r->start += take;
        if (op->got == op->want || r->eof)
            return reader_finish(f, &op->reader, (int64_t)op->got);
        r->start = r->end = 0; /* everything was taken */
        int64_t err;
        if (reader_fill(r, &op->read, cx, &err) == RT_PENDING)
            return RT_PENDING;
        if (err < 0)
            return reader_finish(f, &op->reader, err);
    }
}

static void read_exact_vdrop(rt_future *f)
{
    reader_release(&((rt_read_exact *)f)->reader);
}

static void read_exact_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_read_exact *op = (const rt_read_exact *)f;
    info->kind = RT_WAIT_READ;
    info->fd = rt_io_fd(op->reader->io);
    rt__wait_printf(info, "buffered read of %zu bytes (%zu done) on fd %d", op->want, op->got,
                    info->fd);
}

static const rt_future_vtable read_exact_vtable = {read_exact_vpoll, read_exact_vdrop,
                                                   read_exact_vdescribe};

RT_EXPORT int rt_read_exact_init(rt_read_exact *op, rt_reader *r, void *dst, size_t n)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &read_exact_vtable;
    op->dst = dst;
    op->want = n;
    int err = r == NULL || (dst == NULL && n > 0) ? -EINVAL : reader_begin(r, op);
    if (err < 0) {
        rt__future_finish(&op->future, err);
        return err;
    }
    op->reader = r;
    return 0;
}

/* ---- Writer ------------------------------------------------------------------- */

RT_EXPORT int rt_writer_new(rt_io *io, size_t capacity, rt_writer **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    size_t cap;
    if (io == NULL || capacity_of(capacity, &cap) < 0)
        return -EINVAL;
    rt_writer *w = rt__malloc(sizeof(*w) + cap);
    if (w == NULL)
        return -ENOMEM;
    *w = (rt_writer){.io = io, .capacity = cap};
    *out = w;
    return 0;
}

RT_EXPORT void rt_writer_free(rt_writer *w)
{
    free(w);
}

RT_EXPORT size_t rt_writer_buffered(const rt_writer *w)
{
    return w != NULL ? w->len : 0;
}

/* The first `sent` buffered bytes reached the descriptor: keep the rest, in
 * order, at the front. */
static void writer_consume(rt_writer *w, size_t sent)
{
    memmove(w->buf, w->buf + sent, w->len - sent);
    w->len -= sent;
}

static rt_poll writer_finish(rt_future *f, rt_writer **slot, int64_t result)
{
    (*slot)->busy = NULL;
    *slot = NULL;
    return rt__future_finish(f, result);
}

enum { COPYING, FLUSHING, SENDING };

static rt_poll writer_write_vpoll(rt_future *f, rt_context *cx)
{
    rt_writer_write *op = (rt_writer_write *)f;
    rt_writer *w = op->writer;
    for (;;) {
        size_t rest = op->len - op->done;
        switch (op->phase) {
        case COPYING:
            if (rest <= w->capacity - w->len) {
                memcpy(w->buf + w->len, op->buf + op->done, rest);
                w->len += rest;
                op->done = op->len;
                return writer_finish(f, &op->writer, (int64_t)op->len);
            }
            /* Make room; what does not fit even in an empty buffer goes
             * straight to the descriptor, after what is buffered. */
            if (w->len > 0) {
                rt_io_write_all_init(&op->flush, w->io, w->buf, w->len);
                op->phase = FLUSHING;
            } else {
                rt_io_write_all_init(&op->flush, w->io, op->buf + op->done, rest);
                op->phase = SENDING;
            }
            break;
        case FLUSHING:
            if (RT_POLL_OP(&op->flush, cx) == RT_PENDING)
                return RT_PENDING;
            writer_consume(w, op->flush.progress);
            if (op->flush.result < 0)
                return writer_finish(f, &op->writer, op->flush.result);
            op->phase = COPYING;
            break;
        default: /* SENDING */
            if (RT_POLL_OP(&op->flush, cx) == RT_PENDING)
                return RT_PENDING;
            op->done += op->flush.progress;
            if (op->flush.result < 0)
                return writer_finish(f, &op->writer, op->flush.result);
            return writer_finish(f, &op->writer, (int64_t)op->len);
        }
    }
}

/* A dropped write accounts for what its send in flight moved: buffered
 * bytes sent leave the buffer; the caller's bytes sent count in `done`. */
static void writer_write_vdrop(rt_future *f)
{
    rt_writer_write *op = (rt_writer_write *)f;
    rt_writer *w = op->writer;
    if (w == NULL)
        return;
    if (op->phase == FLUSHING)
        writer_consume(w, op->flush.progress);
    else if (op->phase == SENDING)
        op->done += op->flush.progress;
    w->busy = NULL;
    op->writer = NULL;
}

static void writer_write_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_writer_write *op = (const rt_writer_write *)f;
    info->kind = RT_WAIT_WRITE;
    info->fd = rt_io_fd(op->writer->io);
    rt__wait_printf(info, "buffered write of %zu bytes on fd %d", op->len, info->fd);
}

static const rt_future_vtable writer_write_vtable = {writer_write_vpoll, writer_write_vdrop,
                                                     writer_write_vdescribe};

RT_EXPORT int rt_writer_write_init(rt_writer_write *op, rt_writer *w, const void *buf, size_t len)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &writer_write_vtable;
    op->buf = buf;
    op->len = len;
    int err = -EINVAL;
    if (w != NULL && (buf != NULL || len == 0))
        err = w->busy != NULL ? -EBUSY : 0;
    if (err < 0) {
        rt__future_finish(&op->future, err);
        return err;
    }
    w->busy = op;
    op->writer = w;
    return 0;
}

static rt_poll writer_flush_vpoll(rt_future *f, rt_context *cx)
{
    rt_writer_flush *op = (rt_writer_flush *)f;
    rt_writer *w = op->writer;
    if (RT_POLL_OP(&op->flush, cx) == RT_PENDING)
        return RT_PENDING;
    writer_consume(w, op->flush.progress);
    return writer_finish(f, &op->writer,
                         op->flush.result < 0 ? op->flush.result : (int64_t)op->flush.progress);
}

static void writer_flush_vdrop(rt_future *f)
{
    rt_writer_flush *op = (rt_writer_flush *)f;
    rt_writer *w = op->writer;
    if (w == NULL)
        return;
    writer_consume(w, op->flush.progress);
    w->busy = NULL;
    op->writer = NULL;
}

static void writer_flush_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_writer_flush *op = (const rt_writer_flush *)f;
    info->kind = RT_WAIT_WRITE;
    info->fd = rt_io_fd(op->writer->io);
    rt__wait_printf(info, "flush of %zu bytes (%zu sent) on fd %d", op->flush.len,
                    op->flush.progress, info->fd);
}

static const rt_future_vtable writer_flush_vtable = {writer_flush_vpoll, writer_flush_vdrop,
                                                     writer_flush_vdescribe};

RT_EXPORT int rt_writer_flush_init(rt_writer_flush *op, rt_writer *w)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &writer_flush_vtable;
    int err = w == NULL ? -EINVAL : w->busy != NULL ? -EBUSY : 0;
    if (err < 0) {
        rt__future_finish(&op->future, err);
        return err;
    }
    w->busy = op;
    op->writer = w;
    rt_io_write_all_init(&op->flush, w->io, w->buf, w->len);
    return 0;
}
