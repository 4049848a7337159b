/* Unix domain sockets for real, in a temporary directory and under abstract
 * names: names parsed and printed back, bad arguments, streams over both
 * kinds of name with the peer's credentials, stale socket files refused
 * without RT_UNIX_UNLINK_STALE and replaced with it (never a live socket or
 * a plain file), and connect errors. test_unix_fds.c has descriptor
 * passing, datagrams, drops and shutdown. */
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

TestSuite(unix, .fini = fail_on_leaks);

/* ---- names ------------------------------------------------------------------- */

Test(unix, names_are_parsed_and_printed_back_and_long_ones_are_enametoolong)
{
    rt_runtime *rt = new_runtime(1);
    struct sockaddr_un addr;
    socklen_t len;
    char name[256], back[256];
    const socklen_t base = (socklen_t)offsetof(struct sockaddr_un, sun_path);

    cr_assert_eq(rt_unix_addr("/tmp/x.sock", &addr, &len), 0);
    cr_assert_eq(addr.sun_family, AF_UNIX);
    cr_assert_str_eq(addr.sun_path, "/tmp/x.sock");
    cr_assert_eq(len, base + strlen("/tmp/x.sock") + 1, "the path's NUL is counted");
    cr_assert_eq(rt_unix_addr_name(&addr, len, back, sizeof back), 11);
    cr_assert_str_eq(back, "/tmp/x.sock");

    cr_assert_eq(rt_unix_addr("@svc", &addr, &len), 0);
    cr_assert_eq(addr.sun_path[0], '\0');
    cr_assert_eq(memcmp(addr.sun_path + 1, "svc", 3), 0);
    cr_assert_eq(len, base + 4, "no NUL after an abstract name");
    cr_assert_eq(rt_unix_addr_name(&addr, len, back, sizeof back), 4);
    cr_assert_str_eq(back, "@svc");
    cr_assert_eq(rt_unix_addr_name(&addr, len, back, 4), -ENOSPC, "no room for the NUL");
    cr_assert_str_eq(back, "");

    cr_assert_eq(rt_unix_addr("./@file", &addr, &len), 0);
    cr_assert_str_eq(addr.sun_path, "./@file", "a path that begins with @");

    /* The longest names fit; one byte more is -ENAMETOOLONG. */
    memset(name, 'a', sizeof name);
    name[RT_UNIX_NAME_MAX] = '\0';
    cr_assert_eq(rt_unix_addr(name, &addr, &len), 0);
    cr_assert_eq(len, sizeof addr);
    name[RT_UNIX_NAME_MAX] = 'a';
    name[RT_UNIX_NAME_MAX + 1] = '\0';
    cr_assert_eq(rt_unix_addr(name, &addr, &len), -ENAMETOOLONG);
    name[0] = '@';
    cr_assert_eq(rt_unix_addr(name, &addr, &len), 0, "@ and 107 bytes");
    cr_assert_eq(len, sizeof addr);
    name[RT_UNIX_NAME_MAX + 1] = 'a';
    name[RT_UNIX_NAME_MAX + 2] = '\0';
    cr_assert_eq(rt_unix_addr(name, &addr, &len), -ENAMETOOLONG);

    cr_assert_eq(rt_unix_addr("", &addr, &len), -EINVAL);
    cr_assert_eq(rt_unix_addr("@", &addr, &len), -EINVAL);
    cr_assert_eq(rt_unix_addr(NULL, &addr, &len), -EINVAL);
    cr_assert_eq(rt_unix_addr("x", NULL, &len), -EINVAL);
    cr_assert_eq(rt_unix_addr("x", &addr, NULL), -EINVAL);

    /* An unnamed address prints as "". */
    addr.sun_family = AF_UNIX;
    cr_assert_eq(rt_unix_addr_name(&addr, sizeof(sa_family_t), back, sizeof back), 0);
    cr_assert_str_eq(back, "");
    cr_assert_eq(rt_unix_addr_name(&addr, 0, back, sizeof back), 0, "recvmsg's unnamed sender");
    cr_assert_str_eq(back, "");
    cr_assert_eq(rt_unix_addr_name(&addr, 1, back, sizeof back), -EINVAL);
    cr_assert_eq(rt_unix_addr_name(&addr, sizeof addr + 1, back, sizeof back), -EINVAL);
    cr_assert_eq(rt_unix_addr_name(NULL, sizeof addr, back, sizeof back), -EINVAL);
    addr.sun_family = AF_INET;
    cr_assert_eq(rt_unix_addr_name(&addr, sizeof addr, back, sizeof back), -EINVAL);
    finish_runtime(rt, 0);
}

Test(unix, bad_arguments_are_refused_with_their_errors_and_leave_nothing)
{
    rt_runtime *rt = new_runtime(1);
    char dir[32], path[200];
    make_dir(dir);
    path_in(path, sizeof path, dir, "s");
    int fds = count_fds();
    rt_io *io = (rt_io *)1, *io2 = (rt_io *)1;

    cr_assert_eq(rt_unix_listen(rt, NULL, 1, 0, &io), -EINVAL);
    cr_assert_null(io);
    cr_assert_eq(rt_unix_listen(rt, path, 1, 0, NULL), -EINVAL);
    cr_assert_eq(rt_unix_listen(rt, path, 1, 0x80, &io), -EINVAL, "unknown flags");
    cr_assert_eq(rt_unix_listen(NULL, path, 1, 0, &io), -EINVAL, "no runtime on this thread");
    cr_assert_eq(rt_unix_listen(rt, "", 1, 0, &io), -EINVAL);
    char long_path[300];
    memset(long_path, 'p', sizeof long_path);
    long_path[RT_UNIX_NAME_MAX + 1] = '\0';
    cr_assert_eq(rt_unix_listen(rt, long_path, 1, 0, &io), -ENAMETOOLONG);
    cr_assert_eq(rt_unix_dgram_bind(rt, long_path, 0, &io), -ENAMETOOLONG);
    cr_assert_null(io);
    cr_assert_eq(rt_unix_pair(rt, SOCK_RAW, &io, &io2), -EINVAL);
    cr_assert_null(io);
    cr_assert_null(io2);
    cr_assert_eq(rt_unix_pair(rt, SOCK_STREAM, NULL, &io2), -EINVAL);

    rt_unix_connect c;
    cr_assert_eq(rt_unix_connect_init(&c, rt, long_path), -ENAMETOOLONG);
    cr_assert(rt_future_is_done(&c.future));
    cr_assert_eq(c.result, -ENAMETOOLONG, "the refused init left the operation finished");
    cr_assert_eq(rt_unix_connect_init(&c, rt, NULL), -EINVAL);
    cr_assert_eq(c.result, -EINVAL);
    cr_assert_eq(rt_unix_connect_init(&c, NULL, path), -EINVAL, "no runtime on this thread");
    cr_assert_eq(rt_unix_connect_init(NULL, rt, path), -EINVAL);

    rt_unix_accept a;
    cr_assert_eq(rt_unix_accept_init(&a, NULL), -EINVAL);
    cr_assert_eq(a.result, -EINVAL);

    cr_assert_eq(rt_unix_pair(rt, SOCK_STREAM, &io, &io2), 0);
    int one = 1, bad = -1;
    char byte = 'x';
    rt_unix_send_fds sf;
    cr_assert_eq(rt_unix_send_fds_init(&sf, io, &byte, 0, &one, 1), -EINVAL, "no byte to carry");
    cr_assert_eq(sf.result, -EINVAL);
    cr_assert_eq(rt_unix_send_fds_init(&sf, io, &byte, 1, &one, 0), -EINVAL);
    cr_assert_eq(rt_unix_send_fds_init(&sf, io, &byte, 1, &one, RT_UNIX_FDS_MAX + 1), -EINVAL);
    cr_assert_eq(rt_unix_send_fds_init(&sf, io, &byte, 1, &bad, 1), -EINVAL);
    cr_assert_eq(rt_unix_send_fds_init(&sf, io, &byte, 1, NULL, 1), -EINVAL);
    cr_assert_eq(rt_unix_send_fds_init(&sf, NULL, &byte, 1, &one, 1), -EINVAL);
    rt_unix_recv_fds rf;
    cr_assert_eq(rt_unix_recv_fds_init(&rf, io, &byte, 1, 0), -EINVAL);
    cr_assert_eq(rf.result, -EINVAL);
    cr_assert_eq(rt_unix_recv_fds_init(&rf, io, &byte, 1, RT_UNIX_FDS_MAX + 1), -EINVAL);
    cr_assert_eq(rt_unix_recv_fds_init(&rf, io, &byte, 0, 1), -EINVAL);
    cr_assert_eq(rt_unix_recv_fds_init(&rf, io, NULL, 1, 1), -EINVAL);
    rt_unix_send_to st;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    cr_assert_eq(rt_unix_send_to_init(&st, io, &byte, 1, &addr, sizeof(sa_family_t)), -EINVAL);
    cr_assert_eq(st.result, -EINVAL);
    cr_assert_eq(rt_unix_send_to_init(&st, io, &byte, 1, &addr, sizeof addr + 1), -EINVAL);
    cr_assert_eq(rt_unix_send_to_init(&st, io, NULL, 1, NULL, 0), -EINVAL);
    rt_unix_recv_from rfr;
    cr_assert_eq(rt_unix_recv_from_init(&rfr, NULL, &byte, 1), -EINVAL);
    cr_assert_eq(rfr.result, -EINVAL);

    rt_unix_cred cred;
    cr_assert_eq(rt_unix_peer_cred(NULL, &cred), -EINVAL);
    cr_assert_eq(rt_unix_peer_cred(io, NULL), -EINVAL);
    socklen_t len;
    cr_assert_eq(rt_unix_local_addr(io, NULL, &len), -EINVAL);
    cr_assert_eq(rt_unix_peer_addr(NULL, &addr, &len), -EINVAL);
    cr_assert_eq(rt_unix_shutdown(NULL, SHUT_WR), -EINVAL);
    cr_assert_eq(rt_unix_shutdown(io, 42), -EINVAL);
    cr_assert_eq(rt_unix_dgram_connect(io, NULL), -EINVAL);
    cr_assert_eq(rt_unix_dgram_connect(NULL, path), -EINVAL);
    rt_io_close(io);
    rt_io_close(io2);

    cr_assert_not(exists(path), "no refused call made a file");
    cr_assert_eq(count_fds(), fds);
    remove_dir(dir);
    finish_runtime(rt, 0);
}

/* ---- streams ------------------------------------------------------------------ */

/* Listens on name, connects, accepts, and exchanges bytes both ways with
 * the credentials and names checked on both ends; then the client
 * half-closes and the server reads the end of the stream. */
static void stream_round_trip(rt_runtime *rt, const char *name)
{
    rt_io *l = listen_on(rt, name, 0);
    expect_local_name(l, name);
    rt_io *client = connect_to(rt, name);
    rt_io *server = accept_from(rt, l);

    struct sockaddr_un peer;
    socklen_t peer_len;
    char got[128];
    cr_assert_eq(rt_unix_peer_addr(client, &peer, &peer_len), 0);
    cr_assert_eq(rt_unix_addr_name(&peer, peer_len, got, sizeof got), (int)strlen(name));
    cr_assert_str_eq(got, name, "the client's peer is the listener's name");
    cr_assert_eq(rt_unix_peer_addr(server, &peer, &peer_len), 0);
    cr_assert_eq(rt_unix_addr_name(&peer, peer_len, got, sizeof got), 0, "the client is unnamed");

    expect_own_credentials(client);
    expect_own_credentials(server);

    write_io(rt, client, "ping over a unix stream\n");
    expect_io(rt, server, "ping over a unix stream\n");
    write_io(rt, server, "pong\n");
    expect_io(rt, client, "pong\n");
    cr_assert_eq(rt_unix_shutdown(client, SHUT_WR), 0);
    cr_assert_eq(read_once(rt, server), 0, "the end of the stream after SHUT_WR");

    rt_io_close(client);
    rt_io_close(server);
    rt_io_close(l);
}

Test(unix, a_stream_over_a_path_carries_bytes_and_credentials)
{
    rt_runtime *rt = new_runtime(2);
    char dir[32], path[200];
    make_dir(dir);
    path_in(path, sizeof path, dir, "stream.sock");
    int fds = count_fds();
    stream_round_trip(rt, path);
    cr_assert(exists(path), "the socket file stays after close: the caller's to remove");
    cr_assert_eq(unlink(path), 0);
    cr_assert_eq(count_fds(), fds);
    remove_dir(dir);
    finish_runtime(rt, 0);
}

Test(unix, a_stream_over_an_abstract_name_makes_no_file)
{
    rt_runtime *rt = new_runtime(2);
    char name[100];
    abstract_name(name, sizeof name, "stream");
    int fds = count_fds();
    char cwd_file[120];
    snprintf(cwd_file, sizeof cwd_file, "%s", name); /* "@asyncrt-..." in the cwd */
    stream_round_trip(rt, name);
    cr_assert_not(exists(cwd_file), "an abstract name is not a file");
    /* The name went with the socket: it can be bound again at once. */
    rt_io *l = listen_on(rt, name, 0);
    rt_io_close(l);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(unix, a_pair_carries_bytes_and_reports_credentials)
{
    rt_runtime *rt = new_runtime(1);
    int fds = count_fds();
    rt_io *a, *b;
    cr_assert_eq(rt_unix_pair(rt, SOCK_STREAM, &a, &b), 0);
    cr_assert(fcntl(rt_io_fd(a), F_GETFD) & FD_CLOEXEC);
    cr_assert(fcntl(rt_io_fd(b), F_GETFL) & O_NONBLOCK);
    expect_own_credentials(a);
    expect_own_credentials(b);
    write_io(rt, a, "abc");
    expect_io(rt, b, "abc");
    rt_io_close(a);
    cr_assert_eq(read_once(rt, b), 0);
    rt_io_close(b);
    cr_assert_eq(rt_unix_pair(rt, SOCK_SEQPACKET, &a, &b), 0);
    rt_io_close(a);
    rt_io_close(b);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

/* ---- stale paths --------------------------------------------------------------- */

Test(unix, a_stale_path_is_eaddrinuse_without_the_option_and_replaced_with_it)
{
    rt_runtime *rt = new_runtime(2);
    char dir[32], path[200];
    make_dir(dir);
    path_in(path, sizeof path, dir, "stale.sock");
    int fds = count_fds();

    rt_io *old = listen_on(rt, path, 0);
    rt_io_close(old); /* the file stays: stale */
    cr_assert(exists(path));
    rt_io *l = (rt_io *)1;
    cr_assert_eq(rt_unix_listen(rt, path, 4, 0, &l), -EADDRINUSE);
    cr_assert_null(l);
    cr_assert(exists(path), "never removed without the option");
    cr_assert_eq(count_fds(), fds, "the refused listen closed its socket");

    l = listen_on(rt, path, RT_UNIX_UNLINK_STALE);
    rt_io *client = connect_to(rt, path);
    rt_io *server = accept_from(rt, l);
    write_io(rt, client, "fresh");
    expect_io(rt, server, "fresh");
    rt_io_close(client);
    rt_io_close(server);

    /* A live listener keeps its path, even with the option. */
    rt_io *second = (rt_io *)1;
    cr_assert_eq(rt_unix_listen(rt, path, 4, RT_UNIX_UNLINK_STALE, &second), -EADDRINUSE);
    cr_assert_null(second);
    rt_io *probe = accept_from(rt, l);
    cr_assert_eq(read_once(rt, probe), 0, "the check's connection closed at once");
    rt_io_close(probe);
    client = connect_to(rt, path);
    server = accept_from(rt, l);
    write_io(rt, client, "still here");
    expect_io(rt, server, "still here");
    rt_io_close(client);
    rt_io_close(server);
    rt_io_close(l);
    cr_assert_eq(unlink(path), 0);

    /* A plain file is never removed. */
    int f = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    cr_assert_geq(f, 0);
    close(f);
    cr_assert_eq(rt_unix_listen(rt, path, 4, RT_UNIX_UNLINK_STALE, &l), -EADDRINUSE);
    cr_assert_eq(rt_unix_dgram_bind(rt, path, RT_UNIX_UNLINK_STALE, &l), -EADDRINUSE);
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0);
    cr_assert(S_ISREG(st.st_mode));
    cr_assert_eq(unlink(path), 0);

    /* The same for a datagram socket's file. */
    rt_io *d = NULL;
    cr_assert_eq(rt_unix_dgram_bind(rt, path, 0, &d), 0);
    rt_io_close(d);
    cr_assert_eq(rt_unix_dgram_bind(rt, path, 0, &d), -EADDRINUSE);
    cr_assert_eq(rt_unix_dgram_bind(rt, path, RT_UNIX_UNLINK_STALE, &d), 0);
    rt_io *d2 = NULL;
    cr_assert_eq(rt_unix_dgram_bind(rt, path, RT_UNIX_UNLINK_STALE, &d2), -EADDRINUSE, "live");
    rt_io_close(d);
    cr_assert_eq(unlink(path), 0);

    cr_assert_eq(count_fds(), fds);
    remove_dir(dir);
    finish_runtime(rt, 0);
}

Test(unix, connect_and_bind_errors_are_reported)
{
    int before = count_fds();
    rt_runtime *rt = new_runtime(1);
    char dir[32], path[200], missing[200], nodir[200], name[100];
    make_dir(dir);
    path_in(path, sizeof path, dir, "dgram.sock");
    path_in(missing, sizeof missing, dir, "missing.sock");
    path_in(nodir, sizeof nodir, dir, "no/such/dir.sock");
    abstract_name(name, sizeof name, "nobody");
    static rt_unix_connect c;

    cr_assert_eq(rt_unix_connect_init(&c, rt, missing), 0);
    run_op(rt, &c.future);
    cr_assert_eq(c.result, -ENOENT);
    cr_assert_null(c.conn);

    cr_assert_eq(rt_unix_connect_init(&c, rt, name), 0);
    run_op(rt, &c.future);
    cr_assert_eq(c.result, -ECONNREFUSED, "an abstract name nobody bound");

    rt_io *d;
    cr_assert_eq(rt_unix_dgram_bind(rt, path, 0, &d), 0);
    cr_assert_eq(rt_unix_connect_init(&c, rt, path), 0);
    run_op(rt, &c.future);
    cr_assert_eq(c.result, -EPROTOTYPE, "a datagram socket is there");
    rt_io_close(d);
    cr_assert_eq(rt_unix_connect_init(&c, rt, path), 0);
    run_op(rt, &c.future);
    cr_assert_eq(c.result, -ECONNREFUSED, "a stale socket file");
    cr_assert_eq(unlink(path), 0);

    rt_io *l = (rt_io *)1;
    cr_assert_eq(rt_unix_listen(rt, nodir, 4, 0, &l), -ENOENT);
    cr_assert_null(l);

    /* A listen that fails after its bind removes the file it made. */
    shut_down(rt, 0);
    cr_assert_eq(rt_unix_listen(rt, path, 4, 0, &l), -ESHUTDOWN);
    cr_assert_not(exists(path), "the failed listen removed its socket file");
    cr_assert_eq(rt_runtime_free(rt), 0);
    cr_assert_eq(count_fds(), before);
    remove_dir(dir);
}
