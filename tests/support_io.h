/* What the io suites (test_io_ready.c, test_io_stream.c, test_io_nap.c,
 * test_io_fd.c, test_io_wakeup.c) share: pipes and TCP pairs, the byte
 * pattern every stream carries, and tasks that read once or check what they
 * read. support_io.c has the functions. */
#ifndef RT_TESTS_SUPPORT_IO_H
#define RT_TESTS_SUPPORT_IO_H

#include "support.h"

/* Whether fd is an open descriptor of this process. */
bool fd_is_open(int fd);

/* A pipe whose two ends are rt_io objects of rt. */
void open_pipe(rt_runtime *rt, rt_io **r, rt_io **w, int fds[2]);

/* A connected TCP pair on 127.0.0.1, both ends non-blocking and close-on-exec
 * with TCP_NODELAY: fds[0] is the accepted end, fds[1] the connecting one.
 * On loopback a send is queued at the peer before it returns. */
void tcp_pair(int fds[2]);

/* The byte at offset i of every stream these tests send. */
unsigned char pattern(size_t i);

/* Reads once into the test's buffer, signalling reader_pending at every
 * pending poll; the result is the byte count or -errno. A read holds nothing
 * but the waker it leaves in the rt_io, so the task needs no drop function;
 * one_read_drop drops the read (for a task aborted while it waits, while
 * its rt_io is still open). */
struct one_read {
    rt_coro co;
    rt_io *io;
    size_t len;
    ssize_t result;
    unsigned char *buf; /* owned by the test */
    rt_io_read rd;      /* the read */
};

extern struct event reader_pending;

rt_poll one_read_poll(void *state, rt_context *cx, void **out);
void one_read_drop(void *state);

/* Reads and checks every byte against pattern() until `expected` bytes or
 * end of stream; the result is the byte count, or -errno, or -EILSEQ on a
 * wrong byte. Its state begins with its rt_coro: rt_coro_drop may be its
 * drop function. */
struct checking_reader {
    rt_coro co;
    rt_io *io;
    size_t expected; /* stop after this many bytes; SIZE_MAX: read to end of stream */
    size_t chunk;    /* bytes asked per read */
    size_t off;
    size_t mismatch; /* first bad offset + 1, or 0 */
    ssize_t result;
    rt_io_read rd; /* the read in flight */
    unsigned char buf[4096];
};

rt_poll checking_reader_poll(void *state, rt_context *cx, void **out);

#endif
