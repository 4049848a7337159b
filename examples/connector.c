/* A client that makes many connections at once, each with a deadline: every
 * client task connects to 127.0.0.1:PORT, sends "ping\n" and expects it
 * echoed back (an echo server, such as examples/echo_server.c), all within
 * MS milliseconds of its start. The clients run in a task group whose
 * results the main task collects as they finish.
 *
 *   ./connector --port P [--count N] [--timeout-ms MS] [--workers W]
 *
 * Defaults: N 100, MS 2000, W 0 (all CPUs). Prints `ok K failed F` and, when
 * F > 0, the first error; exits 0 when every client succeeded. */
#include <asyncrt.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char PING[] = "ping\n";

/* One client. It fails (RT_FAIL) with the error that ended it. */
struct client {
    rt_coro co;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int64_t deadline_ns;
    rt_io *io;
    rt_tcp_connect connect;
    rt_timeout limit; /* the connect, then the read, against the deadline */
    rt_io_write_all send;
    rt_io_read reply;
    char buf[sizeof PING];
};

static void client_drop(void *state)
{
    struct client *c = state;
    rt_coro_cleanup(&c->co);
    rt_io_close(c->io);
}

static rt_poll client_poll(void *state, rt_context *cx, void **out)
{
    struct client *c = state;
    RT_CORO_BEGIN(&c->co);
    rt_tcp_connect_init(&c->connect, NULL, (struct sockaddr *)&c->addr, c->addr_len);
    rt_timeout_until_init(&c->limit, NULL, &c->connect.future, c->deadline_ns);
    RT_AWAIT(&c->co, cx, &c->limit);
    if (c->limit.result < 0)
        RT_FAIL(&c->co, out, (int)c->limit.result);
    c->io = c->connect.conn;
    rt_io_write_all_init(&c->send, c->io, PING, strlen(PING));
    RT_AWAIT(&c->co, cx, &c->send);
    if (c->send.result < 0)
        RT_FAIL(&c->co, out, (int)c->send.result);
    rt_io_read_init(&c->reply, c->io, c->buf, sizeof c->buf);
    rt_timeout_until_init(&c->limit, NULL, &c->reply.future, c->deadline_ns);
    RT_AWAIT(&c->co, cx, &c->limit);
    if (c->limit.result < 0)
        RT_FAIL(&c->co, out, (int)c->limit.result);
    if ((size_t)c->limit.result != strlen(PING) || memcmp(c->buf, PING, strlen(PING)) != 0)
        RT_FAIL(&c->co, out, -EPROTO);
    RT_CORO_END(&c->co, out);
}

/* Starts the clients in a group and collects their outcomes; main reads
 * the tally from this state, which rt_block_on hands back. */
struct connector {
    rt_coro co;
    struct client proto; /* the address and deadline every client copies */
    unsigned long count, ok, done;
    int first_error; /* 0: none */
    rt_group *clients;
    rt_group_next next;
};

static void connector_drop(void *state)
{
    struct connector *c = state;
    rt_coro_cleanup(&c->co);
    rt_group_free(c->clients); /* cancels clients still running */
}

static rt_poll connector_poll(void *state, rt_context *cx, void **out)
{
    struct connector *c = state;
    RT_CORO_BEGIN(&c->co);
    c->first_error = rt_group_new(NULL, NULL, NULL, &c->clients);
    if (c->first_error < 0)
        RT_RETURN(&c->co, out, NULL);
    c->proto.deadline_ns += rt_now_ns();
    for (unsigned long i = 0; i < c->count; i++) {
        int err = rt_group_spawn(c->clients, NULL, client_poll, client_drop, &c->proto,
                                 sizeof c->proto, NULL);
        if (err < 0) {
            c->first_error = err;
            c->count = i; /* collect those that started */
            break;
        }
    }
    for (c->done = 0; c->done < c->count; c->done++) {
        rt_group_next_init(&c->next, c->clients);
        RT_AWAIT(&c->co, cx, &c->next);
        if (c->next.child.status == 0)
            c->ok++;
        else if (c->first_error == 0)
            c->first_error = c->next.child.status;
    }
    RT_CORO_END(&c->co, out);
}

int main(int argc, char **argv)
{
    unsigned long port = 0, count = 100, timeout_ms = 2000, workers = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        unsigned long v = strtoul(argv[i + 1], NULL, 10);
        if (strcmp(argv[i], "--port") == 0 && v > 0 && v < 65536)
            port = v;
        else if (strcmp(argv[i], "--count") == 0 && v > 0)
            count = v;
        else if (strcmp(argv[i], "--timeout-ms") == 0)
            timeout_ms = v;
        else if (strcmp(argv[i], "--workers") == 0 && v <= RT_MAX_WORKERS)
            workers = v;
        else
            port = 0, i = argc; /* a bad argument: the usage below */
    }
    if (port == 0 || argc % 2 == 0) {
        fprintf(stderr, "usage: connector --port P [--count N] [--timeout-ms MS] [--workers W]\n");
        return 2;
    }
    struct connector c = {.count = count, .proto.deadline_ns = RT_MS(timeout_ms)};
    rt_net_addr("127.0.0.1", (uint16_t)port, &c.proto.addr, &c.proto.addr_len);
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = (unsigned)workers;
    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err == 0) {
        err = rt_block_on(rt, connector_poll, connector_drop, &c, sizeof c, NULL, NULL);
        rt_runtime_free(rt);
    }
    if (err < 0) {
        fprintf(stderr, "connector: %s\n", rt_strerror(err));
        return 1;
    }
    printf("ok %lu failed %lu\n", c.ok, count - c.ok);
    if (c.first_error < 0)
        printf("first error: %s\n", rt_strerror(c.first_error));
    return c.ok == count ? 0 : 1;
}
