/* The runtime's thread-locals (current.h) and the public questions about the
 * calling thread: rt_current_runtime, rt_current_worker, and the task it runs. */
#include "current.h"

#include <asyncrt/coro.h>

#include "atomic.h"
#include "common.h"
#include "task_internal.h"

__thread rt__worker *rt__tls_worker __attribute__((tls_model("initial-exec")));
static __thread rt_runtime *tls_shutting_down;
static __thread char tls_marker;

void rt__set_current_worker(rt__worker *w)
{
    rt__tls_worker = w;
    rt__block_cache_set_current(w != NULL ? &w->own.cache : NULL);
}

rt_runtime *rt__thread_shutting_down(void)
{
    return tls_shutting_down;
}

void rt__set_thread_shutting_down(rt_runtime *rt)
{
    tls_shutting_down = rt;
}

const void *rt__thread_marker(void)
{
    return &tls_marker;
}

RT_EXPORT rt_runtime *rt_current_runtime(void)
{
    rt__worker *w = rt__tls_worker;
    return w != NULL ? w->rt : NULL;
}

RT_EXPORT int rt_current_worker(void)
{
    rt__worker *w = rt__tls_worker;
    return w != NULL ? (int)w->index : -1;
}

RT_EXPORT uint64_t rt_current_task_id(void)
{
    rt_task *t = rt__task_current();
    return t != NULL ? t->id : 0;
}

RT_EXPORT const char *rt_current_task_name(void)
{
    return rt_task_name(rt__task_current());
}

/* The coroutine mark (RT_CORO_BEGIN): the task the calling worker polls has
 * a coroutine record at the start of its state, whose status a finish
 * reads (worker.c). */
RT_EXPORT void rt_coro_started(rt_coro *co)
{
    rt__worker *w = rt__worker_current();
    rt_task *t = w != NULL ? w->own.current : NULL;
    if (t == NULL || (void *)co != (void *)t->future_state)
        return;
    if (!(rt__load_relaxed_u64(&t->state) & RT__TASK_CORO))
        rt__task_state_set_coro(t);
}
