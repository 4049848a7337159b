/* The global injector on liburcu's wfcqueue; see injector.h for the contract.
 *
 * Ordering: cds_wfcq_enqueue's exchange on the tail is a full barrier
 * (uatomic_xchg), and liburcu orders the node's initialisation before the
 * link store that publishes it (cmm_smp_wmb, then CMM_STORE_SHARED); the
 * dequeue reads the link and then the node through that pointer (a dependent
 * load). So everything a producer wrote to a task before enqueueing it is
 * visible to the worker that dequeues it. The exchange is also the StoreLoad
 * barrier between the push and the producer's read of the idle state. */
#include "injector.h"
#include "fault.h"

#include <errno.h>

#include "atomic.h"

int rt__injector_init(rt__injector *inj)
{
    __cds_wfcq_init(&inj->head, &inj->tail);
    int err = rt__pthread_mutex_init(&inj->consumer_lock, NULL);
    return -err;
}

void rt__injector_destroy(rt__injector *inj)
{
    pthread_mutex_destroy(&inj->consumer_lock);
}

bool rt__injector_push(rt__injector *inj, struct cds_wfcq_node *node)
{
    cds_wfcq_node_init(node);
    rt__tsan_release(node);
    return !cds_wfcq_enqueue(&inj->head, &inj->tail, node);
}

void rt__injector_push_batch(rt__injector *inj, struct cds_wfcq_node **nodes, size_t n)
{
    struct __cds_wfcq_head batch_head;
    struct cds_wfcq_tail batch_tail;
    __cds_wfcq_init(&batch_head, &batch_tail);
    for (size_t i = 0; i < n; i++) {
        cds_wfcq_node_init(nodes[i]);
        rt__tsan_release(nodes[i]);
        cds_wfcq_enqueue(&batch_head, &batch_tail, nodes[i]);
    }
    /* The private queue has no concurrent enqueuers, so the "blocking" splice
     * never waits; the destination may be enqueued to concurrently. */
    __cds_wfcq_splice_blocking(&inj->head, &inj->tail, &batch_head, &batch_tail);
}

size_t rt__injector_pop_batch(rt__injector *inj, struct cds_wfcq_node **out, size_t max,
                              bool *would_block)
{
    *would_block = false;
    if (cds_wfcq_empty(&inj->head, &inj->tail))
        return 0;
    if (pthread_mutex_trylock(&inj->consumer_lock) != 0) {
        *would_block = true;
        return 0;
    }
    size_t n = 0;
    while (n < max) {
        struct cds_wfcq_node *node = __cds_wfcq_dequeue_nonblocking(&inj->head, &inj->tail);
        if (node == CDS_WFCQ_WOULDBLOCK) {
            *would_block = true;
            break;
        }
        if (node == NULL)
            break;
        rt__tsan_acquire(node);
        out[n++] = node;
    }
    pthread_mutex_unlock(&inj->consumer_lock);
    return n;
}

bool rt__injector_is_empty(rt__injector *inj)
{
    return cds_wfcq_empty(&inj->head, &inj->tail);
}
