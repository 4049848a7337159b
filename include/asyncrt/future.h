/* asyncrt: futures, wakers and poll contexts.
 *
 * A future is a poll function over a block of state. The runtime calls the
 * poll function whenever the task may make progress; the function either
 * finishes (RT_READY, writing its result) or arranges to be woken and returns
 * RT_PENDING. "Arranging to be woken" means storing a clone of the context's
 * waker somewhere that will call rt_waker_wake() when the awaited event happens
 * (or calling rt_waker_wake_by_ref() at once, which is a yield).
 *
 * Threading: a poll function is never called concurrently with itself for the
 * same state, but consecutive polls may run on different threads. Do not keep
 * errno or thread-local values across a RT_PENDING. */
#ifndef ASYNCRT_FUTURE_H
#define ASYNCRT_FUTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a poll function reports. */
typedef enum rt_poll {
    RT_PENDING = 0, /* not finished; a waker has been stored or woken */
    RT_READY = 1,   /* finished; the result has been written */
} rt_poll;

struct rt_waker_vtable;

/* A handle that reschedules whatever is waiting (usually a task).
 * `vtable` says how; `data` is the vtable's own pointer (for the runtime's
 * wakers, the task). A waker is a value: copy the struct only together with a
 * clone, since each rt_waker value owns one reference that rt_waker_wake or
 * rt_waker_drop gives back. */
typedef struct rt_waker {
    const struct rt_waker_vtable *vtable; /* never NULL in a valid waker */
    const void *data;                     /* passed to every vtable function */
} rt_waker;

/* The four operations behind a waker. User code may define its own vtables; the
 * runtime stores and calls user wakers exactly like its own. Every function
 * may be called from any thread, concurrently with the others. */
typedef struct rt_waker_vtable {
    /* Returns a new waker for the same target (one more reference). */
    rt_waker (*clone)(const void *data);
    /* Wakes the target and gives up this waker's reference. */
    void (*wake)(const void *data);
    /* Wakes the target; the waker stays valid and owned by the caller. */
    void (*wake_by_ref)(const void *data);
    /* Gives up this waker's reference without waking. */
    void (*drop)(const void *data);
} rt_waker_vtable;

/* What a poll function receives: today the task's waker. It is valid only for
 * the duration of the poll; clone the waker to keep it. The library's poll
 * functions need it: each says what it does when given cx NULL (see error.h,
 * "NULL arguments"). */
typedef struct rt_context {
    rt_waker waker; /* borrowed: never drop or wake (by value) this one */
} rt_context;

/* A future's poll function. `state` is the future's own memory (for a task, the
 * bytes copied in at spawn, kept at a stable address until the drop).
 * On RT_READY it writes the result to *out (NULL is a fine result). It must not
 * block the thread: wait by returning RT_PENDING with a waker stored. */
typedef rt_poll (*rt_poll_fn)(void *state, rt_context *cx, void **out);

/* Releases what a future's state holds. Called exactly once for each spawned
 * future: after the poll that returned RT_READY, or instead of the next poll
 * when the task is aborted or the runtime shuts down. Never called while a
 * poll of the same future runs. May be NULL when there is nothing to release. */
typedef void (*rt_drop_fn)(void *state);

/* ---- Operations: the one shape of everything a task can await -------------
 *
 * Every operation a task can wait on (a sleep, a join, a read, an accept, a
 * lock, a channel receive, a select...) is a struct that begins with
 * RT_FUTURE_HEADER, so it can be handled as an rt_future through its
 * `future` member and reports its outcome in its `result` member:
 *
 *     rt_io_read rd;                        // in the task's state
 *     rt_io_read_init(&rd, io, buf, sizeof buf);
 *     ... RT_POLL_OP(&rd, cx) until RT_READY ...
 *     if (rd.result < 0) error; else rd.result bytes arrived
 *
 * The life of an operation:
 * - Its own init function prepares it (nothing is waited for yet). An init
 *   that fails returns the negative errno and, when the operation pointer is
 *   not NULL, leaves it finished with that errno as its result, so code that
 *   awaits it without checking sees the error there.
 * - rt_future_poll (RT_POLL_OP) polls it: RT_PENDING with the context's waker
 *   stored, or RT_READY with `result` set (a negative errno, or 0 or a count
 *   on success) and the operation's value, if it has one, in its own named
 *   fields. A finished operation has released everything it held, needs no
 *   drop, and reports RT_READY with the same result on every later poll.
 * - rt_future_drop (RT_DROP) abandons it: whatever it holds is released and
 *   whatever it had not yet done is undone (each header's "Abort safety"
 *   says what that means), and `result` becomes -ECANCELED (a channel send
 *   that a receiver had already taken sets 0: it was sent). Dropping is
 *   idempotent, a no-op on a finished operation and safe on a zeroed one, so
 *   a drop function can drop every operation its task might be waiting in.
 * - An operation that returned RT_PENDING may be linked into a wait queue by
 *   address: it must not move until it finishes or is dropped (a task's
 *   state never moves). It may be initialised again once finished or
 *   dropped.
 * - An operation that was initialised and never polled holds nothing,
 *   unless its header says otherwise: dropping it or initialising it again
 *   is then safe and enough, and so is leaving it as it is (a drop may
 *   still touch the object the operation names, so it comes before that
 *   object is freed). Where an init takes ownership of something or claims
 *   something (a join takes its handle, a buffered read or a process wait
 *   marks its reader or process busy, a file operation allocates a record
 *   for its job), its header says so, and dropping or awaiting the
 *   operation is then required: initialising it again, or forgetting it,
 *   leaks or keeps what it took. A combinator never polled holds what the
 *   operations given to it hold, and dropping it drops them.
 * One task (or thread polling by hand) polls a given operation at a time. */

typedef struct rt_future rt_future;
struct rt_wait_info;

/* How a kind of operation is polled and dropped. Library operations bring
 * their own; a user may define one for an operation of their own. */
typedef struct rt_future_vtable {
    /* Makes progress. On RT_READY it has set f->result, released what it
     * held, and called rt_future_finish (unless it may be polled again after
     * finishing, as an interval tick). */
    rt_poll (*poll)(rt_future *f, rt_context *cx);
    /* Releases an unfinished operation; called at most once, by
     * rt_future_drop, which has already set f->result to -ECANCELED. NULL:
     * nothing to release. */
    void (*drop)(rt_future *f);
    /* Says what the operation waits for (see rt_future_describe in diag.h):
     * fills *info from the operation's own fields, or from fields of the
     * objects it refers to that never change while it waits, never from
     * anything another thread may be writing (a task dump calls it on a
     * waiting task's operation from another thread, with the task held so
     * that it is not polled meanwhile). Must not block, allocate or wake.
     * NULL: the dump names the operation by its kind only. */
    void (*describe)(const rt_future *f, struct rt_wait_info *info);
} rt_future_vtable;

/* The common header. NULL vtable: a zeroed operation, never initialised. */
struct rt_future {
    const rt_future_vtable *vtable; /* the kind; rt_future_finish swaps it */
    int64_t result;                 /* the outcome: a negative errno, or >= 0 */
};

/* The first member of every operation struct: the header as `future` (for
 * generic code: &op->future) with its result also reachable as `result`. */
#define RT_FUTURE_HEADER                                                                           \
    union {                                                                                        \
        rt_future future;                                                                          \
        struct {                                                                                   \
            const rt_future_vtable *future_vtable_;                                                \
            int64_t result;                                                                        \
        };                                                                                         \
    }

/* Polls an operation. f NULL: RT_READY. A zeroed operation: RT_READY with
 * result -EINVAL. cx NULL: RT_READY with result -EINVAL and nothing else
 * done: the operation is not finished (poll it again with a context, or
 * drop it as usual); a finished one keeps its result. Otherwise as
 * described above. */
rt_poll rt_future_poll(rt_future *f, rt_context *cx);

/* Drops an operation: see above. NULL is a no-op. */
void rt_future_drop(rt_future *f);

/* True once the operation has finished or been dropped (false for a zeroed
 * one, which never started, and for NULL). */
bool rt_future_is_done(const rt_future *f);

/* Marks f finished with `result` (later polls report RT_READY with it, drops
 * do nothing) and returns RT_READY: for a vtable's poll function when it
 * finishes, and for an init function that refuses its arguments. f must
 * not be NULL. */
rt_poll rt_future_finish(rt_future *f, int64_t result);

/* rt_future_poll with its common case inline (an initialised operation and a
 * context: straight to the vtable), for RT_POLL_OP and the coroutine macros. */
static inline rt_poll rt__future_poll_inline(rt_future *f, rt_context *cx)
{
    if (f != NULL && f->vtable != NULL && cx != NULL)
        return f->vtable->poll(f, cx);
    return rt_future_poll(f, cx);
}

/* Polls or drops any operation struct (anything that begins with
 * RT_FUTURE_HEADER): RT_POLL_OP(&s->read, cx), RT_DROP(&s->read). */
#define RT_POLL_OP(op, cx) rt__future_poll_inline(&(op)->future, (cx))
#define RT_DROP(op) rt_future_drop(&(op)->future)

/* Builds a context around a borrowed waker (for polling futures by hand, for
 * example in a test or a combinator that polls a child future). Takes no
 * pointer. */
static inline rt_context rt_context_from_waker(rt_waker waker)
{
    rt_context cx = {waker};
    return cx;
}

/* The waker of a context. Borrowed: clone it with rt_waker_clone to keep it.
 * cx NULL: returns NULL, which every rt_waker_* function below accepts (as
 * nothing to wake). */
static inline const rt_waker *rt_context_waker(const rt_context *cx)
{
    return cx != NULL ? &cx->waker : NULL;
}

/* Returns a clone of *waker (one more reference); waker NULL: the no-op
 * waker. Any thread. */
rt_waker rt_waker_clone(const rt_waker *waker);

/* Wakes the target and consumes *waker, which is left as the no-op waker. Any
 * thread. Waking a completed or already scheduled task does nothing beyond
 * releasing the reference. NULL is a no-op. */
void rt_waker_wake(rt_waker *waker);

/* Wakes the target; *waker stays valid and owned by the caller. Any thread.
 * NULL is a no-op. */
void rt_waker_wake_by_ref(const rt_waker *waker);

/* Releases *waker without waking and leaves it as the no-op waker. Any thread.
 * Safe on the no-op waker, and safe after the runtime that made it was shut
 * down and freed (see rt_runtime_free). NULL is a no-op. */
void rt_waker_drop(rt_waker *waker);

/* True when waking `a` and `b` would wake the same target (same vtable and
 * data), so a stored waker need not be replaced by a clone of the new one.
 * False when a or b is NULL. */
bool rt_waker_will_wake(const rt_waker *a, const rt_waker *b);

/* A waker that does nothing; cloning and dropping it are free. Useful as the
 * "empty" value of a waker slot and for polling a future once by hand. */
rt_waker rt_waker_noop(void);

/* True when `waker` is the no-op waker (an empty slot), or NULL (nothing to
 * wake either). */
bool rt_waker_is_noop(const rt_waker *waker);

#ifdef __cplusplus
}
#endif
#endif
