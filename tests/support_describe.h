/* What the describe suites (test_describe.c, test_describe_io.c) share:
 * describing an operation into a struct filled with garbage, checks of the
 * fields and words of what it says, polling by hand, the one-call check of
 * an operation that waits, and a pipe to read. support_describe.c has the
 * functions. */
#ifndef RT_TESTS_SUPPORT_DESCRIBE_H
#define RT_TESTS_SUPPORT_DESCRIBE_H

#include "support.h"

#include <asyncrt/diag.h>

/* Describes f into a struct filled with garbage first, so that a field the
 * describe forgot shows. */
rt_wait_info describe(const rt_future *f);

/* The text says `words`, or does not. */
void expect_words(const rt_wait_info *info, const char *words);
void expect_no_words(const rt_wait_info *info, const char *words);

/* The text says "fd N". */
void expect_fd_words(const rt_wait_info *info, int fd);

/* The text says "%p" of object. */
void expect_object_words(const rt_wait_info *info, const void *object);

/* The fields a kind does not use are left empty. */
void expect_fields(const rt_wait_info *info, rt_wait_kind kind, int fd, int64_t deadline_ns,
                   const void *object, int64_t number);

/* The seconds written right after `words` ("sleep until +1.500 s"). */
double seconds_after(const rt_wait_info *info, const char *words);

/* Polls op once by hand, expecting it to wait. */
void poll_pending(rt_future *op, struct hand *h);

/* Polls op by hand until it finishes, waiting for its wake-ups. */
void poll_to_end(rt_future *op);

/* poll_pending, then describe: for the operations whose checks go beyond
 * what EXPECT_WAIT checks (a deadline, a number, a descriptor known only
 * once the operation waits). */
rt_wait_info describe_pending(rt_future *op, struct hand *h);

/* Most operations are checked the same way: polled once by hand so that
 * they wait (with h; h NULL: described before any poll, for operations that
 * seldom wait), described, and dropped. What they say must be `kind`, `fd`
 * (-1: none; else the text also says "fd N") and `object` (NULL: none; else
 * the text also names it by "%p"), with no deadline or number, and the text
 * must say each of `words`, a NULL-ended list. */
void expect_wait_words(rt_future *op, struct hand *h, rt_wait_kind kind, int fd, const void *object,
                       const char *const *words);

/* expect_wait_words on an operation `op` (as RT_DROP takes it) with its
 * words listed in place: EXPECT_WAIT(&rd, &h, RT_WAIT_READ, fd, NULL,
 * "read on "). */
#define EXPECT_WAIT(op, h, kind, fd, object, ...)                                                  \
    expect_wait_words(&(op)->future, (h), (kind), (fd), (object),                                  \
                      (const char *const[]){__VA_ARGS__, NULL})

/* A pipe whose read end is registered with rt (*reader), its write end a
 * plain descriptor of the test (*writer). */
void pipe_to_read(rt_runtime *rt, rt_io **reader, int *writer);

#endif
