/* asyncrt: task groups (structured concurrency).
 *
 * A group owns the tasks spawned into it ("children"). Its owner collects
 * them as they finish, in the order they finish (rt_group_next), waits for
 * all of them, cancels them all, and ends the group in one of two ways:
 * - rt_group_close (an operation to await): cancels every child still
 *   running and waits until each has finished, so when it is ready nothing
 *   spawned into the group runs any more;
 * - rt_group_free (not awaitable, so usable from a drop function, for
 *   example when the task owning the group is itself aborted): cancels every
 *   child and releases the group without waiting. Children are dropped at
 *   their next scheduling point, and the group's memory goes with the last.
 * A child that owns a group of its own ends it from its drop function, so
 * cancelling a group cancels the whole tree below it.
 *
 * Results: a child's result is its future's `void *` output, which the group
 * never frees; results not collected by rt_group_next when the group ends are
 * passed to the dispose function given to rt_group_new (if any). A group
 * made to discard (rt_group_options.discard) collects nothing: each result
 * goes to dispose as its child finishes, so only running children take
 * memory.
 *
 * Threads: rt_group_spawn, rt_group_cancel and rt_group_len from any thread;
 * the awaiting operations from one task (or thread polling by hand) at a
 * time: the group has a single owner's waker. */
#ifndef ASYNCRT_GROUP_H
#define ASYNCRT_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "future.h"
#include "runtime.h"
#include "task.h"
#include "timer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_group rt_group;

/* How a group treats its children's results. */
typedef struct rt_group_options {
    /* Receives, as dispose(value, dispose_arg), every result of a child that
     * finished with status 0 and that nobody collects; NULL: none. Called on
     * the thread where that becomes known (a worker, or the caller of
     * rt_group_free, join or close); it must not block. */
    void (*dispose)(void *value, void *arg);
    void *dispose_arg;
    /* Nonzero: keep no results. Each child's result goes to dispose as the
     * child finishes, so the group holds memory for its running children
     * only (a server's connections, say, which nobody collects one by one).
     * rt_group_next is refused (-EINVAL); joins and closes still wait for
     * every child, and their *failed counts every child that finished with
     * a non-zero status since the group was made. */
    int discard;
} rt_group_options;

/* Sets the defaults: no dispose function, results kept. NULL is a no-op. */
void rt_group_options_init(rt_group_options *opts);

/* Creates a group on `rt` (NULL: rt_current()) with `opts` (NULL: the
 * defaults). Errors: -EINVAL (out NULL, no runtime), -ENOMEM. Any thread. */
int rt_group_new_ex(rt_runtime *rt, const rt_group_options *opts, rt_group **out);

/* rt_group_new_ex with only a dispose function: results are kept until
 * collected, and those nobody collects go to dispose(value, arg). */
int rt_group_new(rt_runtime *rt, void (*dispose)(void *value, void *arg), void *arg,
                 rt_group **out);

/* Spawns a child into the group: as rt_spawn_ex (opts may be NULL), except
 * that there is no join handle: the result comes out of rt_group_next.
 * *id (may be NULL) receives the child's task id.
 * Errors: as rt_spawn_ex (-EINVAL for g or poll NULL, or state NULL with
 * size > 0), and -EPIPE when the group is closing or freed. On error nothing
 * was spawned and drop was not called. Any thread. */
int rt_group_spawn(rt_group *g, const rt_spawn_options *opts, rt_poll_fn poll, rt_drop_fn drop,
                   const void *state, size_t size, uint64_t *id);

/* Children not collected yet: running ones plus finished ones waiting for
 * rt_group_next (0 for NULL). */
size_t rt_group_len(rt_group *g);

/* Aborts every child still running (rt_task_abort). They finish as
 * cancelled and are still collected by rt_group_next (status -ECANCELED).
 * The group stays usable: children spawned later run normally. NULL is a
 * no-op. */
void rt_group_cancel(rt_group *g);

/* What rt_group_next collects. */
typedef struct rt_group_result {
    uint64_t id; /* the child's task id */
    void *value; /* its result (NULL when cancelled) */
    int status;  /* 0, or -ECANCELED (aborted, or cancelled by shutdown) */
} rt_group_result;

/* One wait for the next finished child, with an optional timeout. Fields are
 * private. */
typedef struct rt_group_next {
    rt_group *group; /* NULL: not initialised, or finished */
    rt_sleep sleep;  /* the timeout */
    int timed;       /* a timeout is set */
} rt_group_next;

/* Prepares the wait; timeout_ns < 0: none. Errors: -EINVAL (op or g NULL). */
int rt_group_next_init(rt_group_next *op, rt_group *g, int64_t timeout_ns);

/* RT_READY with 0 and *res filled with a finished child (which is then no
 * longer counted), or with -ECHILD when the group has no child left and is
 * closing (rt_group_close began, so none can be added), or -ETIMEDOUT when
 * the timeout passed first (nothing collected), or a timer error (-ENOMEM,
 * -ESHUTDOWN), or -EINVAL for a discarding group; else RT_PENDING. An open
 * group with no child is not an error: the wait goes on until a child is
 * spawned into it and finishes (or the timeout passes), so a task may reap
 * children from the first spawn on without spinning.
 * *err receives that status (err may be NULL; res may be NULL too, and the
 * child collected is then not described). op or cx NULL, or op not
 * initialised or already dropped: RT_READY with -EINVAL (op is left as it
 * was).
 * Abort safety: a finished child is collected only by a poll that returns
 * RT_READY, so an aborted wait loses nothing. */
rt_poll rt_group_next_poll(rt_group_next *op, rt_context *cx, rt_group_result *res, int *err);

/* Releases the wait (its timer). Idempotent; NULL is a no-op. */
void rt_group_next_drop(rt_group_next *op);

/* Waiting for every child: rt_group_join_all waits for them to finish by
 * themselves, rt_group_close first cancels them (and refuses new spawns).
 * Either way the results are not returned: they go to the group's dispose
 * function. Fields are private. */
typedef struct rt_group_wait {
    rt_group *group; /* NULL: not initialised, or finished */
    rt_sleep sleep;  /* the timeout */
    int timed;       /* a timeout is set */
    int closing;     /* rt_group_close: cancel first, then wait */
    size_t failed;   /* children collected with a non-zero status so far */
} rt_group_wait;

/* Prepares to wait for all children (timeout_ns < 0: none). Errors: -EINVAL
 * (op or g NULL). */
int rt_group_join_all_init(rt_group_wait *op, rt_group *g, int64_t timeout_ns);

/* Prepares to close the group: cancel every child, refuse new spawns
 * (-EPIPE), and wait until all have finished. Errors: -EINVAL (op or g
 * NULL). */
int rt_group_close_init(rt_group_wait *op, rt_group *g, int64_t timeout_ns);

/* RT_READY with 0 when no child is left (*failed, may be NULL, receives how
 * many finished with a non-zero status, cancelled ones included), or
 * -ETIMEDOUT (children remain; waiting again is allowed), or a timer error;
 * else RT_PENDING. *err receives that status (may be NULL). op or cx NULL:
 * RT_READY with *err -EINVAL (*failed is not written; op is left as it
 * was). */
rt_poll rt_group_wait_poll(rt_group_wait *op, rt_context *cx, size_t *failed, int *err);

/* Releases the wait (its timer). Idempotent; NULL is a no-op. Abort safety:
 * results the wait already collected went to dispose; children not yet
 * finished stay in the group, and for rt_group_close they stay cancelled
 * (the group keeps refusing spawns). */
void rt_group_wait_drop(rt_group_wait *op);

/* Ends the group: refuses new spawns, cancels every child still running and
 * releases the owner's reference without waiting. Results not collected go
 * to dispose (now or as the children finish). Every group needs this call,
 * also after rt_group_close or rt_group_join_all completed (they wait, but
 * release nothing). g must not be used afterwards. NULL is a no-op. Any
 * thread, drop functions included. */
void rt_group_free(rt_group *g);

#ifdef __cplusplus
}
#endif
#endif
