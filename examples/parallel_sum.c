/* Sums 1..N by splitting the range in halves down to a cutoff, one task per
 * half, written as straight-line coroutines: spawn two children, await both,
 * add. Shows rt_block_on, rt_spawn with a join handle awaited through an
 * rt_task_join operation, RT_AWAIT and RT_CORO_YIELD.
 *
 *   ./parallel_sum [N] [workers]        (defaults: 10000000 and all CPUs)
 */
#include <asyncrt.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A coroutine keeps everything it needs across an await in its state. */
struct sum_range {
    rt_coro co;        /* resume point */
    uint64_t lo, hi;   /* the half-open range [lo, hi) to add up */
    rt_task_join left; /* awaiting the two halves (each owns its join handle) */
    rt_task_join right;
};

#define CUTOFF 100000

static rt_poll sum_range_poll(void *state, rt_context *cx, void **out);

/* If this task is aborted while it waits, let its children go too: abort
 * those still running (a finished join holds no handle, task NULL: a no-op),
 * then drop the joins, which detach their handles. */
static void sum_range_drop(void *state)
{
    struct sum_range *s = state;
    rt_task_cancel(s->left.task);
    rt_task_cancel(s->right.task);
    RT_DROP(&s->left);
    RT_DROP(&s->right);
}

static rt_poll sum_range_poll(void *state, rt_context *cx, void **out)
{
    struct sum_range *s = state;
    RT_CORO_BEGIN(&s->co);
    if (s->hi - s->lo <= CUTOFF) {
        uint64_t total = 0;
        for (uint64_t i = s->lo; i < s->hi; i++)
            total += i;
        RT_RETURN(&s->co, out, (uintptr_t)total);
    }
    uint64_t mid = s->lo + (s->hi - s->lo) / 2;
    struct sum_range left = {.lo = s->lo, .hi = mid};
    struct sum_range right = {.lo = mid, .hi = s->hi};
    rt_task *handle;
    /* Each join operation takes over its child's handle at once, so the drop
     * above finds every child in one of them. */
    if (RT_SPAWN_STATE(NULL, sum_range_poll, sum_range_drop, &left, &handle) < 0) {
        fprintf(stderr, "spawn failed\n");
        RT_RETURN(&s->co, out, 0);
    }
    rt_task_join_init(&s->left, handle);
    if (RT_SPAWN_STATE(NULL, sum_range_poll, sum_range_drop, &right, &handle) < 0) {
        fprintf(stderr, "spawn failed\n");
        RT_RETURN(&s->co, out, 0);
    }
    rt_task_join_init(&s->right, handle);
    /* Let the children start before we wait (not needed, shows RT_CORO_YIELD). */
    RT_CORO_YIELD(&s->co, cx);
    RT_AWAIT(&s->co, cx, &s->left);
    RT_AWAIT(&s->co, cx, &s->right);
    RT_RETURN(&s->co, out, (uintptr_t)s->left.value + (uintptr_t)s->right.value);
    RT_CORO_END(&s->co, out);
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    rt_config cfg;
    rt_config_init(&cfg);
    if (argc > 2)
        cfg.workers = (unsigned)atoi(argv[2]);

    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err < 0) {
        fprintf(stderr, "rt_runtime_new: %s\n", rt_strerror(err));
        return 1;
    }
    struct sum_range root = {.lo = 1, .hi = n + 1};
    void *result;
    err = rt_block_on(rt, sum_range_poll, sum_range_drop, &root, sizeof(root), &result, NULL);
    if (err < 0) {
        fprintf(stderr, "rt_block_on: %s\n", rt_strerror(err));
        rt_runtime_free(rt);
        return 1;
    }
    uint64_t expected = n * (n + 1) / 2;
    printf("sum 1..%llu = %llu (%s) on %u workers\n", (unsigned long long)n,
           (unsigned long long)(uintptr_t)result, (uintptr_t)result == expected ? "ok" : "WRONG",
           rt_runtime_workers(rt));
    rt_runtime_free(rt);
    return (uintptr_t)result == expected ? 0 : 1;
}
