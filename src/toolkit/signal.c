/* Signals: a process-wide handler that counts arrivals and wakes listeners,
 * and per-listener descriptors the reactor watches.
 *
 * Each listener has an eventfd (the handler writes to a duplicate of it, the
 * reactor watches the original through an rt_io) and a signalfd for a
 * signal blocked in every thread. arrivals[signo] counts every arrival the
 * process saw, from the handler or from any listener's signalfd; a listener
 * remembers how many it has reported, so each listener sees every arrival
 * and a receive reports those since the previous one.
 *
 * The registry (slots, listener counts, saved actions) changes under
 * registry_lock, never in the handler. The handler reads the slots with
 * atomic loads; a slot being emptied must not have its descriptor closed
 * while a handler may still write to it, which the in-flight count
 * guarantees (see release_slot). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <asyncrt/diag.h>
#include <asyncrt/signal.h>

#include "atomic.h"
#include "common.h"
#include "fault.h"
#include "io_internal.h"
#include "operation.h"
#include "runtime_services.h"

#define SIGNALS _NSIG

struct rt_signal {
    rt_runtime *rt;    /* whose reactor watches the descriptors */
    int signo;         /* the signal listened for */
    unsigned slot;     /* its place in the registry */
    int wake_fd;       /* the handler's duplicate of the eventfd */
    rt_io *wakeup;     /* the eventfd, watched */
    rt_io *queued;     /* the signalfd, watched */
    uint64_t reported; /* arrivals[signo] at the last receive (or creation) */
    const void *busy;  /* the unfinished receive, or NULL */
};

/* Every arrival of each signal the process saw while listened for. Written
 * with full-barrier adds (rt__faa_u64) before the wake-up writes, read
 * after a wake-up's read: the eventfd's write/read pair orders them. */
static uint64_t arrivals[SIGNALS];

/* One slot per listener: the signal (0: empty) and the handler's descriptor
 * plus one (0: none). Written under registry_lock with seq_cst stores, read
 * by the handler with seq_cst loads. */
static struct {
    uint32_t signo;
    uint32_t fd_plus_one;
} slots[RT_SIGNAL_LISTENERS_MAX];

/* Handlers between their entry and exit, for release_slot. */
static uint32_t handlers_running;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned listeners_of[SIGNALS];     /* under registry_lock */
static struct sigaction previous[SIGNALS]; /* under registry_lock */

/* Writes a wake-up to every listener of signo. From the handler, and from a
 * listener that took a signal from its signalfd. Async-signal-safe. */
static void wake_listeners(int signo)
{
    static const uint64_t one = 1;
    for (unsigned i = 0; i < RT_SIGNAL_LISTENERS_MAX; i++) {
        if (rt__load_seq_cst_u32(&slots[i].signo) != (uint32_t)signo)
            continue;
        uint32_t fd = rt__load_seq_cst_u32(&slots[i].fd_plus_one);
        if (fd != 0) {
            ssize_t n = write((int)fd - 1, &one, sizeof one);
            (void)n; /* a full counter (2^64 - 2 unread wake-ups) still wakes */
        }
    }
}

/* The handler: counts the arrival, wakes the listeners. The in-flight count
 * is raised (a full barrier) before any slot is read and lowered after the
 * last write, so release_slot, which empties a slot before it waits for the
 * count to drop to zero, never closes a descriptor a handler may still
 * write to. */
static void on_signal(int signo)
{
    int saved = errno;
    rt__faa_u32(&handlers_running, 1);
    rt__faa_u64(&arrivals[signo], 1);
    wake_listeners(signo);
    rt__faa_u32(&handlers_running, (uint32_t)-1);
    errno = saved;
}

/* Signals a listener may not take: those that cannot be caught, those that
 * report a fault of the thread itself (their handler returning would repeat
 * the fault), and those the C library keeps for itself. */
static bool catchable(int signo)
{
    if (signo <= 0 || signo >= SIGNALS)
        return false;
    switch (signo) {
    case SIGKILL:
    case SIGSTOP:
    case SIGSEGV:
    case SIGBUS:
    case SIGFPE:
    case SIGILL:
    case SIGTRAP:
        return false;
    default:
        return signo < 32 || (signo >= SIGRTMIN && signo <= SIGRTMAX);
    }
}

/* Takes a slot and, for the first listener of signo, installs the handler.
 * Returns the slot, or -ENOSPC, or sigaction's error. */
static int claim_slot(int signo, int fd)
{
    pthread_mutex_lock(&registry_lock);
    int slot = -ENOSPC;
    for (unsigned i = 0; i < RT_SIGNAL_LISTENERS_MAX; i++) {
        if (rt__load_seq_cst_u32(&slots[i].signo) == 0) {
            slot = (int)i;
            break;
        }
    }
    if (slot >= 0 && listeners_of[signo] == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigfillset(&sa.sa_mask); /* one handler at a time per thread */
        if (sigaction(signo, &sa, &previous[signo]) < 0)
            slot = -errno;
    }
    if (slot >= 0) {
        listeners_of[signo]++;
        /* The descriptor first: a handler that sees the signal sees it. */
        rt__store_seq_cst_u32(&slots[slot].fd_plus_one, (uint32_t)fd + 1);
        rt__store_seq_cst_u32(&slots[slot].signo, (uint32_t)signo);
    }
    pthread_mutex_unlock(&registry_lock);
    return slot;
}

/* Empties a slot and closes its descriptor once no handler can be using it;
 * the last listener of the signal puts its previous action back. */
static void release_slot(unsigned slot, int signo, int fd)
{
    pthread_mutex_lock(&registry_lock);
    rt__store_seq_cst_u32(&slots[slot].signo, 0);
    rt__store_seq_cst_u32(&slots[slot].fd_plus_one, 0);
    /* A handler that read the slot before the stores above is counted in
     * handlers_running (raised before its loads): wait it out. Handlers are
     * a few instructions long; one interrupting this thread finishes before
     * the loop goes on. */
    while (rt__load_seq_cst_u32(&handlers_running) != 0)
        sched_yield();
    close(fd);
    if (--listeners_of[signo] == 0)
        sigaction(signo, &previous[signo], NULL);
    pthread_mutex_unlock(&registry_lock);
}

RT_EXPORT int rt_signal_new(rt_runtime *rt, int signo, rt_signal **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (rt == NULL)
        rt = rt_current_runtime();
    if (rt == NULL || !catchable(signo))
        return -EINVAL;
    rt_signal *s = rt__calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->rt = rt;
    s->signo = signo;
    s->wake_fd = -1;
    int err = 0;
    int efd = rt__eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd < 0)
        err = -errno;
    if (err == 0 && (s->wake_fd = rt__dup_cloexec(efd)) < 0)
        err = -errno;
    if (err == 0) {
        err = rt_io_open(rt, efd, &s->wakeup);
        if (err == 0)
            efd = -1; /* the rt_io owns it now */
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signo);
    int sfd = -1;
    if (err == 0 && (sfd = rt__signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
        err = -errno;
    if (err == 0) {
        err = rt_io_open(rt, sfd, &s->queued);
        if (err == 0)
            sfd = -1;
    }
    /* Arrivals from here on are this listener's: read before the handler
     * can count one for it. */
    s->reported = rt__load_seq_cst_u64(&arrivals[signo]);
    int slot = err == 0 ? claim_slot(signo, s->wake_fd) : err;
    if (slot < 0) {
        rt_io_close(s->queued);
        rt_io_close(s->wakeup);
        if (sfd >= 0)
            close(sfd);
        if (efd >= 0)
            close(efd);
        if (s->wake_fd >= 0)
            close(s->wake_fd);
        free(s);
        return slot;
    }
    s->slot = (unsigned)slot;
    *out = s;
    return 0;
}

RT_EXPORT void rt_signal_free(rt_signal *s)
{
    if (s == NULL)
        return;
    release_slot(s->slot, s->signo, s->wake_fd);
    /* A shutdown closed every rt_io of the runtime already: the two watched
     * descriptors went with it. */
    bool closed = !rt__runtime_io_accepted(s->rt);
    if (!closed) {
        rt_io_close(s->queued);
        rt_io_close(s->wakeup);
    }
    free(s);
}

RT_EXPORT int rt_signal_number(const rt_signal *s)
{
    return s != NULL ? s->signo : 0;
}

/* Takes what the listener's descriptors hold: its wake-ups (discarded: the
 * count says what arrived) and any signal pending for the process, which
 * counts as an arrival for every listener of it. */
static void drain(rt_signal *s)
{
    uint64_t n;
    while (read(rt_io_fd(s->wakeup), &n, sizeof n) == (ssize_t)sizeof n)
        ;
    struct signalfd_siginfo info;
    while (read(rt_io_fd(s->queued), &info, sizeof info) == (ssize_t)sizeof info) {
        rt__faa_u64(&arrivals[info.ssi_signo], 1);
        wake_listeners((int)info.ssi_signo);
    }
}

static rt_poll signal_finish(rt_future *f, rt_signal_recv *op, int64_t result)
{
    op->signal->busy = NULL;
    op->signal = NULL;
    return rt__future_finish(f, result);
}

static rt_poll signal_recv_vpoll(rt_future *f, rt_context *cx)
{
    rt_signal_recv *op = (rt_signal_recv *)f;
    rt_signal *s = op->signal;
    for (;;) {
        /* Acquire pairs with the release of `closing` at shutdown, which
         * closes the descriptors afterwards: a poll by hand on a foreign
         * thread must not read them then. */
        if (rt__runtime_closing(s->rt))
            return signal_finish(f, op, -ESHUTDOWN);
        drain(s);
        uint64_t now = rt__load_seq_cst_u64(&arrivals[s->signo]);
        if (now != s->reported) {
            int64_t count = (int64_t)(now - s->reported);
            s->reported = now;
            return signal_finish(f, op, count);
        }
        /* Both waits store the waker before they look at their descriptor
         * (exactly, with poll(2)), so a wake-up written after the count was
         * read above is seen by one of them, or wakes the task. */
        rt_io_readable_init(&op->wakeup, s->wakeup);
        rt_io_readable_init(&op->queued, s->queued);
        if (RT_POLL_OP(&op->wakeup, cx) == RT_PENDING && RT_POLL_OP(&op->queued, cx) == RT_PENDING)
            return RT_PENDING;
    }
}

/* A dropped receive loses nothing: the count it did not report stays for
 * the next one. */
static void signal_recv_vdrop(rt_future *f)
{
    rt_signal_recv *op = (rt_signal_recv *)f;
    op->signal->busy = NULL;
    op->signal = NULL;
}

/* Appends the signal's name, "SIGTERM" or "SIGRTMIN+2", or its number
 * where the C library has no names. */
static void describe_signo(rt_wait_info *info, int signo)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    const char *abbrev = sigabbrev_np(signo);
    if (abbrev != NULL) {
        rt__wait_printf(info, "SIG%s", abbrev);
        return;
    }
#endif
    if (signo >= SIGRTMIN && signo <= SIGRTMAX)
        rt__wait_printf(info, "SIGRTMIN+%d", signo - SIGRTMIN);
    else
        rt__wait_printf(info, "%d", signo);
}

/* The listener's signal number is fixed at its creation; its counts are
 * left out. */
static void signal_recv_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_signal_recv *op = (const rt_signal_recv *)f;
    info->kind = RT_WAIT_SIGNAL;
    info->number = op->signal->signo;
    rt__wait_printf(info, "signal ");
    describe_signo(info, op->signal->signo);
}

static const rt_future_vtable signal_recv_vtable = {signal_recv_vpoll, signal_recv_vdrop,
                                                    signal_recv_vdescribe};

RT_EXPORT int rt_signal_recv_init(rt_signal_recv *op, rt_signal *s)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &signal_recv_vtable;
    int err = s == NULL ? -EINVAL : s->busy != NULL ? -EBUSY : 0;
    if (err < 0) {
        rt__future_finish(&op->future, err);
        return err;
    }
    s->busy = op;
    op->signal = s;
    return 0;
}
