/* A line-based key-value server on fibers: one fiber per connection, a
 * shared map behind an async mutex, an idle timeout per connection, and a
 * clean stop on a signal that tells every open connection before it goes.
 *
 *   ./kv_server [--port P] [--workers W] [--idle-ms MS]
 *
 * P 0: any free port; W 0: all CPUs; MS: how long a connection may stay
 * silent (default 30000). Prints `listening 127.0.0.1:PORT` once it accepts
 * connections. One command per line, keys and values without spaces:
 *
 *   SET key value  ->  OK
 *   GET key        ->  the value, or NOT_FOUND
 *   DEL key        ->  OK, or NOT_FOUND
 *   anything else  ->  ERR <reason>
 *
 * A connection silent for MS milliseconds gets `ERR idle timeout` and is
 * closed. On SIGINT or SIGTERM main frees the runtime, which cancels every
 * fiber: each connection's await fails with -ECANCELED, and a shield lets
 * it still send `ERR server shutting down` before it closes; the server
 * exits with status 0. examples/stackless/kv_server.c is the same server
 * as stackless tasks. */
#define _POSIX_C_SOURCE 200809L /* strtok_r, strdup, sigwait, pthread_sigmask */

#include <asyncrt.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

static struct strmap map;
static rt_mutex *map_lock; /* held across no await */
static int64_t idle_ns;

/* Answers one command (a line without its ending) into reply; the caller
 * holds map_lock. */
static void answer(char *line, char *reply, size_t size)
{
    char *save, *cmd = strtok_r(line, " ", &save), *key = strtok_r(NULL, " ", &save);
    char *value = strtok_r(NULL, " ", &save), *extra = strtok_r(NULL, " ", &save);
    bool set = cmd != NULL && strcmp(cmd, "SET") == 0, get = cmd != NULL && strcmp(cmd, "GET") == 0;
    bool del = cmd != NULL && strcmp(cmd, "DEL") == 0;
    const char *found;
    if (cmd == NULL)
        snprintf(reply, size, "ERR empty command\n");
    else if (!set && !get && !del)
        snprintf(reply, size, "ERR unknown command\n");
    else if (key == NULL || extra != NULL || set != (value != NULL))
        snprintf(reply, size, "ERR wrong number of arguments\n");
    else if (set)
        snprintf(reply, size, strmap_set(&map, key, value) ? "OK\n" : "ERR out of memory\n");
    else if (get)
        snprintf(reply, size, "%s\n", (found = strmap_get(&map, key)) ? found : "NOT_FOUND");
    else
        snprintf(reply, size, strmap_del(&map, key) ? "OK\n" : "NOT_FOUND\n");
}

static void *serve_conn(void *conn)
{
    rt_reader *in = NULL;
    rt_writer *out = NULL;
    const char *bye = NULL;
    if (rt_reader_new(conn, 1024, &in) == 0 && rt_writer_new(conn, 0, &out) == 0) {
        for (;;) {
            rt_read_until line;
            rt_read_line_init(&line, in);
            int64_t n = rt_fiber_await_timeout(&line.future, idle_ns);
            if (n == -ETIMEDOUT)
                bye = "ERR idle timeout\n";
            else if (n == -EMSGSIZE)
                bye = "ERR line too long\n";
            else if (n == -ECANCELED || n == -ESHUTDOWN) /* the timer's, if the stop came first */
                bye = "ERR server shutting down\n";
            if (n <= 0 || line.data[n - 1] != '\n') /* the end, an error, or a last piece */
                break;
            line.data[line.len] = '\0'; /* over the line ending */
            char reply[1100];
            if (rt_mutex_lock_await(map_lock) < 0) {
                bye = "ERR server shutting down\n";
                break;
            }
            answer(line.data, reply, sizeof reply);
            rt_mutex_unlock(map_lock);
            /* Pipelined commands: answer every complete one read already,
             * then send the replies together. */
            size_t left;
            const char *rest = rt_reader_peek(in, &left);
            if (rt_writer_write_await(out, reply, strlen(reply)) < 0 ||
                (memchr(rest, '\n', left) == NULL && rt_writer_flush_await(out) < 0))
                break;
        }
        rt_fiber_shield(RT_SEC(1)); /* a cancelled fiber still says goodbye */
        if (bye != NULL)
            rt_writer_write_await(out, bye, strlen(bye));
        rt_writer_flush_await(out);
    }
    rt_writer_free(out);
    rt_reader_free(in);
    rt_io_close(conn);
    return NULL;
}

static void *serve(void *listener)
{
    rt_fiber_serve(listener, NULL, serve_conn);
    rt_io_close(listener);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *flags = "--port --workers --idle-ms";
    const char *usage = "kv_server [--port P] [--workers W] [--idle-ms MS]";
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.1:%lu",
             flag_number(argc, argv, flags, "--port", 0, 65535, usage));
    idle_ns = RT_MS(flag_number(argc, argv, flags, "--idle-ms", 30000, 86400000, usage));
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = (unsigned)flag_number(argc, argv, flags, "--workers", 0, RT_MAX_WORKERS, usage);
    block_stop_signals(); /* before the runtime's threads, which inherit the mask */
    rt_runtime *rt;
    rt_io *listener;
    int err = rt_mutex_new(&map_lock);
    if (err == 0 && (err = rt_runtime_new(&cfg, &rt)) == 0 &&
        (err = rt_tcp_listen_addr(rt, addr, &listener)) == 0)
        err = rt_fiber_spawn(rt, serve, listener, NULL);
    if (err < 0) {
        fprintf(stderr, "kv_server: %s\n", rt_strerror(err));
        return 1;
    }
    printf("listening 127.0.0.1:%d\n", rt_net_local_port(listener));
    fflush(stdout);
    wait_for_stop();
    err = rt_runtime_free(rt); /* cancels every fiber: the goodbyes go out */
    strmap_clear(&map);
    rt_mutex_drop(map_lock);
    return err < 0;
}
