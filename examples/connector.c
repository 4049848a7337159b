/* A client that makes many connections at once, each with a deadline, on
 * fibers: every client fiber connects to 127.0.0.1:PORT, sends "ping\n"
 * and expects it echoed back (an echo server, such as
 * examples/echo_server.c), all within MS milliseconds of its start. The
 * clients run in a task group, whose results are collected as they finish.
 *
 *   ./connector --port P [--count N] [--timeout-ms MS] [--workers W]
 *
 * Defaults: N 100, MS 2000, W 0 (all CPUs). Prints `ok K failed F` and, when
 * F > 0, the first error; exits 0 when every client succeeded. */
#define _POSIX_C_SOURCE 200809L /* sigwait, strdup (common.h) */

#include <asyncrt.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

static struct sockaddr_storage addr;
static socklen_t addr_len;
static int64_t timeout_ns;

/* One client: its status says how it failed. */
static void *client(void *arg)
{
    (void)arg;
    int64_t deadline = rt_now_ns() + timeout_ns; /* for the connect and the reply */
    rt_tcp_connect connect;
    rt_tcp_connect_init(&connect, NULL, (struct sockaddr *)&addr, addr_len);
    int64_t n = rt_fiber_await_until(&connect.future, deadline);
    if (n == 0) {
        char reply[5];
        rt_io_read read;
        if ((n = rt_io_write_all_await(connect.conn, "ping\n", 5)) >= 0 &&
            (n = rt_io_read_init(&read, connect.conn, reply, sizeof reply)) == 0)
            n = rt_fiber_await_until(&read.future, deadline);
        if (n >= 0 && (n != 5 || memcmp(reply, "ping\n", 5) != 0))
            n = -EPROTO;
        rt_io_close(connect.conn);
    }
    rt_fiber_set_status(n < 0 ? (int)n : 0);
    return NULL;
}

/* Starts the clients and collects them: returns how many succeeded. */
static void *run(void *arg)
{
    uintptr_t count = (uintptr_t)arg, started = 0, ok = 0;
    int first = 0;
    rt_group *clients = NULL;
    rt_fiber_options opts;
    rt_fiber_options_init(&opts);
    if ((first = rt_group_new(NULL, NULL, NULL, &clients)) == 0)
        for (opts.group = clients; started < count; started++)
            if ((first = rt_fiber_spawn_ex(NULL, &opts, client, NULL, NULL)) < 0)
                break;
    for (uintptr_t i = 0; i < started; i++) {
        rt_group_next next;
        rt_group_next_init(&next, clients);
        rt_fiber_await(&next.future);
        ok += next.child.status == 0;
        first = first < 0 ? first : next.child.status;
    }
    rt_group_free(clients);
    printf("ok %lu failed %lu\n", (unsigned long)ok, (unsigned long)(count - ok));
    if (first < 0)
        printf("first error: %s\n", rt_strerror(first));
    return (void *)ok;
}

int main(int argc, char **argv)
{
    const char *flags = "--port --count --timeout-ms --workers";
    const char *usage = "connector --port P [--count N] [--timeout-ms MS] [--workers W]";
    unsigned long port = flag_number(argc, argv, flags, "--port", 0, 65535, usage);
    unsigned long count = flag_number(argc, argv, flags, "--count", 100, 1000000, usage);
    timeout_ns = RT_MS(flag_number(argc, argv, flags, "--timeout-ms", 2000, 86400000, usage));
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = (unsigned)flag_number(argc, argv, flags, "--workers", 0, RT_MAX_WORKERS, usage);
    if (port == 0 || count == 0 || rt_net_addr("127.0.0.1", (uint16_t)port, &addr, &addr_len) < 0) {
        fprintf(stderr, "usage: %s\n", usage);
        return 2;
    }
    rt_runtime *rt;
    void *ok = NULL;
    int err = rt_runtime_new(&cfg, &rt);
    if (err == 0)
        err = rt_fiber_block_on(rt, NULL, run, (void *)(uintptr_t)count, &ok, NULL);
    if (err < 0) {
        fprintf(stderr, "connector: %s\n", rt_strerror(err));
        return 1;
    }
    rt_runtime_free(rt);
    return (uintptr_t)ok == count ? 0 : 1;
}
