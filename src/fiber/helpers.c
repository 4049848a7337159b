/* The blocking-style helpers of fibers (include/asyncrt/fiber.h): each is
 * its operation's init and the one await, with the operation in the
 * helper's frame on the fiber's stack, which never moves. An init that
 * fails returns its error before anything is awaited. */
#include <errno.h>
#include <stddef.h>

#include <asyncrt/fiber.h>
#include <asyncrt/net.h>
#include <asyncrt/timer.h>

#include "common.h"
#include "fiber_internal.h"

/* The start of each helper: the calling fiber, with the await site noted
 * (NULL outside a fiber). */
static inline rt__fiber *begin_await(const char *file, int line, const char *function,
                                     rt_future *op, const void *frame)
{
    rt__fiber *f = rt__fiber_current();
    if (f != NULL)
        rt__fiber_note_await(f, file, line, function, op, frame);
    return f;
}
#define BEGIN(op) begin_await(file, line, function, (op), __builtin_frame_address(0))

RT_EXPORT int rt_sleep_await_with_site(const char *file, int line, const char *function,
                                       int64_t duration_ns)
{
    rt_sleep op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_sleep_init(&op, f->task->rt, duration_ns);
    return err < 0 ? err : (int)rt__fiber_await_op(f, &op.future);
}

RT_EXPORT int rt_chan_send_await_with_site(const char *file, int line, const char *function,
                                           rt_chan *ch, void *value)
{
    rt_chan_send op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_chan_send_init(&op, ch, value);
    return err < 0 ? err : (int)rt__fiber_await_op(f, &op.future);
}

RT_EXPORT int rt_chan_recv_await_with_site(const char *file, int line, const char *function,
                                           rt_chan *ch, void **value)
{
    if (value != NULL)
        *value = NULL;
    rt_chan_recv op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_chan_recv_init(&op, ch);
    if (err == 0)
        err = (int)rt__fiber_await_op(f, &op.future);
    if (err == 0 && value != NULL)
        *value = op.value;
    return err;
}

RT_EXPORT int rt_mutex_lock_await_with_site(const char *file, int line, const char *function,
                                            rt_mutex *m)
{
    rt_mutex_lock op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_mutex_lock_init(&op, m);
    return err < 0 ? err : (int)rt__fiber_await_op(f, &op.future);
}

RT_EXPORT int64_t rt_io_read_await_with_site(const char *file, int line, const char *function,
                                             rt_io *io, void *buf, size_t len)
{
    rt_io_read op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_io_read_init(&op, io, buf, len);
    return err < 0 ? err : rt__fiber_await_op(f, &op.future);
}

RT_EXPORT int64_t rt_io_write_all_await_with_site(const char *file, int line, const char *function,
                                                  rt_io *io, const void *buf, size_t len)
{
    rt_io_write_all op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_io_write_all_init(&op, io, buf, len);
    return err < 0 ? err : rt__fiber_await_op(f, &op.future);
}

/* The end of an accept or a connect: on success the connection goes to
 * *conn, or is closed when nobody would own it. */
static int hand_over(int64_t result, rt_io *got, rt_io **conn)
{
    if (result < 0)
        return (int)result;
    if (conn != NULL)
        *conn = got;
    else
        rt_io_close(got);
    return 0;
}

RT_EXPORT int rt_tcp_accept_await_with_site(const char *file, int line, const char *function,
                                            rt_io *listener, rt_io **conn)
{
    if (conn != NULL)
        *conn = NULL;
    rt_tcp_accept op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_tcp_accept_init(&op, listener);
    if (err < 0)
        return err;
    int64_t r = rt__fiber_await_op(f, &op.future); /* before op.conn is read */
    return hand_over(r, op.conn, conn);
}

RT_EXPORT int rt_tcp_connect_await_with_site(const char *file, int line, const char *function,
                                             const struct sockaddr *addr, socklen_t addr_len,
                                             rt_io **conn)
{
    if (conn != NULL)
        *conn = NULL;
    rt_tcp_connect op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_tcp_connect_init(&op, f->task->rt, addr, addr_len);
    if (err < 0)
        return err;
    int64_t r = rt__fiber_await_op(f, &op.future); /* before op.conn is read */
    return hand_over(r, op.conn, conn);
}

RT_EXPORT int64_t rt_read_line_await_with_site(const char *file, int line, const char *function,
                                               rt_reader *r, char **text, size_t *len)
{
    if (text != NULL)
        *text = NULL;
    if (len != NULL)
        *len = 0;
    rt_read_until op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_read_line_init(&op, r);
    if (err < 0)
        return err;
    int64_t n = rt__fiber_await_op(f, &op.future);
    if (n > 0) {
        if (text != NULL)
            *text = op.data;
        if (len != NULL)
            *len = op.len;
    }
    return n;
}

RT_EXPORT int64_t rt_writer_write_await_with_site(const char *file, int line, const char *function,
                                                  rt_writer *w, const void *buf, size_t len)
{
    rt_writer_write op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_writer_write_init(&op, w, buf, len);
    return err < 0 ? err : rt__fiber_await_op(f, &op.future);
}

RT_EXPORT int64_t rt_writer_flush_await_with_site(const char *file, int line, const char *function,
                                                  rt_writer *w)
{
    rt_writer_flush op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_writer_flush_init(&op, w);
    return err < 0 ? err : rt__fiber_await_op(f, &op.future);
}

RT_EXPORT int64_t rt_io_copy_await_with_site(const char *file, int line, const char *function,
                                             rt_io *from, rt_io *to, void *buf, size_t len)
{
    rt_io_copy op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    int err = rt_io_copy_init(&op, from, to, buf, len);
    return err < 0 ? err : rt__fiber_await_op(f, &op.future);
}

/* A connection whose fiber never runs (no stack for it) is closed. */
static void close_conn(void *conn)
{
    rt_io_close(conn);
}

RT_EXPORT int rt_fiber_serve_with_site(const char *file, int line, const char *function,
                                       const char *site, rt_io *listener,
                                       const rt_fiber_options *opts, rt_fiber_fn handler)
{
    rt_tcp_accept op;
    rt__fiber *f = BEGIN(&op.future);
    if (f == NULL)
        return -EPERM;
    if (listener == NULL || handler == NULL)
        return -EINVAL;
    rt_fiber_options each;
    if (opts != NULL)
        each = *opts;
    else
        rt_fiber_options_init(&each);
    if (each.release == NULL)
        each.release = close_conn;
    for (;;) {
        rt__fiber_note_await(f, file, line, function, &op.future, __builtin_frame_address(0));
        int err = rt_tcp_accept_init(&op, listener);
        if (err == 0)
            err = (int)rt__fiber_await_op(f, &op.future);
        if (err == 0) {
            if (rt_fiber_spawn_with_site(site, NULL, &each, handler, op.conn, NULL) < 0)
                rt_io_close(op.conn); /* refused: the peer sees it closed */
            continue;
        }
        if (err == -EMFILE || err == -ENFILE || err == -ENOMEM) {
            /* The connection stays queued: take it once resources are free. */
            err = rt_sleep_await_with_site(file, line, function, RT_MS(10));
            if (err == -ECANCELED)
                return err;
            continue;
        }
        if (err == -ECANCELED || err == -EINVAL || err == -EBADF || err == -ENOTSOCK ||
            err == -ESHUTDOWN || err == -EOPNOTSUPP)
            return err;
        /* Anything else ended that one connection (-ECONNABORTED, -EPROTO,
         * -EPERM from a firewall, -ENOBUFS...): the next one. */
    }
}
