/* asyncrt: host names to addresses, and connecting by name.
 *
 * A lookup is an operation (see future.h) that runs getaddrinfo(3) on the
 * runtime's blocking pool and finishes with a list of addresses:
 *
 *     rt_resolve_init(&s->look, NULL, "example.org", "https", AF_UNSPEC, 0);
 *     RT_AWAIT(&s->co, cx, &s->look);
 *     if (s->look.result < 0) // -ENOENT: no such name; see "Errors"
 *         ...;
 *     for (size_t i = 0; i < s->look.addrs->count; i++)
 *         use(&s->look.addrs->addr[i]);
 *     rt_resolve_addrs_free(s->look.addrs);
 *
 * and connecting by name is an operation that looks the name up, then
 * tries the addresses as RFC 8305 ("Happy Eyeballs") says, and finishes
 * with the connected socket (rt_resolve_connect below).
 *
 * Why getaddrinfo on the blocking pool, and not a resolver of its own on the
 * reactor: getaddrinfo answers exactly as every other program on the system
 * does, because it follows /etc/nsswitch.conf (the hosts file, DNS, mDNS,
 * systemd-resolved, LDAP... whatever the administrator configured),
 * /etc/hosts, /etc/gai.conf (the order of the addresses) and /etc/services.
 * An asynchronous DNS library (c-ares, as Debian packages it) would be one
 * more dependency and would ignore NSS: a name that comes from an NSS
 * module (mDNS's ".local" names, systemd's nss-myhostname and nss-resolve,
 * LDAP, a container's own module) would not resolve, or would resolve
 * differently from the rest of the system. getaddrinfo blocks, so each
 * lookup holds one pool thread (rt_config.blocking_threads) while it
 * runs.
 *
 * Cancellation: a lookup dropped (or whose task is aborted, or cancelled by
 * shutdown) before its job started never runs; one dropped while
 * getaddrinfo runs cannot interrupt it: the job finishes on its pool thread
 * and frees what it found, but the operation is over at once, so the task
 * never waits for it. Either way nothing leaks. At shutdown a lookup still
 * running holds the shutdown at most rt_config.blocking_shutdown_ns (the
 * pool's deadline for every running job); after that it is abandoned and
 * cleans up after itself when getaddrinfo returns.
 *
 * Errors: getaddrinfo's EAI_* codes become negative errnos, one for each
 * kind of failure, and the operation keeps the original code in its `eai`
 * field (0 when the error did not come from getaddrinfo), which
 * rt_resolve_strerror turns into getaddrinfo's own text:
 *   EAI_NONAME     -ENOENT      no such host name (or service, when the C
 *                               library cannot tell which), or a host that
 *                               is not an address with RT_RESOLVE_NUMERIC
 *   EAI_SERVICE    -ESRCH       no such service name, or none for the
 *                               protocol asked for (TCP, or UDP)
 *   EAI_NODATA,    -ENODATA     the name exists but has no address (of the
 *   EAI_ADDRFAMILY              family asked for)
 *   EAI_AGAIN      -EAGAIN      a temporary failure: no answer from the
 *                               name servers, or they said to try again
 *   EAI_FAIL       -EREMOTEIO   a permanent failure of the name servers
 *   EAI_MEMORY     -ENOMEM
 *   EAI_FAMILY     -EAFNOSUPPORT
 *   EAI_SOCKTYPE   -ESOCKTNOSUPPORT
 *   EAI_BADFLAGS   -EINVAL
 *   EAI_SYSTEM     -errno       the error of the system call that failed
 *                               (-EIO if the C library left errno 0)
 *   anything else  -EIO
 * -EAGAIN also comes, with `eai` 0, from a pool that could not start a
 * thread (rt_spawn_blocking_ex); -ENOMEM with `eai` 0 from an allocation of
 * the library's own.
 *
 * Threads: the init functions from any thread; an operation is polled by
 * one task (or one thread polling by hand) at a time, as any operation. */
#ifndef ASYNCRT_RESOLVE_H
#define ASYNCRT_RESOLVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "future.h"
#include "io.h"
#include "net.h"
#include "runtime.h"
#include "task.h"
#include "timer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Addresses -------------------------------------------------------------*/

/* One address: a struct sockaddr for bind(2), connect(2), rt_tcp_listen,
 * rt_tcp_connect_init..., with its port. */
typedef struct rt_resolve_addr {
    struct sockaddr_storage addr; /* a sockaddr_in or sockaddr_in6 */
    socklen_t len;                /* its length */
    int family;                   /* AF_INET or AF_INET6 (addr.ss_family) */
} rt_resolve_addr;

/* A list of addresses, in getaddrinfo's order (RFC 6724, as /etc/gai.conf
 * adjusts it: the preferred first), without duplicates. A lookup's list is
 * one allocation, freed by rt_resolve_addrs_free. A list built by hand (for
 * rt_resolve_connect_addrs_init) is the caller's own business. */
typedef struct rt_resolve_addrs {
    size_t count;          /* >= 1 in a lookup's list */
    rt_resolve_addr *addr; /* addr[0..count) */
} rt_resolve_addrs;

/* Frees a list a lookup returned (not one built by hand). NULL is a no-op.
 * Any thread. */
void rt_resolve_addrs_free(rt_resolve_addrs *list);

/* ---- Looking a name up -----------------------------------------------------*/

/* Flags of rt_resolve_init and rt_resolve_connect_init. */
#define RT_RESOLVE_NUMERIC 1u    /* host must be an address literal: no lookup (AI_NUMERICHOST) */
#define RT_RESOLVE_PASSIVE 2u    /* host NULL gives the wildcard address, to bind (AI_PASSIVE) */
#define RT_RESOLVE_UDP 4u        /* ports of UDP services instead of TCP (SOCK_DGRAM) */
#define RT_RESOLVE_ADDRCONFIG 8u /* only families this host has an address of (AI_ADDRCONFIG) */

/* Longest host name and service taken, without the terminating NUL (a DNS
 * name has at most 253 characters, 254 with the final dot). */
#define RT_RESOLVE_HOST_MAX 255
#define RT_RESOLVE_SERVICE_MAX 31

struct rt__resolve_job;

/* A lookup: an operation that finishes with result the number of addresses
 * found (>= 1) and `addrs` the list, which the caller owns from then on
 * and frees with rt_resolve_addrs_free; or with a negative errno (see
 * "Errors" above; -ESHUTDOWN when the runtime shut down first), `addrs`
 * NULL and `eai` getaddrinfo's code when it came from there. Every address
 * carries the service's port (0 without a service).
 * Abort safety: a dropped lookup loses nothing but its answer (see
 * "Cancellation"); nothing is left to free. Fields after `eai` are
 * private. */
typedef struct rt_resolve {
    RT_FUTURE_HEADER;
    rt_resolve_addrs *addrs;     /* the addresses found, the caller's once finished */
    int eai;                     /* getaddrinfo's EAI_* code behind an error, else 0 */
    rt_runtime *rt;              /* whose blocking pool runs getaddrinfo */
    struct rt__resolve_job *job; /* shared with the pool job while it is out */
    rt_task_join join;           /* the pool job, once started */
    int family;                  /* AF_UNSPEC, AF_INET or AF_INET6 */
    unsigned flags;              /* RT_RESOLVE_* */
    bool has_host, has_service;  /* host / service given (not NULL) */
    char host[RT_RESOLVE_HOST_MAX + 1];
    char service[RT_RESOLVE_SERVICE_MAX + 1];
} rt_resolve;

/* Prepares a lookup of `host` (a name, or an IPv4 or IPv6 literal; NULL:
 * the loopback address, or with RT_RESOLVE_PASSIVE the wildcard one) with
 * `service` (a name of /etc/services such as "http", or a port number in
 * decimal, 0-65535; NULL: port 0), for `family` (AF_UNSPEC: IPv6 and IPv4,
 * AF_INET, AF_INET6) and the RT_RESOLVE_* `flags`. Both strings are copied;
 * the pool job starts at the first poll (a lookup never polled holds
 * nothing and needs no drop). rt NULL means rt_current_runtime().
 * Errors: -EINVAL (op NULL, no runtime, host and service both NULL, host
 * empty or longer than RT_RESOLVE_HOST_MAX, service empty, longer than
 * RT_RESOLVE_SERVICE_MAX, or a number above 65535, another family, unknown
 * flags). Any thread. */
int rt_resolve_init(rt_resolve *op, rt_runtime *rt, const char *host, const char *service,
                    int family, unsigned flags);

/* A text for an error of a lookup or a connection by name: getaddrinfo's
 * own (gai_strerror) when `eai` is not 0, else (and for EAI_SYSTEM, whose
 * text would only say "System error") rt_strerror(err). Static, never
 * NULL. Any thread. */
const char *rt_resolve_strerror(int64_t err, int eai);

/* ---- Connecting by name ----------------------------------------------------*/

/* The delay between the starts of two connection attempts (RFC 8305's
 * "Connection Attempt Delay", its recommended value). */
#define RT_RESOLVE_STAGGER_NS RT_MS(250)

/* The most connection attempts in flight at once. */
#define RT_RESOLVE_CONNECT_INFLIGHT 8

/* Connecting to a host by name: an operation that looks the name up (as
 * rt_resolve), then tries its addresses over TCP (rt_tcp_connect) the way
 * RFC 8305 says: the addresses alternate between the two families (the
 * family of the first address getaddrinfo gave, then the other, and so
 * on: IPv6, IPv4, IPv6... on a host that prefers IPv6), the first attempt
 * starts at once and each next one `stagger_ns` after the start of the
 * previous one, or as soon as that previous one fails. At most
 * RT_RESOLVE_CONNECT_INFLIGHT attempts are in flight; a later one waits
 * for one of them to fail. The first attempt to connect wins: the others
 * are dropped (their half-open sockets closed) and the operation finishes
 * with result 0, `conn` the connected socket (the caller's from then on,
 * to close with rt_io_close) and `addr` / `addr_len` the address it
 * connected to. Errors: those of the lookup (with `eai`), or, when every
 * address failed, the error of the attempt that failed last
 * (-ECONNREFUSED, -ENETUNREACH, -EMFILE...); -ENOMEM or -ESHUTDOWN from
 * the stagger's timer. A slow address is not given up on: the one time
 * limit is the caller's rt_timeout (combine.h) around the operation.
 * Abort safety: a dropped operation drops its lookup (see "Cancellation")
 * and closes every socket it opened; nothing is connected and nothing
 * leaks. Fields after `stagger_ns` are private. */
typedef struct rt_resolve_connect {
    RT_FUTURE_HEADER;
    rt_io *conn;                  /* the connected socket, the caller's */
    struct sockaddr_storage addr; /* the address it connected to */
    socklen_t addr_len;           /* its length */
    int eai;                      /* as rt_resolve.eai, when the lookup failed */
    size_t attempts;              /* connection attempts started so far */
    /* The delay between attempts: RT_RESOLVE_STAGGER_NS after the init;
     * may be changed (>= 0) before the first poll. */
    int64_t stagger_ns;
    rt_runtime *rt;               /* whose reactor and timers */
    rt_resolve lookup;            /* the lookup, by name */
    rt_resolve_addrs *owned;      /* the lookup's list, freed at the end */
    const rt_resolve_addrs *list; /* the addresses tried (owned, or the caller's) */
    size_t cursor[2];             /* next index to look at: preferred family, other */
    unsigned turn;                /* 0: the preferred family's turn, 1: the other's */
    int latest;                   /* slot of the attempt started last, -1: none */
    int last_error;               /* of the attempt that failed last */
    bool resolving;               /* the lookup is in flight */
    bool due;                     /* the next attempt may start */
    bool timing;                  /* the stagger sleep is armed */
    uint32_t inflight;            /* bit i: attempt[i] in flight */
    rt_sleep stagger;             /* until the next attempt is due */
    rt_tcp_connect attempt[RT_RESOLVE_CONNECT_INFLIGHT];
} rt_resolve_connect;

/* Prepares a connection to `host` / `service` (as rt_resolve_init, with
 * the flags RT_RESOLVE_NUMERIC and RT_RESOLVE_ADDRCONFIG only; `service`
 * must not be NULL). rt NULL means rt_current_runtime(). The lookup starts at the
 * first poll: one never polled holds nothing and needs no drop. Errors:
 * those of rt_resolve_init, and -EINVAL for service NULL or another flag.
 * Any thread. */
int rt_resolve_connect_init(rt_resolve_connect *op, rt_runtime *rt, const char *host,
                            const char *service, int family, unsigned flags);

/* Prepares a connection to one of the addresses of `list` (with their
 * ports), tried as above, without a lookup: for a list a lookup returned
 * earlier, or one built by hand (the families that take turns are those
 * of addr.ss_family; `family` is not read). The list is borrowed: it must
 * stay valid and unchanged until the operation finishes or is dropped.
 * rt NULL means
 * rt_current_runtime(). The first attempt starts at the first poll: one never
 * polled holds nothing and needs no drop. Errors: -EINVAL (op or list
 * NULL, no runtime, count 0, addr NULL, an entry whose len is 0 or larger
 * than a sockaddr_storage). Any thread. */
int rt_resolve_connect_addrs_init(rt_resolve_connect *op, rt_runtime *rt,
                                  const rt_resolve_addrs *list);

#ifdef __cplusplus
}
#endif
#endif
