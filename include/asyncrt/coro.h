/* asyncrt: stackless coroutine macros.
 *
 * They let a poll function read as straight-line code. The resume point lives
 * in an `rt_coro` field of the future's state; on every poll RT_CORO_BEGIN
 * jumps back to where the previous poll stopped.
 *
 *     struct fetch { rt_coro co; rt_task *child; void *value; };
 *
 *     static rt_poll fetch_poll(void *p, rt_context *cx, void **out)
 *     {
 *         struct fetch *f = p;
 *         RT_CORO_BEGIN(&f->co);
 *         rt_spawn(NULL, child_poll, NULL, NULL, 0, &f->child);
 *         RT_AWAIT(&f->co, rt_task_join(f->child, cx, &f->value, NULL));
 *         RT_YIELD(&f->co, cx);
 *         RT_RETURN(&f->co, out, f->value);
 *         RT_CORO_END(&f->co, out);
 *     }
 *
 * Rules, because the macros are a `switch` in disguise:
 * - Local variables do not survive an RT_AWAIT or RT_YIELD: keep anything
 *   needed after one in the state struct.
 * - Do not put RT_AWAIT or RT_YIELD inside a nested `switch`, and use each at
 *   most once per source line (the line number is the resume point).
 * - The poll expression given to RT_AWAIT is evaluated again on every poll
 *   until it returns RT_READY, so it must be a poll-style call that registers
 *   the context's waker before returning RT_PENDING.
 * - Zero-initialise the rt_coro (it is, when the whole state is zeroed).
 * - `co` (every macro) and `out` (RT_RETURN, RT_CORO_END) are dereferenced:
 *   they must not be NULL (the `out` a poll function receives never is).
 *   RT_YIELD with cx NULL wakes nothing, as rt_yield(NULL). */
#ifndef ASYNCRT_CORO_H
#define ASYNCRT_CORO_H

#include "future.h"

/* The resume point of one coroutine. */
typedef struct rt_coro {
    int line; /* 0: not started; RT_CORO_DONE: finished; else the resume line */
} rt_coro;

/* Value of rt_coro.line once the coroutine has returned. */
#define RT_CORO_DONE (-1)

/* Opens the coroutine body; resumes at the last suspension point. */
#define RT_CORO_BEGIN(co)                                                                          \
    switch ((co)->line) {                                                                          \
    case 0:

/* Suspends until the poll expression `poll_expr` yields RT_READY. */
#define RT_AWAIT(co, poll_expr)                                                                    \
    do {                                                                                           \
        (co)->line = __LINE__;                                                                     \
        /* fallthrough */                                                                          \
    case __LINE__:                                                                                 \
        if ((poll_expr) != RT_READY)                                                               \
            return RT_PENDING;                                                                     \
    } while (0)

/* Gives other tasks a turn: wakes itself by reference and returns RT_PENDING;
 * the next poll continues after this line. */
#define RT_YIELD(co, cx)                                                                           \
    do {                                                                                           \
        (co)->line = __LINE__;                                                                     \
        rt_waker_wake_by_ref(rt_context_waker(cx));                                                \
        return RT_PENDING;                                                                         \
    case __LINE__:;                                                                                \
    } while (0)

/* Finishes the coroutine with `value` as its result. */
#define RT_RETURN(co, out, value)                                                                  \
    do {                                                                                           \
        (co)->line = RT_CORO_DONE;                                                                 \
        *(out) = (void *)(value);                                                                  \
        return RT_READY;                                                                           \
    } while (0)

/* Closes the body. Falling off the end finishes with a NULL result; polling a
 * finished coroutine again reports RT_READY with a NULL result. */
#define RT_CORO_END(co, out)                                                                       \
    default:                                                                                       \
        break;                                                                                     \
        }                                                                                          \
        (co)->line = RT_CORO_DONE;                                                                 \
        *(out) = NULL;                                                                             \
        return RT_READY

#endif
