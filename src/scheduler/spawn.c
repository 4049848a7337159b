/* Spawning and the task waker: how a task gets onto a run queue, first when
 * it is spawned and then whenever its waker is woken, and how an abort or a
 * blocking wait reaches it. The scheduler's entry points for everything
 * above it (the toolkit, the public task API). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <asyncrt/diag.h>

#include "atomic.h"
#include "events.h"
#include "operation.h"
#include "blocking.h"
#include "misuse.h"
#include "runtime_object.h"
#include "spawning.h"

/* ---- The task waker ----------------------------------------------------- */

static rt_waker task_waker_clone(const void *data)
{
    rt_task *t = (rt_task *)data;
    rt__task_state_ref(t);
    rt_waker w = {&rt__task_waker_vtable, t};
    return w;
}

static void task_waker_drop(const void *data)
{
    rt__task_unref((rt_task *)data, 1);
}

/* True (and noted) when `t` is the task this thread is polling: its wake is
 * then a yield, handled by the worker after the poll without atomics. */
static inline bool self_wake(rt_task *t)
{
    rt__worker *w = rt__worker_current();
    if (w != NULL && w->own.current == t) {
        w->own.current_notified = true;
        return true;
    }
    return false;
}

/* Whether a task scheduled by the calling thread may be queued already
 * claimed (RUNNING, see task_internal.h): only by a worker of its runtime, which
 * puts it on its own queues. The reactor and foreign threads queue
 * NOTIFIED tasks. */
static inline bool may_preclaim(rt_task *t)
{
    rt__worker *w = rt__worker_current();
    return w != NULL && w->rt == t->rt;
}

/* The calling thread as the events name it (events.h). */
static inline int event_thread(void)
{
    rt__worker *w = rt__worker_current();
    return w != NULL ? (int)w->index : RT__EV_FOREIGN;
}

/* Wake by value: the waker's reference becomes the run queue's when the task
 * was idle, and is dropped otherwise. */
static void task_waker_wake(const void *data)
{
    rt_task *t = (rt_task *)data;
    if (self_wake(t)) {
        rt__task_unref(t, 1); /* never the last: the worker holds one */
        return;
    }
    if (rt__task_wake_transition(t, may_preclaim(t))) {
        RT__DEBUG_YIELD();
        RT__EV_WAKE(t->id, event_thread());
        rt__task_note_queued(t);
        rt__schedule(t);
    }
}

static void task_waker_wake_by_ref(const void *data)
{
    rt_task *t = (rt_task *)data;
    if (self_wake(t))
        return;
    if (rt__task_state_wake_by_ref(t, may_preclaim(t))) {
        RT__DEBUG_YIELD();
        RT__EV_WAKE(t->id, event_thread());
        rt__task_note_queued(t);
        rt__schedule(t);
    }
}

const rt_waker_vtable rt__task_waker_vtable = {
    task_waker_clone,
    task_waker_wake,
    task_waker_wake_by_ref,
    task_waker_drop,
};

/* ---- Spawning ----------------------------------------------------------- */

RT_EXPORT void rt_spawn_options_init(rt_spawn_options *opts)
{
    if (opts == NULL)
        return;
    memset(opts, 0, sizeof(*opts));
    opts->name = NULL;
    opts->worker = RT_WORKER_ANY;
}

/* The worker index a spawn pins its task to (-1: none), or -EINVAL. */
static int spawn_pinned_worker(rt_runtime *rt, const rt_spawn_options *opts)
{
    if (opts == NULL || opts->worker == RT_WORKER_ANY)
        return -1;
    if (opts->worker == RT_WORKER_CURRENT) {
        rt__worker *w = rt__worker_current();
        if (w == NULL || w->rt != rt)
            return -EINVAL;
        return (int)w->index;
    }
    if (opts->worker < 0 || (unsigned)opts->worker >= rt->nworkers)
        return -EINVAL;
    return opts->worker;
}

/* Every spawn function is this, inlined: a spawn is a hot path, and one
 * call more per spawn shows in spawn-heavy programs. */
static inline __attribute__((always_inline)) int
spawn_impl(rt_runtime *rt, const rt_spawn_options *opts, rt_poll_fn poll, rt_drop_fn drop,
           const void *state, size_t size, rt_task **handle, uint64_t id, const char *site,
           rt__task_finish_fn on_finish, void *finish_arg)
{
    if (handle != NULL)
        *handle = NULL;
    if (rt == NULL)
        rt = rt_current_runtime();
    if (rt == NULL || poll == NULL || (state == NULL && size > 0) ||
        size > (SIZE_MAX >> 2) - sizeof(rt_task))
        return -EINVAL;
    int pinned = spawn_pinned_worker(rt, opts);
    if (pinned == -EINVAL)
        return -EINVAL;
    const char *name = opts != NULL ? opts->name : NULL;
    if (rt__load_acquire_u32(&rt->closing))
        return -ESHUTDOWN;

    rt__worker *w = rt__worker_current();
    if (w != NULL && w->rt != rt)
        w = NULL;
    /* A worker allocates from and registers in its own structures without a
     * lock; a foreign thread does both under its shard's lock, which also
     * orders the registration against shutdown closing the shard. */
    rt__foreign_shard *sh = NULL;
    rt__block_cache *cache;
    rt__registry *registry;
    if (w != NULL) {
        cache = &w->own.cache;
        registry = &w->registry;
    } else {
        sh = rt__foreign_shard_of_thread(rt);
        pthread_mutex_lock(&sh->lock);
        if (sh->closed) {
            pthread_mutex_unlock(&sh->lock);
            return -ESHUTDOWN;
        }
        cache = &sh->cache;
        registry = &sh->registry;
    }
    int err = -ENOMEM;
    uint64_t flags;
    const rt__task_extras extras = {name, pinned, rt->config.poll_timing != 0, on_finish,
                                    finish_arg};
    rt_task *t = rt__task_alloc(cache, size, &extras, &flags);
    if (t == NULL)
        goto out;
    /* References: the run queue's, the registry's, and the handle's. */
    uint64_t refs = handle != NULL ? 3 : 2;
    /* Queued already claimed (see task_internal.h): the first poll needs no
     * read-modify-write to claim it. */
    t->state = flags | RT__TASK_RUNNING | (handle != NULL ? RT__TASK_JOIN_INTEREST : 0) |
               refs * RT__TASK_REF_ONE;
    t->u.poll = poll;
    t->fin.drop = drop;
    t->rt = rt;
    t->join_waker = rt_waker_noop();
    t->id = id != 0 ? id : rt__task_new_id();
    if (size > 0)
        memcpy(t->future_state, state, size);
    if (extras.timed)
        rt__store_relaxed_u64(&rt__task_timing_of(t)->woken_ns, (uint64_t)rt__now_ns());
    err = rt__registry_insert(rt, registry, t, site, cache);
    if (err < 0) {
        rt__task_recycle(cache, t);
        t = NULL;
    }
out:
    if (sh != NULL)
        pthread_mutex_unlock(&sh->lock);
    if (t == NULL)
        return err;
    if (handle != NULL)
        *handle = t;
    RT__EV_SPAWN(t->id, w != NULL ? (int)w->index : RT__EV_FOREIGN);
    /* Publishing the task on a run queue is the last step: from here on a
     * worker may run, complete and release it. */
    rt__schedule(t);
    return 0;
}

int rt__spawn(rt_runtime *rt, const rt_spawn_options *opts, rt_poll_fn poll, rt_drop_fn drop,
              const void *state, size_t size, rt_task **handle, uint64_t id, const char *site,
              rt__task_finish_fn on_finish, void *finish_arg)
{
    return spawn_impl(rt, opts, poll, drop, state, size, handle, id, site, on_finish, finish_arg);
}

RT_EXPORT int rt_spawn_ex_with_site(const char *site, rt_runtime *rt, const rt_spawn_options *opts,
                                    rt_poll_fn poll, rt_drop_fn drop, const void *state,
                                    size_t size, rt_task **handle)
{
    return spawn_impl(rt, opts, poll, drop, state, size, handle, 0, site, NULL, NULL);
}

RT_EXPORT int rt_spawn_local_with_site(const char *site, rt_runtime *rt, rt_poll_fn poll,
                                       rt_drop_fn drop, const void *state, size_t size,
                                       rt_task **handle)
{
    rt_spawn_options opts;
    rt_spawn_options_init(&opts);
    opts.worker = RT_WORKER_CURRENT;
    return spawn_impl(rt, &opts, poll, drop, state, size, handle, 0, site, NULL, NULL);
}

/* ---- The current task, abort and waiting ---------------------------------- */

/* What a misuse report says of a handle used after its release. */
static const char HANDLE_GONE[] = "the join handle was released already";

RT_EXPORT void rt_task_drop(rt_task *task)
{
    if (task != NULL && !rt__task_release_handle(task))
        rt__report_misuse("rt_task_drop", task, HANDLE_GONE);
}

RT_EXPORT int rt_task_wait(rt_task *task, int64_t timeout_ns, void **value, int *status)
{
    if (task == NULL)
        return -EINVAL;
    if (!rt__task_handle_held(task)) {
        rt__report_misuse("rt_task_wait", task, HANDLE_GONE);
        return -EINVAL;
    }
    if (rt__worker_current() != NULL || rt__thread_in_shutdown())
        return -EDEADLK;
    rt__thread_waker *tw = rt__thread_waker_new();
    if (tw == NULL)
        return -ENOMEM;
    int err = rt__task_wait_with(task, tw, timeout_ns, value, status, NULL, 0);
    rt__thread_waker_release(tw);
    return err;
}

RT_EXPORT int rt_task_set_status(rt_context *cx, int status)
{
    rt__worker *w = rt__worker_current();
    if (status > 0 || cx == NULL || w == NULL || w->own.current == NULL ||
        cx->waker.vtable != &rt__task_waker_vtable || cx->waker.data != w->own.current)
        return -EINVAL;
    w->own.poll_status = status;
    return 0;
}

RT_EXPORT void rt_task_cancel(rt_task *task)
{
    if (task == NULL)
        return;
    /* Running or queued: the worker sees CANCELLED after the poll or at the
     * pop. Idle: schedule it so that a worker drops it. A blocking job is
     * never idle; a queued one is taken out of the pool's queue and
     * completed now. */
    uint64_t prev = 0;
    switch (rt__task_state_abort(task, &prev)) {
    case RT__TASK_ABORT_NONE:
        break;
    case RT__TASK_ABORT_SCHEDULE:
        rt__task_note_queued(task);
        rt__schedule(task);
        break;
    case RT__TASK_ABORT_MARKED:
        if (!(prev & RT__TASK_RUNNING) && rt__task_pinned(task) == RT__TASK_PINNED_JOB)
            rt__blocking_pool_abort(task->rt->blocking, task);
        break;
    }
}

/* ---- The join operation ------------------------------------------------- */

static rt_poll join_vpoll(rt_future *f, rt_context *cx)
{
    rt_task_join *op = (rt_task_join *)f;
    if (rt__unlikely(!rt__task_handle_held(op->task))) {
        /* Detached (or waited for) behind the join's back. */
        rt__report_misuse("rt_task_join", op->task, HANDLE_GONE);
        op->task = NULL;
        return rt__future_finish(f, -EINVAL);
    }
    int status;
    if (rt__task_join_poll(op->task, cx, &op->value, &status) == RT_PENDING)
        return RT_PENDING;
    op->task = NULL;
    return rt__future_finish(f, status);
}

/* A join given up detaches (the task runs on, its result is discarded), or
 * first aborts the task when asked to. */
static void join_vdrop(rt_future *f)
{
    rt_task_join *op = (rt_task_join *)f;
    rt_task *task = op->task;
    op->task = NULL;
    if (op->cancel_on_drop)
        rt_task_cancel(task);
    rt_task_drop(task);
}

/* What a join waits for: the task, by id (the task itself is not read: it
 * may be running on another worker). */
static void join_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_task_join *op = (const rt_task_join *)f;
    info->kind = RT_WAIT_JOIN;
    info->task_id = rt_task_id(op->task);
    snprintf(info->text, sizeof info->text, "join of task %llu", (unsigned long long)info->task_id);
}

static const rt_future_vtable join_vtable = {join_vpoll, join_vdrop, join_vdescribe};

RT_EXPORT int rt_task_join_init(rt_task_join *op, rt_task *task)
{
    if (op == NULL) {
        rt_task_drop(task); /* not leaked, as the header says */
        return -EINVAL;
    }
    op->future.vtable = &join_vtable;
    op->result = 0;
    op->task = task;
    op->value = NULL;
    op->cancel_on_drop = false;
    if (task == NULL) {
        rt__future_finish(&op->future, -EINVAL);
        return -EINVAL;
    }
    if (!rt__task_handle_held(task)) {
        op->task = NULL; /* not the join's to release */
        rt__future_finish(&op->future, -EINVAL);
        rt__report_misuse("rt_task_join_init", task, HANDLE_GONE);
        return -EINVAL;
    }
    return 0;
}
