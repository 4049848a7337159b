/* asyncrt: spawning tasks and waiting for them.
 *
 * A task is one future plus its state, in a single allocation, scheduled on a
 * runtime until its poll function returns RT_READY. Spawning may return a join
 * handle (rt_task *): a counted reference through which the result is read,
 * the task aborted, or interest given up. Every handle must end in exactly one
 * of: an rt_task_join operation initialised with it (which owns it from
 * then on), rt_task_wait returning 0, or rt_task_drop; each of those
 * releases it. A spawn that fails writes NULL to its handle. A handle used
 * or released after its release (a second rt_task_drop, a wait or a join
 * of a released handle) is reported as misuse (diag.h, RT_REPORT_MISUSE)
 * and changes nothing while the task's memory still exists; once it is
 * freed it is a use after free, which AddressSanitizer reports (under ASan
 * every task is allocated with malloc, so that its quarantine sees it).
 *
 * Results and status. A task finishes with a result, a `void *`, and a
 * status: 0, or an error of its own (a negative errno) that it set with
 * RT_FAIL or RT_RETURN_STATUS (coroutines, coro.h) or rt_task_set_status
 * (any poll function), or -ECANCELED when it was aborted or cancelled by
 * shutdown (its result is then NULL). A join, rt_task_wait, rt_group_next
 * and rt_join_all report both; a task group counts the failed and the
 * cancelled apart (group.h). The runtime never frees a result: when nobody
 * joins a task, a result that owns memory is leaked, so detached tasks
 * should return NULL or release what they return themselves. */
#ifndef ASYNCRT_TASK_H
#define ASYNCRT_TASK_H

#include <stdbool.h>
#include <stdint.h>

#include "future.h"
#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_task rt_task;

/* Spawns a task running `poll` over a copy of `size` bytes at `state`.
 * rt: the runtime; NULL means rt_current_runtime() (valid only inside a task).
 * state: copied into the task's own allocation, which keeps it at a stable
 *   address, aligned for any type, until `drop` has run; the caller keeps
 *   ownership of the original bytes. May be NULL when size is 0 (the task then
 *   gets a zero-length state). The copy is a plain memcpy: state must not
 *   point into itself.
 * drop: runs exactly once on the task's state: after the poll that returned
 *   RT_READY, or when the task is aborted or the runtime shuts down. May be NULL.
 * handle: when not NULL, receives a join handle the caller owns; when NULL the
 *   task is detached from the start.
 * The new task runs soon on some worker. Spawning from a worker puts it in
 * that worker's LIFO slot (the next task it runs; the task it displaces
 * moves to the worker's deque), from anywhere else onto the injector.
 * Errors: -EINVAL (poll NULL, state NULL with size > 0, rt NULL outside a
 * task, size absurdly large), -ENOMEM, -ESHUTDOWN (the runtime is shutting
 * down or shut down). On any error nothing stays allocated, drop is not
 * called and the state remains the caller's to release.
 * Any thread; concurrently with anything but rt_runtime_free on the same rt. */
#define rt_spawn(rt, poll, drop, state, size, handle)                                              \
    rt_spawn_ex_with_site(RT__HERE, (rt), NULL, (poll), (drop), (state), (size), (handle))

/* ---- Spawn sites -----------------------------------------------------------
 *
 * rt_spawn, rt_spawn_ex, rt_spawn_local (here), rt_group_spawn (group.h) and
 * rt_block_on (runtime.h) are macros that pass the caller's file and line to
 * a function named *_with_site, so that a task dump (diag.h) says where every
 * task was spawned at the cost of one pointer argument. There is no function
 * of the macro's name: to spawn through a pointer, or from a language that
 * cannot expand C macros, call the _with_site function, with a site of your
 * own ("file:line" with static storage) or NULL. */

/* "file.c:123" of where it is expanded: a string literal. */
#define RT__HERE __FILE__ ":" RT__STRINGIFY(__LINE__)
#define RT__STRINGIFY(x) RT__STRINGIFY_(x)
#define RT__STRINGIFY_(x) #x

/* Awaiting a task: an operation (see future.h) that owns the join handle
 * from its init on. It finishes with result the task's status (0, the
 * task's own error, or -ECANCELED when the task was aborted or the runtime
 * shut down before it finished) and the task's result in `value` (NULL
 * when cancelled); either way the handle is released and the task's drop
 * function has run. Dropped unfinished, it detaches the handle: the task
 * keeps running and its result is discarded (or, with cancel_on_drop, it
 * is cancelled first). One that was initialised and never polled must still be
 * dropped (or awaited): it owns the handle. Otherwise, or when it is
 * initialised again first, the handle is never released: the task still
 * runs to its end, but its memory is never freed (a task dump lists it as
 * finished, not joined).
 * Any thread, with any waker (user wakers too). */
typedef struct rt_task_join {
    RT_FUTURE_HEADER;
    rt_task *task; /* the handle owned; NULL once finished or dropped */
    void *value;   /* the task's result */
    /* Set after the init to make a drop of the unfinished join cancel the
     * task (rt_task_cancel) before dropping the handle, so that a time limit or a
     * select around the join cancels the task instead of leaving it to run
     * (Tokio's AbortOnDropHandle). false after the init. */
    bool cancel_on_drop;
} rt_task_join;

/* Prepares to join `task`, taking over its handle (also on error, unless
 * task is NULL). Errors: -EINVAL (op or task NULL; with op NULL the handle
 * is detached so that it is not leaked). Any thread. */
int rt_task_join_init(rt_task_join *op, rt_task *task);

/* Blocks the calling thread until the task finishes or `timeout_ns`
 * nanoseconds pass (timeout_ns < 0: no limit).
 * Returns 0 once the task finished, however it did: *value holds its result
 * and *status its status (0, its own error, or -ECANCELED: see "Results and
 * status" above); the handle is released, and the task's drop function has
 * run by then. value and status may be NULL.
 * Every other return is the wait's own error, and the handle stays valid and
 * owned by the caller: -ETIMEDOUT (the time passed), -EDEADLK (called from a
 * worker thread of any asyncrt runtime, even for a finished task, a fiber
 * included, which awaits an rt_task_join instead, or from a
 * drop function run by rt_runtime_shutdown), -ENOMEM (no memory for the
 * wait), -EINVAL (task NULL); *value and *status are left as they were.
 * Any thread that is not an asyncrt worker. */
int rt_task_wait(rt_task *task, int64_t timeout_ns, void **value, int *status);

/* Sets the status the calling task finishes with (see "Results and status"
 * above) when this poll returns RT_READY: 0, or a negative errno. For a
 * poll function that is not a coroutine (a coroutine uses RT_FAIL):
 *     rt_task_set_status(cx, -EPROTO);
 *     *out = NULL;
 *     return RT_READY;
 * Only from the task's own poll function with the context it was given
 * (cx's waker is the task's); a later call in the same poll replaces the
 * status. Errors: -EINVAL (status > 0, cx NULL, or not called from a
 * task's poll with its own context: a future polled by hand, on a foreign
 * thread, has no task to give a status to). */
int rt_task_set_status(rt_context *cx, int status);

/* Gives up the handle: the task keeps running (or stays finished) and its
 * result is discarded. The handle must not be used again (see the top for
 * what a second release does). NULL is a no-op. Any thread, including from
 * a drop function. */
void rt_task_drop(rt_task *task);

/* Cancels the task (Tokio's abort). A task that has not finished is not
 * polled again: its drop function runs at its next scheduling point (never
 * in the middle of a poll; a task in the middle of a poll is dropped right
 * after it; an idle task is scheduled by the cancel itself, so it is dropped
 * promptly even if nothing would ever wake it) and its joiner gets
 * -ECANCELED. A task that finishes during the poll in progress keeps its
 * result. Cancelling a finished task does nothing. The handle stays valid
 * and must still be joined, waited on or dropped (rt_task_drop). NULL is a no-op. Any thread, any
 * number of times. */
void rt_task_cancel(rt_task *task);

/* True once the task has finished (completed, aborted or cancelled at
 * shutdown): its drop function has run and a subsequent join returns
 * RT_READY without waiting. False for NULL. Any thread. */
bool rt_task_is_finished(const rt_task *task);

/* Gives the other runnable tasks of this worker a turn: wakes the current task
 * by reference and returns RT_PENDING, so `return rt_yield(cx);` ends the poll
 * and the task is polled again after every task that was already runnable on
 * its worker (tasks that go on waking each other meanwhile get at most three
 * polls in a row ahead of it). In a coroutine use RT_CORO_YIELD. From a poll
 * function only. cx NULL: nothing is woken, and it still returns RT_PENDING. */
rt_poll rt_yield(rt_context *cx);

/* ---- Spawn options: names and local (pinned) tasks ------------------------ */

/* rt_spawn_options.worker: any worker may run the task (the default). */
#define RT_WORKER_ANY (-1)
/* rt_spawn_options.worker: pin the task to the worker that spawns it. */
#define RT_WORKER_CURRENT (-2)

/* How rt_spawn_ex spawns. Fill with rt_spawn_options_init, then change
 * fields; fields are only ever added at the end. */
typedef struct rt_spawn_options {
    /* A name for diagnostics (rt_task_name), copied at spawn; NULL: none.
     * At most RT_TASK_NAME_MAX bytes are kept. */
    const char *name;
    /* RT_WORKER_ANY, RT_WORKER_CURRENT, or a worker index (0 <= index <
     * rt_runtime_workers). A task given a worker is local: only that worker
     * ever polls it (it is never stolen, and wakes from other threads are
     * forwarded to that worker), so state that must stay on one thread may
     * live in it. A local task keeps its worker busy: spread heavy ones. */
    int worker;
} rt_spawn_options;

/* Longest task name kept (longer names are cut). */
#define RT_TASK_NAME_MAX 63

/* Fills *opts with the defaults: no name, any worker. opts NULL: nothing is
 * done. Any thread. */
void rt_spawn_options_init(rt_spawn_options *opts);

/* rt_spawn with options (opts NULL: the defaults, exactly rt_spawn).
 * Extra errors: -EINVAL for a worker index out of range, for
 * RT_WORKER_CURRENT from a thread that is not a worker of rt, or for a local
 * task of another runtime's worker. Any thread, as rt_spawn. */
#define rt_spawn_ex(rt, opts, poll, drop, state, size, handle)                                     \
    rt_spawn_ex_with_site(RT__HERE, (rt), (opts), (poll), (drop), (state), (size), (handle))

/* Convenience: spawn a local task pinned to the calling worker (only from a
 * task of rt, or of rt_current_runtime() when rt is NULL). Arguments and
 * errors as rt_spawn_ex. */
#define rt_spawn_local(rt, poll, drop, state, size, handle)                                        \
    rt_spawn_local_with_site(RT__HERE, (rt), (poll), (drop), (state), (size), (handle))

/* rt_spawn_ex recording `site` ("file:line" with static storage, or NULL)
 * as where the task was spawned: what rt_spawn and rt_spawn_ex expand to. */
int rt_spawn_ex_with_site(const char *site, rt_runtime *rt, const rt_spawn_options *opts,
                          rt_poll_fn poll, rt_drop_fn drop, const void *state, size_t size,
                          rt_task **handle);

/* rt_spawn_local recording `site`: what rt_spawn_local expands to. */
int rt_spawn_local_with_site(const char *site, rt_runtime *rt, rt_poll_fn poll, rt_drop_fn drop,
                             const void *state, size_t size, rt_task **handle);

/* ---- Task identity ---------------------------------------------------------
 *
 * Every task (blocking jobs included) gets an id at spawn, unique in the
 * process for its lifetime (a 64-bit counter: ids are never reused), never 0. */

/* The id of the task behind a join handle (0 for NULL). Any thread, while the
 * handle is owned. */
uint64_t rt_task_id(const rt_task *task);

/* The name given at spawn, or NULL (also for task NULL). The string lives as
 * long as the task's memory (until the handle is released). Any thread, while
 * the handle is owned. */
const char *rt_task_name(const rt_task *task);

/* The id of the task whose poll (or drop) the calling thread is running on
 * a worker, or 0 when it is not running one. */
uint64_t rt_current_task_id(void);

/* The name of the task the calling worker is polling, or NULL (no name, or
 * not inside a task's poll). Valid until that poll returns. */
const char *rt_current_task_name(void);

/* The index of the worker the calling thread is (0 <= index <
 * rt_runtime_workers), or -1 on any other thread. */
int rt_current_worker(void);

/* ---- Cooperative budget ----------------------------------------------------
 *
 * For leaf futures (the runtime's own channels, locks and sockets call this;
 * user-written leaves should too). Call it before an operation that could
 * complete without waiting. true: go on, one unit of the running task's
 * budget is spent. false: the budget of this poll is used up; the task has
 * been woken by reference, and the caller must return RT_PENDING without
 * doing the operation, so that nothing is consumed. Outside a worker's poll
 * (a future polled by hand on a foreign thread) and with rt_config.budget 0
 * it always returns true; for cx NULL too (no budget is then spent). */
bool rt_coop_proceed(rt_context *cx);

/* ---- Blocking pool ---------------------------------------------------------*/

/* A plain blocking function for rt_spawn_blocking; its return value is the
 * task's result. */
typedef void *(*rt_blocking_fn)(void *arg);

/* Runs fn(arg) on the runtime's blocking pool: a separate set of threads,
 * created on demand up to rt_config.blocking_threads and exiting after
 * rt_config.blocking_idle_ns without work. Jobs beyond that maximum queue in
 * FIFO order. Use it for blocking system calls, file I/O and long
 * computations that would otherwise hold a worker.
 * handle: as for rt_spawn (join, wait, drop, cancel; NULL: detached). A job
 * aborted before it started never runs: the abort takes it out of the queue
 * and its joiner gets -ECANCELED at once; one already running cannot be
 * interrupted and keeps its result.
 * The runtime never touches arg: it is the job's to own.
 * Errors: -EINVAL (fn NULL, rt NULL outside a task), -ENOMEM, -ESHUTDOWN,
 * -EAGAIN (no thread could be created and none is running to take the job:
 * it was not queued, nothing ran).
 * Any thread. */
int rt_spawn_blocking(rt_runtime *rt, rt_blocking_fn fn, void *arg, rt_task **handle);

/* rt_spawn_blocking with a release function for arg: release(arg) runs
 * exactly once, on a pool thread after fn(arg) returned, or instead of fn
 * when the job is aborted or cancelled by shutdown before it started
 * (release NULL: nothing runs). It runs before the job's joiner learns the
 * outcome. When the spawn fails, release is not called and arg stays the
 * caller's. This is what lets an operation share a record with its job:
 * both hold a reference, and the last to let go frees it, whether the job
 * ran or not. Errors and threads as rt_spawn_blocking. */
int rt_spawn_blocking_ex(rt_runtime *rt, rt_blocking_fn fn, void (*release)(void *arg), void *arg,
                         rt_task **handle);

/* Convenience: spawn with the size of the state object taken from its type.
 * state_ptr must be a typed pointer (the NULL constant does not compile);
 * a NULL one gives -EINVAL, as for rt_spawn with size > 0. */
#define RT_SPAWN_STATE(rt, poll, drop, state_ptr, handle)                                          \
    rt_spawn((rt), (poll), (drop), (state_ptr), sizeof(*(state_ptr)), (handle))

#ifdef __cplusplus
}
#endif
#endif
