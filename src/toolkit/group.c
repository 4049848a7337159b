/* Task groups.
 *
 * A child is an ordinary task of the runtime, spawned with a join handle
 * and a finish hook (task_internal.h, rt__task_finish_fn): the hook runs
 * once, when the child has ended (completed, aborted or cancelled by
 * shutdown) and its drop has run, and reports the outcome to the group:
 * its record moves from the running list to the finished list, and the
 * owner's waker is woken. So a child dumps, is found lost, is pinned and
 * named exactly as any task: nothing wraps its future.
 *
 * Cancellation: each record holds its child's join handle, through which
 * rt_group_cancel aborts the child (rt_task_cancel: the future is dropped at
 * its next scheduling point, never in the middle of a poll). The handle is
 * released by the hook, after the record left the running list, so a
 * record in that list always holds a valid handle, or none yet: the
 * spawner installs it once rt__spawn returned (the child may already have
 * run and reported by then), and a cancel that came in between is carried
 * out by the spawner (`cancel_pending`).
 *
 * Memory: the group is reference counted (the owner, plus one per child not
 * yet reported, plus one per spawn in progress). A record has two references
 * (`refs`): the spawner's, given up once it has installed the handle, and the
 * lists', given up when the record is collected or its result disposed of;
 * the last one frees it. Everything here is guarded by the group's spinlock. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <asyncrt/diag.h>
#include <asyncrt/group.h>

#include "operation.h"
#include "fault.h"
#include "group_spawn.h"
#include "atomic.h"
#include "common.h"
#include "budget.h"
#include "current.h"
#include "spawning.h"
#include "task_internal.h"
#include "misuse.h"
#include "waitq.h"
#include "waker.h"

/* What the group keeps of one child. */
struct child_record {
    struct child_record *prev, *next; /* in the running or the finished list */
    rt_group *group;
    uint64_t id;         /* the child's task id */
    rt_task *handle;     /* its join handle while running; NULL before the
                            spawner installs it and once reported */
    void *value;         /* its result, once finished */
    int status;          /* 0, its error, or -ECANCELED, once finished */
    bool cancelled;      /* it was cancelled (no result), once finished */
    unsigned refs;       /* the spawner's and the lists' (see the top) */
    bool reported;       /* the child has finished */
    bool cancel_pending; /* cancelled before the handle was installed */
};

struct rt_group {
    uint32_t lock;    /* spinlock over the fields below */
    rt_runtime *rt;   /* where children run */
    size_t refs;      /* the owner + children not yet reported */
    size_t running;   /* children not finished */
    size_t finished;  /* children finished, not collected */
    bool closing;     /* no more spawns */
    bool owner_gone;  /* rt_group_free was called */
    bool discard;     /* results go to dispose as children finish */
    size_t failed;    /* discarded children that finished with an error */
    size_t cancelled; /* discarded children that were cancelled */
    struct child_record *running_head;
    struct child_record *done_head, *done_tail;
    rt_waker owner;                  /* the waiting owner, or the no-op waker */
    void (*dispose)(void *, void *); /* for results nobody collects */
    void *dispose_arg;
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

/* Gives up one reference of r; true when it was the last (the caller frees
 * r once it has unlocked). Under the lock. */
static bool record_unref_locked(struct child_record *r)
{
    return --r->refs == 0;
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
        rt = rt_current_runtime();
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

/* Counts a discarded child's outcome. Under the lock. */
static void count_outcome_locked(rt_group *g, int status, bool cancelled)
{
    if (cancelled)
        g->cancelled++;
    else if (status != 0)
        g->failed++;
}

/* The finish hook of every child (rt__task_finish_fn): the child `t` has
 * ended with `value` and `status`, its drop has run. */
static void group_child_finished(void *arg, rt_task *t, void *value, int status, bool cancelled)
{
    struct child_record *rec = arg;
    rt_group *g = rec->group;
    /* A discarding group's result goes to dispose before the child counts as
     * finished, so a join or close that sees no child running knows every
     * result has been disposed of (and the owner may then free dispose_arg).
     * discard, dispose and dispose_arg never change after rt_group_new_ex,
     * and this child's reference keeps g alive. */
    bool returned = !cancelled; /* a cancelled child has no result */
    bool discard = g->discard;
    if (discard && returned && g->dispose != NULL)
        g->dispose(value, g->dispose_arg);
    rt__waitq_lock(&g->lock);
    list_remove(&g->running_head, rec);
    g->running--;
    rec->reported = true;
    rec->handle = NULL;
    rec->value = value;
    rec->status = status;
    rec->cancelled = cancelled;
    /* Without an owner, or in discard mode, nobody collects the record: the
     * result goes to dispose now. In discard mode the owner still hears of
     * it, since a join or close waits for the running count. */
    bool dispose_now = g->owner_gone || discard;
    rt_waker owner = rt__waker_noop();
    if (!g->owner_gone) {
        owner = g->owner;
        g->owner = rt__waker_noop();
    }
    bool free_rec = false;
    if (!dispose_now) {
        rec->prev = g->done_tail;
        if (g->done_tail != NULL)
            g->done_tail->next = rec;
        else
            g->done_head = rec;
        g->done_tail = rec;
        g->finished++;
    } else {
        count_outcome_locked(g, status, cancelled);
        free_rec = record_unref_locked(rec);
    }
    bool last = --g->refs == 0;
    void (*dispose)(void *, void *) = g->dispose;
    void *dispose_arg = g->dispose_arg;
    rt__waitq_unlock(&g->lock);
    /* g may be gone from here on (unless `last`: then it is ours to free).
     * The handle goes now that no cancel can reach it: the record left the
     * running list under the lock. Never the task's last reference (the
     * completing thread holds its own). */
    rt_task_drop(t);
    rt__waker_wake(&owner);
    if (dispose_now && !discard && returned && dispose != NULL)
        dispose(value, dispose_arg);
    if (free_rec)
        free(rec);
    if (last)
        group_destroy(g);
}

RT_EXPORT int rt_group_spawn_with_site(const char *site, rt_group *g, const rt_spawn_options *opts,
                                       rt_poll_fn poll, rt_drop_fn drop, const void *state,
                                       size_t size, uint64_t *id)
{
    if (id != NULL)
        *id = 0;
    if (g == NULL || poll == NULL || (state == NULL && size > 0))
        return -EINVAL;
    /* The id is chosen here: once spawned, the child may finish and its
     * record be collected before rt__spawn returns. */
    uint64_t child_id = rt__task_new_id();
    int err = rt__group_spawn_as(site, g, opts, poll, drop, state, size, child_id);
    if (err == 0 && id != NULL)
        *id = child_id;
    return err;
}

rt_runtime *rt__group_runtime(const rt_group *g)
{
    return g->rt;
}

int rt__group_spawn_as(const char *site, rt_group *g, const rt_spawn_options *opts, rt_poll_fn poll,
                       rt_drop_fn drop, const void *state, size_t size, uint64_t child_id)
{
    if (g == NULL || poll == NULL || (state == NULL && size > 0))
        return -EINVAL;
    struct child_record *rec = rt__calloc(1, sizeof(*rec));
    if (rec == NULL)
        return -ENOMEM;
    rec->group = g;
    rec->refs = 2;
    rec->id = child_id;
    /* The record is listed, and the group referenced twice (for the child,
     * until it reports, and for this spawn, until it has installed the
     * handle: the caller need not hold a reference of its own), before the
     * child can run and report. */
    rt__waitq_lock(&g->lock);
    if (g->closing) {
        rt__waitq_unlock(&g->lock);
        free(rec);
        return -EPIPE;
    }
    rec->next = g->running_head;
    if (g->running_head != NULL)
        g->running_head->prev = rec;
    g->running_head = rec;
    g->running++;
    g->refs += 2;
    rt__waitq_unlock(&g->lock);

    rt_task *handle;
    int err = rt__spawn(g->rt, opts, poll, drop, state, size, &handle, child_id, site,
                        group_child_finished, rec);
    if (err < 0) {
        rt__waitq_lock(&g->lock);
        list_remove(&g->running_head, rec);
        g->running--;
        g->refs -= 2; /* the child's and this spawn's */
        bool last = g->refs == 0;
        /* The owner may have seen this child counted and be waiting for
         * it: wake it to look again (a spurious wake is harmless). */
        rt_waker owner = g->owner;
        g->owner = rt__waker_noop();
        rt__waitq_unlock(&g->lock);
        rt__waker_wake(&owner);
        free(rec);
        if (last)
            group_destroy(g);
        return err;
    }
    /* A test may cancel the group right here, before the handle is in. */
    RT__DEBUG_WINDOW("group.spawn");
    /* Install the handle for cancels, unless the child has reported (and
     * released it) already; carry out a cancel that could not reach it. */
    rt__waitq_lock(&g->lock);
    if (!rec->reported) {
        rec->handle = handle;
        if (rec->cancel_pending)
            rt_task_cancel(handle);
    }
    bool free_rec = record_unref_locked(rec);
    bool last = --g->refs == 0; /* this spawn's */
    rt__waitq_unlock(&g->lock);
    if (free_rec)
        free(rec);
    if (last)
        group_destroy(g);
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

/* Aborts every running child. Under the lock: an abort touches only the
 * task's word and a run queue, never a group lock, and a record in the
 * running list holds a valid handle (or none yet: see the top). */
static void cancel_locked(rt_group *g)
{
    for (struct child_record *r = g->running_head; r != NULL; r = r->next) {
        if (r->handle != NULL)
            rt_task_cancel(r->handle);
        else
            r->cancel_pending = true;
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

/* Takes the oldest finished record off the list: true with its outcome in
 * *res, and *free_rec true when the list's reference was the record's last
 * (the caller frees it once it has unlocked); false when there is none.
 * Under the lock. */
static bool pop_done_locked(rt_group *g, rt_group_result *res, bool *cancelled,
                            struct child_record **free_rec)
{
    struct child_record *r = g->done_head;
    *free_rec = NULL;
    if (r == NULL)
        return false;
    g->done_head = r->next;
    if (g->done_head != NULL)
        g->done_head->prev = NULL;
    else
        g->done_tail = NULL;
    g->finished--;
    r->next = NULL;
    res->id = r->id;
    res->value = r->value;
    res->status = r->status;
    *cancelled = r->cancelled;
    if (record_unref_locked(r))
        *free_rec = r;
    return true;
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
    struct child_record *free_rec;
    bool cancelled;
    bool got = pop_done_locked(g, &op->child, &cancelled, &free_rec);
    /* Empty and closing: no child can come any more. Empty but open: a
     * child spawned later may still finish, so the wait goes on. */
    bool empty = !got && g->running == 0 && g->closing;
    if (!got && !empty)
        old = rt__waker_store(&g->owner, rt_context_waker(cx));
    rt__waitq_unlock(&g->lock);
    rt__waker_drop(&old);
    free(free_rec);
    if (got) {
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
    if (g->discard) { /* never changes after rt_group_new_ex */
        rt__future_finish(&op->future, -EINVAL);
        return -EINVAL;
    }
    return 0;
}

static rt_poll group_wait_vpoll(rt_future *f, rt_context *cx)
{
    rt_group_join *op = (rt_group_join *)f;
    rt_group *g = op->group;
    if (op->closing) {
        /* Once per poll: each walk of the running list holds the lock that
         * every finishing child takes. */
        rt__waitq_lock(&g->lock);
        g->closing = true;
        cancel_locked(g);
        rt__waitq_unlock(&g->lock);
    }
    for (;;) {
        rt_waker old = rt__waker_noop();
        rt__waitq_lock(&g->lock);
        rt_group_result res;
        bool cancelled;
        struct child_record *free_rec;
        bool got = pop_done_locked(g, &res, &cancelled, &free_rec);
        bool all_done = !got && g->running == 0;
        if (all_done && g->discard) {
            op->failed = g->failed; /* counted as they finished */
            op->cancelled = g->cancelled;
        }
        if (!got && !all_done)
            old = rt__waker_store(&g->owner, rt_context_waker(cx));
        void (*dispose)(void *, void *) = g->dispose;
        void *arg = g->dispose_arg;
        rt__waitq_unlock(&g->lock);
        rt__waker_drop(&old);
        free(free_rec);
        if (got) {
            /* Collected here: the result goes to dispose, outside the lock. */
            if (cancelled)
                op->cancelled++;
            else if (res.status != 0)
                op->failed++;
            if (!cancelled && dispose != NULL)
                dispose(res.value, arg);
            continue;
        }
        if (!all_done)
            return RT_PENDING;
        op->group = NULL;
        return rt__future_finish(f, 0);
    }
}

/* `closing`, `failed` and `cancelled` are the operation's own; the group's
 * counts are its lock's. */
static void group_wait_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_group_join *op = (const rt_group_join *)f;
    info->kind = RT_WAIT_GROUP;
    info->object = op->group;
    rt__wait_printf(info, "%s of group %p", op->closing ? "close" : "join of every child",
                    (const void *)op->group);
    if (op->failed > 0 || op->cancelled > 0)
        rt__wait_printf(info, " (%zu failed, %zu cancelled so far)", op->failed, op->cancelled);
}

static const rt_future_vtable group_wait_vtable = {group_wait_vpoll, NULL, group_wait_vdescribe};

static int wait_init(rt_group_join *op, rt_group *g, int closing)
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

RT_EXPORT int rt_group_join_all_init(rt_group_join *op, rt_group *g)
{
    return wait_init(op, g, 0);
}

RT_EXPORT int rt_group_close_init(rt_group_join *op, rt_group *g)
{
    return wait_init(op, g, 1);
}

RT_EXPORT void rt_group_free(rt_group *g)
{
    if (g == NULL)
        return;
    rt__waitq_lock(&g->lock);
    if (g->owner_gone) {
        /* Freed already, and still allocated for children that have not
         * finished: nothing changes. */
        rt__waitq_unlock(&g->lock);
        rt__report_misuse("rt_group_free", g, "the group was freed already");
        return;
    }
    g->closing = true;
    g->owner_gone = true;
    cancel_locked(g);
    rt_waker owner = g->owner;
    g->owner = rt__waker_noop();
    void (*dispose)(void *, void *) = g->dispose;
    void *arg = g->dispose_arg;
    rt__waitq_unlock(&g->lock);
    rt__waker_drop(&owner);
    /* Finished results nobody will collect go to dispose, one at a time
     * outside the lock. Children still running dispose of theirs when they
     * report (owner_gone). */
    for (;;) {
        rt_group_result res;
        struct child_record *free_rec;
        rt__waitq_lock(&g->lock);
        bool cancelled;
        bool got = pop_done_locked(g, &res, &cancelled, &free_rec);
        rt__waitq_unlock(&g->lock);
        if (!got)
            break;
        free(free_rec);
        if (!cancelled && dispose != NULL)
            dispose(res.value, arg);
    }
    rt__waitq_lock(&g->lock);
    bool last = --g->refs == 0;
    rt__waitq_unlock(&g->lock);
    if (last)
        group_destroy(g);
}
