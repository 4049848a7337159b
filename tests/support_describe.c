/* The checks, hand polling and pipe of support_describe.h, shared by the
 * describe suites. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_describe.h"

#include <string.h>

rt_wait_info describe(const rt_future *f)
{
    rt_wait_info info;
    memset(&info, 0x5a, sizeof info);
    cr_assert_eq(rt_future_describe(f, &info), 0);
    cr_assert_lt(strnlen(info.text, sizeof info.text), sizeof info.text, "text not terminated");
    return info;
}

void expect_words(const rt_wait_info *info, const char *words)
{
    cr_assert_not_null(strstr(info->text, words), "\"%s\" does not say \"%s\"", info->text, words);
}

void expect_no_words(const rt_wait_info *info, const char *words)
{
    cr_assert_null(strstr(info->text, words), "\"%s\" says \"%s\"", info->text, words);
}

void expect_fd_words(const rt_wait_info *info, int fd)
{
    char words[32];
    snprintf(words, sizeof words, "fd %d", fd);
    expect_words(info, words);
}

void expect_object_words(const rt_wait_info *info, const void *object)
{
    char words[32];
    snprintf(words, sizeof words, "%p", object);
    expect_words(info, words);
}

void expect_fields(const rt_wait_info *info, rt_wait_kind kind, int fd, int64_t deadline_ns,
                   const void *object, int64_t number)
{
    cr_assert_eq(info->kind, kind, "kind %d, not %d (\"%s\")", (int)info->kind, (int)kind,
                 info->text);
    cr_assert_eq(info->fd, fd, "fd %d, not %d (\"%s\")", info->fd, fd, info->text);
    cr_assert_eq(info->deadline_ns, deadline_ns, "deadline %lld, not %lld (\"%s\")",
                 (long long)info->deadline_ns, (long long)deadline_ns, info->text);
    cr_assert_eq(info->object, object, "object %p, not %p (\"%s\")", info->object, object,
                 info->text);
    cr_assert_eq(info->task_id, 0);
    cr_assert_eq(info->number, number, "number %lld, not %lld (\"%s\")", (long long)info->number,
                 (long long)number, info->text);
}

double seconds_after(const rt_wait_info *info, const char *words)
{
    const char *at = strstr(info->text, words);
    cr_assert_not_null(at, "\"%s\" does not say \"%s\"", info->text, words);
    double s;
    cr_assert_eq(sscanf(at + strlen(words), "%lf", &s), 1, "no seconds in \"%s\"", info->text);
    return s;
}

void poll_pending(rt_future *op, struct hand *h)
{
    cr_assert_eq(rt_future_poll(op, &h->cx), RT_PENDING, "finished with %lld",
                 (long long)op->result);
}

/* The event is static: a waker stored in an object (a group's owner slot)
 * may outlive the call. */
void poll_to_end(rt_future *op)
{
    static struct event woken = EVENT_INIT;
    rt_context cx = event_context(&woken);
    for (;;) {
        unsigned long seen = event_count(&woken);
        if (rt_future_poll(op, &cx) == RT_READY)
            return;
        cr_assert(event_wait_for(&woken, seen + 1), "the operation was never woken");
    }
}

rt_wait_info describe_pending(rt_future *op, struct hand *h)
{
    poll_pending(op, h);
    return describe(op);
}

void expect_wait_words(rt_future *op, struct hand *h, rt_wait_kind kind, int fd, const void *object,
                       const char *const *words)
{
    rt_wait_info info = h != NULL ? describe_pending(op, h) : describe(op);
    expect_fields(&info, kind, fd, 0, object, 0);
    for (; *words != NULL; words++)
        expect_words(&info, *words);
    if (fd >= 0)
        expect_fd_words(&info, fd);
    if (object != NULL)
        expect_object_words(&info, object);
    rt_future_drop(op);
}

void pipe_to_read(rt_runtime *rt, rt_io **reader, int *writer)
{
    int fds[2];
    make_pipe(fds);
    cr_assert_eq(rt_io_open(rt, fds[0], reader), 0);
    *writer = fds[1];
}
