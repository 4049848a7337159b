/* Combinators over any operation: a time limit, the first of several, all of
 * several. Each polls its children with its own context, so one waker (the
 * task's) is stored wherever a child waits, and a wake of any child polls
 * the combinator again. Children are never owned, only polled and dropped. */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include <asyncrt/combine.h>
#include <asyncrt/diag.h>

#include "operation.h"
#include "common.h"

/* rt_join_all.done has a bit for each operation. */
_Static_assert(RT_COMBINE_MAX < 32, "RT_COMBINE_MAX must fit rt_join_all.done");

/* An init that fails drops the operations it was given, as the header says:
 * the combinator is finished at once, so nothing else would drop them. Only
 * the first RT_COMBINE_MAX entries of the caller's array are read. */
static void drop_given(rt_future *const *futures, size_t count)
{
    if (futures == NULL)
        return;
    for (size_t i = 0; i < count && i < RT_COMBINE_MAX; i++)
        rt_future_drop(futures[i]);
}

/* ---- Timeout and deadline ----------------------------------------------------- */

/* The inner operation first, so one that is ready wins over a deadline that
 * passed in the same instant: its work is done and must not be lost. */
static rt_poll timeout_vpoll(rt_future *f, rt_context *cx)
{
    rt_timeout *t = (rt_timeout *)f;
    if (rt__future_poll_inline(t->inner, cx) == RT_READY) {
        RT_DROP(&t->sleep);
        return rt__future_finish(f, t->inner->result);
    }
    if (RT_POLL_OP(&t->sleep, cx) == RT_PENDING)
        return RT_PENDING;
    int64_t err = t->sleep.result < 0 ? t->sleep.result : -ETIMEDOUT;
    rt_future_drop(t->inner);
    return rt__future_finish(f, err);
}

static void timeout_vdrop(rt_future *f)
{
    rt_timeout *t = (rt_timeout *)f;
    rt_future_drop(t->inner);
    RT_DROP(&t->sleep);
}

/* The fields are the time limit's; the inner operation, whose fields are
 * those of another kind, appears in the words only. */
static void timeout_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_timeout *t = (const rt_timeout *)f;
    info->kind = RT_WAIT_TIMEOUT;
    info->deadline_ns = t->sleep.deadline_ns;
    rt__wait_printf(info, "timeout in ");
    rt__wait_from_now(info, t->sleep.deadline_ns);
    rt_wait_info_append(info, " around: ", t->inner);
}

static const rt_future_vtable timeout_vtable = {timeout_vpoll, timeout_vdrop, timeout_vdescribe};

RT_EXPORT int rt_timeout_until_init(rt_timeout *t, rt_runtime *rt, rt_future *inner,
                                    int64_t deadline_ns)
{
    int err = -EINVAL;
    if (t != NULL) {
        memset(t, 0, sizeof(*t));
        t->future.vtable = &timeout_vtable;
        t->inner = inner;
        if (inner != NULL)
            err = rt_sleep_until_init(&t->sleep, rt, deadline_ns);
        if (err < 0)
            rt__future_finish(&t->future, err);
    }
    if (err < 0)
        rt_future_drop(inner);
    return err;
}

RT_EXPORT int rt_timeout_init(rt_timeout *t, rt_runtime *rt, rt_future *inner, int64_t duration_ns)
{
    int64_t now = rt_now_ns();
    int64_t deadline = duration_ns > INT64_MAX - now ? INT64_MAX : now + duration_ns;
    return rt_timeout_until_init(t, rt, inner, deadline);
}

/* ---- Select ------------------------------------------------------------------- */

/* Copies the array after checking it; shared by select and join_all. */
static int arms_copy(rt_future **arms, size_t *count, rt_future *const *futures, size_t n)
{
    if (futures == NULL || n == 0 || n > RT_COMBINE_MAX)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        if (futures[i] == NULL)
            return -EINVAL;
        arms[i] = futures[i];
    }
    *count = n;
    return 0;
}

static rt_poll select_vpoll(rt_future *f, rt_context *cx)
{
    rt_select *op = (rt_select *)f;
    /* From the first arm chosen at init, round to the one before it. */
    size_t i = op->first;
    for (size_t n = 0; n < op->count; n++, i = i + 1 == op->count ? 0 : i + 1) {
        if (rt__future_poll_inline(op->arms[i], cx) != RT_READY)
            continue;
        /* The result first: an arm given twice is the winner, not a loser
         * to drop, and one that stays pollable (an interval) keeps it. */
        int64_t result = op->arms[i]->result;
        op->index = i;
        for (size_t j = 0; j < op->count; j++)
            if (op->arms[j] != op->arms[i])
                rt_future_drop(op->arms[j]);
        return rt__future_finish(f, result);
    }
    return RT_PENDING;
}

static void select_vdrop(rt_future *f)
{
    rt_select *op = (rt_select *)f;
    for (size_t i = 0; i < op->count; i++)
        rt_future_drop(op->arms[i]);
}

static void select_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_select *op = (const rt_select *)f;
    info->kind = RT_WAIT_SELECT;
    rt__wait_printf(info, "first of %zu:", op->count);
    for (size_t i = 0; i < op->count; i++)
        rt_wait_info_append(info, i == 0 ? " " : " | ", op->arms[i]);
}

static const rt_future_vtable select_vtable = {select_vpoll, select_vdrop, select_vdescribe};

/* The per-thread generator of the arm a fair select polls first: an
 * xorshift32, seeded from the thread's own address the first time. It only
 * picks where a select starts (read at init, never across an await), so
 * selects initialised in a loop, or several interleaved on one thread, do
 * not fall into step with each other as a plain counter would. */
static __thread uint32_t select_rng;

static size_t select_pick(size_t count)
{
    uint32_t x = select_rng;
    if (rt__unlikely(x == 0)) {
        uint64_t a = (uintptr_t)&select_rng;
        x = (uint32_t)(a ^ (a >> 32)) | 1u;
    }
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    select_rng = x;
    /* Lemire's multiply-shift: an index below count without a division. */
    return (size_t)(((uint64_t)x * count) >> 32);
}

static int select_init(rt_select *op, rt_future *const *futures, size_t count, bool biased)
{
    int err = -EINVAL;
    if (op != NULL) {
        memset(op, 0, sizeof(*op));
        op->future.vtable = &select_vtable;
        err = arms_copy(op->arms, &op->count, futures, count);
        op->index = op->count;
        if (err < 0)
            rt__future_finish(&op->future, err);
        else if (!biased && op->count > 1)
            op->first = select_pick(op->count);
    }
    if (err < 0)
        drop_given(futures, count);
    return err;
}

RT_EXPORT int rt_select_init(rt_select *op, rt_future *const *futures, size_t count)
{
    return select_init(op, futures, count, false);
}

RT_EXPORT int rt_select_biased_init(rt_select *op, rt_future *const *futures, size_t count)
{
    return select_init(op, futures, count, true);
}

/* ---- Join all ----------------------------------------------------------------- */

static void join_all_drop_rest(rt_join_all *op)
{
    for (size_t i = 0; i < op->count; i++)
        if (!(op->done & (1u << i)))
            rt_future_drop(op->arms[i]);
}

static rt_poll join_all_vpoll(rt_future *f, rt_context *cx)
{
    rt_join_all *op = (rt_join_all *)f;
    for (size_t i = 0; i < op->count; i++) {
        if (op->done & (1u << i))
            continue;
        if (rt__future_poll_inline(op->arms[i], cx) != RT_READY)
            continue;
        op->done |= 1u << i;
        if (op->arms[i]->result < 0 && op->failed == op->count) {
            op->failed = i;
            if (op->flags & RT_JOIN_CANCEL_ON_ERROR) {
                int64_t err = op->arms[i]->result;
                join_all_drop_rest(op);
                return rt__future_finish(f, err);
            }
        }
    }
    if (op->done != (1u << op->count) - 1)
        return RT_PENDING;
    /* The first error's result is stable: that operation has finished. */
    return rt__future_finish(f, op->failed == op->count ? 0 : op->arms[op->failed]->result);
}

static void join_all_vdrop(rt_future *f)
{
    join_all_drop_rest((rt_join_all *)f);
}

/* Only the operations still unfinished are worth words. */
static void join_all_vdescribe(const rt_future *f, rt_wait_info *info)
{
    const rt_join_all *op = (const rt_join_all *)f;
    info->kind = RT_WAIT_JOIN_ALL;
    rt__wait_printf(info, "all of %zu (%d done):", op->count, __builtin_popcount(op->done));
    const char *sep = " ";
    for (size_t i = 0; i < op->count; i++) {
        if (op->done & (1u << i))
            continue;
        rt_wait_info_append(info, sep, op->arms[i]);
        sep = " | ";
    }
}

static const rt_future_vtable join_all_vtable = {join_all_vpoll, join_all_vdrop,
                                                 join_all_vdescribe};

RT_EXPORT int rt_join_all_init(rt_join_all *op, rt_future *const *futures, size_t count,
                               unsigned flags)
{
    int err = -EINVAL;
    if (op != NULL) {
        memset(op, 0, sizeof(*op));
        op->future.vtable = &join_all_vtable;
        if ((flags & ~RT_JOIN_CANCEL_ON_ERROR) == 0)
            err = arms_copy(op->arms, &op->count, futures, count);
        op->flags = flags;
        op->failed = op->count;
        if (err < 0)
            rt__future_finish(&op->future, err);
    }
    if (err < 0)
        drop_given(futures, count);
    return err;
}
