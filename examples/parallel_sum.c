/* Sums 1..N by splitting the range in halves down to a cutoff, one fiber per
 * half: spawn the left half, add up the right one in this fiber (splitting
 * it the same way), then join the left one. Shows rt_fiber_block_on,
 * rt_fiber_spawn with a join handle and an rt_task_join awaited in a fiber.
 *
 *   ./parallel_sum [N] [workers]        (defaults: 10000000 and all CPUs) */
#define _POSIX_C_SOURCE 200809L /* sigwait, strdup (common.h) */

#include <asyncrt.h>

#include <stdint.h>
#include <stdio.h>

#include "common.h"

#define CUTOFF 100000

struct range {
    uint64_t lo, hi; /* [lo, hi) */
};

static void *sum(void *arg)
{
    struct range r = *(struct range *)arg; /* the spawner's copy may go */
    if (r.hi - r.lo <= CUTOFF) {
        uint64_t total = 0;
        for (uint64_t i = r.lo; i < r.hi; i++)
            total += i;
        return (void *)(uintptr_t)total;
    }
    uint64_t mid = r.lo + (r.hi - r.lo) / 2;
    struct range left = {r.lo, mid}, right = {mid, r.hi};
    rt_task *t;
    rt_task_join join;
    if (rt_fiber_spawn(NULL, sum, &left, &t) < 0 || rt_task_join_init(&join, t) < 0)
        return (void *)(uintptr_t)((uintptr_t)sum(&left) + (uintptr_t)sum(&right)); /* here */
    uintptr_t total = (uintptr_t)sum(&right);
    if (rt_fiber_await(&join.future) < 0) /* left lives here until the child ends */
        return 0;
    return (void *)(total + (uintptr_t)join.value);
}

int main(int argc, char **argv)
{
    const char *usage = "parallel_sum [N] [workers]";
    struct range all = {1, arg_number(argc, argv, 1, 10000000, UINT32_MAX, usage) + 1};
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = (unsigned)arg_number(argc, argv, 2, 0, RT_MAX_WORKERS, usage);
    rt_runtime *rt;
    void *result = NULL;
    int err = rt_runtime_new(&cfg, &rt);
    if (err == 0)
        err = rt_fiber_block_on(rt, NULL, sum, &all, &result, NULL);
    if (err < 0) {
        fprintf(stderr, "parallel_sum: %s\n", rt_strerror(err));
        return 1;
    }
    uint64_t n = all.hi - 1, expected = n * (n + 1) / 2;
    printf("sum 1..%llu = %llu (%s) on %u workers\n", (unsigned long long)n,
           (unsigned long long)(uintptr_t)result, (uintptr_t)result == expected ? "ok" : "WRONG",
           rt_runtime_workers(rt));
    rt_runtime_free(rt);
    return (uintptr_t)result == expected ? 0 : 1;
}
