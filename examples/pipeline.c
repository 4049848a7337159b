/* A producer/consumer pipeline on fibers: P producer fibers each send 1..M
 * through one bounded channel to one consumer, which adds them up until the
 * channel reports the end of the stream (every sender gone: no count or
 * wait group needed). A full channel makes the producers wait:
 * backpressure.
 *
 *   ./pipeline [P] [M] [capacity] [workers]    (defaults: 8 100000 64 all CPUs)
 *
 * Prints "sum S" and exits 0 when S is the expected P * M * (M + 1) / 2. */
#define _POSIX_C_SOURCE 200809L /* sigwait, strdup (common.h) */

#include <asyncrt.h>

#include <stdint.h>
#include <stdio.h>

#include "common.h"

static uint64_t producers, count, capacity;

/* Sends 1..count, then lets its sender reference go (the end of the stream
 * once every producer has). */
static void *produce(void *ch)
{
    for (uint64_t n = 1; n <= count; n++)
        if (rt_chan_send_await(ch, (void *)(uintptr_t)n) < 0) /* the consumer went away */
            break;
    rt_chan_sender_drop(ch);
    return NULL;
}

static void *consume(void *arg)
{
    (void)arg;
    rt_chan *ch;
    if (rt_chan_new(capacity, &ch) < 0)
        return NULL;
    for (uint64_t i = 0; i < producers; i++) /* each owns a sender reference */
        if (rt_chan_sender_clone(ch) == 0 && rt_fiber_spawn(NULL, produce, ch, NULL) < 0)
            rt_chan_sender_drop(ch); /* not started: the sum comes out short */
    rt_chan_sender_drop(ch);         /* ours: now only the producers hold one */
    uint64_t sum = 0;
    void *n;
    while (rt_chan_recv_await(ch, &n) == 0) /* -EPIPE: every producer is done */
        sum += (uintptr_t)n;
    rt_chan_receiver_drop(ch, NULL, NULL);
    return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv)
{
    const char *usage = "pipeline [P] [M] [capacity] [workers]";
    producers = arg_number(argc, argv, 1, 8, 1000000, usage);
    count = arg_number(argc, argv, 2, 100000, UINT32_MAX, usage);
    capacity = arg_number(argc, argv, 3, 64, 1000000, usage);
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = (unsigned)arg_number(argc, argv, 4, 0, RT_MAX_WORKERS, usage);
    rt_runtime *rt;
    void *sum = NULL;
    int err = rt_runtime_new(&cfg, &rt);
    if (err == 0)
        err = rt_fiber_block_on(rt, NULL, consume, NULL, &sum, NULL);
    if (err < 0) {
        fprintf(stderr, "pipeline: %s\n", rt_strerror(err));
        return 1;
    }
    rt_runtime_free(rt);
    printf("sum %llu\n", (unsigned long long)(uintptr_t)sum);
    return (uintptr_t)sum == producers * (count * (count + 1) / 2) ? 0 : 1;
}
