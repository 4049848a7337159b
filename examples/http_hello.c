/* An HTTP/1.1 server on fibers that answers every GET with "hello": one
 * fiber per connection, keep-alive, pipelined requests answered together
 * (the answers go out in one write once no further request is buffered),
 * a close after "Connection: close" (and after an HTTP/1.0 request without
 * "Connection: keep-alive"), and 400 with a close for anything else (a
 * request line that is not `GET TARGET HTTP/1.x`, a header line without a
 * colon, a line longer than 8 KiB). Clean exit on SIGINT or SIGTERM.
 *
 *   ./http_hello [--port P] [--workers W]   (P 0: any free port; W 0: all CPUs)
 *
 * Prints `listening 127.0.0.1:PORT` once it accepts connections.
 * bench/peers/go/examples/http_hello_net is the same server in Go, with the
 * same bytes on the wire; scripts/compare --only http measures both, and Go's
 * net/http, with wrk. */
#define _GNU_SOURCE /* memmem, strcasecmp, strtok_r, sigwait */

#include <asyncrt.h>

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common.h"

static const char HELLO[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
static const char HELLO_CLOSE[] =
    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
static const char BAD[] =
    "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

enum { CLOSE, KEEP, BAD_REQUEST, END }; /* what request() read */

/* Reads one request head. */
static int request(rt_reader *in)
{
    char *line, *save;
    size_t len;
    int64_t n = rt_read_line_await(in, &line, &len);
    if (n <= 0 || (size_t)n == len) /* the end, an error, or a last unfinished line */
        return n == -EMSGSIZE ? BAD_REQUEST : END;
    line[len] = '\0';
    char *method = strtok_r(line, " ", &save), *target = strtok_r(NULL, " ", &save);
    char *version = strtok_r(NULL, " ", &save);
    if (method == NULL || target == NULL || version == NULL || strtok_r(NULL, " ", &save) ||
        strcmp(method, "GET") != 0 || (strcmp(version, "HTTP/1.1") && strcmp(version, "HTTP/1.0")))
        return BAD_REQUEST;
    int keep = strcmp(version, "HTTP/1.1") == 0 ? KEEP : CLOSE;
    for (;;) {
        if ((n = rt_read_line_await(in, &line, &len)) <= 0 || (size_t)n == len)
            return n == -EMSGSIZE ? BAD_REQUEST : END;
        if (len == 0)
            return keep; /* the empty line after the headers */
        line[len] = '\0';
        char *value = strchr(line, ':');
        if (value == NULL)
            return BAD_REQUEST;
        *value++ = '\0';
        value += strspn(value, " \t");
        value[strcspn(value, " \t")] = '\0';
        if (strcasecmp(line, "Connection") == 0)
            keep = strcasecmp(value, "keep-alive") == 0 || (keep && strcasecmp(value, "close"));
    }
}

static void *serve_conn(void *conn)
{
    rt_reader *in = NULL;
    rt_writer *out = NULL;
    if (rt_reader_new(conn, 8192, &in) == 0 && rt_writer_new(conn, 0, &out) == 0) {
        for (;;) {
            int got = request(in);
            const char *answer = got == KEEP ? HELLO : got == CLOSE ? HELLO_CLOSE : BAD;
            if (got == END || rt_writer_write_await(out, answer, strlen(answer)) < 0 || got != KEEP)
                break;
            /* Pipelined requests: answer every complete one read already,
             * then send the answers together. */
            size_t left;
            const char *rest = rt_reader_peek(in, &left);
            if (memmem(rest, left, "\r\n\r\n", 4) == NULL && rt_writer_flush_await(out) < 0)
                break;
        }
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
    const char *flags = "--port --workers", *usage = "http_hello [--port P] [--workers W]";
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
        fprintf(stderr, "http_hello: %s\n", rt_strerror(err));
        return 1;
    }
    printf("listening 127.0.0.1:%d\n", rt_net_local_port(listener));
    fflush(stdout);
    wait_for_stop();
    return rt_runtime_free(rt) < 0;
}
