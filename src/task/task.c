/* The task object: its memory, ids and references, the wake transition a
 * waker makes, completion, blocking-pool jobs and join handles. The state
 * word and its named transitions are in task_internal.h. This layer knows
 * no scheduler: putting a task on a run queue is the caller's business
 * (spawn.c, the scheduler, the reactor's wake batch through its hook). */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "atomic.h"
#include "budget.h"
#include "task_internal.h"
#include "waker.h"

void rt__task_recycle(rt__block_cache *cache, rt_task *t)
{
    /* Never touches t->rt: the runtime may already be freed. The flags are
     * read before the block goes back (and, under ASan, is poisoned). */
    uint64_t s = rt__load_relaxed_u64(&t->state);
    if (s & RT__TASK_SMALL) {
        rt__block_free(cache, t);
    } else if (s & RT__TASK_TIMED) {
        free(rt__task_timing_of(t));
    } else if (s & RT__TASK_EXTENDED) {
        free(rt__task_ext_of(t));
    } else {
        free(t);
    }
}

rt_task *rt__task_alloc_large(size_t size, const rt__task_extras *x, uint64_t *flags)
{
    rt_task *t;
    if (rt__task_extras_none(x)) {
        *flags = 0;
        return rt__malloc(sizeof(rt_task) + size);
    }
    size_t name_len = x->name != NULL ? strnlen(x->name, RT_TASK_NAME_MAX) : 0;
    size_t name_bytes = x->name != NULL ? name_len + 1 : 0;
    size_t timing = x->timed ? sizeof(rt__task_timing) : 0;
    char *base = rt__malloc(timing + sizeof(rt__task_ext) + sizeof(rt_task) + size + name_bytes);
    if (base == NULL)
        return NULL;
    if (x->timed)
        memset(base, 0, timing);
    t = (rt_task *)(base + timing + sizeof(rt__task_ext));
    rt__task_ext *ext = rt__task_ext_of(t);
    ext->name = NULL;
    ext->pinned = x->pinned;
    ext->unused = 0;
    ext->on_finish = x->on_finish;
    ext->finish_arg = x->finish_arg;
    if (x->name != NULL) {
        char *copy = (char *)t->future_state + size;
        memcpy(copy, x->name, name_len);
        copy[name_len] = '\0';
        ext->name = copy;
    }
    *flags = RT__TASK_EXTENDED | (x->timed ? RT__TASK_TIMED : 0);
    return t;
}

/* Task ids come from one process-wide counter. Each thread takes them in
 * blocks, so spawning does not write a shared cache line each time. */
static uint64_t next_task_id = 1;

__thread rt__task_ids rt__tls_task_ids __attribute__((tls_model("initial-exec")));

uint64_t rt__task_new_id_block(void)
{
    uint64_t first = rt__faa_u64(&next_task_id, RT__TASK_ID_BLOCK);
    rt__tls_task_ids.next = first + 1;
    rt__tls_task_ids.limit = first + RT__TASK_ID_BLOCK;
    return first;
}

void rt__task_unref(rt_task *t, uint64_t n)
{
    /* Any thread's cache may take any block; elsewhere, to the pool. */
    if (rt__task_state_unref(t, n))
        rt__task_recycle(rt__current_block_cache(), t);
}

/* ---- Waking ------------------------------------------------------------- */

rt_task *rt__task_wake_for_batch(rt_waker *w, const rt_waker_vtable *task_vtable, rt_runtime *rt)
{
    rt_waker taken = *w;
    *w = rt_waker_noop();
    rt_task *t = (rt_task *)taken.data;
    if (taken.vtable != task_vtable || t->rt != rt) {
        rt_waker_wake(&taken);
        return NULL;
    }
    if (!rt__task_wake_transition(t, false))
        return NULL;
    rt__task_note_queued(t);
    return t;
}

/* ---- Identity ------------------------------------------------------------ */

RT_EXPORT uint64_t rt_task_id(const rt_task *task)
{
    return task != NULL ? task->id : 0;
}

static const char *task_name(rt_task *t)
{
    if (!(rt__load_relaxed_u64(&t->state) & RT__TASK_EXTENDED))
        return NULL;
    return rt__task_ext_of(t)->name;
}

RT_EXPORT const char *rt_task_name(const rt_task *task)
{
    return task != NULL ? task_name((rt_task *)task) : NULL;
}

/* ---- Completion ---------------------------------------------------------- */

void rt__task_cancel_at_shutdown(rt_task *t)
{
    rt__task_state_claim_for_shutdown(t);
    rt__task_drop_future(t);
    rt__task_finish(t, NULL, -ECANCELED, true);
    rt__task_complete(t, true, 0);
    /* A queue entry, if any, is drained later; the registry drops its own. */
}

/* ---- Blocking jobs -------------------------------------------------------
 *
 * A job of the blocking pool is a task that no worker ever polls: it sits
 * in the pool's queue (holding the queue reference) with NOTIFIED set, and
 * a pool thread claims it exactly as a worker claims a queued task. It is
 * in no registry: the pool cancels the jobs it has not started at shutdown.
 * Join handles, abort and ids work as for any task. */

struct job_state {
    rt_blocking_fn fn;
    void (*release)(void *arg); /* after fn, or instead of it; may be NULL */
    void *arg;
};

static rt_poll job_never_polled(void *state, rt_context *cx, void **out)
{
    (void)state, (void)cx, (void)out;
    assert(!"a blocking job is never polled");
    return RT_PENDING;
}

rt_task *rt__task_new_job(rt_runtime *rt, rt_blocking_fn fn, void (*release)(void *), void *arg,
                          bool handle)
{
    uint64_t flags;
    /* Marked as a job in its prefix, for rt_task_cancel. */
    const rt__task_extras x = {.pinned = RT__TASK_PINNED_JOB};
    rt_task *t = rt__task_alloc(NULL, sizeof(struct job_state), &x, &flags);
    if (t == NULL)
        return NULL;
    /* References: the pool queue's, and the handle's. */
    uint64_t refs = handle ? 2 : 1;
    t->state =
        flags | RT__TASK_NOTIFIED | (handle ? RT__TASK_JOIN_INTEREST : 0) | refs * RT__TASK_REF_ONE;
    t->u.poll = job_never_polled;
    t->fin.drop = NULL;
    t->rt = rt;
    t->join_waker = rt_waker_noop();
    t->id = rt__task_new_id();
    struct job_state js = {fn, release, arg};
    memcpy(t->future_state, &js, sizeof(js));
    return t;
}

void rt__task_discard_job(rt_task *t)
{
    /* Never published: nobody else holds a reference. */
    rt__task_recycle(NULL, t);
}

void rt__task_run_job(rt_task *t)
{
    uint64_t prev = rt__task_state_claim(t);
    assert((prev & (RT__TASK_NOTIFIED | RT__TASK_RUNNING | RT__TASK_COMPLETE)) ==
           RT__TASK_NOTIFIED);
    bool cancelled = (prev & RT__TASK_CANCELLED) != 0;
    struct job_state js;
    memcpy(&js, t->future_state, sizeof(js));
    void *value = cancelled ? NULL : js.fn(js.arg);
    /* Before the completion, so that a joiner finds the argument released. */
    if (js.release != NULL)
        js.release(js.arg);
    rt__task_finish(t, value, cancelled ? -ECANCELED : 0, cancelled);
    /* No registry reference keeps the task alive here, so the queue's
     * reference is dropped separately, after the completion. */
    rt__task_complete(t, cancelled, 0);
    rt__task_unref(t, 1);
}

void rt__task_cancel_job(rt_task *t)
{
    rt__task_state_set_cancelled(t);
    rt__task_run_job(t); /* sees CANCELLED: completes without running */
}

/* ---- Join handles -------------------------------------------------------- */

/* Stores a clone of `waker` as the join waker. Returns false when the task
 * completed meanwhile (the caller then reads the result). */
static bool task_set_join_waker(rt_task *t, const rt_waker *waker, uint64_t s)
{
    if (s & RT__TASK_JOIN_WAKER) {
        /* The completer may read the field; leave it when it already wakes us. */
        if (rt_waker_will_wake(&t->join_waker, waker))
            return true;
        /* Take the field back by clearing JOIN_WAKER; fails once COMPLETE. */
        if (!rt__task_state_take_join_waker(t, s))
            return false;
    }
    /* JOIN_WAKER is clear: the field is ours. */
    rt_waker_drop(&t->join_waker);
    t->join_waker = rt_waker_clone(waker);
    /* False: completed meanwhile; the field stays ours, released with the
     * handle. */
    return rt__task_state_publish_join_waker(t);
}

bool rt__task_release_handle(rt_task *t)
{
    uint64_t s = rt__task_state_release_handle(t);
    if (!(s & RT__TASK_JOIN_INTEREST))
        return false;
    /* Unless the completer is using the field right now (it then sees the
     * interest gone and drops the waker itself), the field is ours. */
    if (!((s & RT__TASK_COMPLETE) && (s & RT__TASK_JOIN_WAKER)))
        rt_waker_drop(&t->join_waker);
    rt__task_unref(t, 1);
    return true;
}

/* The join's release. A handle its owner released meanwhile from another
 * thread (detached while a join owned it) is left alone: the scheduler's
 * entry points check the handle, and report, before they join. */
static void task_release_handle(rt_task *t)
{
    (void)rt__task_release_handle(t);
}

static void task_read_result(rt_task *t, uint64_t s, void **value, int *status)
{
    bool cancelled = (s & RT__TASK_CANCELLED) != 0;
    if (value != NULL)
        *value = cancelled ? NULL : t->u.output;
    if (status != NULL)
        *status = cancelled ? -ECANCELED : (int)t->fin.status;
}

/* One join attempt; a finished task's state is copied to copy_to (size
 * bytes; NULL: nothing) before the handle goes. */
static rt_poll join_poll(rt_task *task, rt_context *cx, void **value, int *status, void *copy_to,
                         size_t size)
{
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    /* Acquire pairs with the completer's release of COMPLETE: the output,
     * the status and what the drop left in the state are visible. */
    uint64_t s = rt__load_acquire_u64(&task->state);
    if (!(s & RT__TASK_COMPLETE)) {
        if (task_set_join_waker(task, rt_context_waker(cx), s)) {
            rt__coop_refund(); /* only completed operations spend budget */
            return RT_PENDING;
        }
        s = rt__load_acquire_u64(&task->state);
    }
    task_read_result(task, s, value, status);
    if (copy_to != NULL && size > 0)
        memcpy(copy_to, task->future_state, size);
    task_release_handle(task);
    return RT_READY;
}

rt_poll rt__task_join_poll(rt_task *task, rt_context *cx, void **value, int *status)
{
    return join_poll(task, cx, value, status, NULL, 0);
}

/* The join as the poll rt__thread_waker_block repeats. */
struct wait_join {
    rt_task *task;
    void **value;
    int status;
    void *copy_to;
    size_t size;
};

static rt_poll wait_join_poll(void *arg, rt_context *cx)
{
    struct wait_join *j = arg;
    return join_poll(j->task, cx, j->value, &j->status, j->copy_to, j->size);
}

int rt__task_wait_with(rt_task *task, rt__thread_waker *tw, int64_t timeout_ns, void **value,
                       int *status, void *copy_to, size_t size)
{
    void *v = NULL;
    struct wait_join j = {task, &v, 0, copy_to, size};
    int err = rt__thread_waker_block(tw, wait_join_poll, &j, timeout_ns);
    if (err < 0)
        return err;
    if (value != NULL)
        *value = v;
    if (status != NULL)
        *status = j.status;
    return 0;
}

RT_EXPORT bool rt_task_is_finished(const rt_task *task)
{
    if (task == NULL)
        return false;
    return (rt__load_acquire_u64(&task->state) & RT__TASK_COMPLETE) != 0;
}

RT_EXPORT rt_poll rt_yield(rt_context *cx)
{
    /* The vtable directly: cx was checked, and a yield is a hot path. */
    if (rt__likely(cx != NULL))
        cx->waker.vtable->wake_by_ref(cx->waker.data);
    return RT_PENDING;
}
