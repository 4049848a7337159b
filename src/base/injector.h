/* The global injector: where tasks spawned or woken off-worker wait for a
 * worker, and where a worker's full deque spills half of itself.
 *
 * A liburcu wait-free concurrent queue (wfcqueue). Producers (any thread)
 * enqueue with one atomic exchange on the tail, then link the previous node.
 * Consumers (workers) serialize on a mutex and use only the non-blocking
 * dequeue: the blocking one may sleep 10 ms when a producer was preempted
 * between its exchange and its link store; the non-blocking one reports that
 * as "would block", and the worker yields its CPU and comes back. No task is
 * stranded meanwhile: rt__injector_is_empty() looks at the tail, which the
 * exchange already moved, so the parking re-check of every worker sees the
 * queue as non-empty until the node has been taken.
 *
 * TSan cannot see liburcu's atomics, so each hand-off is annotated: release on
 * the node before enqueue, acquire after dequeue. */
#ifndef RT_SRC_INJECTOR_H
#define RT_SRC_INJECTOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urcu/wfcqueue.h>

#include "common.h"

typedef struct rt__injector {
    /* Consumer side: the head and the lock that serializes dequeuers. */
    RT_ALIGNED_CACHELINE struct __cds_wfcq_head head;
    pthread_mutex_t consumer_lock;
    /* Producer side: the tail every enqueue exchanges. */
    RT_ALIGNED_CACHELINE struct cds_wfcq_tail tail;
} rt__injector;

int rt__injector_init(rt__injector *inj);
void rt__injector_destroy(rt__injector *inj);

/* Enqueues one node. Returns true when the queue looked empty before. Any thread. */
bool rt__injector_push(rt__injector *inj, struct cds_wfcq_node *node);

/* Enqueues `n` nodes in order with a single splice into the queue. Any thread. */
void rt__injector_push_batch(rt__injector *inj, struct cds_wfcq_node **nodes, size_t n);

/* Dequeues up to `max` nodes into `out` in FIFO order. Returns how many.
 * *would_block is set when a producer was caught mid-enqueue (the queue is not
 * empty; retry later). Never waits: when another consumer holds the lock it
 * returns 0 with *would_block set. Any thread. */
size_t rt__injector_pop_batch(rt__injector *inj, struct cds_wfcq_node **out, size_t max,
                              bool *would_block);

/* True when nothing is queued (a snapshot). Any thread. */
bool rt__injector_is_empty(rt__injector *inj);

#endif
