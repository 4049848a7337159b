/* The pipes, TCP pairs and reader tasks of support_io.h, shared by the io
 * suites. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

bool fd_is_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

void open_pipe(rt_runtime *rt, rt_io **r, rt_io **w, int fds[2])
{
    make_pipe(fds);
    int rc = rt_io_open(rt, fds[0], r);
    cr_assert_eq(rc, 0, "rt_io_open(read end): %s", rt_strerror(rc));
    rc = rt_io_open(rt, fds[1], w);
    cr_assert_eq(rc, 0, "rt_io_open(write end): %s", rt_strerror(rc));
    cr_assert_eq(rt_io_fd(*r), fds[0]);
    cr_assert_eq(rt_io_fd(*w), fds[1]);
}

unsigned char pattern(size_t i)
{
    uint32_t x = (uint32_t)i * 2654435761u;
    return (unsigned char)((x >> 24) ^ (x >> 11));
}

struct event reader_pending = EVENT_INIT;

rt_poll one_read_poll(void *state, rt_context *cx, void **out)
{
    struct one_read *r = state;
    RT_CORO_BEGIN(&r->co);
    rt_io_read_init(&r->rd, r->io, r->buf, r->len);
    RT_AWAIT_POLL(&r->co, note_pending(RT_POLL_OP(&r->rd, cx), &reader_pending));
    r->result = (ssize_t)r->rd.result;
    RT_RETURN(&r->co, out, (intptr_t)r->result);
    RT_CORO_END(&r->co, out);
}

void one_read_drop(void *state)
{
    struct one_read *r = state;
    RT_DROP(&r->rd);
}

void tcp_pair(int fds[2])
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(l, 0, "socket: %s", strerror(errno));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    cr_assert_eq(bind(l, (struct sockaddr *)&sa, sl), 0, "bind: %s", strerror(errno));
    cr_assert_eq(listen(l, 1), 0);
    cr_assert_eq(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
    fds[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fds[1], 0);
    cr_assert_eq(connect(fds[1], (struct sockaddr *)&sa, sl), 0, "connect: %s", strerror(errno));
    fds[0] = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    cr_assert_geq(fds[0], 0, "accept4: %s", strerror(errno));
    close(l);
    int one = 1;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), 0);
    cr_assert_eq(fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK), 0);
}

rt_poll checking_reader_poll(void *state, rt_context *cx, void **out)
{
    struct checking_reader *s = state;
    RT_CORO_BEGIN(&s->co);
    while (s->off < s->expected) {
        rt_io_read_init(&s->rd, s->io, s->buf, s->chunk);
        RT_AWAIT(&s->co, cx, &s->rd);
        s->result = (ssize_t)s->rd.result;
        if (s->result < 0)
            RT_RETURN(&s->co, out, (intptr_t)s->result);
        if (s->result == 0)
            break;
        if ((size_t)s->result > s->chunk)
            RT_RETURN(&s->co, out, (intptr_t)-E2BIG);
        for (ssize_t i = 0; i < s->result; i++) {
            if (s->buf[i] != pattern(s->off + (size_t)i)) {
                s->mismatch = s->off + (size_t)i + 1;
                RT_RETURN(&s->co, out, (intptr_t)-EILSEQ);
            }
        }
        s->off += (size_t)s->result;
    }
    RT_RETURN(&s->co, out, (intptr_t)s->off);
    RT_CORO_END(&s->co, out);
}
