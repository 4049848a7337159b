/* Futex parking; see park.h for the state diagram.
 *
 * Ordering: unpark's exchange to NOTIFIED (a full barrier) happens after the
 * waker published its work; park's CAS from NOTIFIED to EMPTY (a full barrier)
 * pairs with it, so a parked thread that returns sees that work. The futex
 * syscall itself re-checks the word in the kernel, so an unpark that slips in
 * between the CAS to PARKED and FUTEX_WAIT makes the wait return at once. */
#include "park.h"
#include "fault.h"

#include <errno.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"

static void futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns)
{
    struct timespec ts, *tsp = NULL;
    if (timeout_ns >= 0) {
        ts.tv_sec = (time_t)(timeout_ns / 1000000000);
        ts.tv_nsec = (long)(timeout_ns % 1000000000);
        tsp = &ts;
    }
    /* EAGAIN (the word changed), EINTR and ETIMEDOUT all send the caller back
     * to re-read the state word, which is the only source of truth. */
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, tsp, NULL, 0);
}

static void futex_wake_one(uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void rt__parker_init(rt__parker *p)
{
    p->state = RT__PARK_EMPTY;
}

bool rt__parker_park(rt__parker *p, int64_t timeout_ns)
{
    uint32_t expected = RT__PARK_NOTIFIED;
    if (rt__cas_u32(&p->state, &expected, RT__PARK_EMPTY))
        return true;
    expected = RT__PARK_EMPTY;
    if (!rt__cas_u32(&p->state, &expected, RT__PARK_PARKED)) {
        /* Only the owner parks, so the state was NOTIFIED after all. */
        rt__fas_u32(&p->state, RT__PARK_EMPTY);
        return true;
    }
    int64_t deadline = rt__deadline_after(timeout_ns);
    for (;;) {
        int64_t left = -1;
        if (deadline >= 0) {
            left = deadline - rt__now_ns();
            if (left < 0)
                left = 0;
        }
        if (left != 0)
            futex_wait(&p->state, RT__PARK_PARKED, left);
        expected = RT__PARK_NOTIFIED;
        if (rt__cas_u32(&p->state, &expected, RT__PARK_EMPTY))
            return true;
        if (deadline >= 0 && rt__now_ns() >= deadline) {
            expected = RT__PARK_PARKED;
            if (rt__cas_u32(&p->state, &expected, RT__PARK_EMPTY))
                return false;
            /* An unpark won the race with the timeout: consume it. */
            rt__fas_u32(&p->state, RT__PARK_EMPTY);
            return true;
        }
        /* A spurious wake-up: sleep again. */
    }
}

void rt__parker_unpark(rt__parker *p)
{
    if (rt__fas_u32(&p->state, RT__PARK_NOTIFIED) == RT__PARK_PARKED)
        futex_wake_one(&p->state);
}

struct rt__thread_waker {
    uint32_t refs;     /* references: the creator's plus one per waker value */
    rt__parker parker; /* the blocked thread's parker */
};

static rt_waker thread_waker_clone(const void *data);
static void thread_waker_wake(const void *data);
static void thread_waker_wake_by_ref(const void *data);
static void thread_waker_drop(const void *data);

static const rt_waker_vtable thread_waker_vtable = {
    thread_waker_clone,
    thread_waker_wake,
    thread_waker_wake_by_ref,
    thread_waker_drop,
};

rt__thread_waker *rt__thread_waker_new(void)
{
    rt__thread_waker *tw = rt__malloc(sizeof(*tw));
    if (tw == NULL)
        return NULL;
    tw->refs = 1;
    rt__parker_init(&tw->parker);
    return tw;
}

rt_waker rt__thread_waker_get(rt__thread_waker *tw)
{
    return thread_waker_clone(tw);
}

void rt__thread_waker_release(rt__thread_waker *tw)
{
    thread_waker_drop(tw);
}

int rt__thread_waker_block(rt__thread_waker *tw, rt_poll (*poll)(void *arg, rt_context *cx),
                           void *arg, int64_t timeout_ns)
{
    rt_context cx = rt_context_from_waker(rt__thread_waker_get(tw));
    int64_t deadline = rt__deadline_after(timeout_ns);
    int status = 0;
    while (poll(arg, &cx) != RT_READY) {
        int64_t left = -1;
        if (deadline >= 0) {
            left = deadline - rt__now_ns();
            if (left <= 0) {
                status = -ETIMEDOUT;
                break;
            }
        }
        rt__parker_park(&tw->parker, left);
    }
    /* A queue or a task may still hold a clone of the waker; the clone keeps
     * the heap object alive after we return. */
    rt_waker_drop(&cx.waker);
    return status;
}

static rt_waker thread_waker_clone(const void *data)
{
    rt__thread_waker *tw = (rt__thread_waker *)data;
    rt__faa_u32(&tw->refs, 1);
    rt_waker w = {&thread_waker_vtable, tw};
    return w;
}

static void thread_waker_wake_by_ref(const void *data)
{
    rt__thread_waker *tw = (rt__thread_waker *)data;
    rt__parker_unpark(&tw->parker);
}

static void thread_waker_wake(const void *data)
{
    thread_waker_wake_by_ref(data);
    thread_waker_drop(data);
}

static void thread_waker_drop(const void *data)
{
    rt__thread_waker *tw = (rt__thread_waker *)data;
    /* The decrement is a full barrier: every use of the waker by this thread
     * happens before the free by whichever thread drops the last reference. */
    if (rt__faa_u32(&tw->refs, (uint32_t)-1) == 1)
        free(tw);
}
