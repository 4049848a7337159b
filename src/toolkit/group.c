/* Task groups.
 *
 * Every child runs inside a wrapper future that polls the user's future and,
 * from its drop function (which runs exactly once, after completion, abort
 * or shutdown), reports the outcome to the group: its record moves from the
 * running list to the finished list, and the owner's waker is woken.
 *
 * Cancellation does not keep join handles: each record holds a clone of its
 * child's waker (stored at the child's first poll), which is a counted
 * reference to the child's task, and rt_group_cancel aborts the task through
 * it (rt_task_abort: the future is dropped at its next scheduling point,
 * never in the middle of a poll). A child not yet polled has no waker: the
 * record's `cancelled` flag makes its first poll abort itself.
 *
 * Memory: the group is reference counted (the owner, plus one per child not
 * yet reported); records are freed when collected, or at once when the
 * owner is gone. Everything below is guarded by the group's spinlock, except
 * `cancelled`, which the wrapper reads without it (an atomic flag: the
 * store in rt_group_cancel is a release, the wrapper's load an acquire; a
 * stale read only delays the cancellation to the wake that follows it). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <asyncrt/diag.h>
#include <asyncrt/group.h>

#include "operation.h"
#include "fault.h"
#include "atomic.h"
#include "common.h"
#include "budget.h"
#include "current.h"
#include "spawning.h"
#include "task_internal.h"
#include "waitq.h"
#include "waker.h"

struct group_child;

/* Wrapper states up to this size are assembled on the stack at spawn. */
#define RT__GROUP_STACK_STATE 256

/* What the group keeps of one child. */
struct child_record {
    struct child_record *prev, *next; /* in the running or the finished list */
    uint64_t id;                      /* the child's task id */
    void *value;                      /* its result, once finished */
    int status;                       /* 0 or -ECANCELED, once finished */
    uint32_t cancelled;               /* rt_group_cancel asked (atomic) */
    rt_waker waker;                   /* the child's waker (no-op before its first poll) */
};

struct rt_group {
    uint32_t lock;   /* spinlock over the fields below */
    rt_runtime *rt;  /* where children run */
    size_t refs;     /* the owner + children not yet reported */
    size_t running;  /* children not finished */
    size_t finished; /* children finished, not collected */
    bool closing;    /* no more spawns */
    bool owner_gone; /* rt_group_free was called */
    bool discard;    /* results go to dispose as children finish */
    size_t failed;   /* discarded children that finished with a non-zero status */
    struct child_record *running_head;
    struct child_record *done_head, *done_tail;
    rt_waker owner;                  /* the waiting owner, or the no-op waker */
    void (*dispose)(void *, void *); /* for results nobody collects */
    void *dispose_arg;
};

/* The wrapper's state, followed by the user's future state. */
struct group_child {
    rt_group *group;
    struct child_record *rec;
    rt_poll_fn poll;
    rt_drop_fn drop;
    void *out;         /* the user's result */
    int status;        /* 1 while unfinished, then 0 or -ECANCELED */
    bool waker_stored; /* rec->waker holds our waker */
    _Alignas(16) unsigned char inner[];
};

static void list_remove(struct child_record **head, struct child_record *r)
{
    if (r->prev != NULL)
        r->prev->next = r->next;
    else
        *head = r->next;
    if (r->next != NULL)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

static void group_destroy(rt_group *g)
{
    rt__waker_drop(&g->owner);
    free(g);
}

RT_EXPORT void rt_group_options_init(rt_group_options *opts)
{
    if (opts != NULL)
        memset(opts, 0, sizeof(*opts));
}

RT_EXPORT int rt_group_new_ex(rt_runtime *rt, const rt_group_options *opts, rt_group **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    if (rt == NULL)
        rt = rt_current();
    if (rt == NULL)
        return -EINVAL;
    rt_group *g = rt__calloc(1, sizeof(*g));
    if (g == NULL)
        return -ENOMEM;
    g->rt = rt;
    g->refs = 1;
    g->owner = rt__waker_noop();
    if (opts != NULL) {
        g->dispose = opts->dispose;
        g->dispose_arg = opts->dispose_arg;
        g->discard = opts->discard != 0;
    }
    *out = g;
    return 0;
}

RT_EXPORT int rt_group_new(rt_runtime *rt, void (*dispose)(void *value, void *arg), void *arg,
                           rt_group **out)
{
    rt_group_options opts;
    rt_group_options_init(&opts);
    opts.dispose = dispose;
    opts.dispose_arg = arg;
    return rt_group_new_ex(rt, &opts, out);
}

/* A child has finished (from its wrapper's drop). */
static void group_report(rt_group *g, struct child_record *rec, void *value, int status)
{
    /* A discarding group's result goes to dispose before the child counts as
     * finished, so a join or close that sees no child running knows every
     * result has been disposed of (and the owner may then free dispose_arg).
     * discard, dispose and dispose_arg never change after rt_group_new_ex,
     * and this child's reference keeps g alive. */
    bool disposed = false;
    if (g->discard) {
        if (status == 0 && g->dispose != NULL)
            g->dispose(value, g->dispose_arg);
        disposed = true;
    }
    rt__waitq_lock(&g->lock);
    rt_waker child_waker = rec->waker;
    rec->waker = rt__waker_noop();
    list_remove(&g->running_head, rec);
    g->running--;
    rec->value = value;
    rec->status = status;
    /* Without an owner, or in discard mode, nobody collects the record: the
     * result goes to dispose now. In discard mode the owner still hears of
     * it, since a join or close waits for the running count. */
    bool dispose_now = g->owner_gone || g->discard;
    rt_waker owner = rt__waker_noop();
    if (!g->owner_gone) {
        owner = g->owner;
        g->owner = rt__waker_noop();
    }
    if (!dispose_now) {
        rec->prev = g->done_tail;
        if (g->done_tail != NULL)
            g->done_tail->next = rec;
        else
            g->done_head = rec;
        g->done_tail = rec;
        g->finished++;
    } else if (status != 0) {
        g->failed++;
    }
    bool last = --g->refs == 0;
    void (*dispose)(void *, void *) = g->dispose;
    void *arg = g->dispose_arg;
    rt__waitq_unlock(&g->lock);
    rt__waker_drop(&child_waker);
    rt__waker_wake(&owner);
    if (dispose_now) {
        if (!disposed && status == 0 && dispose != NULL)
            dispose(value, arg);
        free(rec);
    }
    if (last)
        group_destroy(g);
}

static rt_poll group_child_poll(void *state, rt_context *cx, void **out)
{
    struct group_child *c = state;
    if (!c->waker_stored) {
        /* A task's waker never changes, so one clone serves every cancel. */
        c->waker_stored = true;
        rt__waitq_lock(&c->group->lock);
        c->rec->waker = rt_waker_clone(rt_context_waker(cx));
        rt__waitq_unlock(&c->group->lock);
    }
    if (rt__load_acquire_u32(&c->rec->cancelled)) {
        /* Cancelled before this poll could see a waker to abort: abort
         * ourselves, so the worker drops us right after this poll exactly
         * as for rt_task_abort (and counts the task cancelled). */
        rt_task_abort(rt__task_current());
        return RT_PENDING;
    }
    if (c->poll(c->inner, cx, &c->out) != RT_READY)
        return RT_PENDING;
    c->status = 0;
    *out = NULL;
    return RT_READY;
}

static void group_child_drop(void *state)
{
    struct group_child *c = state;
    if (c->drop != NULL)
        c->drop(c->inner);
    /* Still 1: the task was aborted or cancelled by shutdown unfinished. */
    int status = c->status == 1 ? -ECANCELED : c->status;
    group_report(c->group, c->rec, status == 0 ? c->out : NULL, status);
}

RT_EXPORT int(rt_group_spawn)(rt_group *g, const rt_spawn_options *opts, rt_poll_fn poll,
                              rt_drop_fn drop, const void *state, size_t size, uint64_t *id)
{
    return rt_group_spawn_at(NULL, g, opts, poll, drop, state, size, id);
}

RT_EXPORT int rt_group_spawn_at(const char *site, rt_group *g, const rt_spawn_options *opts,
                                rt_poll_fn poll, rt_drop_fn drop, const void *state, size_t size,
                                uint64_t *id)
{
    if (id != NULL)
        *id = 0;
    if (g == NULL || poll == NULL || (state == NULL && size > 0) ||
        size > (SIZE_MAX >> 2) - sizeof(struct group_child))
        return -EINVAL;
    struct child_record *rec = rt__calloc(1, sizeof(*rec));
    size_t total = sizeof(struct group_child) + size;
    /* The wrapper's state is assembled here and copied into the task by the
     * spawn: on the stack when small (the usual case), else on the heap. */
    _Alignas(16) unsigned char small[RT__GROUP_STACK_STATE];
    struct group_child *c = total <= sizeof small ? (struct group_child *)small : rt__malloc(total);
    if (rec == NULL || c == NULL) {
        free(rec);
        if ((unsigned char *)c != small)
            free(c);
        return -ENOMEM;
    }
    rec->waker = rt__waker_noop();
    c->group = g;
    c->rec = rec;
    c->poll = poll;
    c->drop = drop;
    c->out = NULL;
    c->status = 1;
    c->waker_stored = false;
    if (size > 0)
        memcpy(c->inner, state, size);

    /* The id is chosen here: once spawned, the child may finish and its
     * record be collected and freed before rt__spawn returns. */
    uint64_t child_id = rt__task_new_id();
    rec->id = child_id;
    /* The record is listed (and the group referenced) before the child can
     * run and report. */
    rt__waitq_lock(&g->lock);
    if (g->closing) {
        rt__waitq_unlock(&g->lock);
        free(rec);
        if ((unsigned char *)c != small)
            free(c);
        return -EPIPE;
    }
    rec->next = g->running_head;
    if (g->running_head != NULL)
        g->running_head->prev = rec;
    g->running_head = rec;
    g->running++;
    g->refs++;
    rt__waitq_unlock(&g->lock);

    int err =
        rt__spawn(g->rt, opts, group_child_poll, group_child_drop, c, total, NULL, child_id, site);
    if ((unsigned char *)c != small)
        free(c); /* the task has its own copy */
    if (err < 0) {
        rt__waitq_lock(&g->lock);
        list_remove(&g->running_head, rec);
        g->running--;
        g->refs--; /* never the last: the caller's owner reference stays */
        /* The owner may have seen this child counted and be waiting for
         * it: wake it to look again (a spurious wake is harmless). */
        rt_waker owner = g->owner;
        g->owner = rt__waker_noop();
        rt__waitq_unlock(&g->lock);
        rt__waker_wake(&owner);
        free(rec);
        return err;
    }
    if (id != NULL)
        *id = child_id;
    return 0;
}

RT_EXPORT size_t rt_group_len(rt_group *g)
{
    if (g == NULL)
        return 0;
    rt__waitq_lock(&g->lock);
    size_t n = g->running + g->finished;
    rt__waitq_unlock(&g->lock);
    return n;
}

/* Flags every running child cancelled and wakes it. Under the lock: the
 * wakes are of runtime tasks (the children), which touch only the task's
 * word and a run queue, never a group lock. */
static void cancel_locked(rt_group *g)
{
    for (struct child_record *r = g->running_head; r != NULL; r = r->next) {
        if (rt__load_relaxed_u32(&r->cancelled))
            continue;
        rt__store_release_u32(&r->cancelled, 1);
        /* The stored waker is a reference to the child's task, which is
         * all rt_task_abort needs. Not polled yet: its first poll sees the
         * flag and aborts itself. */
        if (r->waker.vtable == &rt__task_waker_vtable)
            rt_task_abort((rt_task *)r->waker.data);
    }
}

RT_EXPORT void rt_group_cancel(rt_group *g)
{
    if (g == NULL)
        return;
    rt__waitq_lock(&g->lock);
    cancel_locked(g);
    rt__waitq_unlock(&g->lock);
}

/* Pops the oldest finished record, or NULL. Under the lock. */
static struct child_record *pop_done_locked(rt_group *g)
{
    struct child_record *r = g->done_head;
    if (r == NULL)
        return NULL;
    g->done_head = r->next;
    if (g->done_head != NULL)
        g->done_head->prev = NULL;
    else
        g->done_tail = NULL;
    g->finished--;
    r->next = NULL;
    return r;
}

static rt_poll group_next_vpoll(rt_future *f, rt_context *cx)
{
    rt_group_next *op = (rt_group_next *)f;
    rt_group *g = op->group;
    if (g->discard)
        return rt__future_finish(f, -EINVAL); /* a discarding group keeps no result */
    if (!rt__coop_proceed(cx))
        return RT_PENDING;
    rt_waker old = rt__waker_noop();
    rt__waitq_lock(&g->lock);
    struct child_record *r = pop_done_locked(g);
    /* Empty and closing: no child can come any more. Empty but open: a
     * child spawned later may still finish, so the wait goes on. */
    bool empty = r == NULL && g->running == 0 && g->closing;
    if (r == NULL && !empty)
        old = rt__waker_store(&g->owner, rt_context_waker(cx));
    rt__waitq_unlock(&g->lock);
    rt__waker_drop(&old);
    if (r != NULL) {
        op->child.id = r->id;
        op->child.value = r->value;
        op->child.status = r->status;
        free(r);
        op->group = NULL;
        return rt__future_finish(f, 0);
    }
    if (empty) {
        op->group = NULL;
        return rt__future_finish(f, -ECHILD);
    }
    rt__coop_refund(); /* only completed operations spend budget */
    return RT_PENDING;
}

/* Only the address: the group's counts and lists are its lock's. */
static void group_next_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_group_next *op = (const rt_group_next *)f;
    info->kind = RT_WAIT_GROUP;
    info->object = op->group;
    rt__wait_printf(info, "next result of group %p", (const void *)op->group);
}

/* Dropping a wait releases nothing: the owner's waker it may have stored
 * stays in the group until the next wait replaces it or the group ends. */
static const rt_future_vtable group_next_vtable = {group_next_vpoll, NULL, group_next_vdescribe};

RT_EXPORT int rt_group_next_init(rt_group_next *op, rt_group *g)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &group_next_vtable;
    op->group = g;
    if (g == NULL) {
        rt__future_finish(&op->future, -EINVAL);
        return -EINVAL;
    }
    return 0;
}

static rt_poll group_wait_vpoll(rt_future *f, rt_context *cx)
{
    rt_group_wait *op = (rt_group_wait *)f;
    rt_group *g = op->group;
    for (;;) {
        rt_waker old = rt__waker_noop();
        rt__waitq_lock(&g->lock);
        if (op->closing) {
            g->closing = true;
            cancel_locked(g);
        }
        struct child_record *r = pop_done_locked(g);
        bool all_done = r == NULL && g->running == 0;
        if (all_done && g->discard)
            op->failed = g->failed; /* counted as they finished */
        if (r == NULL && !all_done)
            old = rt__waker_store(&g->owner, rt_context_waker(cx));
        void (*dispose)(void *, void *) = g->dispose;
        void *arg = g->dispose_arg;
        rt__waitq_unlock(&g->lock);
        rt__waker_drop(&old);
        if (r != NULL) {
            /* Collected here: the result goes to dispose, outside the lock. */
            if (r->status != 0)
                op->failed++;
            else if (dispose != NULL)
                dispose(r->value, arg);
            free(r);
            continue;
        }
        if (!all_done)
            return RT_PENDING;
        op->group = NULL;
        return rt__future_finish(f, 0);
    }
}

/* `closing` and `failed` are the operation's own; the group's counts are
 * its lock's. */
static void group_wait_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_group_wait *op = (const rt_group_wait *)f;
    info->kind = RT_WAIT_GROUP;
    info->object = op->group;
    rt__wait_printf(info, "%s of group %p", op->closing ? "close" : "join of every child",
                    (const void *)op->group);
    if (op->failed > 0)
        rt__wait_printf(info, " (%zu failed so far)", op->failed);
}

static const rt_future_vtable group_wait_vtable = {group_wait_vpoll, NULL, group_wait_vdescribe};

static int wait_init(rt_group_wait *op, rt_group *g, int closing)
{
    if (op == NULL)
        return -EINVAL;
    memset(op, 0, sizeof(*op));
    op->future.vtable = &group_wait_vtable;
    op->group = g;
    op->closing = closing;
    if (g == NULL) {
        rt__future_finish(&op->future, -EINVAL);
        return -EINVAL;
    }
    return 0;
}

RT_EXPORT int rt_group_join_all_init(rt_group_wait *op, rt_group *g)
{
    return wait_init(op, g, 0);
}

RT_EXPORT int rt_group_close_init(rt_group_wait *op, rt_group *g)
{
    return wait_init(op, g, 1);
}

RT_EXPORT void rt_group_free(rt_group *g)
{
    if (g == NULL)
        return;
    rt__waitq_lock(&g->lock);
    g->closing = true;
    g->owner_gone = true;
    cancel_locked(g);
    /* Finished results nobody will collect: take the list, dispose of it
     * outside the lock. Children still running dispose of theirs when they
     * report. */
    struct child_record *done = g->done_head;
    g->done_head = g->done_tail = NULL;
    g->finished = 0;
    rt_waker owner = g->owner;
    g->owner = rt__waker_noop();
    bool last = --g->refs == 0;
    void (*dispose)(void *, void *) = g->dispose;
    void *arg = g->dispose_arg;
    rt__waitq_unlock(&g->lock);
    rt__waker_drop(&owner);
    while (done != NULL) {
        struct child_record *next = done->next;
        if (done->status == 0 && dispose != NULL)
            dispose(done->value, arg);
        free(done);
        done = next;
    }
    if (last)
        group_destroy(g);
}
