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
