/* A TCP echo server on fibers: one fiber per connection copies what it
 * reads back to the peer until the peer closes. main waits for SIGINT or
 * SIGTERM; freeing the runtime then cancels every fiber, whose awaits fail
 * with -ECANCELED, so each closes its socket on its way out.
 *
 *   ./echo_server [--port P] [--workers W]   (P 0: any free port; W 0: all CPUs)
 *
 * Prints `listening 127.0.0.1:PORT` once it accepts connections, and exits
 * with status 0 on SIGINT or SIGTERM. examples/stackless/echo_server.c is
 * the same server as stackless tasks. */
#define _POSIX_C_SOURCE 200809L /* sigwait, pthread_sigmask, strdup */

#include <asyncrt.h>

#include <stdio.h>

#include "common.h"

static void *echo(void *conn)
{
    char buf[4096];
    rt_io_copy_await(conn, conn, buf, sizeof buf); /* until the peer closes, or an error */
    rt_io_close(conn);
    return NULL;
}

static void *serve(void *listener)
{
    rt_fiber_serve(listener, NULL, echo); /* a fiber per connection, until cancelled */
    rt_io_close(listener);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *flags = "--port --workers", *usage = "echo_server [--port P] [--workers W]";
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%lu",
             flag_number(argc, argv, flags, "--port", 0, 65535, usage));
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = (unsigned)flag_number(argc, argv, flags, "--workers", 0, RT_MAX_WORKERS, usage);
    block_stop_signals(); /* before the runtime's threads, which inherit the mask */
    rt_runtime *rt;
    rt_io *listener;
    int err = rt_runtime_new(&cfg, &rt);
    if (err == 0 && (err = rt_tcp_listen_addr(rt, addr, &listener)) == 0)
        err = rt_fiber_spawn(rt, serve, listener, NULL);
    if (err < 0) {
        fprintf(stderr, "echo_server: %s\n", rt_strerror(err));
        return 1;
    }
    printf("listening 127.0.0.1:%d\n", rt_net_local_port(listener));
    fflush(stdout);
    wait_for_stop();
    return rt_runtime_free(rt) < 0;
}
