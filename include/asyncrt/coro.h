/* asyncrt: stackless coroutines that clean up after themselves.
 *
 * The macros let a poll function read as straight-line code. The resume
 * point lives in an `rt_coro` record in the future's state; on every poll
 * RT_CORO_BEGIN jumps back to where the previous poll stopped. The record
 * also remembers the operation in flight and the locks and permits held, so
 * a task whose state begins with its rt_coro and that is spawned with
 * rt_coro_drop as its drop function needs no drop code for the operation it
 * awaits or the guards it holds (what it keeps otherwise, a socket or an
 * operation it started but does not await, is its drop function's to
 * release, after rt_coro_cleanup):
 *
 *     struct fetch { rt_coro co; rt_io *io; rt_timeout limit; rt_io_read rd;
 *                    char buf[512]; };
 *
 *     static rt_poll fetch_poll(void *p, rt_context *cx, void **out)
 *     {
 *         struct fetch *f = p;
 *         RT_CORO_BEGIN(&f->co);
 *         rt_io_read_init(&f->rd, f->io, f->buf, sizeof f->buf);
 *         rt_timeout_init(&f->limit, NULL, &f->rd.future, RT_MS(500));
 *         RT_AWAIT(&f->co, cx, &f->limit);
 *         if (f->limit.result < 0) // -ETIMEDOUT, or the read's error
 *             RT_RETURN(&f->co, out, NULL);
 *         RT_CORO_YIELD(&f->co, cx);
 *         RT_CORO_END(&f->co, out);
 *     }
 *     ...
 *     rt_spawn(rt, fetch_poll, rt_coro_drop, &f, sizeof f, &task);
 *
 * If that task is aborted in the middle of the await, rt_coro_drop drops the
 * timeout, which drops the read and cancels the timer.
 *
 * Rules, because the macros are a `switch` in disguise:
 * - Local variables do not survive an RT_AWAIT or RT_CORO_YIELD: keep anything
 *   needed after one in the state struct, operations included.
 * - Do not put an RT_AWAIT or RT_CORO_YIELD inside a nested `switch`, and use each
 *   at most once per source line (the line number is the resume point).
 * - Initialise the operation before its RT_AWAIT (the resume jumps into the
 *   await, past the init), and give RT_AWAIT the poll's own context: with
 *   cx NULL the await ends at once (result -EINVAL) and forgets the
 *   operation, which is then the drop function's to drop.
 * - Zero-initialise the rt_coro (it is, when the whole state is zeroed).
 * - `co` (every macro) and `out` (RT_RETURN, RT_CORO_END) are dereferenced:
 *   they must not be NULL (the `out` a poll function receives never is).
 *   RT_CORO_YIELD with cx NULL wakes nothing, as rt_yield(NULL).
 * A coroutine is polled by one task at a time, like any future. */
#ifndef ASYNCRT_CORO_H
#define ASYNCRT_CORO_H

#include "future.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Something a coroutine holds until it lets go or its task is dropped: the
 * lock of an rt_mutex_lock, the permits of an rt_semaphore_acquire. Lives in
 * the operation; the library fills it in at init. */
typedef struct rt_guard {
    struct rt_guard *next;              /* the next guard held, older */
    void (*release)(struct rt_guard *); /* gives back what is held */
} rt_guard;

/* Where a coroutine's code is: recorded by RT_CORO_BEGIN (a static of the
 * poll function), so that a task dump can say "server.c:88 in
 * handle_client" for the line a coroutine waits at. */
typedef struct rt_coro_site {
    const char *file;     /* __FILE__ */
    const char *function; /* __func__ */
} rt_coro_site;

/* The resume point of one coroutine, and what it must clean up. */
typedef struct rt_coro {
    int line;                 /* 0: not started; RT_CORO_DONE: finished; else resume */
    int status;               /* what it finished with: 0, or RT_FAIL's error */
    rt_future *awaiting;      /* the operation in flight, or NULL */
    rt_guard *held;           /* guards held, newest first */
    const rt_coro_site *site; /* the poll function's file and name, or NULL */
} rt_coro;

/* Value of rt_coro.line once the coroutine has returned. */
#define RT_CORO_DONE (-1)

/* Drops the operation in flight and releases every guard still held (newest
 * first). After it, the coroutine holds nothing; the record may be reused
 * zeroed. co NULL: a no-op. From the task that owns the coroutine, or from
 * its drop function. */
void rt_coro_cleanup(rt_coro *co);

/* A drop function (rt_drop_fn) for a task whose state begins with its
 * rt_coro: rt_coro_cleanup on it. A task with more to release calls
 * rt_coro_cleanup from its own drop function instead. state NULL: a no-op. */
void rt_coro_drop(void *state);

/* Adds a guard to those the coroutine holds. Normally done by RT_AWAIT_HOLD;
 * co or g NULL: a no-op. */
void rt_coro_hold(rt_coro *co, rt_guard *g);

/* Releases a held guard now (the unlock, the permits given back) and forgets
 * it. A guard not held (never, or released already) is left alone, so a
 * second release does nothing. co or g NULL: a no-op. */
void rt_coro_release(rt_coro *co, rt_guard *g);

/* Called by RT_CORO_BEGIN on a coroutine's first poll: when `co` is at
 * the start of the state of the task being polled, marks the task as a
 * coroutine, which lets task dumps and stall reports show where it waits.
 * Anywhere else (a coroutine nested in another's state, a future polled
 * by hand) it does nothing. */
void rt_coro_started(rt_coro *co);

/* Marks the jumps into the middle of a coroutine's switch as meant, for
 * -Wimplicit-fallthrough (the comment form does not survive a macro). */
#if defined(__GNUC__) && (__GNUC__ >= 7 || defined(__clang__))
#define RT__FALLTHROUGH __attribute__((__fallthrough__))
#else
#define RT__FALLTHROUGH ((void)0)
#endif

static inline void rt__coro_enter(rt_coro *co, const rt_coro_site *site)
{
    co->site = site;
    if (co->line == 0)
        rt_coro_started(co);
}

/* Opens the coroutine body; resumes at the last suspension point. Use it
 * once per function, as the first thing the poll function does with co
 * (it declares a static with the function's name and file). */
#define RT_CORO_BEGIN(co)                                                                          \
    static const rt_coro_site rt__coro_site_ = {__FILE__, __func__};                               \
    rt__coro_enter((co), &rt__coro_site_);                                                         \
    switch ((co)->line) {                                                                          \
    case 0:

/* Awaits the operation `op` (a pointer to any struct that begins with
 * RT_FUTURE_HEADER, initialised before this line): polls it until RT_READY,
 * remembering it as the operation in flight meanwhile. Its outcome is then
 * in op->result. */
#define RT_AWAIT(co, cx, op) RT_AWAIT_FUTURE(co, cx, &(op)->future)

/* RT_AWAIT for an operation given as an rt_future pointer. */
#define RT_AWAIT_FUTURE(co, cx, fut)                                                               \
    do {                                                                                           \
        (co)->line = __LINE__;                                                                     \
        (co)->awaiting = (fut);                                                                    \
        RT__FALLTHROUGH;                                                                           \
    case __LINE__:                                                                                 \
        if (rt__future_poll_inline((co)->awaiting, (cx)) != RT_READY)                              \
            return RT_PENDING;                                                                     \
        (co)->awaiting = NULL;                                                                     \
    } while (0)

/* Awaits a lock or an acquisition (`op` an rt_mutex_lock or an
 * rt_semaphore_acquire) and, when it succeeded (op->result 0), holds its
 * guard: the lock or the permits are given back by RT_RELEASE(co, op), or
 * by rt_coro_cleanup when the task ends or is dropped first. While its
 * guard is held, the operation must not be initialised again, and what it
 * holds must not be given back by hand (rt_mutex_unlock,
 * rt_semaphore_release): the guard would give it back a second time. */
#define RT_AWAIT_HOLD(co, cx, op)                                                                  \
    do {                                                                                           \
        RT_AWAIT(co, cx, op);                                                                      \
        if ((op)->result == 0)                                                                     \
            rt_coro_hold((co), &(op)->guard);                                                      \
    } while (0)

/* Gives back what RT_AWAIT_HOLD took with `op`; nothing if it holds nothing. */
#define RT_RELEASE(co, op) rt_coro_release((co), &(op)->guard)

/* Suspends until the poll expression `poll_expr` yields RT_READY: for a
 * poll-style function of the user's own that stores the context's waker
 * before returning RT_PENDING. The expression is evaluated on every poll; it
 * is not an operation in flight, so nothing is dropped for it. */
#define RT_AWAIT_POLL(co, poll_expr)                                                               \
    do {                                                                                           \
        (co)->line = __LINE__;                                                                     \
        RT__FALLTHROUGH;                                                                           \
    case __LINE__:                                                                                 \
        if ((poll_expr) != RT_READY)                                                               \
            return RT_PENDING;                                                                     \
    } while (0)

/* Gives other tasks a turn: wakes itself by reference and returns RT_PENDING;
 * the next poll continues after this line. */
#define RT_CORO_YIELD(co, cx)                                                                      \
    do {                                                                                           \
        (co)->line = __LINE__;                                                                     \
        rt_waker_wake_by_ref(rt_context_waker(cx));                                                \
        return RT_PENDING;                                                                         \
    case __LINE__:;                                                                                \
    } while (0)

/* Finishes the coroutine with `value` as its result. What it still holds is
 * released by rt_coro_cleanup (the task's drop). */
#define RT_RETURN(co, out, value)                                                                  \
    do {                                                                                           \
        (co)->line = RT_CORO_DONE;                                                                 \
        *(out) = (void *)(value);                                                                  \
        return RT_READY;                                                                           \
    } while (0)

/* Finishes the coroutine with `value` as its result and `code` (0, or a
 * negative errno) as its status, which a task whose state begins with this
 * coroutine finishes with (task.h, "Results and status"): its joiner, its
 * group and rt_task_wait report it. A coroutine nested in another's state
 * keeps it in co->status for its parent to read. */
#define RT_RETURN_STATUS(co, out, value, code)                                                     \
    do {                                                                                           \
        (co)->status = (code);                                                                     \
        RT_RETURN(co, out, value);                                                                 \
    } while (0)

/* Finishes the coroutine with the error `err` (a negative errno) as its
 * status and a NULL result: RT_RETURN_STATUS(co, out, NULL, err). */
#define RT_FAIL(co, out, err) RT_RETURN_STATUS(co, out, NULL, err)

/* Closes the body. Falling off the end finishes with a NULL result; polling a
 * finished coroutine again reports RT_READY with a NULL result. */
#define RT_CORO_END(co, out)                                                                       \
    RT__FALLTHROUGH;                                                                               \
    default:                                                                                       \
        break;                                                                                     \
        }                                                                                          \
        (co)->line = RT_CORO_DONE;                                                                 \
        *(out) = NULL;                                                                             \
        return RT_READY

#ifdef __cplusplus
}
#endif
#endif
