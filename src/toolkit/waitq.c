/* Blocking a foreign thread on a poll-style operation (the *_blocking forms
 * of the synchronization primitives and channels). */
#include <errno.h>

#include "park.h"
#include "current.h"
#include "waitq.h"

int rt__block_on_poll(rt_poll (*poll)(void *arg, rt_context *cx), void *arg, int64_t timeout_ns)
{
    /* A worker blocked here could be the one that has to run the task that
     * would wake it. */
    if (rt__worker_current() != NULL)
        return -EDEADLK;
    rt__thread_waker *tw = rt__thread_waker_new();
    if (tw == NULL)
        return -ENOMEM;
    int status = rt__thread_waker_block(tw, poll, arg, timeout_ns);
    rt__thread_waker_release(tw);
    return status;
}

static rt_poll future_poll(void *arg, rt_context *cx)
{
    return rt_future_poll(arg, cx);
}

int rt__block_on_future(rt_future *f, int64_t timeout_ns)
{
    return rt__block_on_poll(future_poll, f, timeout_ns);
}
