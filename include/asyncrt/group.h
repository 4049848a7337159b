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

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_group rt_group;

/* How a group treats its children's results. */
typedef struct rt_group_options {
    /* Receives, as dispose(value, dispose_arg), the result of every child
     * that returned (status 0 or an error of its own: a result may come with
     * either; a cancelled child has none) and that nobody collects; NULL:
     * none. Called on the thread where that becomes known (a worker, or the
     * caller of rt_group_free, join or close); it must not block. */
    void (*dispose)(void *value, void *arg);
    void *dispose_arg;
    /* Nonzero: keep no results. Each child's result goes to dispose as the
     * child finishes, so the group holds memory for its running children
     * only (a server's connections, say, which nobody collects one by one).
     * rt_group_next is refused (-EINVAL); joins and closes still wait for
     * every child, and their `failed` and `cancelled` count every child
     * that failed or was cancelled since the group was made. */
    int discard;
} rt_group_options;

/* Sets the defaults: no dispose function, results kept. NULL is a no-op. */
void rt_group_options_init(rt_group_options *opts);

/* Creates a group on `rt` (NULL: rt_current_runtime()) with `opts` (NULL: the
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
 * size > 0), and -EPIPE when the group is closing. On error nothing was
 * spawned and drop was not called. Any thread; a spawn in progress keeps
 * the group allocated until it returns, so the owner may close or free the
 * group meanwhile, but a spawn must begin before rt_group_free (the caller
 * holds no reference of its own otherwise). */
#define rt_group_spawn(g, opts, poll, drop, state, size, id)                                       \
    rt_group_spawn_with_site(RT__HERE, (g), (opts), (poll), (drop), (state), (size), (id))

/* rt_group_spawn recording `site` ("file:line", static storage, or NULL) as
 * where the child was spawned, for task dumps (diag.h): what rt_group_spawn
 * expands to (task.h, "Spawn sites"). */
int rt_group_spawn_with_site(const char *site, rt_group *g, const rt_spawn_options *opts,
                             rt_poll_fn poll, rt_drop_fn drop, const void *state, size_t size,
                             uint64_t *id);

/* Children not collected yet: running ones plus finished ones waiting for
 * rt_group_next (0 for NULL). */
size_t rt_group_len(rt_group *g);

/* Aborts every child still running (rt_task_cancel). They finish as
 * cancelled and are still collected by rt_group_next (status -ECANCELED).
 * The group stays usable: children spawned later run normally. NULL is a
 * no-op. */
void rt_group_cancel(rt_group *g);

/* What rt_group_next collects. */
typedef struct rt_group_result {
    uint64_t id; /* the child's task id */
    void *value; /* its result (NULL when cancelled) */
    int status;  /* 0, the child's own error (RT_FAIL, rt_task_set_status), or
                    -ECANCELED (aborted, or cancelled by shutdown) */
} rt_group_result;

/* One wait for the next finished child: an operation (see future.h) that
 * finishes with result 0 and the child in `child` (which is then no longer
 * counted), or with -ECHILD when the group has no child left and is closing
 * (rt_group_close began, so none can be added). An open group with no child
 * is not an error: the wait goes on until a child is spawned into it and
 * finishes, so a task may reap children from the first spawn on without
 * spinning. For a time limit, wrap it in an rt_timeout (combine.h). Abort
 * safety: a finished child is collected only by a poll that finishes the
 * operation, so a dropped wait loses nothing. */
typedef struct rt_group_next {
    RT_FUTURE_HEADER;
    rt_group *group;       /* NULL once finished or dropped */
    rt_group_result child; /* the child collected */
} rt_group_next;

/* Prepares the wait. Errors: -EINVAL (op or g NULL, or a discarding group,
 * which keeps no result). Never polled, it holds nothing and needs no
 * drop. */
int rt_group_next_init(rt_group_next *op, rt_group *g);

/* Waiting for every child: an operation (see future.h) made by
 * rt_group_join_all_init, which waits for them to finish by themselves, or
 * rt_group_close_init, which first cancels them (and refuses new spawns).
 * It finishes with result 0 when no child is left; `failed` says how many
 * children finished with an error of their own and `cancelled` how many
 * were cancelled (aborted, cancelled by the close or by shutdown), so a
 * child that failed never passes for a success. The results are not
 * returned: they go to the group's dispose function.
 * Abort safety: results the wait already collected went to dispose;
 * children not yet finished stay in the group, and for rt_group_close they
 * stay cancelled (the group keeps refusing spawns). */
typedef struct rt_group_join {
    RT_FUTURE_HEADER;
    rt_group *group;  /* NULL once finished or dropped */
    int closing;      /* rt_group_close: cancel first, then wait */
    size_t failed;    /* children collected with an error status so far */
    size_t cancelled; /* children collected cancelled so far */
} rt_group_join;

/* Prepares to wait for all children. Errors: -EINVAL (op or g NULL). Never
 * polled, it holds nothing and needs no drop. */
int rt_group_join_all_init(rt_group_join *op, rt_group *g);

/* Prepares to close the group: cancel every child, refuse new spawns
 * (-EPIPE), and wait until all have finished. Errors: -EINVAL (op or g
 * NULL). The cancelling is done by the first poll: never polled, the close
 * holds nothing, needs no drop, and has cancelled nothing (spawns are
 * still taken). */
int rt_group_close_init(rt_group_join *op, rt_group *g);

/* Ends the group: refuses new spawns, cancels every child still running and
 * releases the owner's reference without waiting. Results not collected go to
 * dispose (now or as the children finish). Every group needs this call, also
 * after rt_group_close or rt_group_join_all completed (they wait, but release
 * nothing). Results of children still running then go to dispose as they
 * finish, at a time the owner cannot know: close the group first when
 * dispose_arg must be freed afterwards. g must not be used afterwards: a
 * second rt_group_free while children still hold the group is reported as
 * misuse and changes nothing; once they are gone the memory is freed, and a
 * second call is a use after free (AddressSanitizer reports it). NULL is a
 * no-op. Any thread, drop functions included. */
void rt_group_free(rt_group *g);

#ifdef __cplusplus
}
#endif
#endif
