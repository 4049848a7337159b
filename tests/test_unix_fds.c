/* Unix domain sockets for real: a pipe's write end passed to the peer and
 * used there, descriptors beyond the receiver's capacity closed, datagrams
 * with their senders' addresses, accepts, receives and connects dropped
 * while they wait losing nothing, operations waiting at shutdown, and the
 * descriptor count back where it began. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_unix.h"

#include <dirent.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

TestSuite(unix_fds, .fini = fail_on_leaks);

/* ---- descriptors ---------------------------------------------------------------- */

Test(unix_fds, a_pipe_write_end_passed_to_the_peer_is_used_there)
{
    rt_runtime *rt = new_runtime(2);
    char dir[32], path[200];
    make_dir(dir);
    path_in(path, sizeof path, dir, "fds.sock");
    int fds = count_fds();
    rt_io *l = listen_on(rt, path, 0);
    rt_io *client = connect_to(rt, path);
    rt_io *server = accept_from(rt, l);

    int p[2];
    make_pipe(p);
    static rt_unix_send_fds send;
    cr_assert_eq(rt_unix_send_fds_init(&send, client, "F", 1, &p[1], 1), 0);
    run_op(rt, &send.future);
    cr_assert_eq(send.result, 1);
    close(p[1]); /* the only write end left is the one in flight */

    static char buf[8];
    static rt_unix_recv_fds recv;
    cr_assert_eq(rt_unix_recv_fds_init(&recv, server, buf, sizeof buf, 4), 0);
    run_op(rt, &recv.future);
    cr_assert_eq(recv.result, 1);
    cr_assert_eq(buf[0], 'F');
    cr_assert_eq(recv.nfds, 1);
    cr_assert_not(recv.fds_truncated);
    int w = recv.fds[0];
    cr_assert(fcntl(w, F_GETFD) & FD_CLOEXEC, "received close-on-exec");
    cr_assert_eq(write(w, "via the passed fd", 17), 17);
    char got[32] = {0};
    cr_assert_eq(read(p[0], got, sizeof got), 17);
    cr_assert_str_eq(got, "via the passed fd");
    close(w);
    cr_assert_eq(read(p[0], got, sizeof got), 0, "the passed end was the last write end");

    /* A descriptor that is not open is -EBADF, and nothing is sent. */
    int closed_fd = dup(p[0]);
    cr_assert_geq(closed_fd, 0);
    close(closed_fd);
    cr_assert_eq(rt_unix_send_fds_init(&send, client, "B", 1, &closed_fd, 1), 0);
    run_op(rt, &send.future);
    cr_assert_eq(send.result, -EBADF);

    /* Bytes without descriptors come through the same operation. */
    write_io(rt, client, "plain");
    cr_assert_eq(rt_unix_recv_fds_init(&recv, server, buf, sizeof buf, 4), 0);
    run_op(rt, &recv.future);
    cr_assert_eq(recv.result, 5);
    cr_assert_eq(recv.nfds, 0);
    cr_assert_eq(memcmp(buf, "plain", 5), 0, "only the bytes sent after the refused send");
    close(p[0]);

    rt_io_close(client);
    rt_io_close(server);
    rt_io_close(l);
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir(dir);
    finish_runtime(rt, 0);
}

Test(unix_fds, descriptors_beyond_the_receivers_capacity_are_closed)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    rt_io *a, *b;
    cr_assert_eq(rt_unix_pair(rt, SOCK_DGRAM, &a, &b), 0);
    int p[2];
    make_pipe(p);
    int ends[3] = {p[1], dup(p[1]), dup(p[1])};
    cr_assert(ends[1] >= 0 && ends[2] >= 0);
    static rt_unix_send_fds send;
    cr_assert_eq(rt_unix_send_fds_init(&send, a, "three", 5, ends, 3), 0);
    run_op(rt, &send.future);
    cr_assert_eq(send.result, 5);
    for (int i = 0; i < 3; i++)
        close(ends[i]);

    static char buf[8];
    static rt_unix_recv_fds recv;
    cr_assert_eq(rt_unix_recv_fds_init(&recv, b, buf, sizeof buf, 1), 0);
    run_op(rt, &recv.future);
    cr_assert_eq(recv.result, 5);
    cr_assert_eq(recv.nfds, 1, "one kept");
    cr_assert(recv.fds_truncated, "two closed");
    close(recv.fds[0]);
    char c;
    cr_assert_eq(read(p[0], &c, 1), 0, "no write end is left open anywhere");
    close(p[0]);

    /* A datagram longer than the buffer is truncated, and says so. */
    static rt_unix_recv_from rf;
    static rt_unix_send_to st;
    cr_assert_eq(rt_unix_send_to_init(&st, a, "0123456789", 10, NULL, 0), 0);
    run_op(rt, &st.future);
    cr_assert_eq(st.result, 10);
    cr_assert_eq(rt_unix_recv_from_init(&rf, b, buf, 4), 0);
    run_op(rt, &rf.future);
    cr_assert_eq(rf.result, 4);
    cr_assert(rf.truncated);
    cr_assert_eq(rf.from_len, 0, "a socketpair's end is unnamed");
    char from[8];
    cr_assert_eq(rt_unix_addr_name(&rf.from, rf.from_len, from, sizeof from), 0);
    cr_assert_str_eq(from, "");

    rt_io_close(a);
    rt_io_close(b);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(unix_fds, the_descriptors_of_two_sends_never_arrive_together)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    rt_io *a, *b;
    cr_assert_eq(rt_unix_pair(rt, SOCK_STREAM, &a, &b), 0);
    int p[2];
    make_pipe(p);
    static rt_unix_send_fds send;
    write_io(rt, a, "xy"); /* bytes without descriptors first */
    cr_assert_eq(rt_unix_send_fds_init(&send, a, "AB", 2, &p[0], 1), 0);
    run_op(rt, &send.future);
    cr_assert_eq(send.result, 2);
    cr_assert_eq(rt_unix_send_fds_init(&send, a, "CD", 2, &p[1], 1), 0);
    run_op(rt, &send.future);
    cr_assert_eq(send.result, 2);

    static char buf[16];
    static rt_unix_recv_fds recv;
    size_t got = 0;
    int received[2];
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(rt_unix_recv_fds_init(&recv, b, buf + got, sizeof buf - got, 4), 0);
        run_op(rt, &recv.future);
        cr_assert_gt(recv.result, 0);
        cr_assert_eq(recv.nfds, 1, "one send's descriptor per receive");
        got += (size_t)recv.result;
        cr_assert_eq(memcmp(buf + got - 2, i == 0 ? "AB" : "CD", 2), 0,
                     "the receive ends with the bytes its descriptor came with");
        received[i] = recv.fds[0];
    }
    cr_assert_eq(got, 6);
    cr_assert_eq(memcmp(buf, "xyABCD", 6), 0);
    for (int i = 0; i < 2; i++)
        close(received[i]);
    close(p[0]);
    close(p[1]);
    rt_io_close(a);
    rt_io_close(b);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

/* ---- datagrams ---------------------------------------------------------------------- */

/* A server bound to `name` and a client bound to a kernel-chosen abstract
 * name exchange datagrams, each replying to the address it received. */
static void datagram_round_trip(rt_runtime *rt, const char *name)
{
    rt_io *server, *client;
    cr_assert_eq(rt_unix_dgram_bind(rt, name, 0, &server), 0);
    cr_assert_eq(rt_unix_dgram_bind(rt, NULL, 0, &client), 0);
    struct sockaddr_un self;
    socklen_t self_len;
    cr_assert_eq(rt_unix_local_addr(client, &self, &self_len), 0);
    char client_name[64];
    cr_assert_eq(rt_unix_addr_name(&self, self_len, client_name, sizeof client_name), 6,
                 "@ and five hex digits");
    cr_assert_eq(client_name[0], '@');

    struct sockaddr_un to;
    socklen_t to_len;
    cr_assert_eq(rt_unix_addr(name, &to, &to_len), 0);
    static rt_unix_send_to st;
    static rt_unix_recv_from rf;
    static char buf[64];
    char from[128];
    cr_assert_eq(rt_unix_send_to_init(&st, client, "question", 8, &to, to_len), 0);
    run_op(rt, &st.future);
    cr_assert_eq(st.result, 8);
    cr_assert_eq(rt_unix_recv_from_init(&rf, server, buf, sizeof buf), 0);
    run_op(rt, &rf.future);
    cr_assert_eq(rf.result, 8);
    cr_assert_not(rf.truncated);
    cr_assert_eq(memcmp(buf, "question", 8), 0);
    cr_assert_geq(rt_unix_addr_name(&rf.from, rf.from_len, from, sizeof from), 0);
    cr_assert_str_eq(from, client_name, "the sender's address");

    /* The reply goes to the address received. */
    cr_assert_eq(rt_unix_send_to_init(&st, server, "answer", 6, &rf.from, rf.from_len), 0);
    run_op(rt, &st.future);
    cr_assert_eq(st.result, 6);
    cr_assert_eq(rt_unix_recv_from_init(&rf, client, buf, sizeof buf), 0);
    run_op(rt, &rf.future);
    cr_assert_eq(rf.result, 6);
    cr_assert_eq(memcmp(buf, "answer", 6), 0);
    cr_assert_geq(rt_unix_addr_name(&rf.from, rf.from_len, from, sizeof from), 0);
    cr_assert_str_eq(from, name);

    /* With a default peer: no address, and rt_io_write / rt_io_read. */
    cr_assert_eq(rt_unix_dgram_connect(client, name), 0);
    cr_assert_eq(rt_unix_send_to_init(&st, client, "one", 3, NULL, 0), 0);
    run_op(rt, &st.future);
    cr_assert_eq(st.result, 3);
    write_io(rt, client, "two");
    cr_assert_eq(rt_unix_recv_from_init(&rf, server, buf, sizeof buf), 0);
    run_op(rt, &rf.future);
    cr_assert_eq(rf.result, 3);
    cr_assert_eq(memcmp(buf, "one", 3), 0);
    expect_io(rt, server, "two");
    rt_unix_cred cred;
    cr_assert_eq(rt_unix_peer_cred(client, &cred), -ENOTCONN, "connect(2) records none");

    rt_io_close(client);
    rt_io_close(server);
}

Test(unix_fds, datagrams_carry_their_senders_addresses)
{
    rt_runtime *rt = new_runtime(2);
    char dir[32], path[200], missing[200], name[100];
    make_dir(dir);
    path_in(path, sizeof path, dir, "dgram.sock");
    path_in(missing, sizeof missing, dir, "missing.sock");
    abstract_name(name, sizeof name, "dgram");
    int fds = count_fds();

    datagram_round_trip(rt, path);
    cr_assert_eq(unlink(path), 0);
    datagram_round_trip(rt, name);

    rt_io *lonely;
    cr_assert_eq(rt_unix_dgram_bind(rt, NULL, 0, &lonely), 0);
    cr_assert_eq(rt_unix_dgram_connect(lonely, missing), -ENOENT);
    struct sockaddr_un to;
    socklen_t to_len;
    cr_assert_eq(rt_unix_addr(missing, &to, &to_len), 0);
    static rt_unix_send_to st;
    cr_assert_eq(rt_unix_send_to_init(&st, lonely, "x", 1, &to, to_len), 0);
    run_op(rt, &st.future);
    cr_assert_eq(st.result, -ENOENT);
    cr_assert_eq(rt_unix_send_to_init(&st, lonely, "x", 1, NULL, 0), 0);
    run_op(rt, &st.future);
    cr_assert_eq(st.result, -ENOTCONN, "no address and no default peer");
    rt_io_close(lonely);

    cr_assert_eq(count_fds(), fds);
    remove_dir(dir);
    finish_runtime(rt, 0);
}

/* ---- drops and shutdown ------------------------------------------------------------- */

Test(unix_fds, an_accept_or_receive_dropped_while_waiting_loses_nothing)
{
    rt_runtime *rt = new_runtime(2);
    char name[100];
    abstract_name(name, sizeof name, "drops");
    int fds = count_fds();
    rt_io *l = listen_on(rt, name, 0);

    static rt_unix_accept acc;
    rt_unix_accept_init(&acc, l);
    abort_waiter(start_waiter(rt, &acc.future));
    cr_assert_eq(acc.result, -ECANCELED);
    rt_io *client = connect_to(rt, name);
    rt_io *server = accept_from(rt, l); /* the connection is there for the next accept */

    static char buf[8];
    static rt_unix_recv_fds rf;
    rt_unix_recv_fds_init(&rf, server, buf, sizeof buf, 2);
    abort_waiter(start_waiter(rt, &rf.future));
    cr_assert_eq(rf.result, -ECANCELED);
    int p[2];
    make_pipe(p);
    static rt_unix_send_fds sf;
    rt_unix_send_fds_init(&sf, client, "!", 1, &p[1], 1);
    run_op(rt, &sf.future);
    cr_assert_eq(sf.result, 1);
    close(p[1]);
    rt_unix_recv_fds_init(&rf, server, buf, sizeof buf, 2);
    run_op(rt, &rf.future);
    cr_assert_eq(rf.result, 1, "the next receive gets the byte");
    cr_assert_eq(rf.nfds, 1, "and the descriptor");
    close(rf.fds[0]);
    close(p[0]);

    rt_io *a, *b;
    cr_assert_eq(rt_unix_pair(rt, SOCK_DGRAM, &a, &b), 0);
    static rt_unix_recv_from rfr;
    rt_unix_recv_from_init(&rfr, b, buf, sizeof buf);
    abort_waiter(start_waiter(rt, &rfr.future));
    write_io(rt, a, "dg");
    rt_unix_recv_from_init(&rfr, b, buf, sizeof buf);
    run_op(rt, &rfr.future);
    cr_assert_eq(rfr.result, 2);

    rt_io_close(a);
    rt_io_close(b);
    rt_io_close(client);
    rt_io_close(server);
    rt_io_close(l);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(unix_fds, a_connect_to_a_full_backlog_waits_retries_and_closes_its_socket_when_dropped)
{
    rt_runtime *rt = new_runtime(2);
    char name[100];
    abstract_name(name, sizeof name, "backlog");
    int fds = count_fds();
    rt_io *l = NULL;
    cr_assert_eq(rt_unix_listen(rt, name, 0, 0, &l), 0);
    /* Fill the backlog with plain non-blocking connects until one is
     * refused for room (EAGAIN). */
    struct sockaddr_un addr;
    socklen_t len;
    cr_assert_eq(rt_unix_addr(name, &addr, &len), 0);
    int queued[64];
    int nqueued = 0;
    for (;;) {
        cr_assert_lt(nqueued, 64, "the backlog never filled");
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        cr_assert_geq(s, 0);
        if (connect(s, (struct sockaddr *)&addr, len) < 0) {
            cr_assert_eq(errno, EAGAIN, "connect: %s", strerror(errno));
            close(s);
            break;
        }
        queued[nqueued++] = s;
    }

    /* Dropped while it pauses: its socket is closed. */
    static rt_unix_connect c;
    static rt_timeout limit;
    rt_unix_connect_init(&c, rt, name);
    rt_timeout_init(&limit, rt, &c.future, 30 * MS);
    run_op(rt, &limit.future);
    cr_assert_eq(limit.result, -ETIMEDOUT);
    cr_assert_eq(c.result, -ECANCELED);
    cr_assert_eq(count_fds(), fds + 1 + nqueued, "the dropped connect closed its socket");

    /* One that waits gets in once the listener makes room. */
    rt_unix_connect_init(&c, rt, name);
    rt_task *t = start_waiter(rt, &c.future);
    static rt_io *taken[64];
    for (int i = 0; i < nqueued; i++)
        taken[i] = accept_from(rt, l);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(c.result, 0, "connect: %s", rt_strerror((int)c.result));
    rt_io *server = accept_from(rt, l);
    write_io(rt, c.conn, "in");
    expect_io(rt, server, "in");

    rt_io_close(c.conn);
    rt_io_close(server);
    for (int i = 0; i < nqueued; i++) {
        rt_io_close(taken[i]);
        close(queued[i]);
    }
    rt_io_close(l);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(unix_fds, operations_waiting_at_shutdown_are_cancelled_and_leave_nothing)
{
    int before = count_fds();
    rt_runtime *rt = new_runtime(2);
    char name[100];
    abstract_name(name, sizeof name, "shutdown");
    rt_io *l = listen_on(rt, name, 0);
    static rt_unix_accept acc;
    rt_unix_accept_init(&acc, l);
    rt_task_drop(start_waiter(rt, &acc.future));
    rt_io *a, *b;
    cr_assert_eq(rt_unix_pair(rt, SOCK_STREAM, &a, &b), 0);
    static char buf[4];
    static rt_unix_recv_fds rf;
    rt_unix_recv_fds_init(&rf, a, buf, sizeof buf, 1);
    rt_task_drop(start_waiter(rt, &rf.future));
    /* The runtime closes the sockets still open (rt_io belongs to it). */
    finish_runtime(rt, 2);
    cr_assert_eq(acc.result, -ECANCELED);
    cr_assert_eq(rf.result, -ECANCELED);
    cr_assert_eq(count_fds(), before);
}
