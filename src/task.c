/* Tasks: spawning, the state machine, the task waker, join handles and abort.
 * The state word and its ownership rules are described in runtime.h. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "atomic.h"
#include "runtime.h"

static inline void *task_future_state(rt_task *t)
{
    return t->future_state;
}

void rt__task_recycle(rt__block_cache *cache, rt_task *t)
{
    /* Never touches t->rt: the runtime may already be freed. The flags are
     * read before the block goes back (and, under ASan, is poisoned). */
    uint64_t s = rt__load_relaxed_u64(&t->state);
    if (s & RT__TASK_SMALL) {
        rt__block_free(cache, t);
    } else if (s & RT__TASK_EXTENDED) {
        free(rt__task_ext_of(t));
    } else {
        free(t);
    }
}

/* Allocates a task for `size` bytes of state. Without options it may be a
 * small block; with a name or a pinned worker the allocation starts with an
 * rt__task_ext and ends with a copy of the name. *flags receives the
 * immutable flag bits for the state word. */
static rt_task *task_alloc(rt__block_cache *cache, size_t size, const char *name, int pinned,
                           uint64_t *flags)
{
    rt_task *t;
    if (name == NULL && pinned == -1) {
        if (sizeof(rt_task) + size <= RT__TASK_SMALL_BLOCK) {
            if ((t = rt__block_alloc(cache)) == NULL)
                return NULL;
            *flags = RT__TASK_SMALL;
            return t;
        }
        *flags = 0;
        return rt__malloc(sizeof(rt_task) + size);
    }
    size_t name_len = name != NULL ? strnlen(name, RT_TASK_NAME_MAX) : 0;
    size_t name_bytes = name != NULL ? name_len + 1 : 0;
    char *base = rt__malloc(sizeof(rt__task_ext) + sizeof(rt_task) + size + name_bytes);
    if (base == NULL)
        return NULL;
    t = (rt_task *)(base + sizeof(rt__task_ext));
    rt__task_ext *ext = rt__task_ext_of(t);
    ext->name = NULL;
    ext->pinned = pinned;
    ext->unused = 0;
    if (name != NULL) {
        char *copy = (char *)t->future_state + size;
        memcpy(copy, name, name_len);
        copy[name_len] = '\0';
        ext->name = copy;
    }
    *flags = RT__TASK_EXTENDED;
    return t;
}

/* Task ids come from one process-wide counter. Workers take them in blocks,
 * so spawning on a worker does not write a shared cache line each time. */
static uint64_t next_task_id = 1;
#define RT__TASK_ID_BLOCK 1024

uint64_t rt__task_new_id(void)
{
    rt__worker *w = rt__worker_current();
    if (w == NULL)
        return rt__faa_u64(&next_task_id, 1);
    if (w->next_id == w->id_limit) {
        w->next_id = rt__faa_u64(&next_task_id, RT__TASK_ID_BLOCK);
        w->id_limit = w->next_id + RT__TASK_ID_BLOCK;
    }
    return w->next_id++;
}

void rt__task_unref(rt_task *t, uint64_t n)
{
    /* Any thread's cache may take any block; elsewhere, to the pool. */
    if (rt__task_state_unref(t, n))
        rt__task_recycle(rt__current_block_cache(), t);
}

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
    if (w != NULL && w->current == t) {
        w->current_notified = true;
        return true;
    }
    return false;
}

/* Whether a task scheduled by the calling thread may be queued already
 * claimed (RUNNING, see runtime.h): only by a worker of its runtime, which
 * puts it on its own queues. The reactor and foreign threads queue
 * NOTIFIED tasks. */
static inline bool may_preclaim(rt_task *t)
{
    rt__worker *w = rt__worker_current();
    return w != NULL && w->rt == t->rt;
}

/* The state transition of a wake by value: returns true when the task was
 * idle and is now marked for a run queue (NOTIFIED, or RUNNING when
 * `preclaim`: queued already claimed), the waker's reference becoming the
 * run queue's (the caller schedules it); otherwise the reference has been
 * dealt with. */
static bool task_wake_transition(rt_task *t, bool preclaim)
{
    switch (rt__task_state_wake(t, preclaim)) {
    case RT__TASK_WAKE_DROP:
        rt__task_unref(t, 1);
        return false;
    case RT__TASK_WAKE_DONE:
        return false;
    case RT__TASK_WAKE_SCHEDULE:
        break;
    }
    return true;
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
    if (task_wake_transition(t, may_preclaim(t))) {
        RT__DEBUG_YIELD();
        rt__schedule(t);
    }
}

rt_task *rt__task_wake_for_batch(rt_waker *w, rt_runtime *rt)
{
    rt_waker taken = *w;
    *w = rt_waker_noop();
    rt_task *t = (rt_task *)taken.data;
    if (taken.vtable != &rt__task_waker_vtable || t->rt != rt) {
        rt_waker_wake(&taken);
        return NULL;
    }
    if (!task_wake_transition(t, false))
        return NULL;
    if (rt__task_pinned(t) >= 0) {
        /* A local task goes to its own worker's inbox, not the shared queue. */
        rt__schedule(t);
        return NULL;
    }
    return t;
}

static void task_waker_wake_by_ref(const void *data)
{
    rt_task *t = (rt_task *)data;
    if (self_wake(t))
        return;
    if (rt__task_state_wake_by_ref(t, may_preclaim(t))) {
        RT__DEBUG_YIELD();
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

RT_EXPORT int rt_spawn_ex(rt_runtime *rt, const rt_spawn_options *opts, rt_poll_fn poll,
                          rt_drop_fn drop, const void *state, size_t size, rt_task **handle)
{
    return rt__spawn(rt, opts, poll, drop, state, size, handle, 0);
}

int rt__spawn(rt_runtime *rt, const rt_spawn_options *opts, rt_poll_fn poll, rt_drop_fn drop,
              const void *state, size_t size, rt_task **handle, uint64_t id)
{
    if (handle != NULL)
        *handle = NULL;
    if (rt == NULL)
        rt = rt_current();
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
        cache = &w->cache;
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
    rt_task *t = task_alloc(cache, size, name, pinned, &flags);
    if (t == NULL)
        goto out;
    /* References: the run queue's, the registry's, and the handle's. */
    uint64_t refs = handle != NULL ? 3 : 2;
    /* Queued already claimed (see runtime.h): the first poll needs no
     * read-modify-write to claim it. */
    t->state = flags | RT__TASK_RUNNING | (handle != NULL ? RT__TASK_JOIN_INTEREST : 0) |
               refs * RT__TASK_REF_ONE;
    t->u.poll = poll;
    t->drop = drop;
    t->rt = rt;
    t->join_waker = rt_waker_noop();
    t->id = id != 0 ? id : rt__task_new_id();
    if (size > 0)
        memcpy(t->future_state, state, size);
    err = rt__registry_insert(rt, registry, t, cache);
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
    /* Publishing the task on a run queue is the last step: from here on a
     * worker may run, complete and release it. */
    rt__schedule(t);
    return 0;
}

RT_EXPORT int rt_spawn(rt_runtime *rt, rt_poll_fn poll, rt_drop_fn drop, const void *state,
                       size_t size, rt_task **handle)
{
    return rt_spawn_ex(rt, NULL, poll, drop, state, size, handle);
}

RT_EXPORT int rt_spawn_local(rt_runtime *rt, rt_poll_fn poll, rt_drop_fn drop, const void *state,
                             size_t size, rt_task **handle)
{
    rt_spawn_options opts;
    rt_spawn_options_init(&opts);
    opts.worker = RT_WORKER_CURRENT;
    return rt_spawn_ex(rt, &opts, poll, drop, state, size, handle);
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

RT_EXPORT uint64_t rt_task_current_id(void)
{
    rt__worker *w = rt__worker_current();
    return w != NULL && w->current != NULL ? w->current->id : 0;
}

RT_EXPORT const char *rt_task_current_name(void)
{
    rt__worker *w = rt__worker_current();
    return w != NULL && w->current != NULL ? task_name(w->current) : NULL;
}

RT_EXPORT bool rt_coop_proceed(rt_context *cx)
{
    if (rt__unlikely(cx == NULL))
        return true; /* nothing to wake: no budget is spent */
    return rt__coop_proceed(cx);
}

/* ---- Completion ---------------------------------------------------------- */

/* Marks the task COMPLETE (cancelled or not), wakes its joiner and drops
 * `drop_refs` of the caller's references. The caller owns RUNNING. The
 * registry notices the completion at its next sweep. */
static void task_complete(rt_task *t, bool cancelled, uint64_t drop_refs)
{
    if (!rt__task_state_complete(t, cancelled, drop_refs))
        return;
    /* JOIN_WAKER was set when we completed: the field is ours to use. */
    rt_waker_wake_by_ref(&t->join_waker);
    if (rt__task_state_join_woken(t)) {
        /* The handle went away while we were waking: we drop the waker. */
        rt_waker_drop(&t->join_waker);
    }
    if (drop_refs > 0)
        rt__task_unref(t, drop_refs);
}

static void task_drop_future(rt_task *t)
{
    if (t->drop != NULL)
        t->drop(task_future_state(t));
}

/* The worker owns RUNNING and saw CANCELLED: drop instead of polling. */
static void task_cancel_running(rt__worker *w, rt_task *t)
{
    /* The drop runs as the task (rt_task_current_id works in it); a wake of
     * its own waker from there is harmless, the task completes next. */
    w->current = t;
    task_drop_future(t);
    w->current = NULL;
    t->u.output = NULL;
    rt__stat_add(&w->cancelled, 1);
    task_complete(t, true, 1); /* and the run queue's reference */
}

void rt__task_run(rt__worker *w, rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    if (s & RT__TASK_RUNNING) {
        /* Queued already claimed (spawned, woken by a worker, or requeued
         * by a yield): ours without a read-modify-write. An abort may have
         * come meanwhile, or a wake (NOTIFIED), which this poll consumes as
         * the claim of a NOTIFIED task would. */
        if (rt__unlikely(s & (RT__TASK_CANCELLED | RT__TASK_NOTIFIED))) {
            if (s & RT__TASK_CANCELLED) {
                task_cancel_running(w, t);
                return;
            }
            rt__task_state_consume_notified(t);
        }
    } else {
        /* Shutdown completes tasks only after every worker has exited. */
        uint64_t prev = rt__task_state_claim(t);
        assert((prev & (RT__TASK_NOTIFIED | RT__TASK_RUNNING | RT__TASK_COMPLETE)) ==
               RT__TASK_NOTIFIED);
        if (rt__unlikely(prev & RT__TASK_CANCELLED)) {
            task_cancel_running(w, t);
            return;
        }
    }

    rt_context cx = {{&rt__task_waker_vtable, t}};
    void *out = NULL;
    /* Counted here, not when popped: a cancelled task is dropped unpolled. */
    rt__stat_add(&w->stats.polls, 1);
    w->current = t;
    w->current_notified = false;
    w->budget = w->budget_limit;
    rt_poll r = t->u.poll(task_future_state(t), &cx, &out);

    if (r == RT_READY) {
        t->u.output = out;
        task_drop_future(t);
        w->current = NULL;
        rt__stat_add(&w->completed, 1);
        task_complete(t, false, 1); /* and the run queue's reference */
        return;
    }
    w->current = NULL;

    if (w->current_notified) {
        /* A yield: requeue behind the other runnable tasks, keeping RUNNING
         * and the queue reference. An abort that came during the poll is
         * honoured now rather than at the next pop. */
        if (rt__load_acquire_u64(&t->state) & RT__TASK_CANCELLED)
            task_cancel_running(w, t);
        else
            rt__defer(w, t);
        return;
    }

    /* Pending: back to idle, unless woken or aborted during the poll. */
    switch (rt__task_state_pending(t)) {
    case RT__TASK_CANCEL_IT:
        task_cancel_running(w, t);
        break;
    case RT__TASK_REQUEUE:
        rt__defer(w, t);
        break;
    case RT__TASK_IDLE:
        break;
    }
}

void rt__task_cancel_at_shutdown(rt_task *t)
{
    rt__task_state_claim_for_shutdown(t);
    task_drop_future(t);
    t->u.output = NULL;
    task_complete(t, true, 0);
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
    void *arg;
};

static rt_poll job_never_polled(void *state, rt_context *cx, void **out)
{
    (void)state, (void)cx, (void)out;
    assert(!"a blocking job is never polled");
    return RT_PENDING;
}

rt_task *rt__task_new_job(rt_runtime *rt, rt_blocking_fn fn, void *arg, bool handle)
{
    uint64_t flags;
    /* Marked as a job in its prefix, for rt_task_abort. */
    rt_task *t = task_alloc(NULL, sizeof(struct job_state), NULL, RT__TASK_PINNED_JOB, &flags);
    if (t == NULL)
        return NULL;
    /* References: the pool queue's, and the handle's. */
    uint64_t refs = handle ? 2 : 1;
    t->state =
        flags | RT__TASK_NOTIFIED | (handle ? RT__TASK_JOIN_INTEREST : 0) | refs * RT__TASK_REF_ONE;
    t->u.poll = job_never_polled;
    t->drop = NULL;
    t->rt = rt;
    t->join_waker = rt_waker_noop();
    t->id = rt__task_new_id();
    struct job_state js = {fn, arg};
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
    t->u.output = NULL;
    if (!cancelled) {
        struct job_state js;
        memcpy(&js, t->future_state, sizeof(js));
        t->u.output = js.fn(js.arg);
    }
    /* No registry reference keeps the task alive here, so the queue's
     * reference is dropped separately, after the completion. */
    task_complete(t, cancelled, 0);
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

static void task_release_handle(rt_task *t)
{
    uint64_t s = rt__task_state_release_handle(t);
    /* Unless the completer is using the field right now (it then sees the
     * interest gone and drops the waker itself), the field is ours. */
    if (!((s & RT__TASK_COMPLETE) && (s & RT__TASK_JOIN_WAKER)))
        rt_waker_drop(&t->join_waker);
    rt__task_unref(t, 1);
}

static void task_read_result(rt_task *t, uint64_t s, void **value, int *status)
{
    bool cancelled = (s & RT__TASK_CANCELLED) != 0;
    if (value != NULL)
        *value = cancelled ? NULL : t->u.output;
    if (status != NULL)
        *status = cancelled ? -ECANCELED : 0;
}

RT_EXPORT rt_poll rt_task_join(rt_task *task, rt_context *cx, void **value, int *status)
{
    if (rt__unlikely(task == NULL || cx == NULL)) {
        /* The handle (if any) is not released: it stays the caller's. */
        if (value != NULL)
            *value = NULL;
        if (status != NULL)
            *status = -EINVAL;
        return RT_READY;
    }
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    /* Acquire pairs with the completer's release of COMPLETE (output). */
    uint64_t s = rt__load_acquire_u64(&task->state);
    if (!(s & RT__TASK_COMPLETE)) {
        if (task_set_join_waker(task, rt_context_waker(cx), s)) {
            rt__coop_refund(); /* only completed operations spend budget */
            return RT_PENDING;
        }
        s = rt__load_acquire_u64(&task->state);
    }
    task_read_result(task, s, value, status);
    task_release_handle(task);
    return RT_READY;
}

/* rt_task_join as the poll rt__thread_waker_block repeats. */
struct wait_join {
    rt_task *task;
    void **value;
    int status;
};

static rt_poll wait_join_poll(void *arg, rt_context *cx)
{
    struct wait_join *j = arg;
    return rt_task_join(j->task, cx, j->value, &j->status);
}

int rt__task_wait_with(rt_task *task, rt__thread_waker *tw, int64_t timeout_ns, void **value)
{
    if (value != NULL)
        *value = NULL;
    struct wait_join j = {task, value, 0};
    int err = rt__thread_waker_block(tw, wait_join_poll, &j, timeout_ns);
    return err < 0 ? err : j.status;
}

RT_EXPORT int rt_task_wait(rt_task *task, int64_t timeout_ns, void **value)
{
    if (task == NULL)
        return -EINVAL;
    if (rt__worker_current() != NULL || rt__thread_in_shutdown())
        return -EDEADLK;
    if (value != NULL)
        *value = NULL;
    rt__thread_waker *tw = rt__thread_waker_new();
    if (tw == NULL)
        return -ENOMEM;
    int status = rt__task_wait_with(task, tw, timeout_ns, value);
    rt__thread_waker_release(tw);
    return status;
}

RT_EXPORT void rt_task_detach(rt_task *task)
{
    if (task != NULL)
        task_release_handle(task);
}

RT_EXPORT void rt_task_abort(rt_task *task)
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
        rt__schedule(task);
        break;
    case RT__TASK_ABORT_MARKED:
        if (!(prev & RT__TASK_RUNNING) && rt__task_pinned(task) == RT__TASK_PINNED_JOB)
            rt__blocking_pool_abort(task->rt->blocking, task);
        break;
    }
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
