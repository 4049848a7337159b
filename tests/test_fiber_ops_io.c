/* Black-box tests that a fiber awaits every descriptor and file operation
 * of the library through the one generic call, rt_fiber_await
 * (asyncrt/fiber.h), on the operation structs a coroutine gives RT_AWAIT,
 * and through the blocking-style helpers of fiber.h where they exist:
 * TCP and UDP on 127.0.0.1, Unix stream and datagram sockets with
 * descriptors passed between them, readiness and copies on pipes, the
 * buffered reader and writer, files and directories on the blocking pool,
 * and name lookups and connections by name. The two ends of each exchange
 * are fibers of one runtime, on real sockets and pipes. test_fiber_ops.c
 * covers the other operations. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

TestSuite(fiber_ops_io, .timeout = 120, .fini = fail_on_leaks);

/* Spawns a(arg_a) and b(arg_b) as fibers of rt and waits for both, which
 * must finish with status 0. */
static void run_two_fibers(rt_runtime *rt, rt_fiber_fn a, void *arg_a, rt_fiber_fn b, void *arg_b)
{
    rt_task *ta, *tb;
    cr_assert_eq(rt_fiber_spawn(rt, a, arg_a, &ta), 0);
    cr_assert_eq(rt_fiber_spawn(rt, b, arg_b, &tb), 0);
    cr_assert_eq(task_wait_status(ta, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(task_wait_status(tb, WAIT_DEADLINE_NS, NULL), 0);
}

/* More than a loopback socket's buffers take at once by default, so that
 * the writes below usually wait for the reader. */
#define BIG ((size_t)1 << 20)
static unsigned char big[BIG];

static void fill_big(void)
{
    for (size_t i = 0; i < BIG; i++)
        big[i] = (unsigned char)(i * 7 + i / 251);
}

/* Reads from io until the end of the stream into buf (room for size
 * bytes), one generic read at a time. Returns the byte count. */
static size_t read_to_end(rt_io *io, unsigned char *buf, size_t size)
{
    size_t got = 0;
    for (;;) {
        cr_assert_lt(got, size, "more bytes than were sent");
        rt_io_read rd;
        cr_assert_eq(rt_io_read_init(&rd, io, buf + got, size - got), 0);
        int64_t n = rt_fiber_await(&rd.future);
        cr_assert_geq(n, 0, "read: %s", rt_strerror((int)n));
        if (n == 0)
            return got;
        got += (size_t)n;
    }
}

static bool same_inet(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
    return x->sin_family == AF_INET && y->sin_family == AF_INET && x->sin_port == y->sin_port &&
           x->sin_addr.s_addr == y->sin_addr.s_addr;
}

/* A listener on 127.0.0.1, port 0, and the address the kernel bound. */
struct endpoint {
    rt_io *listener;
    struct sockaddr_storage addr;
    socklen_t len;
    struct sockaddr_storage client; /* the client's own address, as it sees it */
    struct sockaddr_storage peer;   /* the client's address, as the accept saw it */
};

static void listen_loopback(rt_runtime *rt, struct endpoint *e)
{
    struct sockaddr_storage any;
    socklen_t len;
    cr_assert_eq(rt_net_addr("127.0.0.1", 0, &any, &len), 0);
    cr_assert_eq(
        rt_tcp_listen(rt, (struct sockaddr *)&any, len, 16, RT_NET_REUSEADDR, &e->listener), 0);
    cr_assert_eq(rt_net_local_addr(e->listener, &e->addr, &e->len), 0);
    cr_assert_neq(((struct sockaddr_in *)&e->addr)->sin_port, 0, "a port was bound");
}

/* ---- TCP ------------------------------------------------------------------ */

/* Accepts one connection, reads the client's megabyte, then answers with a
 * plain write and a write_all of its own megabyte, and closes. */
static void *tcp_server(void *arg)
{
    struct endpoint *e = arg;
    rt_tcp_accept accept;
    cr_assert_eq(rt_tcp_accept_init(&accept, e->listener), 0);
    cr_assert_eq(rt_fiber_await(&accept.future), 0);
    e->peer = accept.peer;
    rt_io *conn = accept.conn;
    unsigned char *in = malloc(BIG);
    cr_assert_not_null(in);
    size_t got = 0;
    while (got < BIG) {
        rt_io_read rd;
        cr_assert_eq(rt_io_read_init(&rd, conn, in + got, BIG - got), 0);
        int64_t n = rt_fiber_await(&rd.future);
        cr_assert_gt(n, 0, "the client's bytes stopped at %zu", got);
        got += (size_t)n;
    }
    cr_assert_eq(memcmp(in, big, BIG), 0);
    free(in);
    rt_io_write wr;
    cr_assert_eq(rt_io_write_init(&wr, conn, "ok:", 3), 0);
    cr_assert_eq(rt_fiber_await(&wr.future), 3, "an empty socket buffer takes 3 bytes");
    cr_assert_eq(rt_io_write_all_await(conn, big, BIG), (int64_t)BIG);
    cr_assert_eq(rt_io_close(conn), 0);
    return NULL;
}

static void *tcp_client(void *arg)
{
    struct endpoint *e = arg;
    rt_tcp_connect connect;
    cr_assert_eq(rt_tcp_connect_init(&connect, NULL, (struct sockaddr *)&e->addr, e->len), 0);
    cr_assert_eq(rt_fiber_await(&connect.future), 0);
    rt_io *conn = connect.conn;
    socklen_t len;
    cr_assert_eq(rt_net_local_addr(conn, &e->client, &len), 0);
    rt_io_write_all all;
    cr_assert_eq(rt_io_write_all_init(&all, conn, big, BIG), 0);
    cr_assert_eq(rt_fiber_await(&all.future), (int64_t)BIG);
    cr_assert_eq(all.progress, BIG);
    unsigned char *in = malloc(BIG + 16);
    cr_assert_not_null(in);
    cr_assert_eq(read_to_end(conn, in, BIG + 16), BIG + 3);
    cr_assert_eq(memcmp(in, "ok:", 3), 0);
    cr_assert_eq(memcmp(in + 3, big, BIG), 0);
    free(in);
    cr_assert_eq(rt_io_close(conn), 0);
    return NULL;
}

Test(fiber_ops_io, tcp_accept_connect_read_write_and_write_all_between_two_fibers)
{
    fill_big();
    rt_runtime *rt = new_runtime(2);
    struct endpoint e = {0};
    listen_loopback(rt, &e);
    run_two_fibers(rt, tcp_server, &e, tcp_client, &e);
    cr_assert(same_inet(&e.peer, &e.client), "the accept saw the client's own address");
    cr_assert_eq(rt_io_close(e.listener), 0);
    finish_runtime(rt, 0);
}

/* The same exchange through the blocking-style helpers of fiber.h: an echo
 * of what the client sends until it shuts its side down. */
static void *tcp_echo_server(void *arg)
{
    struct endpoint *e = arg;
    rt_io *conn;
    cr_assert_eq(rt_tcp_accept_await(e->listener, &conn), 0);
    char buf[256];
    int64_t n;
    while ((n = rt_io_read_await(conn, buf, sizeof buf)) > 0)
        cr_assert_eq(rt_io_write_all_await(conn, buf, (size_t)n), n);
    cr_assert_eq(n, 0);
    cr_assert_eq(rt_io_close(conn), 0);
    return NULL;
}

static void *tcp_echo_client(void *arg)
{
    struct endpoint *e = arg;
    rt_io *conn;
    cr_assert_eq(rt_tcp_connect_await((struct sockaddr *)&e->addr, e->len, &conn), 0);
    static const char hello[] = "hello through the helpers";
    cr_assert_eq(rt_io_write_all_await(conn, hello, sizeof hello), (int64_t)sizeof hello);
    cr_assert_eq(rt_tcp_shutdown(conn, SHUT_WR), 0);
    unsigned char back[64];
    cr_assert_eq(read_to_end(conn, back, sizeof back), sizeof hello);
    cr_assert_str_eq((char *)back, hello);
    cr_assert_eq(rt_io_close(conn), 0);
    return NULL;
}

Test(fiber_ops_io, tcp_through_the_blocking_style_helpers)
{
    rt_runtime *rt = new_runtime(2);
    struct endpoint e = {0};
    listen_loopback(rt, &e);
    run_two_fibers(rt, tcp_echo_server, &e, tcp_echo_client, &e);
    cr_assert_eq(rt_io_close(e.listener), 0);
    finish_runtime(rt, 0);
}

/* ---- UDP ------------------------------------------------------------------ */

struct udp_pair {
    rt_io *a, *b;
    struct sockaddr_storage a_addr, b_addr;
    socklen_t a_len, b_len;
};

/* On a: receives "ping" and answers "pong" to its sender, then receives
 * what b sends once connected. */
static void *udp_answerer(void *arg)
{
    struct udp_pair *p = arg;
    char buf[64];
    rt_udp_recv_from recv;
    cr_assert_eq(rt_udp_recv_from_init(&recv, p->a, buf, sizeof buf), 0);
    cr_assert_eq(rt_fiber_await(&recv.future), 4);
    cr_assert_eq(memcmp(buf, "ping", 4), 0);
    cr_assert(same_inet(&recv.from, &p->b_addr), "the sender is b");
    rt_udp_send_to send;
    cr_assert_eq(
        rt_udp_send_to_init(&send, p->a, "pong", 4, (struct sockaddr *)&recv.from, recv.from_len),
        0);
    cr_assert_eq(rt_fiber_await(&send.future), 4);
    cr_assert_eq(rt_udp_recv_from_init(&recv, p->a, buf, sizeof buf), 0);
    cr_assert_eq(rt_fiber_await(&recv.future), 5);
    cr_assert_eq(memcmp(buf, "again", 5), 0);
    cr_assert(same_inet(&recv.from, &p->b_addr));
    return NULL;
}

static void *udp_asker(void *arg)
{
    struct udp_pair *p = arg;
    rt_udp_send_to send;
    cr_assert_eq(
        rt_udp_send_to_init(&send, p->b, "ping", 4, (struct sockaddr *)&p->a_addr, p->a_len), 0);
    cr_assert_eq(rt_fiber_await(&send.future), 4);
    char buf[64];
    rt_udp_recv_from recv;
    cr_assert_eq(rt_udp_recv_from_init(&recv, p->b, buf, sizeof buf), 0);
    cr_assert_eq(rt_fiber_await(&recv.future), 4);
    cr_assert_eq(memcmp(buf, "pong", 4), 0);
    cr_assert(same_inet(&recv.from, &p->a_addr), "the answer comes from a");
    /* Connected, a send needs no address. */
    cr_assert_eq(rt_udp_connect(p->b, (struct sockaddr *)&p->a_addr, p->a_len), 0);
    cr_assert_eq(rt_udp_send_to_init(&send, p->b, "again", 5, NULL, 0), 0);
    cr_assert_eq(rt_fiber_await(&send.future), 5);
    return NULL;
}

Test(fiber_ops_io, udp_datagrams_between_two_fibers)
{
    rt_runtime *rt = new_runtime(2);
    struct udp_pair p;
    struct sockaddr_storage any;
    socklen_t len;
    cr_assert_eq(rt_net_addr("127.0.0.1", 0, &any, &len), 0);
    cr_assert_eq(rt_udp_bind(rt, (struct sockaddr *)&any, len, 0, &p.a), 0);
    cr_assert_eq(rt_udp_bind(rt, (struct sockaddr *)&any, len, 0, &p.b), 0);
    cr_assert_eq(rt_net_local_addr(p.a, &p.a_addr, &p.a_len), 0);
    cr_assert_eq(rt_net_local_addr(p.b, &p.b_addr, &p.b_len), 0);
    run_two_fibers(rt, udp_answerer, &p, udp_asker, &p);
    cr_assert_eq(rt_io_close(p.a), 0);
    cr_assert_eq(rt_io_close(p.b), 0);
    finish_runtime(rt, 0);
}

/* ---- Unix sockets --------------------------------------------------------- */

struct unix_stream {
    rt_io *listener;
    char name[64];
};

static void *unix_server(void *arg)
{
    struct unix_stream *u = arg;
    rt_unix_accept accept;
    cr_assert_eq(rt_unix_accept_init(&accept, u->listener), 0);
    cr_assert_eq(rt_fiber_await(&accept.future), 0);
    rt_io *conn = accept.conn;
    rt_unix_cred cred;
    cr_assert_eq(rt_unix_peer_cred(conn, &cred), 0);
    cr_assert_eq(cred.pid, getpid(), "the peer is this process");
    char buf[8];
    size_t got = 0;
    while (got < 5) {
        rt_io_read rd;
        cr_assert_eq(rt_io_read_init(&rd, conn, buf + got, 5 - got), 0);
        int64_t n = rt_fiber_await(&rd.future);
        cr_assert_gt(n, 0);
        got += (size_t)n;
    }
    cr_assert_eq(memcmp(buf, "hello", 5), 0);
    rt_io_write_all all;
    cr_assert_eq(rt_io_write_all_init(&all, conn, "world", 5), 0);
    cr_assert_eq(rt_fiber_await(&all.future), 5);
    cr_assert_eq(rt_io_close(conn), 0);
    return NULL;
}

static void *unix_client(void *arg)
{
    struct unix_stream *u = arg;
    rt_unix_connect connect;
    cr_assert_eq(rt_unix_connect_init(&connect, NULL, u->name), 0);
    cr_assert_eq(rt_fiber_await(&connect.future), 0);
    rt_io *conn = connect.conn;
    cr_assert_eq(rt_io_write_all_await(conn, "hello", 5), 5);
    unsigned char buf[16];
    cr_assert_eq(read_to_end(conn, buf, sizeof buf), 5);
    cr_assert_eq(memcmp(buf, "world", 5), 0);
    cr_assert_eq(rt_io_close(conn), 0);
    return NULL;
}

Test(fiber_ops_io, unix_stream_accept_and_connect_between_two_fibers)
{
    rt_runtime *rt = new_runtime(2);
    struct unix_stream u;
    snprintf(u.name, sizeof u.name, "@asyncrt-fiber-ops-%d", (int)getpid());
    cr_assert_eq(rt_unix_listen(rt, u.name, 8, 0, &u.listener), 0);
    run_two_fibers(rt, unix_server, &u, unix_client, &u);
    cr_assert_eq(rt_io_close(u.listener), 0);
    finish_runtime(rt, 0);
}

struct unix_dgrams {
    rt_io *a, *b;          /* datagram sockets, autobound */
    struct sockaddr_un at; /* a's address */
    socklen_t at_len;      /* its length */
    rt_io *x, *y;          /* a connected stream pair */
    int pipe_fds[2];       /* x sends the write end to y */
};

/* On a, then y: a datagram answered to its sender, then a descriptor
 * received and written through. */
static void *unix_receiver(void *arg)
{
    struct unix_dgrams *u = arg;
    char buf[16];
    rt_unix_recv_from recv;
    cr_assert_eq(rt_unix_recv_from_init(&recv, u->a, buf, sizeof buf), 0);
    cr_assert_eq(rt_fiber_await(&recv.future), 4);
    cr_assert_eq(memcmp(buf, "ping", 4), 0);
    cr_assert(!recv.truncated);
    cr_assert_gt(recv.from_len, sizeof(sa_family_t), "an autobound sender can be answered");
    rt_unix_send_to send;
    cr_assert_eq(rt_unix_send_to_init(&send, u->a, "pong", 4, &recv.from, recv.from_len), 0);
    cr_assert_eq(rt_fiber_await(&send.future), 4);
    rt_unix_recv_fds fds;
    cr_assert_eq(rt_unix_recv_fds_init(&fds, u->y, buf, sizeof buf, 1), 0);
    cr_assert_eq(rt_fiber_await(&fds.future), 1);
    cr_assert_eq(buf[0], 'f');
    cr_assert_eq(fds.nfds, 1);
    cr_assert(!fds.fds_truncated);
    cr_assert_eq(write(fds.fds[0], "via", 3), 3, "the descriptor received is the pipe's");
    close(fds.fds[0]);
    return NULL;
}

static void *unix_sender(void *arg)
{
    struct unix_dgrams *u = arg;
    rt_unix_send_to send;
    cr_assert_eq(rt_unix_send_to_init(&send, u->b, "ping", 4, &u->at, u->at_len), 0);
    cr_assert_eq(rt_fiber_await(&send.future), 4);
    char buf[16];
    rt_unix_recv_from recv;
    cr_assert_eq(rt_unix_recv_from_init(&recv, u->b, buf, sizeof buf), 0);
    cr_assert_eq(rt_fiber_await(&recv.future), 4);
    cr_assert_eq(memcmp(buf, "pong", 4), 0);
    rt_unix_send_fds fds;
    cr_assert_eq(rt_unix_send_fds_init(&fds, u->x, "f", 1, &u->pipe_fds[1], 1), 0);
    cr_assert_eq(rt_fiber_await(&fds.future), 1);
    return NULL;
}

Test(fiber_ops_io, unix_datagrams_and_passed_descriptors_between_two_fibers)
{
    rt_runtime *rt = new_runtime(2);
    struct unix_dgrams u;
    cr_assert_eq(rt_unix_dgram_bind(rt, NULL, 0, &u.a), 0);
    cr_assert_eq(rt_unix_dgram_bind(rt, NULL, 0, &u.b), 0);
    cr_assert_eq(rt_unix_local_addr(u.a, &u.at, &u.at_len), 0);
    cr_assert_eq(rt_unix_pair(rt, SOCK_STREAM, &u.x, &u.y), 0);
    make_pipe(u.pipe_fds);
    run_two_fibers(rt, unix_receiver, &u, unix_sender, &u);
    char buf[8] = {0};
    cr_assert_eq(read(u.pipe_fds[0], buf, sizeof buf), 3);
    cr_assert_str_eq(buf, "via");
    close(u.pipe_fds[0]);
    close(u.pipe_fds[1]);
    rt_io *ios[] = {u.a, u.b, u.x, u.y};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(rt_io_close(ios[i]), 0);
    finish_runtime(rt, 0);
}

/* ---- readiness and copies on pipes --------------------------------------- */

/* A pipeline of three fibers: a writer into pipe 1, a copy from pipe 1 to
 * pipe 2 (which first awaits readiness), and a reader of pipe 2. */
struct pipeline {
    rt_io *in_w, *in_r, *out_w, *out_r;
    struct event ready;
};

static void *copies(void *arg)
{
    struct pipeline *p = arg;
    rt_io_ready ready;
    cr_assert_eq(rt_io_readable_init(&ready, p->in_r), 0);
    event_signal(&p->ready);
    cr_assert_eq(rt_fiber_await(&ready.future), 0);
    char buf[16384];
    rt_io_copy copy;
    cr_assert_eq(rt_io_copy_init(&copy, p->in_r, p->out_w, buf, sizeof buf), 0);
    cr_assert_eq(rt_fiber_await(&copy.future), (int64_t)BIG);
    cr_assert_eq(copy.copied, BIG);
    cr_assert(!copy.write_failed);
    cr_assert_eq(rt_io_close(p->out_w), 0, "the reader sees the end of the stream");
    return NULL;
}

static void *writes_into_the_pipeline(void *arg)
{
    struct pipeline *p = arg;
    rt_io_ready writable;
    cr_assert_eq(rt_io_writable_init(&writable, p->in_w), 0);
    cr_assert_eq(rt_fiber_await(&writable.future), 0);
    cr_assert_eq(rt_io_write_all_await(p->in_w, big, BIG), (int64_t)BIG);
    cr_assert_eq(rt_io_close(p->in_w), 0);
    return NULL;
}

static void *reads_the_pipeline(void *arg)
{
    struct pipeline *p = arg;
    unsigned char *in = malloc(BIG + 16);
    cr_assert_not_null(in);
    cr_assert_eq(read_to_end(p->out_r, in, BIG + 16), BIG);
    cr_assert_eq(memcmp(in, big, BIG), 0);
    free(in);
    return NULL;
}

Test(fiber_ops_io, readiness_and_a_copy_between_pipes)
{
    fill_big();
    rt_runtime *rt = new_runtime(2);
    struct pipeline p = {.ready = EVENT_INIT};
    int one[2], two[2];
    make_pipe(one);
    make_pipe(two);
    cr_assert_eq(rt_io_open(rt, one[0], &p.in_r), 0);
    cr_assert_eq(rt_io_open(rt, one[1], &p.in_w), 0);
    cr_assert_eq(rt_io_open(rt, two[0], &p.out_r), 0);
    cr_assert_eq(rt_io_open(rt, two[1], &p.out_w), 0);
    rt_task *copy;
    cr_assert_eq(rt_fiber_spawn(rt, copies, &p, &copy), 0);
    /* The copy waits for readiness before anything is written. */
    cr_assert(event_wait_for(&p.ready, 1));
    (void)wait_task_waiting(rt, rt_task_id(copy));
    run_two_fibers(rt, writes_into_the_pipeline, &p, reads_the_pipeline, &p);
    cr_assert_eq(task_wait_status(copy, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_io_close(p.in_r), 0);
    cr_assert_eq(rt_io_close(p.out_r), 0);
    finish_runtime(rt, 0);
}

/* ---- bufio.h -------------------------------------------------------------- */

#define BLOCK 200

struct buffered {
    rt_io *x, *y; /* a stream pair: the writer's end, the reader's end */
};

static void *writes_buffered(void *arg)
{
    struct buffered *b = arg;
    rt_writer *w;
    cr_assert_eq(rt_writer_new(b->x, 64, &w), 0);
    static const char *const pieces[] = {"first line\r\n", "second\n", "a,b", "\n"};
    for (int i = 0; i < 4; i++) {
        rt_writer_write write;
        cr_assert_eq(rt_writer_write_init(&write, w, pieces[i], strlen(pieces[i])), 0);
        cr_assert_eq(rt_fiber_await(&write.future), (int64_t)strlen(pieces[i]));
    }
    /* Larger than the buffer: what is buffered goes first, then the block. */
    rt_writer_write write;
    cr_assert_eq(rt_writer_write_init(&write, w, big, BLOCK), 0);
    cr_assert_eq(rt_fiber_await(&write.future), BLOCK);
    cr_assert_eq(rt_writer_write_await(w, "tail\n", 5), 5);
    cr_assert_eq(rt_writer_buffered(w), 5, "the tail waits for a flush");
    rt_writer_flush flush;
    cr_assert_eq(rt_writer_flush_init(&flush, w), 0);
    cr_assert_eq(rt_fiber_await(&flush.future), 5);
    cr_assert_eq(rt_writer_buffered(w), 0);
    cr_assert_eq(rt_writer_write_await(w, "last", 4), 4);
    cr_assert_eq(rt_writer_flush_await(w), 4);
    rt_writer_free(w);
    cr_assert_eq(rt_unix_shutdown(b->x, SHUT_WR), 0);
    return NULL;
}

/* Reads one line through the generic await and checks it. */
static void expect_line(rt_reader *r, const char *want)
{
    rt_read_until line;
    cr_assert_eq(rt_read_line_init(&line, r), 0);
    cr_assert_gt(rt_fiber_await(&line.future), 0);
    cr_assert_eq(line.len, strlen(want), "line \"%.*s\"", (int)line.len, line.data);
    cr_assert_eq(memcmp(line.data, want, line.len), 0);
}

static void *reads_buffered(void *arg)
{
    struct buffered *b = arg;
    rt_reader *r;
    cr_assert_eq(rt_reader_new(b->y, 256, &r), 0);
    expect_line(r, "first line");
    expect_line(r, "second");
    rt_read_until until;
    cr_assert_eq(rt_read_until_init(&until, r, ','), 0);
    cr_assert_eq(rt_fiber_await(&until.future), 2);
    cr_assert_eq(memcmp(until.data, "a,", 2), 0);
    expect_line(r, "b");
    unsigned char block[BLOCK];
    rt_read_exact exact;
    cr_assert_eq(rt_read_exact_init(&exact, r, block, BLOCK), 0);
    cr_assert_eq(rt_fiber_await(&exact.future), BLOCK);
    cr_assert_eq(memcmp(block, big, BLOCK), 0);
    char *text;
    size_t len;
    cr_assert_eq(rt_read_line_await(r, &text, &len), 5);
    cr_assert(len == 4 && memcmp(text, "tail", 4) == 0);
    cr_assert_eq(rt_read_line_await(r, &text, &len), 4, "a last piece without its newline");
    cr_assert(len == 4 && memcmp(text, "last", 4) == 0);
    cr_assert_eq(rt_read_line_await(r, &text, &len), 0, "the end of the stream");
    rt_reader_free(r);
    return NULL;
}

Test(fiber_ops_io, a_buffered_reader_reads_lines_and_a_writer_flushes)
{
    fill_big();
    rt_runtime *rt = new_runtime(2);
    struct buffered b;
    cr_assert_eq(rt_unix_pair(rt, SOCK_STREAM, &b.x, &b.y), 0);
    run_two_fibers(rt, writes_buffered, &b, reads_buffered, &b);
    cr_assert_eq(rt_io_close(b.x), 0);
    cr_assert_eq(rt_io_close(b.y), 0);
    finish_runtime(rt, 0);
}

/* ---- fs.h ----------------------------------------------------------------- */

/* Awaits a path operation or a sync: its result. */
static int64_t await_fs(rt_fs_op *op)
{
    return rt_fiber_await(&op->future);
}

static void *works_with_files(void *arg)
{
    const char *dir = arg;
    char sub[128], path[160], moved[160];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(path, sizeof path, "%s/file", sub);
    snprintf(moved, sizeof moved, "%s/moved", sub);
    rt_fs_op op;
    cr_assert_eq(rt_fs_mkdir_init(&op, NULL, sub, 0700), 0);
    cr_assert_eq(await_fs(&op), 0);
    rt_file_open open;
    cr_assert_eq(rt_file_open_init(&open, NULL, path, O_RDWR | O_CREAT | O_EXCL, 0600), 0);
    cr_assert_eq(rt_fiber_await(&open.future), 0);
    rt_file *f = open.file;
    rt_file_write write;
    cr_assert_eq(rt_file_write_init(&write, f, "hello, ", 7), 0);
    cr_assert_eq(rt_fiber_await(&write.future), 7);
    cr_assert_eq(rt_file_write_init(&write, f, "world\n", 6), 0);
    cr_assert_eq(rt_fiber_await(&write.future), 6);
    cr_assert_eq(rt_file_pwrite_init(&write, f, "J", 1, 0), 0);
    cr_assert_eq(rt_fiber_await(&write.future), 1);
    cr_assert_eq(rt_file_sync_init(&op, f, false), 0);
    cr_assert_eq(await_fs(&op), 0);
    rt_fs_stat st;
    cr_assert_eq(rt_file_stat_init(&st, f), 0);
    cr_assert_eq(rt_fiber_await(&st.future), 0);
    cr_assert_eq(st.st.st_size, 13);
    char buf[32];
    rt_file_read read;
    cr_assert_eq(rt_file_pread_init(&read, f, buf, sizeof buf, 0), 0);
    cr_assert_eq(rt_fiber_await(&read.future), 13);
    cr_assert_eq(memcmp(buf, "Jello, world\n", 13), 0);
    cr_assert_eq(rt_file_read_init(&read, f, buf, sizeof buf), 0);
    cr_assert_eq(rt_fiber_await(&read.future), 0, "the file position is at its end");
    cr_assert_eq(rt_file_close(f), 0);
    cr_assert_eq(rt_fs_rename_init(&op, NULL, path, moved), 0);
    cr_assert_eq(await_fs(&op), 0);
    cr_assert_eq(rt_fs_stat_init(&st, NULL, path), 0);
    cr_assert_eq(rt_fiber_await(&st.future), -ENOENT, "the old name is gone");
    rt_fs_read_file whole;
    cr_assert_eq(rt_fs_read_file_init(&whole, NULL, moved, 1024), 0);
    cr_assert_eq(rt_fiber_await(&whole.future), 13);
    cr_assert_eq(whole.size, 13);
    cr_assert_str_eq(whole.data, "Jello, world\n");
    free(whole.data);
    cr_assert_eq(rt_fs_unlink_init(&op, NULL, moved), 0);
    cr_assert_eq(await_fs(&op), 0);
    cr_assert_eq(rt_fs_rmdir_init(&op, NULL, sub), 0);
    cr_assert_eq(await_fs(&op), 0);
    return NULL;
}

Test(fiber_ops_io, files_and_directories_on_the_blocking_pool)
{
    rt_runtime *rt = new_runtime(2);
    char dir[] = "/tmp/asyncrt-fiber-ops-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, works_with_files, dir, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(rmdir(dir), 0, "the fiber removed what it made");
}

/* ---- resolve.h ------------------------------------------------------------ */

static void *resolves_and_connects(void *arg)
{
    struct endpoint *e = arg;
    rt_resolve look;
    cr_assert_eq(rt_resolve_init(&look, NULL, "localhost", "8080", AF_INET, 0), 0);
    cr_assert_geq(rt_fiber_await(&look.future), 1);
    struct sockaddr_storage want;
    socklen_t len;
    cr_assert_eq(rt_net_addr("127.0.0.1", 8080, &want, &len), 0);
    cr_assert(same_inet(&look.addrs->addr[0].addr, &want), "localhost is 127.0.0.1:8080");
    rt_resolve_addrs_free(look.addrs);
    cr_assert_eq(rt_resolve_init(&look, NULL, "127.0.0.1", "9", AF_UNSPEC, RT_RESOLVE_NUMERIC), 0);
    cr_assert_eq(rt_fiber_await(&look.future), 1);
    cr_assert_eq(look.addrs->addr[0].family, AF_INET);
    rt_resolve_addrs_free(look.addrs);
    cr_assert_eq(rt_resolve_init(&look, NULL, "localhost", "9", AF_UNSPEC, RT_RESOLVE_NUMERIC), 0);
    cr_assert_eq(rt_fiber_await(&look.future), -ENOENT, "a name is not a numeric address");
    cr_assert_null(look.addrs);
    char port[8];
    snprintf(port, sizeof port, "%u", ntohs(((struct sockaddr_in *)&e->addr)->sin_port));
    rt_resolve_connect connect;
    cr_assert_eq(rt_resolve_connect_init(&connect, NULL, "localhost", port, AF_INET, 0), 0);
    cr_assert_eq(rt_fiber_await(&connect.future), 0);
    cr_assert(same_inet(&connect.addr, &e->addr), "it connected to the listener");
    cr_assert_eq(rt_io_write_all_await(connect.conn, "by name", 7), 7);
    cr_assert_eq(rt_io_close(connect.conn), 0);
    return NULL;
}

static void *accepts_by_name(void *arg)
{
    struct endpoint *e = arg;
    rt_io *conn;
    cr_assert_eq(rt_tcp_accept_await(e->listener, &conn), 0);
    unsigned char buf[16];
    cr_assert_eq(read_to_end(conn, buf, sizeof buf), 7);
    cr_assert_eq(memcmp(buf, "by name", 7), 0);
    cr_assert_eq(rt_io_close(conn), 0);
    return NULL;
}

Test(fiber_ops_io, names_are_resolved_and_connected_to)
{
    rt_runtime *rt = new_runtime(2);
    struct endpoint e = {0};
    listen_loopback(rt, &e);
    run_two_fibers(rt, resolves_and_connects, &e, accepts_by_name, &e);
    cr_assert_eq(rt_io_close(e.listener), 0);
    finish_runtime(rt, 0);
}
