/* asyncrt-switch-bench: the fiber_switch workload (docs/benchmarks.md):
 * the library's own context switch between two contexts on one thread,
 * without the scheduler: M round trips A -> B -> A, timed as ns per round
 * trip (two switches). Linked against the internal library, since the
 * switch is not public. Prints one bench line, in asyncrt-bench's format.
 *
 *   asyncrt-switch-bench [--reps R] [--switches M] */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "switch.h"

static void *main_sp, *fiber_sp;
static uint64_t rounds_left;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* B: switches back at once, forever. */
_Noreturn static void bounce(void *arg)
{
    (void)arg;
    for (;;)
        rt__fiber_switch(&fiber_sp, main_sp, NULL);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    unsigned reps = 5;
    uint64_t m = 10000000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--reps") == 0)
            reps = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--switches") == 0)
            m = strtoull(argv[i + 1], NULL, 10);
    }
    if (reps == 0 || reps > 100 || m == 0) {
        fprintf(stderr, "asyncrt-switch-bench: --reps 1..100, --switches >= 1\n");
        return 2;
    }
    size_t size = 64 * 1024;
    unsigned char *stack =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack == MAP_FAILED) {
        perror("asyncrt-switch-bench: mmap");
        return 1;
    }
    fiber_sp = rt__fiber_make(stack + size, bounce);
    double per[100];
    for (unsigned r = 0; r <= reps; r++) { /* rep 0 warms up */
        uint64_t t0 = now_ns();
        for (rounds_left = m; rounds_left > 0; rounds_left--)
            rt__fiber_switch(&main_sp, fiber_sp, NULL);
        uint64_t t1 = now_ns();
        if (r > 0)
            per[r - 1] = (double)(t1 - t0) / (double)m;
    }
    qsort(per, reps, sizeof per[0], cmp);
    double median = reps % 2 ? per[reps / 2] : (per[reps / 2 - 1] + per[reps / 2]) / 2;
    printf("bench fiber_switch runtime=asyncrt workers=1 ops=%llu median_ns_per_op=%.2f "
           "min_ns_per_op=%.2f max_ns_per_op=%.2f\n",
           (unsigned long long)m, median, per[0], per[reps - 1]);
    return 0;
}
