/* What the calling thread is to the scheduler: one of its workers (and
 * which), or a thread running shutdown's cancellation. The scheduler's
 * thread-locals are here (current.c); the lower layers keep their own: the
 * block cache (block_cache.h), the clock's reading cache (clock.h) and the
 * task id block (task.c). Internal, not installed. */
#ifndef RT_SRC_CURRENT_H
#define RT_SRC_CURRENT_H

#include <stdbool.h>

#include <asyncrt/runtime.h>

#include "reactor.h"
#include "worker.h"

/* The worker the calling thread is, or NULL. Set by the worker's loop. */
extern __thread rt__worker *rt__tls_worker __attribute__((tls_model("initial-exec")));

static inline rt__worker *rt__worker_current(void)
{
    return rt__tls_worker;
}

/* The task the calling worker is polling (or dropping), else NULL. */
static inline struct rt_task *rt__task_current(void)
{
    rt__worker *w = rt__worker_current();
    return w != NULL ? w->own.current : NULL;
}

/* The worker loop marks its thread on start (w) and on exit (NULL), and
 * installs the worker's block cache as the thread's (block_cache.h). */
void rt__set_current_worker(rt__worker *w);

/* The timer batch a timer command submitted by the calling thread to the
 * reactor of `rt` joins: its worker's when it is a worker of `rt`, else NULL
 * (rt__reactor_submit_timer). */
static inline rt__timer_batch *rt__current_timer_batch(rt_runtime *rt)
{
    rt__worker *w = rt__worker_current();
    return w != NULL && w->rt == rt ? &w->own.timer_batch : NULL;
}

/* The runtime whose shutdown the calling thread is cancelling tasks for
 * (running their drop functions), or NULL; set and cleared by
 * rt_runtime_shutdown. A drop that calls back into shutdown, or blocks on a
 * task shutdown has yet to cancel, would wait for itself. */
rt_runtime *rt__thread_shutting_down(void);
void rt__set_thread_shutting_down(rt_runtime *rt);

/* True while this thread runs rt_runtime_shutdown's cancellation. */
static inline bool rt__thread_in_shutdown(void)
{
    return rt__thread_shutting_down() != NULL;
}

/* An address that differs per thread and costs no system call: foreign
 * threads hash it to pick a registry shard. */
const void *rt__thread_marker(void);

#endif
