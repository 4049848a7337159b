/* An echo server on a Unix domain socket, on fibers: one fiber per
 * connection copies what it reads back until the peer closes, after
 * printing the peer's credentials (rt_unix_peer_cred); the connections are
 * plain rt_io streams. main waits for SIGINT or SIGTERM, removes the
 * socket file, and freeing the runtime cancels every fiber.
 *
 *   ./unix_echo --path PATH [--workers W]   (W 0: all CPUs)
 *
 * PATH is a filesystem path, or "@name" for a Linux abstract name (no file).
 * A socket file left at PATH by a server that died is replaced
 * (RT_UNIX_UNLINK_STALE: only a socket file nobody listens on); a live
 * server's, or any other file, makes it fail. Prints `listening PATH` once
 * it accepts connections, then serves until SIGINT or SIGTERM, removes its
 * socket file and exits with status 0. */
#define _POSIX_C_SOURCE 200809L /* sigwait, pthread_sigmask, strdup */

#include <asyncrt.h>

#include <stdio.h>
#include <unistd.h>

#include "common.h"

static void *echo(void *conn)
{
    rt_unix_cred peer;
    if (rt_unix_peer_cred(conn, &peer) == 0)
        fprintf(stderr, "unix_echo: connection from pid %ld uid %ld\n", (long)peer.pid,
                (long)peer.uid);
    char buf[4096];
    rt_io_copy_await(conn, conn, buf, sizeof buf);
    rt_io_close(conn);
    return NULL;
}

static void *serve(void *listener)
{
    rt_fiber_serve(listener, NULL, echo);
    rt_io_close(listener);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *usage = "unix_echo --path PATH [--workers W]";
    if (argc < 3 || strcmp(argv[1], "--path") != 0) {
        fprintf(stderr, "usage: %s\n", usage);
        return 2;
    }
    const char *path = argv[2];
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = (unsigned)flag_number(argc - 2, argv + 2, "--workers", "--workers", 0,
                                        RT_MAX_WORKERS, usage);
    block_stop_signals(); /* before the runtime's threads, which inherit the mask */
    rt_runtime *rt;
    rt_io *listener;
    int err = rt_runtime_new(&cfg, &rt);
    if (err == 0 && (err = rt_unix_listen(rt, path, 1024, RT_UNIX_UNLINK_STALE, &listener)) == 0)
        err = rt_fiber_spawn(rt, serve, listener, NULL);
    if (err < 0) {
        fprintf(stderr, "unix_echo: %s: %s\n", path, rt_strerror(err));
        return 1;
    }
    printf("listening %s\n", path);
    fflush(stdout);
    wait_for_stop();
    if (path[0] != '@')
        unlink(path); /* new clients get ENOENT from here on */
    return rt_runtime_free(rt) < 0;
}
