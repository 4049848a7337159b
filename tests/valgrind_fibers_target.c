/* The program tests/valgrind_test.sh runs under Valgrind's memcheck: fibers
 * that go a few KiB deep, yield and sleep there, on two workers and on
 * pooled stacks reused by later fibers, so that every kind of switch
 * happens many times. Prints the sum it computes. */
#include <asyncrt.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

__attribute__((noinline)) static int dive(int n)
{
    char frame[512];
    memset(frame, n, sizeof frame);
    if (n == 0) {
        if (rt_fiber_yield() != 0)
            return -1000;
        return frame[3];
    }
    return dive(n - 1) + frame[n];
}

static void *body(void *arg)
{
    int sum = 0;
    for (int i = 0; i < 10; i++) {
        sum += dive(8);
        if (rt_sleep_await(100000) != 0)
            return NULL;
    }
    return (void *)(intptr_t)(sum + (intptr_t)arg);
}

int main(void)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    rt_runtime *rt;
    if (rt_runtime_new(&cfg, &rt) < 0)
        return 1;
    intptr_t sum = 0;
    for (int round = 0; round < 3; round++) {
        rt_task *t[8];
        for (intptr_t i = 0; i < 8; i++)
            if (rt_fiber_spawn(rt, body, (void *)i, &t[i]) < 0)
                return 1;
        for (int i = 0; i < 8; i++) {
            void *v;
            int status;
            if (rt_task_wait(t[i], -1, &v, &status) < 0 || status != 0)
                return 1;
            sum += (intptr_t)v;
        }
    }
    printf("sum %ld\n", (long)sum);
    rt_runtime_free(rt);
    return 0;
}
