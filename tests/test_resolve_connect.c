/* Connecting by name for real, on the loopback: a listener reached through
 * "localhost", a refused first address giving way to the second, a silent
 * one getting a second attempt after the stagger, a failure starting the
 * next attempt at once, the families taking turns, every address refused,
 * one time limit around it all, and the lookup's errors. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_resolve.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(resolve_connect, .fini = fail_on_leaks);

/* ---- connecting by name ---------------------------------------------------- */

/* The connected socket's peer and the accepted one's local address match. */
static void check_accepted(rt_runtime *rt, rt_io *listener, rt_resolve_connect *c)
{
    static rt_tcp_accept acc;
    cr_assert_eq(rt_tcp_accept_init(&acc, listener), 0);
    run_op(rt, &acc.future);
    cr_assert_eq(acc.result, 0, "accept: %s", rt_strerror((int)acc.result));
    struct sockaddr_storage local;
    socklen_t len;
    cr_assert_eq(rt_net_local_addr(c->conn, &local, &len), 0);
    cr_assert_eq(len, acc.peer_len);
    cr_assert_eq(memcmp(&local, &acc.peer, len), 0, "the listener accepted someone else");
    rt_io_close(acc.conn);
}

Test(resolve_connect, connect_by_name_reaches_a_listener_on_localhost)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    struct sockaddr_storage ss;
    socklen_t len;
    cr_assert_eq(rt_net_addr("127.0.0.1", 0, &ss, &len), 0);
    rt_io *listener;
    cr_assert_eq(rt_tcp_listen(rt, (struct sockaddr *)&ss, len, 16, RT_NET_REUSEADDR, &listener),
                 0);
    cr_assert_eq(rt_net_local_addr(listener, &ss, &len), 0);
    char service[8];
    snprintf(service, sizeof service, "%u", port_of(&ss));
    static rt_resolve_connect c;
    cr_assert_eq(rt_resolve_connect_init(&c, rt, "localhost", service, AF_UNSPEC, 0), 0);
    run_op(rt, &c.future);
    cr_assert_eq(c.result, 0, "%s", rt_resolve_strerror(c.result, c.eai));
    cr_assert_not_null(c.conn);
    cr_assert_eq(c.eai, 0);
    cr_assert_eq(c.addr_len, sizeof(struct sockaddr_in));
    cr_assert_eq(memcmp(&c.addr, &ss, c.addr_len), 0, "connected to the listener's address");
    /* 1 where localhost is 127.0.0.1 first; 2 where it is ::1 first (refused
     * there: the listener is on 127.0.0.1 only). */
    cr_assert_geq(c.attempts, 1);
    cr_log_info("localhost connected after %zu attempt(s)", c.attempts);
    check_accepted(rt, listener, &c);
    rt_io_close(c.conn);
    rt_io_close(listener);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(resolve_connect, a_refused_first_address_gives_way_to_the_second)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    uint16_t refusing, listening;
    int r = raw_socket("127.0.0.1", -1, &refusing); /* bound, not listening */
    int l = raw_socket("127.0.0.1", 16, &listening);
    rt_resolve_addr a[] = {entry("127.0.0.1", refusing), entry("127.0.0.1", listening)};
    rt_resolve_addrs list = {2, a};
    static rt_resolve_connect c;
    cr_assert_eq(rt_resolve_connect_addrs_init(&c, rt, &list), 0);
    c.stagger_ns = RT_SEC(10);
    int64_t t0 = rt_now_ns();
    run_op(rt, &c.future);
    int64_t took = rt_now_ns() - t0;
    cr_assert_eq(c.result, 0, "%s", rt_resolve_strerror(c.result, c.eai));
    cr_assert_eq(c.attempts, 2);
    cr_assert_eq(port_of(&c.addr), listening);
    /* The refusal started the second attempt at once, not after 10 s. */
    cr_assert_lt(took, RT_SEC(5), "took %lld ms", (long long)(took / MS));
    rt_io_close(c.conn);
    close(r);
    close(l);
    cr_assert_eq(count_fds(), fds, "the refused attempt's socket is closed");
    finish_runtime(rt, 0);
}

Test(resolve_connect, a_silent_address_gets_a_second_attempt_after_the_stagger)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    uint16_t silent, listening;
    int filler;
    int s = silent_listener(&silent, &filler);
    int l = raw_socket("127.0.0.1", 16, &listening);
    rt_resolve_addr a[] = {entry("127.0.0.1", silent), entry("127.0.0.1", listening)};
    rt_resolve_addrs list = {2, a};
    static rt_resolve_connect c;
    cr_assert_eq(rt_resolve_connect_addrs_init(&c, rt, &list), 0);
    cr_assert_eq(c.stagger_ns, RT_RESOLVE_STAGGER_NS);
    int64_t t0 = rt_now_ns();
    run_op(rt, &c.future);
    int64_t took = rt_now_ns() - t0;
    cr_assert_eq(c.result, 0, "%s", rt_resolve_strerror(c.result, c.eai));
    cr_assert_eq(port_of(&c.addr), listening, "the second address won");
    cr_assert_eq(c.attempts, 2);
    cr_assert_geq(took, RT_RESOLVE_STAGGER_NS, "the second attempt started after %lld ms",
                  (long long)(took / MS));
    cr_assert_lt(took, 5 * SEC);
    rt_io_close(c.conn);
    /* The silent attempt was dropped: its socket is closed. */
    close(filler);
    close(s);
    close(l);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(resolve_connect, a_failure_starts_the_next_attempt_without_waiting_for_the_stagger)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    uint16_t silent, refusing, listening;
    int filler;
    int s = silent_listener(&silent, &filler);
    int r = raw_socket("127.0.0.1", -1, &refusing);
    int l = raw_socket("127.0.0.1", 16, &listening);
    /* The first hangs; the second starts one stagger later and is refused,
     * which starts the third at once, not one more stagger later. */
    rt_resolve_addr a[] = {entry("127.0.0.1", silent), entry("127.0.0.1", refusing),
                           entry("127.0.0.1", listening)};
    rt_resolve_addrs list = {3, a};
    static rt_resolve_connect c;
    cr_assert_eq(rt_resolve_connect_addrs_init(&c, rt, &list), 0);
    c.stagger_ns = RT_SEC(2);
    int64_t t0 = rt_now_ns();
    run_op(rt, &c.future);
    int64_t took = rt_now_ns() - t0;
    cr_assert_eq(c.result, 0, "%s", rt_resolve_strerror(c.result, c.eai));
    cr_assert_eq(port_of(&c.addr), listening);
    cr_assert_eq(c.attempts, 3);
    cr_assert_geq(took, RT_SEC(2));
    cr_assert_lt(took, RT_MS(3500), "the third attempt waited for a second stagger: %lld ms",
                 (long long)(took / MS));
    rt_io_close(c.conn);
    close(filler);
    close(s);
    close(r);
    close(l);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(resolve_connect, the_families_take_turns)
{
    if (!have_ipv6_loopback())
        cr_skip("no IPv6 loopback on this machine");
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    uint16_t r6, l6, r4;
    int fr6 = raw_socket("::1", -1, &r6);
    int fl6 = raw_socket("::1", 16, &l6);
    int fr4 = raw_socket("127.0.0.1", -1, &r4);
    /* In the list's order the second address would connect; with the
     * families taking turns (IPv6 first, as the list begins) the IPv4 one
     * comes second, so the connection is made at the third attempt. */
    rt_resolve_addr a[] = {entry("::1", r6), entry("::1", l6), entry("127.0.0.1", r4)};
    rt_resolve_addrs list = {3, a};
    static rt_resolve_connect c;
    cr_assert_eq(rt_resolve_connect_addrs_init(&c, rt, &list), 0);
    run_op(rt, &c.future);
    cr_assert_eq(c.result, 0, "%s", rt_resolve_strerror(c.result, c.eai));
    cr_assert_eq(c.attempts, 3);
    cr_assert_eq(c.addr.ss_family, AF_INET6);
    cr_assert_eq(port_of(&c.addr), l6);
    rt_io_close(c.conn);
    close(fr6);
    close(fl6);
    close(fr4);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(resolve_connect, every_address_refused_reports_the_last_error)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    uint16_t p1, p2;
    int f1 = raw_socket("127.0.0.1", -1, &p1);
    int f2 = raw_socket("127.0.0.1", -1, &p2);
    rt_resolve_addr a[] = {entry("127.0.0.1", p1), entry("127.0.0.1", p2)};
    rt_resolve_addrs list = {2, a};
    static rt_resolve_connect c;
    cr_assert_eq(rt_resolve_connect_addrs_init(&c, rt, &list), 0);
    run_op(rt, &c.future);
    cr_assert_eq(c.result, -ECONNREFUSED, "%s", rt_resolve_strerror(c.result, c.eai));
    cr_assert_eq(c.attempts, 2);
    cr_assert_null(c.conn);
    cr_assert_eq(c.eai, 0);
    close(f1);
    close(f2);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}

Test(resolve_connect, one_time_limit_around_it_closes_what_it_opened)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    uint16_t silent;
    int filler;
    int s = silent_listener(&silent, &filler);
    rt_resolve_addr a[] = {entry("127.0.0.1", silent), entry("127.0.0.1", silent)};
    rt_resolve_addrs list = {2, a};
    static rt_resolve_connect c;
    static rt_timeout limit;
    cr_assert_eq(rt_resolve_connect_addrs_init(&c, rt, &list), 0);
    c.stagger_ns = 20 * MS; /* both attempts in flight before the limit */
    cr_assert_eq(rt_timeout_init(&limit, rt, &c.future, 300 * MS), 0);
    run_op(rt, &limit.future);
    cr_assert_eq(limit.result, -ETIMEDOUT);
    cr_assert_eq(c.result, -ECANCELED);
    cr_assert_eq(c.attempts, 2);
    cr_assert_null(c.conn);
    close(filler);
    close(s);
    cr_assert_eq(count_fds(), fds, "the dropped attempts' sockets are closed");
    finish_runtime(rt, 0);
}

Test(resolve_connect, connect_by_name_reports_the_lookup_error)
{
    rt_runtime *rt = new_runtime(2);
    int fds = count_fds();
    static rt_resolve_connect c;
    cr_assert_eq(rt_resolve_connect_init(&c, rt, "localhost", "asyncrt-no-such-svc", AF_UNSPEC, 0),
                 0);
    run_op(rt, &c.future);
    cr_assert_eq(c.result, -ESRCH);
    cr_assert_eq(c.eai, EAI_SERVICE);
    cr_assert_eq(c.attempts, 0);
    cr_assert_null(c.conn);
    cr_assert_eq(rt_resolve_connect_init(&c, rt, "localhost", "80", AF_UNSPEC, RT_RESOLVE_NUMERIC),
                 0);
    run_op(rt, &c.future);
    cr_assert_eq(c.result, -ENOENT);
    cr_assert_eq(c.eai, EAI_NONAME);
    cr_assert_eq(count_fds(), fds);
    finish_runtime(rt, 0);
}
