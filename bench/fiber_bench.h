/* The fiber workloads of asyncrt-bench (fiber_bench.c). Each runs one
 * repetition and returns its elapsed nanoseconds. */
#ifndef ASYNCRT_BENCH_FIBER_BENCH_H
#define ASYNCRT_BENCH_FIBER_BENCH_H

#include <asyncrt.h>

#include <stdint.h>
#include <stdlib.h>

/* Reports a failure and exits 1 (bench.c). */
_Noreturn void bench_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

uint64_t fiber_bench_spawn(rt_runtime *rt, uint64_t n);
uint64_t fiber_bench_spawn_remote(rt_runtime *rt, uint64_t n);
uint64_t fiber_bench_yield(rt_runtime *rt, uint64_t tasks, uint64_t yields);
uint64_t fiber_bench_ping_pong(rt_runtime *rt, uint64_t pairs, uint64_t rounds);
uint64_t fiber_bench_chained_spawn(rt_runtime *rt, uint64_t depth);
uint64_t fiber_bench_fork_join(rt_runtime *rt, uint64_t n, uint64_t *value);
uint64_t fiber_bench_skynet(rt_runtime *rt, uint64_t depth, uint64_t *sum);

/* --idle-fibers N: starts N fibers that each wait on one channel receive,
 * prints `bench idle_fibers ... rss_kib=... rss_per_fiber_b=...` once all
 * wait, then ends them. */
void fiber_bench_idle(rt_runtime *rt, uint64_t n, unsigned workers);

#endif
