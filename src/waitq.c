/* Blocking a foreign thread on a poll-style operation (the *_blocking forms
 * of the synchronization primitives and channels). */
#include <errno.h>

#include "park.h"
#include "runtime.h"
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
        rt__parker_park(rt__thread_waker_parker(tw), left);
    }
    /* A queue may still hold a clone of the waker until the caller drops its
     * operation; the clone keeps the heap object alive. */
    rt_waker_drop(&cx.waker);
    rt__thread_waker_release(tw);
    return status;
}
