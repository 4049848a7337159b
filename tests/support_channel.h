/* What the channel suites (test_channel_oneshot.c, test_channel_mpsc.c,
 * test_channel_tasks.c) share: token and heap values, a dispose function
 * that frees, and a task that receives from a oneshot channel.
 * support_channel.c has the functions. */
#ifndef RT_TESTS_SUPPORT_CHANNEL_H
#define RT_TESTS_SUPPORT_CHANNEL_H

#include "support.h"

/* A plain token value (never dereferenced). */
#define V(x) ((void *)(uintptr_t)(x))

/* A heap value: AddressSanitizer sees it leaked or freed twice. */
struct msg {
    int seq;
};

struct msg *new_msg(int seq);

/* A dispose function that frees the value and counts it in
 * disposed_free_count. */
extern atomic_int disposed_free_count;
void dispose_free(void *value, void *arg);

/* What a oneshot_receiver saw: its receive, and a poll again after it (its
 * answer, and the operation's result and value after it). */
struct oneshot_result {
    int status;
    void *value;
    rt_poll again;
    int again_status;
    void *again_value;
};

/* Receives from a oneshot channel in a task (announcing `pending` once
 * waiting), then polls again and records both answers in *res when res is
 * not NULL; returns the value. With owns_receiver its drop releases the
 * receiver (freeing a value never received) and signals `dropped`. */
struct oneshot_receiver {
    rt_coro co;
    rt_oneshot *o;
    rt_oneshot_recv op;
    bool owns_receiver;
    bool announced;
    void *value;
    int status;
    struct oneshot_result *res;
    struct event *pending;
    struct event *dropped;
};

rt_poll oneshot_receiver_poll(void *state, rt_context *cx, void **out);
void oneshot_receiver_drop(void *state);

#endif
