/* What the name-resolution suites (test_resolve.c, test_resolve_connect.c)
 * share: tasks that await an operation, lookups in one call, runtimes with a
 * pool of a chosen size, addresses and listeners, and a lookup held inside
 * getaddrinfo (through a HOSTALIASES FIFO) until the test lets it go.
 * support_resolve.c has the functions. */
#ifndef RT_TESTS_SUPPORT_RESOLVE_H
#define RT_TESTS_SUPPORT_RESOLVE_H

#include "support.h"

#include <stdbool.h>
#include <sys/socket.h>

/* A task that awaits one operation the test owns (kept at a stable
 * address), signalling `pending` each time it waits and `dropped` when its
 * drop runs, which drops the operation if it has not finished. */
struct awaiter {
    rt_future *op;
    struct event *pending;
    struct event *dropped;
};

/* Keeps a lookup inside getaddrinfo: HOSTALIASES names a FIFO, which
 * glibc's DNS back end opens (for a name without dots, after the hosts
 * file did not know it) and reads. The writer thread's open returns once
 * the job's open did, so from then on the job is in the middle of
 * getaddrinfo, reading, until the test closes the writing end. */
struct held {
    char dir[64];
    char fifo[96];
    char plain[96];
    pthread_t writer;
    int fd;
    struct event in;
    bool entered;
};

extern struct event gate_entered;

rt_poll awaiter_poll(void *state, rt_context *cx, void **out);
void awaiter_drop(void *state);
rt_task *start_op(rt_runtime *rt, rt_future *op, struct event *dropped);
void run_op(rt_runtime *rt, rt_future *op);
rt_resolve *lookup(rt_runtime *rt, const char *host, const char *service, int family,
                   unsigned flags);
rt_runtime *runtime_with_pool(unsigned threads, int64_t shutdown_ns);
rt_metrics metrics_of(rt_runtime *rt);
uint16_t port_of(const struct sockaddr_storage *ss);
const char *text_of(const struct sockaddr_storage *ss, char *buf, size_t len);
bool is_text(const rt_resolve_addr *a, const char *want);
void check_list(const rt_resolve *op, uint16_t port);
rt_resolve_addr entry(const char *ip, uint16_t port);
int raw_socket(const char *ip, int backlog, uint16_t *port);
int silent_listener(uint16_t *port, int *filler);
bool have_ipv6_loopback(void);
void *gate_job(void *arg);
void *writer_main(void *arg);
void held_setup(struct held *h);
bool held_wait(struct held *h);
void held_release(struct held *h);
void held_cleanup(struct held *h);

#endif
