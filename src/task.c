/* Tasks: spawning, the state machine, the task waker, join handles and abort.
 * The state word and its ownership rules are described in runtime.h. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "runtime.h"

static inline uint64_t refcount(uint64_t state)
{
    return state >> RT__TASK_REF_SHIFT;
}

static inline void *task_future_state(rt_task *t)
{
    return t->future_state;
}

static void task_free(rt_task *t)
{
    /* Never touches t->rt: the runtime may already be freed. */
    free(t);
}

void rt__task_unref(rt_task *t, uint64_t n)
{
    /* The fetch-add is a full barrier: every access a reference holder made
     * happens before the free by whoever drops the last reference. */
    uint64_t prev = rt__faa_u64(&t->state, (uint64_t)0 - n * RT__TASK_REF_ONE);
    if (refcount(prev) == n)
        task_free(t);
}

/* ---- The task waker ----------------------------------------------------- */

static rt_waker task_waker_clone(const void *data)
{
    rt_task *t = (rt_task *)data;
    rt__faa_u64(&t->state, RT__TASK_REF_ONE);
    rt_waker w = {&rt__task_waker_vtable, t};
    return w;
}

static void task_waker_drop(const void *data)
{
    rt__task_unref((rt_task *)data, 1);
}

/* Wake by value: the waker's reference becomes the run queue's when the task
 * was idle, and is dropped otherwise. */
static void task_waker_wake(const void *data)
{
    rt_task *t = (rt_task *)data;
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        uint64_t next;
        if (s & (RT__TASK_COMPLETE | RT__TASK_NOTIFIED)) {
            /* Finished or already queued: only the reference goes. */
            rt__task_unref(t, 1);
            return;
        }
        if (s & RT__TASK_RUNNING) {
            /* The worker polling it requeues it afterwards with the queue
             * reference it holds, so this reference can go in the same CAS
             * (it cannot be the last: the worker holds one). */
            next = (s | RT__TASK_NOTIFIED) - RT__TASK_REF_ONE;
            if (rt__cas_u64(&t->state, &s, next))
                return;
            continue;
        }
        next = s | RT__TASK_NOTIFIED;
        if (rt__cas_u64(&t->state, &s, next)) {
            RT__DEBUG_YIELD();
            rt__schedule(t);
            return;
        }
    }
}

static void task_waker_wake_by_ref(const void *data)
{
    rt_task *t = (rt_task *)data;
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        if (s & (RT__TASK_COMPLETE | RT__TASK_NOTIFIED))
            return;
        uint64_t next = s | RT__TASK_NOTIFIED;
        bool idle = !(s & RT__TASK_RUNNING);
        if (idle)
            next += RT__TASK_REF_ONE; /* the run queue's reference */
        if (rt__cas_u64(&t->state, &s, next)) {
            if (idle) {
                RT__DEBUG_YIELD();
                rt__schedule(t);
            }
            return;
        }
    }
}

const rt_waker_vtable rt__task_waker_vtable = {
    task_waker_clone,
    task_waker_wake,
    task_waker_wake_by_ref,
    task_waker_drop,
};

/* ---- Spawning ----------------------------------------------------------- */

RT_EXPORT int rt_spawn(rt_runtime *rt, rt_poll_fn poll, rt_drop_fn drop, const void *state,
                       size_t size, rt_task **handle)
{
    if (handle != NULL)
        *handle = NULL;
    if (rt == NULL)
        rt = rt_current();
    if (rt == NULL || poll == NULL || (state == NULL && size > 0) ||
        size > (SIZE_MAX >> 2) - sizeof(rt_task))
        return -EINVAL;
    if (rt__load_acquire_u32(&rt->closing))
        return -ESHUTDOWN;

    rt_task *t = malloc(sizeof(rt_task) + size);
    if (t == NULL)
        return -ENOMEM;
    /* References: the run queue's, the registry's, and the handle's. */
    uint64_t refs = handle != NULL ? 3 : 2;
    t->state = RT__TASK_NOTIFIED | (handle != NULL ? RT__TASK_JOIN_INTEREST : 0) |
               refs * RT__TASK_REF_ONE;
    t->u.poll = poll;
    t->drop = drop;
    t->rt = rt;
    t->join_waker = rt_waker_noop();
    if (size > 0)
        memcpy(t->future_state, state, size);

    rt__worker *w = rt__worker_current();
    if (w != NULL && w->rt != rt)
        w = NULL;
    int err = rt__registry_insert(rt, w, t);
    if (err < 0) {
        task_free(t);
        return err;
    }
    if (handle != NULL)
        *handle = t;
    /* Publishing the task on a run queue is the last step: from here on a
     * worker may run, complete and release it. */
    rt__schedule(t);
    return 0;
}

/* ---- Completion ---------------------------------------------------------- */

/* Marks the task COMPLETE (cancelled or not), wakes its joiner, and removes it
 * from the registry. The caller owns RUNNING. Returns nothing: the caller
 * drops its references afterwards. */
static void task_complete(rt_task *t, bool cancelled)
{
    rt_runtime *rt = t->rt;
    /* Leave the registry first: after COMPLETE is published a joiner may free
     * the runtime, and this is the last use of it. */
    rt__registry_remove(rt, t, cancelled);

    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        uint64_t next = (s & ~RT__TASK_RUNNING) | RT__TASK_COMPLETE;
        if (cancelled)
            next |= RT__TASK_CANCELLED;
        else
            next &= ~RT__TASK_CANCELLED; /* finished first: the result stands */
        /* Release: output and the drop's effects are visible to the joiner. */
        if (rt__cas_u64(&t->state, &s, next))
            break;
    }
    if ((s & RT__TASK_JOIN_INTEREST) && (s & RT__TASK_JOIN_WAKER)) {
        /* JOIN_WAKER was set when we completed: the field is ours to use. */
        rt_waker_wake_by_ref(&t->join_waker);
        uint64_t cur = rt__load_acquire_u64(&t->state);
        while (!rt__cas_u64(&t->state, &cur, cur & ~RT__TASK_JOIN_WAKER))
            ;
        if (!(cur & RT__TASK_JOIN_INTEREST)) {
            /* The handle went away while we were waking: we drop the waker. */
            rt_waker_drop(&t->join_waker);
        }
    }
}

static void task_drop_future(rt_task *t)
{
    if (t->drop != NULL)
        t->drop(task_future_state(t));
}

/* The worker owns RUNNING and saw CANCELLED: drop instead of polling. */
static void task_cancel_running(rt_task *t)
{
    task_drop_future(t);
    t->u.output = NULL;
    task_complete(t, true);
    /* The run queue's reference and the registry's. */
    rt__task_unref(t, 2);
}

void rt__task_run(rt__worker *w, rt_task *t)
{
    /* NOTIFIED is set and RUNNING clear for a queued task, so one fetch-add
     * swaps them (RUNNING - NOTIFIED, as two's complement). */
    uint64_t prev =
        rt__faa_u64(&t->state, RT__TASK_RUNNING - RT__TASK_NOTIFIED);
    /* Shutdown completes tasks only after every worker has exited. */
    assert((prev & (RT__TASK_NOTIFIED | RT__TASK_RUNNING | RT__TASK_COMPLETE)) ==
           RT__TASK_NOTIFIED);
    if (rt__unlikely(prev & RT__TASK_CANCELLED)) {
        task_cancel_running(t);
        return;
    }

    rt_context cx = {{&rt__task_waker_vtable, t}};
    void *out = NULL;
    w->current = t;
    rt_poll r = t->u.poll(task_future_state(t), &cx, &out);
    w->current = NULL;

    if (r == RT_READY) {
        t->u.output = out;
        task_drop_future(t);
        task_complete(t, false);
        rt__task_unref(t, 2);
        return;
    }

    /* Pending: back to idle, unless woken or aborted during the poll. */
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        if (s & RT__TASK_CANCELLED) {
            task_cancel_running(t);
            return;
        }
        uint64_t next = s & ~RT__TASK_RUNNING;
        bool requeue = (s & RT__TASK_NOTIFIED) != 0;
        /* Idle: the run queue's reference goes in the same CAS. It is never
         * the last one, since the registry holds a reference until COMPLETE. */
        if (!requeue)
            next -= RT__TASK_REF_ONE;
        if (rt__cas_u64(&t->state, &s, next)) {
            if (requeue)
                rt__defer(w, t);
            return;
        }
    }
}

bool rt__task_cancel_at_shutdown(rt_task *t)
{
    /* No worker is alive, so nobody else can hold RUNNING: claim it. */
    uint64_t s = rt__load_acquire_u64(&t->state);
    while (!rt__cas_u64(&t->state, &s, s | RT__TASK_RUNNING | RT__TASK_CANCELLED))
        ;
    task_drop_future(t);
    t->u.output = NULL;
    task_complete(t, true);
    /* The registry's reference only; a queue entry, if any, is drained later. */
    rt__task_unref(t, 1);
    return true;
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
        for (;;) {
            if (s & RT__TASK_COMPLETE)
                return false;
            if (rt__cas_u64(&t->state, &s, s & ~RT__TASK_JOIN_WAKER))
                break;
        }
    }
    /* JOIN_WAKER is clear: the field is ours. */
    rt_waker_drop(&t->join_waker);
    t->join_waker = rt_waker_clone(waker);
    s = rt__load_acquire_u64(&t->state);
    for (;;) {
        if (s & RT__TASK_COMPLETE)
            return false; /* the field stays ours; released with the handle */
        /* Release: the waker's bytes are visible to the completer. */
        if (rt__cas_u64(&t->state, &s, s | RT__TASK_JOIN_WAKER))
            return true;
    }
}

static void task_release_handle(rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    for (;;) {
        uint64_t next = s & ~RT__TASK_JOIN_INTEREST;
        if (!(s & RT__TASK_COMPLETE))
            next &= ~RT__TASK_JOIN_WAKER;
        if (rt__cas_u64(&t->state, &s, next))
            break;
    }
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
    /* Acquire pairs with the completer's release of COMPLETE (output). */
    uint64_t s = rt__load_acquire_u64(&task->state);
    if (!(s & RT__TASK_COMPLETE)) {
        if (task_set_join_waker(task, rt_context_waker(cx), s))
            return RT_PENDING;
        s = rt__load_acquire_u64(&task->state);
    }
    task_read_result(task, s, value, status);
    task_release_handle(task);
    return RT_READY;
}

RT_EXPORT int rt_task_wait(rt_task *task, int64_t timeout_ns, void **value)
{
    if (task == NULL)
        return -EINVAL;
    if (rt__worker_current() != NULL)
        return -EDEADLK;
    if (value != NULL)
        *value = NULL;
    rt__thread_waker *tw = rt__thread_waker_new();
    if (tw == NULL)
        return -ENOMEM;
    rt_context cx = rt_context_from_waker(rt__thread_waker_get(tw));
    int64_t deadline = timeout_ns >= 0 ? rt__now_ns() + timeout_ns : -1;
    int status = -ETIMEDOUT;
    for (;;) {
        if (rt_task_join(task, &cx, value, &status) == RT_READY)
            break;
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
    /* The task may still hold a clone of the waker; the clone keeps the heap
     * object alive after we return. */
    rt_waker_drop(&cx.waker);
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
    uint64_t s = rt__load_acquire_u64(&task->state);
    for (;;) {
        if (s & (RT__TASK_COMPLETE | RT__TASK_CANCELLED))
            return;
        uint64_t next = s | RT__TASK_CANCELLED;
        /* Running or queued: the worker sees CANCELLED after the poll or at
         * the pop. Idle: schedule it so that a worker drops it. */
        bool idle = !(s & (RT__TASK_RUNNING | RT__TASK_NOTIFIED));
        if (idle)
            next |= RT__TASK_NOTIFIED, next += RT__TASK_REF_ONE;
        if (rt__cas_u64(&task->state, &s, next)) {
            if (idle)
                rt__schedule(task);
            return;
        }
    }
}

RT_EXPORT bool rt_task_is_finished(const rt_task *task)
{
    return (rt__load_acquire_u64(&task->state) & RT__TASK_COMPLETE) != 0;
}

RT_EXPORT rt_poll rt_yield(rt_context *cx)
{
    rt_waker_wake_by_ref(rt_context_waker(cx));
    return RT_PENDING;
}
