/* The task dump on a signal (rt_config.dump_signal): a signal listener
 * (signal.h) whose receive is polled by hand with a waker of our own. The
 * reactor wakes wakers that are not its tasks' directly, on its own
 * thread, so that is where the dump is written: never in a signal handler,
 * and even when every worker is stuck in a poll.
 *
 * The trigger's state word, because a wake can come while a poll of the
 * receive is still returning (the arming poll on the thread that created
 * the runtime, or the reactor's previous wake), and two polls of one
 * operation must never overlap:
 *
 *   IDLE ──wake──► POLLING ──poll pending, CAS back──► IDLE
 *                   │   ▲
 *              wake │   │ the poller sees NOTIFIED instead of POLLING:
 *                   ▼   │ it polls again
 *                  NOTIFIED
 *
 * Whoever moves IDLE to POLLING (CAS, acquire) polls; a wake that finds
 * POLLING moves it to NOTIFIED (CAS) and leaves. The poller's CAS from
 * POLLING to IDLE is the release that pairs with the next waker's acquire,
 * so the next poll sees everything this one wrote to the operation. */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>

#include <asyncrt/diag.h>
#include <asyncrt/signal.h>

#include "atomic.h"
#include "common.h"
#include "dump_signal.h"
#include "fault.h"

#define TRIGGER_IDLE 0u
#define TRIGGER_POLLING 1u
#define TRIGGER_NOTIFIED 2u

struct rt__dump_trigger {
    rt_runtime *rt;
    int fd;              /* where dumps go */
    rt_signal *listener; /* listens for rt_config.dump_signal */
    rt_signal_recv recv; /* the receive in flight: only the poller touches it */
    uint32_t state;      /* the diagram above */
    uint32_t stopping;   /* set by rt__dump_trigger_stop: polls end */
};

static void run(struct rt__dump_trigger *tr);
static const rt_waker_vtable trigger_vtable;

static rt_waker trigger_clone(const void *data)
{
    /* The trigger outlives every waker: it is freed only after the reactor
     * has stopped and the receive is dropped. */
    rt_waker w = {&trigger_vtable, data};
    return w;
}

static void trigger_wake(const void *data)
{
    run((struct rt__dump_trigger *)data);
}

static void trigger_drop(const void *data)
{
    (void)data;
}

static const rt_waker_vtable trigger_vtable = {trigger_clone, trigger_wake, trigger_wake,
                                               trigger_drop};

/* Polls the receive until it waits; each arrival writes one dump. */
static void poll_receive(struct rt__dump_trigger *tr)
{
    rt_context cx = {{&trigger_vtable, tr}};
    while (!rt__load_acquire_u32(&tr->stopping)) {
        if (rt_future_poll(&tr->recv.future, &cx) == RT_PENDING)
            return;
        if (tr->recv.result < 0)
            return; /* the runtime is shutting down */
        rt__runtime_dump_fd_nowait(tr->rt, tr->fd);
        rt_signal_recv_init(&tr->recv, tr->listener);
    }
}

static void run(struct rt__dump_trigger *tr)
{
    uint32_t s = rt__load_acquire_u32(&tr->state);
    for (;;) {
        if (s == TRIGGER_IDLE) {
            if (rt__cas_u32(&tr->state, &s, TRIGGER_POLLING))
                break;
        } else if (s == TRIGGER_POLLING) {
            if (rt__cas_u32(&tr->state, &s, TRIGGER_NOTIFIED))
                return; /* the poller polls again */
        } else {
            return; /* NOTIFIED already */
        }
    }
    for (;;) {
        poll_receive(tr);
        uint32_t polling = TRIGGER_POLLING;
        if (rt__cas_u32(&tr->state, &polling, TRIGGER_IDLE))
            return;
        /* A wake came while we polled: NOTIFIED -> POLLING, and again. */
        rt__store_release_u32(&tr->state, TRIGGER_POLLING);
    }
}

int rt__dump_trigger_start(rt_runtime *rt, int signo, int fd, struct rt__dump_trigger **out)
{
    *out = NULL;
    struct rt__dump_trigger *tr = rt__calloc(1, sizeof(*tr));
    if (tr == NULL)
        return -ENOMEM;
    tr->rt = rt;
    tr->fd = fd;
    int err = rt_signal_new(rt, signo, &tr->listener);
    if (err < 0) {
        free(tr);
        return err;
    }
    rt_signal_recv_init(&tr->recv, tr->listener);
    run(tr); /* arms the receive: its waker is ours from now on */
    *out = tr;
    return 0;
}

void rt__dump_trigger_stop(struct rt__dump_trigger *tr)
{
    if (tr == NULL)
        return;
    rt__store_release_u32(&tr->stopping, 1);
    /* A poll in progress (on the reactor) reads the listener's descriptors,
     * which shutdown closes next: wait for it to end. It ends soon: a dump
     * it started sees the runtime closing and gives up. Any later wake
     * finds `stopping` and polls nothing. The acquire pairs with the
     * poller's release back to IDLE. */
    while (rt__load_acquire_u32(&tr->state) != TRIGGER_IDLE)
        sched_yield();
}

void rt__dump_trigger_free(struct rt__dump_trigger *tr)
{
    if (tr == NULL)
        return;
    /* The reactor has stopped: no wake can come any more. */
    rt_future_drop(&tr->recv.future);
    rt_signal_free(tr->listener);
    free(tr);
}
