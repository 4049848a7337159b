/* Name resolution: getaddrinfo on the blocking pool, and connecting by name
 * with staggered attempts (RFC 8305).
 *
 * A lookup shares one heap record with its pool job: the record holds
 * copies of the host and service, and the job writes its outcome there.
 * Both hold a reference (rt__faa_u32); the job's release function gives
 * the job's back whether getaddrinfo ran or the job was cancelled before it
 * started, and the operation gives its own back when it finishes or is
 * dropped. Whoever lets go last frees the record and any list still in it,
 * so a lookup dropped while getaddrinfo runs leaves the job to clean up
 * after itself on its pool thread.
 *
 * The connection attempts are rt_tcp_connect operations in the
 * operation's own slots, polled directly rather than through an
 * rt_select: a select finishes when any arm finishes, failures included,
 * and drops the others, where an attempt that fails must only make the
 * next one start while the others go on. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <asyncrt/diag.h>
#include <asyncrt/error.h>
#include <asyncrt/resolve.h>

#include "atomic.h"
#include "common.h"
#include "fault.h"
#include "operation.h"

/* ---- Address lists ------------------------------------------------------------ */

/* A lookup's list: the header and its entries in one allocation. */
struct addr_list {
    rt_resolve_addrs head;
    rt_resolve_addr entries[];
};

RT_EXPORT void rt_resolve_addrs_free(rt_resolve_addrs *list)
{
    free(list); /* the head is the start of its struct addr_list */
}

static bool same_addr(const rt_resolve_addr *a, const struct addrinfo *ai)
{
    return a->len == ai->ai_addrlen && memcmp(&a->addr, ai->ai_addr, ai->ai_addrlen) == 0;
}

/* Copies getaddrinfo's IPv4 and IPv6 answers, in order, without repeats.
 * Returns the count, or -ENOMEM, or -ENODATA when none is usable. */
static int64_t copy_list(const struct addrinfo *res, rt_resolve_addrs **out)
{
    size_t n = 0;
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next)
        n++;
    struct addr_list *l = rt__malloc(sizeof(*l) + n * sizeof(l->entries[0]));
    if (l == NULL)
        return -ENOMEM;
    size_t count = 0;
    for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) || ai->ai_addr == NULL ||
            ai->ai_addrlen == 0 || ai->ai_addrlen > sizeof(struct sockaddr_storage))
            continue;
        bool repeat = false;
        for (size_t i = 0; i < count && !repeat; i++)
            repeat = same_addr(&l->entries[i], ai);
        if (repeat)
            continue;
        rt_resolve_addr *a = &l->entries[count++];
        memset(a, 0, sizeof(*a));
        memcpy(&a->addr, ai->ai_addr, ai->ai_addrlen);
        a->len = (socklen_t)ai->ai_addrlen;
        a->family = ai->ai_family;
    }
    if (count == 0) {
        free(l);
        return -ENODATA;
    }
    l->head.count = count;
    l->head.addr = l->entries;
    *out = &l->head;
    return (int64_t)count;
}

/* ---- Errors --------------------------------------------------------------------- */

/* getaddrinfo's code as a negative errno (the table in resolve.h). `sys` is
 * errno right after the call, for EAI_SYSTEM. */
static int64_t eai_to_errno(int eai, int sys)
{
    switch (eai) {
    case EAI_NONAME:
        return -ENOENT;
    case EAI_SERVICE:
        return -ESRCH;
#ifdef EAI_NODATA
    case EAI_NODATA:
        return -ENODATA;
#endif
#ifdef EAI_ADDRFAMILY
    case EAI_ADDRFAMILY:
        return -ENODATA;
#endif
    case EAI_AGAIN:
        return -EAGAIN;
    case EAI_FAIL:
        return -EREMOTEIO;
    case EAI_MEMORY:
        return -ENOMEM;
    case EAI_FAMILY:
        return -EAFNOSUPPORT;
    case EAI_SOCKTYPE:
        return -ESOCKTNOSUPPORT;
    case EAI_BADFLAGS:
        return -EINVAL;
    case EAI_SYSTEM:
        return sys > 0 ? -sys : -EIO;
    default:
        return -EIO;
    }
}

RT_EXPORT const char *rt_resolve_strerror(int64_t err, int eai)
{
    if (eai != 0 && eai != EAI_SYSTEM) /* "System error" says less than errno */
        return gai_strerror(eai);
    return rt_strerror(err < INT32_MIN || err > INT32_MAX ? INT32_MIN : (int)err);
}

/* ---- The lookup's record and job ------------------------------------------------ */

struct rt__resolve_job {
    uint32_t refs; /* the operation's and the job's */
    int family;
    unsigned flags;
    bool has_host, has_service;
    char host[RT_RESOLVE_HOST_MAX + 1];
    char service[RT_RESOLVE_SERVICE_MAX + 1];
    /* Written by the job, read by the operation once the join finished. */
    int64_t result;          /* the count, or a negative errno */
    int eai;                 /* getaddrinfo's code, 0 on success */
    rt_resolve_addrs *addrs; /* the list, until the operation takes it */
};

static void job_unref(struct rt__resolve_job *j)
{
    /* Full barrier: the job's writes come before its release, and the last
     * one out sees them all. */
    if (rt__faa_u32(&j->refs, (uint32_t)-1) == 1) {
        rt_resolve_addrs_free(j->addrs);
        free(j);
    }
}

/* The job's release: after the job ran, or instead of it. */
static void job_release(void *arg)
{
    job_unref(arg);
}

/* On a pool thread: the blocking call itself. */
static void *job_run(void *arg)
{
    struct rt__resolve_job *j = arg;
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    bool udp = (j->flags & RT_RESOLVE_UDP) != 0;
    hints.ai_family = j->family;
    hints.ai_socktype = udp ? SOCK_DGRAM : SOCK_STREAM;
    hints.ai_protocol = udp ? IPPROTO_UDP : IPPROTO_TCP;
    hints.ai_flags = ((j->flags & RT_RESOLVE_NUMERIC) ? AI_NUMERICHOST : 0) |
                     ((j->flags & RT_RESOLVE_PASSIVE) ? AI_PASSIVE : 0) |
                     ((j->flags & RT_RESOLVE_ADDRCONFIG) ? AI_ADDRCONFIG : 0);
    struct addrinfo *res = NULL;
    errno = 0;
    int eai =
        getaddrinfo(j->has_host ? j->host : NULL, j->has_service ? j->service : NULL, &hints, &res);
    int sys = errno; /* read at once: EAI_SYSTEM's cause */
    if (eai != 0) {
        j->eai = eai;
        j->result = eai_to_errno(eai, sys);
        return NULL;
    }
    j->result = copy_list(res, &j->addrs);
    freeaddrinfo(res);
    return NULL;
}

/* ---- The lookup operation ------------------------------------------------------- */

/* Starts the pool job. Returns 0 or the spawn's error (nothing held then). */
static int resolve_start(rt_resolve *op)
{
    struct rt__resolve_job *j = rt__calloc(1, sizeof(*j));
    if (j == NULL)
        return -ENOMEM;
    j->refs = 2; /* published to the job by the pool's lock */
    j->family = op->family;
    j->flags = op->flags;
    j->has_host = op->has_host;
    j->has_service = op->has_service;
    memcpy(j->host, op->host, sizeof j->host);
    memcpy(j->service, op->service, sizeof j->service);
    rt_task *task;
    int err = rt_spawn_blocking_ex(op->rt, job_run, job_release, j, &task);
    if (err < 0) {
        free(j); /* the release never runs for a job that was not accepted */
        return err;
    }
    op->job = j;
    rt_task_join_init(&op->join, task);
    op->join.cancel_on_drop = true; /* a dropped lookup aborts a job not started */
    return 0;
}

static rt_poll resolve_vpoll(rt_future *f, rt_context *cx)
{
    rt_resolve *op = (rt_resolve *)f;
    if (op->job == NULL) {
        int err = resolve_start(op);
        if (err < 0)
            return rt__future_finish(f, err);
    }
    if (RT_POLL_OP(&op->join, cx) == RT_PENDING)
        return RT_PENDING;
    struct rt__resolve_job *j = op->job;
    op->job = NULL;
    int64_t result;
    if (op->join.result == 0) {
        /* The job ran and released its reference before the join finished:
         * the record is ours alone. */
        result = j->result;
        op->eai = j->eai;
        op->addrs = j->addrs;
        j->addrs = NULL;
    } else {
        /* Only a shutdown cancels a job this operation did not abort. */
        result = -ESHUTDOWN;
    }
    job_unref(j);
    return rt__future_finish(f, result);
}

/* Aborts the job (a queued one never runs; a running one finishes on its
 * own) and lets go of the record. */
static void resolve_vdrop(rt_future *f)
{
    rt_resolve *op = (rt_resolve *)f;
    if (op->job != NULL) {
        RT_DROP(&op->join); /* cancel_on_drop: aborts, then detaches */
        job_unref(op->job);
        op->job = NULL;
    }
}

/* Appends "example.org:443", "example.org" or "service 443": the names
 * the operation copied at init. */
static void describe_name(rt_wait_info *info, const rt_resolve *lookup)
{
    if (lookup->has_host && lookup->has_service)
        rt__wait_printf(info, "%s:%s", lookup->host, lookup->service);
    else if (lookup->has_host)
        rt__wait_printf(info, "%s", lookup->host);
    else
        rt__wait_printf(info, "service %s", lookup->service);
}

/* Only the operation's own copies of the names: the record's outcome is
 * the pool thread's. */
static void resolve_vdescribe(const rt_future *f, rt_wait_info *info)
{
    info->kind = RT_WAIT_BLOCKING;
    rt__wait_printf(info, "name lookup of ");
    describe_name(info, (const rt_resolve *)f);
    rt__wait_printf(info, " on the blocking pool");
}

static const rt_future_vtable resolve_vtable = {resolve_vpoll, resolve_vdrop, resolve_vdescribe};

#define KNOWN_FLAGS                                                                                \
    (RT_RESOLVE_NUMERIC | RT_RESOLVE_PASSIVE | RT_RESOLVE_UDP | RT_RESOLVE_ADDRCONFIG)

/* Copies s (at most max characters) into dst. false: empty or too long. */
static bool copy_name(char *dst, const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n == 0 || n > max)
        return false;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return true;
}

/* A service made of digits only must be a port number. */
static bool valid_service(const char *s)
{
    unsigned long port = 0;
    for (const char *p = s; *p != '\0'; p++) {
        if (*p < '0' || *p > '9')
            return true; /* a name: getaddrinfo judges it */
        port = port * 10 + (unsigned long)(*p - '0');
        if (port > 65535)
            return false;
    }
    return true;
}

static int resolve_args(rt_resolve *op, const char *host, const char *service, int family,
                        unsigned flags)
{
    if (op->rt == NULL || (host == NULL && service == NULL) || (flags & ~KNOWN_FLAGS) != 0 ||
        (family != AF_UNSPEC && family != AF_INET && family != AF_INET6))
        return -EINVAL;
    op->has_host = host != NULL;
    op->has_service = service != NULL;
    if (host != NULL && !copy_name(op->host, host, RT_RESOLVE_HOST_MAX))
        return -EINVAL;
    if (service != NULL &&
        (!copy_name(op->service, service, RT_RESOLVE_SERVICE_MAX) || !valid_service(op->service)))
        return -EINVAL;
    op->family = family;
    op->flags = flags;
    return 0;
}

RT_EXPORT int rt_resolve_init(rt_resolve *op, rt_runtime *rt, const char *host, const char *service,
                              int family, unsigned flags)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &resolve_vtable;
    op->rt = rt != NULL ? rt : rt_current_runtime();
    int err = resolve_args(op, host, service, family, flags);
    if (err < 0)
        rt__future_finish(&op->future, err);
    return err;
}

/* ---- Connecting by name ------------------------------------------------------- */

#define ALL_SLOTS ((uint32_t)((1ull << RT_RESOLVE_CONNECT_INFLIGHT) - 1))

/* Drops everything the operation holds: the lookup, the attempts in
 * flight (closing their sockets), the stagger's timer, the list. */
static void hconnect_release(rt_resolve_connect *op)
{
    RT_DROP(&op->lookup); /* nothing for one finished, or never initialised */
    op->resolving = false;
    for (unsigned i = 0; i < RT_RESOLVE_CONNECT_INFLIGHT; i++)
        if (op->inflight & (1u << i))
            RT_DROP(&op->attempt[i]);
    op->inflight = 0;
    if (op->timing) {
        RT_DROP(&op->stagger);
        op->timing = false;
    }
    rt_resolve_addrs_free(op->owned);
    op->owned = NULL;
    op->list = NULL;
}

static rt_poll hconnect_fail(rt_resolve_connect *op, int64_t err)
{
    hconnect_release(op);
    return rt__future_finish(&op->future, err);
}

/* Attempt i connected: it wins, and the rest is dropped. */
static rt_poll hconnect_win(rt_resolve_connect *op, unsigned i)
{
    rt_tcp_connect *a = &op->attempt[i];
    op->inflight &= ~(1u << i);
    op->conn = a->conn;
    memcpy(&op->addr, &a->addr, sizeof op->addr);
    op->addr_len = a->addr_len;
    hconnect_release(op);
    return rt__future_finish(&op->future, 0);
}

/* The next address to try: the two families take turns (the family of the
 * list's first address, then any other), each in the list's order; when
 * one has none left the other goes on. NULL once every one was tried. */
static const rt_resolve_addr *next_address(rt_resolve_connect *op)
{
    const rt_resolve_addrs *l = op->list;
    sa_family_t preferred = l->addr[0].addr.ss_family;
    for (unsigned k = 0; k < 2; k++) {
        unsigned side = (op->turn + k) & 1u;
        size_t *c = &op->cursor[side];
        while (*c < l->count && (l->addr[*c].addr.ss_family == preferred) != (side == 0))
            (*c)++;
        if (*c < l->count) {
            op->turn = side ^ 1u;
            return &l->addr[(*c)++];
        }
    }
    return NULL;
}

/* The next attempt may start now: the stagger's timer is no longer
 * needed. */
static void make_due(rt_resolve_connect *op)
{
    op->due = true;
    if (op->timing) {
        RT_DROP(&op->stagger);
        op->timing = false;
    }
}

/* Starts the next attempt in a free slot, if an address is left; its first
 * poll is the caller's. Then the stagger runs until the one after it is
 * due. Returns false when no address is left. */
static bool start_attempt(rt_resolve_connect *op)
{
    const rt_resolve_addr *a = next_address(op);
    if (a == NULL)
        return false;
    unsigned i = 0;
    while (op->inflight & (1u << i))
        i++;
    rt_tcp_connect_init(&op->attempt[i], op->rt, (const struct sockaddr *)&a->addr, a->len);
    op->inflight |= 1u << i;
    op->latest = (int)i;
    op->attempts++;
    op->due = false;
    if (op->timing) {
        RT_DROP(&op->stagger);
        op->timing = false;
    }
    if (op->attempts < op->list->count) {
        rt_sleep_init(&op->stagger, op->rt, op->stagger_ns);
        op->timing = true;
    }
    return true;
}

static rt_poll hconnect_vpoll(rt_future *f, rt_context *cx)
{
    rt_resolve_connect *op = (rt_resolve_connect *)f;
    if (op->resolving) {
        if (RT_POLL_OP(&op->lookup, cx) == RT_PENDING)
            return RT_PENDING;
        op->resolving = false;
        if (op->lookup.result < 0) {
            op->eai = op->lookup.eai;
            return hconnect_fail(op, op->lookup.result);
        }
        op->owned = op->lookup.addrs;
        op->lookup.addrs = NULL;
        op->list = op->owned;
        op->due = true;
    }
    for (;;) {
        for (unsigned i = 0; i < RT_RESOLVE_CONNECT_INFLIGHT; i++) {
            if (!(op->inflight & (1u << i)) || RT_POLL_OP(&op->attempt[i], cx) == RT_PENDING)
                continue;
            if (op->attempt[i].result == 0)
                return hconnect_win(op, i);
            op->inflight &= ~(1u << i);
            op->last_error = (int)op->attempt[i].result;
            if ((int)i == op->latest)
                make_due(op); /* the previous attempt failed: no need to wait */
        }
        if (op->timing && RT_POLL_OP(&op->stagger, cx) == RT_READY) {
            op->timing = false;
            if (op->stagger.result < 0)
                return hconnect_fail(op, op->stagger.result);
            op->due = true;
        }
        if ((op->due || op->inflight == 0) && op->inflight != ALL_SLOTS && start_attempt(op))
            continue;          /* poll the new attempt (and the new stagger) */
        if (op->inflight == 0) /* every address failed */
            return hconnect_fail(op, op->last_error != 0 ? op->last_error : -ECONNREFUSED);
        return RT_PENDING;
    }
}

static void hconnect_vdrop(rt_future *f)
{
    hconnect_release((rt_resolve_connect *)f);
}

/* Every field read is the operation's own, its attempts included, and the
 * list, which stays unchanged while the operation lives. */
static void hconnect_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_resolve_connect *op = (const rt_resolve_connect *)f;
    info->kind = RT_WAIT_CONNECT;
    rt__wait_printf(info, "connect to ");
    if (op->lookup.has_host || op->lookup.has_service)
        describe_name(info, &op->lookup);
    else if (op->list != NULL)
        rt__wait_printf(info, "one of %zu addresses", op->list->count);
    if (op->resolving) {
        rt__wait_printf(info, ", name lookup on the blocking pool");
        return;
    }
    if (op->list != NULL)
        rt__wait_printf(info, ", attempt %zu of %zu", op->attempts, op->list->count);
    if (op->timing) {
        info->deadline_ns = op->stagger.deadline_ns;
        rt__wait_printf(info, ", next at ");
        rt__wait_from_now(info, op->stagger.deadline_ns);
    }
    /* The attempt started last, or else any still in flight, gives the
     * descriptor. */
    int slot = -1;
    if (op->latest >= 0 && (op->inflight & (1u << op->latest)))
        slot = op->latest;
    else if (op->inflight != 0)
        slot = __builtin_ctz(op->inflight);
    if (slot < 0)
        return;
    const rt_tcp_connect *a = &op->attempt[slot];
    if (a->io != NULL)
        info->fd = rt_io_fd(a->io);
    rt_wait_info_append(info, ": ", &a->future);
}

static const rt_future_vtable hconnect_vtable = {hconnect_vpoll, hconnect_vdrop,
                                                 hconnect_vdescribe};

/* The common start of both inits. */
static void hconnect_prepare(rt_resolve_connect *op, rt_runtime *rt)
{
    memset(op, 0, sizeof(*op));
    op->future.vtable = &hconnect_vtable;
    op->stagger_ns = RT_RESOLVE_STAGGER_NS;
    op->rt = rt != NULL ? rt : rt_current_runtime();
    op->latest = -1;
}

static int hconnect_refuse(rt_resolve_connect *op, int err)
{
    rt__future_finish(&op->future, err);
    return err;
}

RT_EXPORT int rt_resolve_connect_init(rt_resolve_connect *op, rt_runtime *rt, const char *host,
                                      const char *service, int family, unsigned flags)
{
    if (op == NULL)
        return -EINVAL;
    hconnect_prepare(op, rt);
    if (service == NULL || (flags & ~(RT_RESOLVE_NUMERIC | RT_RESOLVE_ADDRCONFIG)) != 0)
        return hconnect_refuse(op, -EINVAL);
    int err = rt_resolve_init(&op->lookup, op->rt, host, service, family, flags);
    if (err < 0)
        return hconnect_refuse(op, err); /* the lookup holds nothing */
    op->resolving = true;
    return 0;
}

RT_EXPORT int rt_resolve_connect_addrs_init(rt_resolve_connect *op, rt_runtime *rt,
                                            const rt_resolve_addrs *list)
{
    if (op == NULL)
        return -EINVAL;
    hconnect_prepare(op, rt);
    bool valid = op->rt != NULL && list != NULL && list->count > 0 && list->addr != NULL;
    for (size_t i = 0; valid && i < list->count; i++)
        valid = list->addr[i].len > 0 && list->addr[i].len <= sizeof(struct sockaddr_storage);
    if (!valid)
        return hconnect_refuse(op, -EINVAL);
    op->list = list;
    op->due = true;
    return 0;
}
