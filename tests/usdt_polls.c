/* For tests/usdt_test.sh: polls N tasks (argument; default 1000) on two
 * workers, each task exactly once, so that a tracer counting the
 * asyncrt:poll_start probe sees at least N. Linked against the shared
 * library, the file perf attaches its probes to. Prints "polled N". */
#include <asyncrt.h>

#include <stdio.h>
#include <stdlib.h>

static rt_poll once_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = NULL;
    return RT_READY;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 10) : 1000;
    if (n <= 0 || n > 1000000) {
        fprintf(stderr, "usage: usdt_polls [N in 1..1000000]\n");
        return 2;
    }
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err != 0) {
        fprintf(stderr, "usdt_polls: rt_runtime_new: %s\n", rt_strerror(err));
        return 1;
    }
    rt_task **tasks = calloc((size_t)n, sizeof(*tasks));
    if (tasks == NULL) {
        fprintf(stderr, "usdt_polls: out of memory\n");
        return 1;
    }
    for (long i = 0; i < n; i++) {
        err = rt_spawn(rt, once_poll, NULL, NULL, 0, &tasks[i]);
        if (err != 0) {
            fprintf(stderr, "usdt_polls: rt_spawn: %s\n", rt_strerror(err));
            return 1;
        }
    }
    for (long i = 0; i < n; i++) {
        err = rt_task_wait(tasks[i], -1, NULL, NULL);
        if (err != 0) {
            fprintf(stderr, "usdt_polls: rt_task_wait: %s\n", rt_strerror(err));
            return 1;
        }
    }
    free(tasks);
    err = rt_runtime_free(rt);
    if (err != 0) {
        fprintf(stderr, "usdt_polls: rt_runtime_free: %s\n", rt_strerror(err));
        return 1;
    }
    printf("polled %ld\n", n);
    return 0;
}
