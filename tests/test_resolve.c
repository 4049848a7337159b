/* Name resolution without the network: "localhost", address literals,
 * service names and numbers from /etc/services, a name under ".invalid"
 * (RFC 6761) that must fail, the mapping of getaddrinfo's errors, lookups
 * dropped or aborted while queued behind a busy pool and while getaddrinfo
 * runs (held inside the C library by a FIFO named in HOSTALIASES, which
 * glibc's DNS back end opens for a name without dots), shutdown with a
 * lookup queued or running. test_resolve_connect.c connects by name. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_blocking.h"
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

TestSuite(resolve, .fini = fail_on_leaks);

/* ---- lookups ---------------------------------------------------------------- */

#define ASSERT_REFUSED(op, call)                                                                   \
    do {                                                                                           \
        cr_assert_eq((call), -EINVAL, "%s", #call);                                                \
        cr_assert_eq((op)->result, -EINVAL, "%s", #call);                                          \
        cr_assert(rt_future_is_done(&(op)->future), "%s", #call);                                  \
    } while (0)

Test(resolve, bad_arguments_are_einval_and_finish_the_operation)
{
    rt_runtime *rt = new_runtime(1);
    static rt_resolve op;
    char longest[RT_RESOLVE_HOST_MAX + 2];
    memset(longest, 'a', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    ASSERT_REFUSED(&op, rt_resolve_init(&op, rt, NULL, NULL, AF_UNSPEC, 0));
    ASSERT_REFUSED(&op, rt_resolve_init(&op, rt, "", "80", AF_UNSPEC, 0));
    ASSERT_REFUSED(&op, rt_resolve_init(&op, rt, longest, "80", AF_UNSPEC, 0));
    ASSERT_REFUSED(&op, rt_resolve_init(&op, rt, "localhost", "", AF_UNSPEC, 0));
    ASSERT_REFUSED(&op, rt_resolve_init(&op, rt, "localhost", "65536", AF_UNSPEC, 0));
    ASSERT_REFUSED(&op, rt_resolve_init(&op, rt, "localhost", "a-service-name-longer-than-31-chars",
                                        AF_UNSPEC, 0));
    ASSERT_REFUSED(&op, rt_resolve_init(&op, rt, "localhost", "80", AF_UNIX, 0));
    ASSERT_REFUSED(&op, rt_resolve_init(&op, rt, "localhost", "80", AF_UNSPEC, 16));
    ASSERT_REFUSED(&op, rt_resolve_init(&op, NULL, "localhost", "80", AF_UNSPEC, 0));
    cr_assert_null(op.addrs);
    cr_assert_eq(rt_resolve_init(NULL, rt, "localhost", "80", AF_UNSPEC, 0), -EINVAL);
    /* The longest name taken is taken. */
    longest[RT_RESOLVE_HOST_MAX] = '\0';
    cr_assert_eq(rt_resolve_init(&op, rt, longest, "65535", AF_UNSPEC, 0), 0);
    RT_DROP(&op); /* never polled: holds nothing */
    cr_assert_eq(op.result, -ECANCELED);

    static rt_resolve_connect c;
    ASSERT_REFUSED(&c, rt_resolve_connect_init(&c, rt, "localhost", NULL, AF_UNSPEC, 0));
    ASSERT_REFUSED(
        &c, rt_resolve_connect_init(&c, rt, "localhost", "80", AF_UNSPEC, RT_RESOLVE_PASSIVE));
    ASSERT_REFUSED(&c,
                   rt_resolve_connect_init(&c, rt, "localhost", "80", AF_UNSPEC, RT_RESOLVE_UDP));
    ASSERT_REFUSED(&c, rt_resolve_connect_init(&c, rt, "", "80", AF_UNSPEC, 0));
    ASSERT_REFUSED(&c, rt_resolve_connect_init(&c, NULL, "localhost", "80", AF_UNSPEC, 0));
    cr_assert_eq(rt_resolve_connect_init(NULL, rt, "localhost", "80", AF_UNSPEC, 0), -EINVAL);
    rt_resolve_addr one = entry("127.0.0.1", 1);
    rt_resolve_addrs empty = {0, &one}, no_array = {1, NULL}, fine = {1, &one};
    ASSERT_REFUSED(&c, rt_resolve_connect_addrs_init(&c, rt, NULL));
    ASSERT_REFUSED(&c, rt_resolve_connect_addrs_init(&c, rt, &empty));
    ASSERT_REFUSED(&c, rt_resolve_connect_addrs_init(&c, rt, &no_array));
    ASSERT_REFUSED(&c, rt_resolve_connect_addrs_init(&c, NULL, &fine));
    one.len = 0;
    ASSERT_REFUSED(&c, rt_resolve_connect_addrs_init(&c, rt, &fine));
    one.len = sizeof(struct sockaddr_storage) + 1;
    ASSERT_REFUSED(&c, rt_resolve_connect_addrs_init(&c, rt, &fine));
    cr_assert_eq(rt_resolve_connect_addrs_init(NULL, rt, &fine), -EINVAL);
    cr_assert_null(c.conn);

    /* Zeroed operations drop safely; NULL lists free as nothing. */
    static rt_resolve zero;
    static rt_resolve_connect zero_c;
    RT_DROP(&zero);
    RT_DROP(&zero_c);
    rt_resolve_addrs_free(NULL);
    cr_assert_str_eq(rt_resolve_strerror(-ENOENT, EAI_NONAME), gai_strerror(EAI_NONAME));
    cr_assert_str_eq(rt_resolve_strerror(-EINVAL, 0), rt_strerror(-EINVAL));
    cr_assert_not_null(rt_resolve_strerror(INT64_MIN, 0));
    finish_runtime(rt, 0);
}

Test(resolve, localhost_resolves_to_the_loopback_with_the_service_port)
{
    rt_runtime *rt = new_runtime(2);
    rt_resolve *op = lookup(rt, "localhost", "http", AF_UNSPEC, 0);
    check_list(op, 80);
    for (size_t i = 0; i < op->addrs->count; i++) {
        char buf[INET6_ADDRSTRLEN];
        const rt_resolve_addr *a = &op->addrs->addr[i];
        cr_assert(is_text(a, "127.0.0.1") || is_text(a, "::1"), "localhost is %s",
                  text_of(&a->addr, buf, sizeof buf));
    }
    rt_resolve_addrs_free(op->addrs);

    /* A port number, IPv4 only. */
    op = lookup(rt, "localhost", "8080", AF_INET, 0);
    check_list(op, 8080);
    cr_assert_eq(op->addrs->count, 1);
    cr_assert(is_text(&op->addrs->addr[0], "127.0.0.1"));
    rt_resolve_addrs_free(op->addrs);

    /* A host alone: port 0. */
    op = lookup(rt, "localhost", NULL, AF_INET, 0);
    check_list(op, 0);
    rt_resolve_addrs_free(op->addrs);
    finish_runtime(rt, 0);
}

Test(resolve, literals_services_and_the_null_host)
{
    rt_runtime *rt = new_runtime(2);
    rt_resolve *op = lookup(rt, "192.0.2.7", "443", AF_UNSPEC, 0);
    check_list(op, 443);
    cr_assert_eq(op->addrs->count, 1);
    cr_assert(is_text(&op->addrs->addr[0], "192.0.2.7"));
    rt_resolve_addrs_free(op->addrs);

    op = lookup(rt, "2001:db8::5", "ssh", AF_UNSPEC, RT_RESOLVE_NUMERIC);
    check_list(op, 22);
    cr_assert_eq(op->addrs->count, 1);
    cr_assert_eq(op->addrs->addr[0].family, AF_INET6);
    cr_assert(is_text(&op->addrs->addr[0], "2001:db8::5"));
    rt_resolve_addrs_free(op->addrs);

    /* UDP services: "domain" is 53. */
    op = lookup(rt, "127.0.0.1", "domain", AF_INET, RT_RESOLVE_UDP);
    check_list(op, 53);
    rt_resolve_addrs_free(op->addrs);

    /* No host: the loopback, or with RT_RESOLVE_PASSIVE the wildcard. */
    op = lookup(rt, NULL, "7000", AF_INET, 0);
    check_list(op, 7000);
    cr_assert(is_text(&op->addrs->addr[0], "127.0.0.1"));
    rt_resolve_addrs_free(op->addrs);
    op = lookup(rt, NULL, "7000", AF_INET6, RT_RESOLVE_PASSIVE);
    check_list(op, 7000);
    cr_assert(is_text(&op->addrs->addr[0], "::"));
    rt_resolve_addrs_free(op->addrs);
    finish_runtime(rt, 0);
}

Test(resolve, getaddrinfo_errors_are_distinct_errnos_with_their_eai_code)
{
    rt_runtime *rt = new_runtime(2);
    /* A name where only an address literal is allowed. */
    rt_resolve *op = lookup(rt, "localhost", "80", AF_UNSPEC, RT_RESOLVE_NUMERIC);
    cr_assert_eq(op->result, -ENOENT, "%lld", (long long)op->result);
    cr_assert_eq(op->eai, EAI_NONAME);
    cr_assert_null(op->addrs);
    cr_assert_str_eq(rt_resolve_strerror(op->result, op->eai), gai_strerror(EAI_NONAME));
    /* A service nobody knows. */
    op = lookup(rt, "localhost", "asyncrt-no-such-svc", AF_UNSPEC, 0);
    cr_assert_eq(op->result, -ESRCH, "%lld", (long long)op->result);
    cr_assert_eq(op->eai, EAI_SERVICE);
    cr_assert_null(op->addrs);
    /* An IPv4 literal asked for as IPv6. */
    op = lookup(rt, "192.0.2.7", "80", AF_INET6, 0);
    cr_assert_eq(op->result, -ENODATA, "%lld", (long long)op->result);
    cr_assert_eq(op->eai, EAI_ADDRFAMILY);
    cr_assert_null(op->addrs);
    finish_runtime(rt, 0);
}

Test(resolve, a_name_under_invalid_fails_without_the_network)
{
    /* RFC 6761: no name under .invalid exists. Offline, the name server
     * may not answer at all: a second per try, one try. */
    cr_assert_eq(setenv("RES_OPTIONS", "timeout:1 attempts:1", 1), 0);
    rt_runtime *rt = new_runtime(2);
    int64_t t0 = rt_now_ns();
    rt_resolve *op = lookup(rt, "no-such-host.invalid", "80", AF_UNSPEC, 0);
    int64_t took = rt_now_ns() - t0;
    /* Not found, or no answer: which depends on the network, not on us. */
    cr_assert(op->result == -ENOENT || op->result == -ENODATA || op->result == -EAGAIN ||
                  op->result == -EREMOTEIO,
              "%lld: %s", (long long)op->result, rt_resolve_strerror(op->result, op->eai));
    cr_assert_neq(op->eai, 0);
    cr_assert_null(op->addrs);
    cr_assert_lt(took, 10 * SEC, "took %lld ms", (long long)(took / MS));
    cr_log_info("no-such-host.invalid: %s (%lld ms)", rt_resolve_strerror(op->result, op->eai),
                (long long)(took / MS));
    finish_runtime(rt, 0);
    unsetenv("RES_OPTIONS");
}

/* Signals its event: a job queued after another runs after it (FIFO). */
static void *marker_job(void *arg)
{
    event_signal(arg);
    return NULL;
}

Test(resolve, a_lookup_dropped_while_queued_never_runs_and_gives_everything_back)
{
    /* Had the dropped lookup run, glibc would have opened the FIFO (a
     * reader for the writer thread) and stayed inside getaddrinfo, holding
     * the pool's only thread. */
    struct held h;
    held_setup(&h);
    rt_runtime *rt = runtime_with_pool(1, 0);
    static struct event open_gate = EVENT_INIT;
    rt_task *gate;
    cr_assert_eq(rt_spawn_blocking(rt, gate_job, &open_gate, &gate), 0);
    cr_assert(event_wait_for(&gate_entered, 1));
    /* Polled by hand: the job queues behind the gate. */
    static rt_resolve op;
    struct hand hd;
    hand_init(&hd);
    cr_assert_eq(rt_resolve_init(&op, rt, "asyncrt-held", "http", AF_UNSPEC, 0), 0);
    cr_assert_eq(RT_POLL_OP(&op, &hd.cx), RT_PENDING);
    cr_assert_eq(RT_POLL_OP(&op, &hd.cx), RT_PENDING, "still queued");
    cr_assert_eq(metrics_of(rt).blocking_jobs, 2);
    RT_DROP(&op);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert(rt_future_is_done(&op.future));
    cr_assert_null(op.addrs);
    cr_assert_eq(counting_outstanding(&hd.w), 0, "the job's joiner kept a waker");
    RT_DROP(&op); /* again: nothing */
    event_signal(&open_gate);
    cr_assert_eq(task_wait_status(gate, WAIT_DEADLINE_NS, NULL), 0);
    /* A job queued now runs after the dropped one would have. */
    static struct event marker = EVENT_INIT;
    cr_assert_eq(rt_spawn_blocking(rt, marker_job, &marker, NULL), 0);
    cr_assert(event_wait_for_s(&marker, 1, 10), "the pool's thread is stuck: the lookup ran");
    cr_assert_eq(event_count(&h.in), 0, "the dropped lookup ran getaddrinfo");
    /* The same lookup not dropped does open the FIFO, so the check above
     * would have seen a run. */
    static rt_resolve again;
    cr_assert_eq(rt_resolve_init(&again, rt, "asyncrt-held", "http", AF_UNSPEC, 0), 0);
    rt_task *t = start_op(rt, &again.future, NULL);
    bool held = held_wait(&h);
    held_release(&h);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    rt_resolve_addrs_free(again.addrs); /* whatever the name server said */
    cr_assert_eq(metrics_of(rt).blocking_jobs, 4);
    finish_runtime(rt, 0);
    held_cleanup(&h);
    if (!held)
        cr_skip("the C library never opened HOSTALIASES: a run of the dropped lookup could "
                "not have been seen");
}

Test(resolve, a_lookup_dropped_after_its_job_finished_frees_what_it_found)
{
    rt_runtime *rt = runtime_with_pool(1, 0);
    static struct event open_gate = EVENT_INIT;
    rt_task *gate;
    cr_assert_eq(rt_spawn_blocking(rt, gate_job, &open_gate, &gate), 0);
    cr_assert(event_wait_for(&gate_entered, 1));
    /* Queued behind the gate, so that the first poll surely waits. */
    static struct event woken = EVENT_INIT;
    rt_context cx = event_context(&woken);
    static rt_resolve op;
    cr_assert_eq(rt_resolve_init(&op, rt, "localhost", "http", AF_UNSPEC, 0), 0);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING);
    event_signal(&open_gate);
    cr_assert_eq(task_wait_status(gate, WAIT_DEADLINE_NS, NULL), 0);
    /* The job found the addresses and let go of the record; the drop, last
     * out, frees them (the leak check after the test says so). */
    cr_assert(event_wait_for(&woken, 1));
    RT_DROP(&op);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_null(op.addrs);
    finish_runtime(rt, 0);
}

Test(resolve, a_task_aborted_while_its_lookup_is_queued_leaks_nothing)
{
    rt_runtime *rt = runtime_with_pool(1, 0);
    static struct event open_gate = EVENT_INIT;
    rt_task *gate;
    cr_assert_eq(rt_spawn_blocking(rt, gate_job, &open_gate, &gate), 0);
    cr_assert(event_wait_for(&gate_entered, 1));
    static rt_resolve op;
    static rt_resolve_connect conn;
    cr_assert_eq(rt_resolve_init(&op, rt, "localhost", "http", AF_UNSPEC, 0), 0);
    cr_assert_eq(rt_resolve_connect_init(&conn, rt, "localhost", "80", AF_UNSPEC, 0), 0);
    rt_task *a = start_op(rt, &op.future, NULL);
    rt_task *b = start_op(rt, &conn.future, NULL);
    rt_task_cancel(a);
    rt_task_cancel(b);
    cr_assert_eq(task_wait_status(a, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(task_wait_status(b, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_eq(conn.result, -ECANCELED);
    cr_assert_null(conn.conn);
    event_signal(&open_gate);
    cr_assert_eq(task_wait_status(gate, WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
}

Test(resolve, shutdown_with_a_lookup_queued_cancels_it)
{
    rt_runtime *rt = runtime_with_pool(1, 0);
    /* The gate lets go once the lookup's task was dropped by the shutdown,
     * so the shutdown waits for nothing else. */
    static struct event lookup_dropped = EVENT_INIT;
    cr_assert_eq(rt_spawn_blocking(rt, gate_job, &lookup_dropped, NULL), 0);
    cr_assert(event_wait_for(&gate_entered, 1));
    static rt_resolve op;
    cr_assert_eq(rt_resolve_init(&op, rt, "localhost", "http", AF_UNSPEC, 0), 0);
    rt_task_drop(start_op(rt, &op.future, &lookup_dropped));
    rt_metrics m;
    finish_runtime_metrics(rt, 1, &m);
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_eq(m.blocking_abandoned, 0);
    cr_assert_eq(m.blocking_jobs, 2);
}

Test(resolve, a_lookup_polled_by_hand_reports_eshutdown_after_a_shutdown)
{
    rt_runtime *rt = runtime_with_pool(1, 0);
    /* The gate lets go when the lookup's waker is woken: when the shutdown
     * cancels its queued job. */
    static struct event woken = EVENT_INIT;
    cr_assert_eq(rt_spawn_blocking(rt, gate_job, &woken, NULL), 0);
    cr_assert(event_wait_for(&gate_entered, 1));
    static rt_resolve op;
    rt_context cx = event_context(&woken);
    cr_assert_eq(rt_resolve_init(&op, rt, "localhost", "http", AF_UNSPEC, 0), 0);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING);
    rt_metrics m = shut_down(rt, 0);
    cr_assert_eq(m.blocking_abandoned, 0);
    cr_assert_eq(event_count(&woken), 1);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, -ESHUTDOWN);
    cr_assert_null(op.addrs);
    /* A lookup started after the shutdown fails at its first poll. */
    cr_assert_eq(rt_resolve_init(&op, rt, "localhost", "http", AF_UNSPEC, 0), 0);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, -ESHUTDOWN);
    finish_runtime(rt, 0); /* shut down already: frees it */
}

Test(resolve, a_lookup_aborted_while_getaddrinfo_runs_is_over_at_once)
{
    struct held h;
    held_setup(&h);
    rt_runtime *rt = new_runtime(2);
    static rt_resolve op;
    cr_assert_eq(rt_resolve_init(&op, rt, "asyncrt-held", "80", AF_UNSPEC, 0), 0);
    rt_task *t = start_op(rt, &op.future, NULL);
    if (!held_wait(&h)) {
        cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
        held_release(&h);
        finish_runtime(rt, 0);
        held_cleanup(&h);
        cr_skip("the C library never opened HOSTALIASES: no lookup can be held");
    }
    /* The job is inside getaddrinfo, and stays there until the release. */
    rt_task_cancel(t);
    cr_assert_eq(task_wait_status(t, 5 * SEC, NULL), -ECANCELED,
                 "the aborted lookup waited for getaddrinfo");
    cr_assert_eq(op.result, -ECANCELED);
    cr_assert_null(op.addrs);
    held_release(&h);
    /* The job finishes on its own and frees what it found (the leak check
     * after the test says so); the shutdown waits for it. */
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.blocking_abandoned, 0);
    held_cleanup(&h);
}

Test(resolve, shutdown_with_a_lookup_running_waits_only_the_pool_deadline)
{
    struct held h;
    held_setup(&h);
    const int64_t deadline = 200 * MS;
    rt_runtime *rt = runtime_with_pool(4, deadline);
    static rt_resolve op;
    cr_assert_eq(rt_resolve_init(&op, rt, "asyncrt-held", NULL, AF_UNSPEC, 0), 0);
    rt_task_drop(start_op(rt, &op.future, NULL));
    if (!held_wait(&h)) {
        held_release(&h);
        finish_runtime(rt, -1);
        held_cleanup(&h);
        cr_skip("the C library never opened HOSTALIASES: no lookup can be held");
    }
    int64_t t0 = rt_now_ns();
    rt_metrics m = shut_down(rt, 1);
    int64_t took = rt_now_ns() - t0;
    cr_assert_geq(took, deadline);
    cr_assert_lt(took, 5 * SEC, "shutdown took %lld ms", (long long)(took / MS));
    cr_assert_eq(m.blocking_abandoned, 1);
    cr_assert_eq(op.result, -ECANCELED);
    /* Released, the abandoned job finishes, frees the record and its
     * thread exits (the one state here with no event to wait on). */
    held_release(&h);
    cr_assert(wait_blocking_threads(rt, 0, 20), "the abandoned job never finished");
    finish_runtime(rt, 0); /* shut down already: frees it */
    held_cleanup(&h);
}
