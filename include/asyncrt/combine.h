/* asyncrt: combinators over any operation.
 *
 * A timeout, a select and a join_all are operations themselves (see
 * future.h), so they nest: a timeout around a select of a read and a
 * channel receive is
 *
 *     rt_io_read_init(&s->rd, io, s->buf, sizeof s->buf);
 *     rt_chan_recv_init(&s->rx, ch);
 *     rt_select_init(&s->sel, RT_FUTURES(&s->rd.future, &s->rx.future));
 *     rt_timeout_init(&s->limit, NULL, &s->sel.future, RT_SEC(30));
 *     RT_AWAIT(&s->co, cx, &s->limit);
 *     // s->limit.result: -ETIMEDOUT, or what the select reported;
 *     // s->sel.index: which of the two finished (when one did).
 *
 * A combinator does not own the memory of its operations (they live next
 * to it, in the task's state); it polls them with its own context and drops
 * them when it is dropped or no longer needs them, so dropping the outermost
 * one (rt_coro_cleanup does it for a coroutine) releases the whole tree.
 * Every operation it is given must have been initialised (a zeroed one
 * finishes at once with -EINVAL).
 * Abort safety is that of the operations inside: what a dropped receive,
 * send or lock leaves behind is said in their headers (a receive that did
 * not complete keeps its message in the channel, a send its value, a lock
 * not granted is not held). */
#ifndef ASYNCRT_COMBINE_H
#define ASYNCRT_COMBINE_H

#include <stddef.h>
#include <stdint.h>

#include "future.h"
#include "runtime.h"
#include "timer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most operations one select or join_all takes (nest them for more). */
#define RT_COMBINE_MAX 16

/* Expands to "array, count" for the init functions below:
 * rt_select_init(&op, RT_FUTURES(&a.future, &b.future)). */
#define RT_FUTURES(...)                                                                            \
    (rt_future *const[]){__VA_ARGS__},                                                             \
        sizeof((rt_future *const[]){__VA_ARGS__}) / sizeof(rt_future *)

/* ---- Timeout and deadline --------------------------------------------------*/

/* An operation with a time limit. Its result is the inner operation's when
 * that finished first, or -ETIMEDOUT when the time ran out first (the inner
 * one is then dropped: its result is -ECANCELED), or a timer error
 * (-ENOMEM, -ESHUTDOWN; the inner one is dropped too). */
typedef struct rt_timeout {
    RT_FUTURE_HEADER;
    rt_future *inner; /* the operation limited, not owned */
    rt_sleep sleep;   /* the limit */
} rt_timeout;

/* Limits `inner` to `duration_ns` from now (rt: NULL means rt_current_runtime()).
 * Errors: -EINVAL (t or inner NULL, no runtime); the inner operation is then
 * dropped, since nothing else would drop it. Around a join, a time limit
 * that runs out detaches the task unless the join was set to abort it
 * (rt_task_join.cancel_on_drop). Never polled, a timeout holds nothing of
 * its own (its timer is armed at the first poll): it needs a drop only
 * when `inner` does (a join, a buffered read...), and dropping it drops
 * `inner`. Any thread. */
int rt_timeout_init(rt_timeout *t, rt_runtime *rt, rt_future *inner, int64_t duration_ns);

/* Limits `inner` to an absolute deadline on rt_now_ns()'s clock. Errors,
 * and what one never polled holds, as rt_timeout_init. */
int rt_timeout_until_init(rt_timeout *t, rt_runtime *rt, rt_future *inner, int64_t deadline_ns);

/* ---- Select ----------------------------------------------------------------*/

/* The first of several operations to finish. Each poll polls them all,
 * starting from the arm `first` and going round; the first to finish wins:
 * `index` says which, `result` is its result, and every other one is
 * dropped at once (each then reports -ECANCELED in its own result, except a
 * channel send a receiver had already taken, which reports 0: check it when
 * that matters). Dropping an unfinished select drops them all.
 * Fair by default, as Go's select and Tokio's select!: rt_select_init picks
 * `first` at random, afresh at every init, so when several arms are ready
 * at once each wins as often as the others and none starves, also for a
 * select initialised again in a loop. rt_select_biased_init polls in the
 * order given (`first` 0), for a caller that wants the first ready arm to
 * win, as Tokio's `biased;` does. */
typedef struct rt_select {
    RT_FUTURE_HEADER;
    rt_future *arms[RT_COMBINE_MAX]; /* the operations, not owned */
    size_t count;                    /* how many */
    size_t index;                    /* the winner; count until then */
    size_t first;                    /* the arm each poll starts from */
} rt_select;

/* Prepares a fair select over futures[0..count) (1 <= count <=
 * RT_COMBINE_MAX; the array is copied, the operations are not). Errors:
 * -EINVAL (op NULL, futures NULL, count out of range, a NULL entry); the
 * operations given (the first RT_COMBINE_MAX entries) are then dropped.
 * Never polled, a select holds nothing of its own: it needs a drop only
 * when one of its arms does (a join, a buffered read...), and dropping it
 * drops every arm. Any thread. */
int rt_select_init(rt_select *op, rt_future *const *futures, size_t count);

/* The same, biased: the arms are polled in the order given, so the first
 * ready one wins. Arguments, errors, and what one never polled holds, as
 * rt_select_init. */
int rt_select_biased_init(rt_select *op, rt_future *const *futures, size_t count);

/* ---- Join all --------------------------------------------------------------*/

/* Every one of several operations, polled together until all have finished.
 * Result: 0 when each finished with a result >= 0, else the first negative
 * result seen (in the order they finished), with `failed` its index. With
 * RT_JOIN_CANCEL_ON_ERROR, that first error drops the unfinished ones at
 * once and the join_all finishes. Each operation's own outcome stays in its
 * own result. Dropping an unfinished join_all drops those not finished. */
typedef struct rt_join_all {
    RT_FUTURE_HEADER;
    rt_future *arms[RT_COMBINE_MAX]; /* the operations, not owned */
    size_t count;                    /* how many */
    size_t failed;                   /* the first that failed; count if none */
    uint32_t done;                   /* bit i: arms[i] finished */
    unsigned flags;                  /* RT_JOIN_* */
} rt_join_all;

/* rt_join_all_init flag: the first error cancels the rest. */
#define RT_JOIN_CANCEL_ON_ERROR 1u

/* Prepares a join over futures[0..count) (1 <= count <= RT_COMBINE_MAX; the
 * array is copied). Errors: -EINVAL (op NULL, futures NULL, count out of
 * range, a NULL entry, unknown flags); the operations given (the first
 * RT_COMBINE_MAX entries) are then dropped. Never polled, a join_all holds
 * nothing of its own: it needs a drop only when one of its operations
 * does, and dropping it drops them all. Any thread. */
int rt_join_all_init(rt_join_all *op, rt_future *const *futures, size_t count, unsigned flags);

#ifdef __cplusplus
}
#endif
#endif
