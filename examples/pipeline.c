/* A producer/consumer pipeline: P producer tasks, spawned into a task group,
 * each send M numbers through one bounded channel to a single consumer task,
 * which adds them up until the channel reports end of stream (every sender
 * gone). A full channel makes the producers wait: backpressure. Shows
 * rt_chan, rt_chan_send, rt_chan_recv, rt_group_spawn and rt_group_close.
 *
 *   ./pipeline [P] [M] [capacity] [workers]    (defaults: 8 100000 64 all CPUs)
 *
 * Prints "sum S" and exits 0 when S is the expected P * M * (M + 1) / 2.
 */
#include <asyncrt.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* One producer: sends 1..count, then lets its sender reference go. */
struct producer {
    rt_coro co;        /* resume point */
    rt_chan *ch;       /* holds one sender reference until the drop */
    uint64_t count;    /* how many numbers to send */
    uint64_t next;     /* the next number */
    rt_chan_send send; /* the send in progress (kept across the await) */
};

/* Runs once whether the producer finished or was cancelled. */
static void producer_drop(void *state)
{
    struct producer *p = state;
    rt_coro_cleanup(&p->co); /* the send in flight, if any */
    rt_chan_sender_drop(p->ch);
}

static rt_poll producer_poll(void *state, rt_context *cx, void **out)
{
    struct producer *p = state;
    RT_CORO_BEGIN(&p->co);
    for (p->next = 1; p->next <= p->count; p->next++) {
        rt_chan_send_init(&p->send, p->ch, (void *)(uintptr_t)p->next);
        RT_AWAIT(&p->co, cx, &p->send);
        if (p->send.result != 0) /* the consumer went away */
            RT_RETURN(&p->co, out, NULL);
    }
    RT_CORO_END(&p->co, out);
}

/* The pipeline: starts the producers, consumes, then closes the group. */
struct pipeline {
    rt_coro co;
    uint64_t producers, count, capacity;
    rt_chan *ch;         /* receiver side (plus one sender while spawning) */
    rt_group *group;     /* the producers */
    rt_group_join close; /* awaiting the group's end */
    rt_chan_recv recv;   /* the receive in flight */
    uint64_t sum;
};

static void pipeline_drop(void *state)
{
    struct pipeline *p = state;
    rt_coro_cleanup(&p->co); /* the receive or the close in flight */
    rt_group_free(p->group); /* cancels producers still running */
    rt_chan_receiver_drop(p->ch, NULL, NULL);
}

static rt_poll pipeline_poll(void *state, rt_context *cx, void **out)
{
    struct pipeline *p = state;
    RT_CORO_BEGIN(&p->co);
    if (rt_chan_new(p->capacity, &p->ch) < 0 || rt_group_new(NULL, NULL, NULL, &p->group) < 0)
        RT_RETURN(&p->co, out, NULL);
    for (uint64_t i = 0; i < p->producers; i++) {
        /* Each producer owns a sender reference of its own. */
        rt_chan_sender_clone(p->ch);
        struct producer prod = {.ch = p->ch, .count = p->count};
        if (rt_group_spawn(p->group, NULL, producer_poll, producer_drop, &prod, sizeof prod, NULL) <
            0) {
            rt_chan_sender_drop(p->ch);
            fprintf(stderr, "spawn failed\n");
        }
    }
    rt_chan_sender_drop(p->ch); /* ours: now only the producers hold one */
    for (;;) {
        rt_chan_recv_init(&p->recv, p->ch);
        RT_AWAIT(&p->co, cx, &p->recv);
        if (p->recv.result != 0) /* -EPIPE: every producer is done */
            break;
        p->sum += (uintptr_t)p->recv.value;
    }
    rt_group_close_init(&p->close, p->group);
    RT_AWAIT(&p->co, cx, &p->close);
    RT_RETURN(&p->co, out, (uintptr_t)p->sum);
    RT_CORO_END(&p->co, out);
}

int main(int argc, char **argv)
{
    struct pipeline p = {
        .producers = argc > 1 ? strtoull(argv[1], NULL, 10) : 8,
        .count = argc > 2 ? strtoull(argv[2], NULL, 10) : 100000,
        .capacity = argc > 3 ? strtoull(argv[3], NULL, 10) : 64,
    };
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = argc > 4 ? (unsigned)atoi(argv[4]) : 0;
    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err < 0) {
        fprintf(stderr, "rt_runtime_new: %s\n", rt_strerror(err));
        return 1;
    }
    void *sum = NULL;
    err = rt_block_on(rt, pipeline_poll, pipeline_drop, &p, sizeof p, &sum, NULL);
    rt_runtime_free(rt);
    if (err < 0) {
        fprintf(stderr, "rt_block_on: %s\n", rt_strerror(err));
        return 1;
    }
    uint64_t expected = p.producers * (p.count * (p.count + 1) / 2);
    printf("sum %llu\n", (unsigned long long)(uintptr_t)sum);
    return (uintptr_t)sum == expected ? 0 : 1;
}
