/* What the calling thread is to the runtime: one of its workers (and which),
 * its reactor, or a thread running shutdown's cancellation. Every
 * thread-local of the runtime layers is here (current.c); the clock's
 * reading cache belongs to the clock (park.h). Internal, not installed. */
#ifndef RT_SRC_CURRENT_H
#define RT_SRC_CURRENT_H

#include <stdbool.h>

#include <asyncrt/runtime.h>

#include "block_cache.h"
#include "reactor.h"
#include "worker.h"

/* The worker the calling thread is, or NULL. Set by the worker's loop. */
extern __thread rt__worker *rt__tls_worker __attribute__((tls_model("initial-exec")));
/* The reactor thread's block cache while it runs, else NULL. */
extern __thread rt__block_cache *rt__tls_reactor_cache __attribute__((tls_model("initial-exec")));

static inline rt__worker *rt__worker_current(void)
{
    return rt__tls_worker;
}

/* The worker loop marks its thread on start (w) and on exit (NULL). */
void rt__set_current_worker(rt__worker *w);

/* The reactor thread marks itself with its block cache (NULL on exit). */
void rt__set_reactor_cache(rt__block_cache *cache);

/* The block cache of the calling thread: its worker's, the reactor's, or
 * NULL for any other thread (which then uses the block pool directly). */
static inline rt__block_cache *rt__current_block_cache(void)
{
    rt__worker *w = rt__worker_current();
    return w != NULL ? &w->cache : rt__tls_reactor_cache;
}

/* The timer batch a timer command submitted by the calling thread to the
 * reactor of `rt` joins: its worker's when it is a worker of `rt`, else NULL
 * (rt__reactor_submit_timer). */
static inline rt__timer_batch *rt__current_timer_batch(rt_runtime *rt)
{
    rt__worker *w = rt__worker_current();
    return w != NULL && w->rt == rt ? &w->timer_batch : NULL;
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
