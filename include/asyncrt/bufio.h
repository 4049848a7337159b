/* asyncrt: buffered reading and writing over any byte stream.
 *
 * An rt_reader keeps a buffer in front of an rt_io (a socket, a pipe, any
 * descriptor rt_io_open took), so a line protocol is framed in a few lines:
 *
 *     rt_read_line_init(&s->line, s->reader);
 *     RT_AWAIT(&s->co, cx, &s->line);
 *     if (s->line.result <= 0) // 0: end of stream; < 0: an error
 *         ...;
 *     handle(s->line.data, s->line.len); // without the "\n" or "\r\n"
 *
 * An rt_writer collects small writes and sends them in one system call
 * when it is flushed or full.
 *
 * Both are operations of the common shape (see future.h). The reader's and
 * writer's memory is the caller's to free (rt_reader_free, rt_writer_free);
 * neither owns its rt_io, which the caller closes after freeing them (or
 * before: a freed reader never touches it again).
 * Threads: a reader (or writer) is used by one task at a time, and one
 * operation at a time: initialising an operation on a reader while another
 * is unfinished is refused (-EBUSY).
 * Never polled: every init that succeeds claims its reader or writer (marks
 * it busy) until the operation finishes or is dropped, so one initialised
 * and never polled must still be dropped (or awaited). Otherwise the
 * reader or writer stays busy for good: every later init on it is refused
 * with -EBUSY, initialising the same operation again included, and
 * rt_reader_peek returns NULL and rt_reader_discard 0. A drop touches the
 * reader or writer, never the rt_io: it comes before rt_reader_free or
 * rt_writer_free, and may come after rt_io_close.
 * Abort safety: a reader loses nothing when an operation is dropped: bytes
 * read from the descriptor stay in its buffer for the next operation. A
 * dropped write or flush leaves its bytes in the writer's buffer (a flush
 * may have sent part of them; the rest stay queued, in order). */
#ifndef ASYNCRT_BUFIO_H
#define ASYNCRT_BUFIO_H

#include <stddef.h>
#include <stdint.h>

#include "future.h"
#include "io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Reading ---------------------------------------------------------------*/

typedef struct rt_reader rt_reader;

/* Largest buffer a reader or writer takes. */
#define RT_BUFIO_MAX ((size_t)1 << 30)

/* A reader over io with a buffer of `capacity` bytes (>= 16; 0: 8192), which
 * is also the longest line it can return. Errors: -EINVAL (io or out NULL,
 * capacity out of range), -ENOMEM. Any thread. */
int rt_reader_new(rt_io *io, size_t capacity, rt_reader **out);

/* Frees the reader and the bytes it buffered (it must have no unfinished
 * operation). The rt_io is not closed. NULL is a no-op. */
void rt_reader_free(rt_reader *r);

/* Bytes buffered and not yet handed out (0 for NULL). */
size_t rt_reader_buffered(const rt_reader *r);

/* Reading up to a delimiter: an operation that finishes with result the
 * length of the bytes handed out, the delimiter included, in `data` (which
 * points into the reader's buffer: valid until the next operation on the
 * reader is initialised), or with 0 at the end of the stream with nothing
 * buffered. At the end of the stream, bytes buffered without a delimiter
 * are handed out as a last, unterminated piece. Errors: -EMSGSIZE (the
 * reader's capacity filled without a delimiter: nothing is consumed, and
 * the caller may give up or rt_reader_discard), the descriptor's errors.
 * rt_read_line is the same with '\n', and `len` is the length without the
 * trailing "\n" or "\r\n". A last piece at the end of the stream has no
 * "\n", so nothing is taken off it: "tail\r" finishes with result 5 and
 * `len` 5, its "\r" kept. With any other delimiter `len` is the result. */
typedef struct rt_read_until {
    RT_FUTURE_HEADER;
    rt_reader *reader; /* NULL once finished or dropped */
    int delim;         /* the delimiter byte */
    char *data;        /* the bytes, in the reader's buffer */
    size_t len;        /* rt_read_line: length without the line ending */
    rt_io_read read;   /* the read in flight (the reader's buffer) */
} rt_read_until;

/* Prepares a read up to the byte `delim` (0-255). Errors: -EINVAL (op or r
 * NULL, delim out of range), -EBUSY (another operation on r is
 * unfinished). */
int rt_read_until_init(rt_read_until *op, rt_reader *r, int delim);

/* Prepares a read of one line ('\n'; `len` without "\n" or "\r\n").
 * Errors as rt_read_until_init. */
int rt_read_line_init(rt_read_until *op, rt_reader *r);

/* Reading exactly n bytes into dst: an operation that finishes with result
 * n, or with the number of bytes copied (< n) when the stream ended first,
 * or with a descriptor error (the bytes copied so far, `got`, are in dst).
 * Bytes come from the reader's buffer first; dst must stay valid until the
 * operation finishes or is dropped (bytes copied into it by then are
 * consumed: `got` says how many). */
typedef struct rt_read_exact {
    RT_FUTURE_HEADER;
    rt_reader *reader;  /* NULL once finished or dropped */
    unsigned char *dst; /* where the bytes go, the caller's */
    size_t want;        /* n */
    size_t got;         /* copied so far */
    rt_io_read read;    /* the read in flight (the reader's buffer) */
} rt_read_exact;

/* Prepares the read of n bytes. Errors: -EINVAL (op or r NULL, dst NULL
 * with n > 0), -EBUSY (another operation on r is unfinished). */
int rt_read_exact_init(rt_read_exact *op, rt_reader *r, void *dst, size_t n);

/* The bytes buffered and not yet handed out, without consuming them (Go's
 * Peek): returns where they start and writes their count to *len (0 for
 * none). Valid until the next operation on r is initialised; not while one
 * is unfinished (returns NULL with *len 0 then). A server that answers
 * pipelined requests looks here for a further complete request before it
 * flushes its replies. r NULL: NULL with *len 0; len must not be NULL. */
const char *rt_reader_peek(const rt_reader *r, size_t *len);

/* Throws away up to n buffered bytes (after -EMSGSIZE, say) and returns how
 * many went. Not while an operation on r is unfinished (returns 0 then).
 * 0 for NULL. */
size_t rt_reader_discard(rt_reader *r, size_t n);

/* ---- Writing ---------------------------------------------------------------*/

typedef struct rt_writer rt_writer;

/* A writer over io with a buffer of `capacity` bytes (>= 16; 0: 8192).
 * Errors: -EINVAL (io or out NULL, capacity out of range), -ENOMEM. */
int rt_writer_new(rt_io *io, size_t capacity, rt_writer **out);

/* Frees the writer; bytes still buffered are not sent (flush first). The
 * rt_io is not closed. NULL is a no-op. */
void rt_writer_free(rt_writer *w);

/* Bytes buffered and not yet sent (0 for NULL). */
size_t rt_writer_buffered(const rt_writer *w);

/* Writing through the buffer: an operation that finishes with result len
 * once all len bytes are in the buffer or sent (bytes that do not fit are
 * made room for by sending what is buffered; a write larger than the
 * buffer goes straight to the descriptor after it), or with a descriptor
 * error. The bytes are copied when the operation finishes; buf must stay
 * valid until then. Buffered bytes reach the descriptor at a flush, or
 * when the buffer is full. */
typedef struct rt_writer_write {
    RT_FUTURE_HEADER;
    rt_writer *writer;     /* NULL once finished or dropped */
    const char *buf;       /* the caller's bytes */
    size_t len;            /* how many */
    size_t done;           /* of them, copied or sent so far */
    int phase;             /* 0: copying, 1: flushing the buffer, 2: sending buf */
    rt_io_write_all flush; /* the send in flight */
} rt_writer_write;

/* Prepares a write of len bytes (0 is allowed). Errors: -EINVAL (op or w
 * NULL, buf NULL with len > 0), -EBUSY (another operation on w is
 * unfinished). */
int rt_writer_write_init(rt_writer_write *op, rt_writer *w, const void *buf, size_t len);

/* Sending everything buffered: an operation that finishes with result the
 * number of bytes sent (0: nothing was buffered), or a descriptor error
 * (what was not sent stays buffered). */
typedef struct rt_writer_flush {
    RT_FUTURE_HEADER;
    rt_writer *writer;     /* NULL once finished or dropped */
    rt_io_write_all flush; /* the send in flight */
} rt_writer_flush;

/* Prepares a flush. Errors: -EINVAL (op or w NULL), -EBUSY (another
 * operation on w is unfinished). */
int rt_writer_flush_init(rt_writer_flush *op, rt_writer *w);

#ifdef __cplusplus
}
#endif
#endif
