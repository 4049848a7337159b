/* The injector (white box): many producers, single and batch pushes, two
 * consumers taking batches. Every node arrives exactly once, and each
 * producer's nodes arrive in the order it pushed them. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "injector.h"

#define PRODUCERS 4
#define PER_PRODUCER 200000u
#define CONSUMERS 2

struct item {
    struct cds_wfcq_node node; /* first: the node address is the item's */
    unsigned producer;
    unsigned seq;
};

static rt__injector inj;
static struct item items[PRODUCERS][PER_PRODUCER];
static atomic_uint seen[PRODUCERS][PER_PRODUCER];
static atomic_uint producers_done;
static atomic_ulong consumed;

static void *producer(void *arg)
{
    unsigned p = (unsigned)(uintptr_t)arg;
    for (unsigned i = 0; i < PER_PRODUCER;) {
        /* Alternate single pushes and batches of up to 16. */
        if (i % 3 == 0) {
            items[p][i].producer = p;
            items[p][i].seq = i;
            rt__injector_push(&inj, &items[p][i].node);
            i++;
        } else {
            struct cds_wfcq_node *batch[16];
            unsigned n = 0;
            while (n < 16 && i < PER_PRODUCER) {
                items[p][i].producer = p;
                items[p][i].seq = i;
                batch[n++] = &items[p][i].node;
                i++;
            }
            rt__injector_push_batch(&inj, batch, n);
        }
    }
    atomic_fetch_add(&producers_done, 1);
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    unsigned last_seq[PRODUCERS];
    bool any[PRODUCERS] = {false};
    for (;;) {
        struct cds_wfcq_node *out[32];
        bool would_block;
        size_t n = rt__injector_pop_batch(&inj, out, 32, &would_block);
        if (n == 0) {
            if (!would_block && atomic_load(&producers_done) == PRODUCERS &&
                rt__injector_is_empty(&inj))
                break;
            continue;
        }
        for (size_t k = 0; k < n; k++) {
            struct item *it = (struct item *)out[k];
            /* Per-producer FIFO as seen by one consumer. */
            if (any[it->producer])
                cr_assert_gt(it->seq, last_seq[it->producer], "producer order broken");
            any[it->producer] = true;
            last_seq[it->producer] = it->seq;
            cr_assert_eq(atomic_fetch_add(&seen[it->producer][it->seq], 1), 0,
                         "node delivered twice");
        }
        atomic_fetch_add(&consumed, n);
    }
    return NULL;
}

Test(injector, every_node_once_and_in_producer_order, .timeout = 120)
{
    cr_assert_eq(rt__injector_init(&inj), 0);
    pthread_t prod[PRODUCERS], cons[CONSUMERS];
    for (unsigned c = 0; c < CONSUMERS; c++)
        pthread_create(&cons[c], NULL, consumer, NULL);
    for (unsigned p = 0; p < PRODUCERS; p++)
        pthread_create(&prod[p], NULL, producer, (void *)(uintptr_t)p);
    for (unsigned p = 0; p < PRODUCERS; p++)
        pthread_join(prod[p], NULL);
    for (unsigned c = 0; c < CONSUMERS; c++)
        pthread_join(cons[c], NULL);
    cr_assert_eq(atomic_load(&consumed), (unsigned long)PRODUCERS * PER_PRODUCER);
    for (unsigned p = 0; p < PRODUCERS; p++)
        for (unsigned i = 0; i < PER_PRODUCER; i++)
            cr_assert_eq(atomic_load(&seen[p][i]), 1);
    cr_assert(rt__injector_is_empty(&inj));
    rt__injector_destroy(&inj);
}

Test(injector, push_reports_whether_it_was_empty)
{
    static struct item a, b;
    cr_assert_eq(rt__injector_init(&inj), 0);
    cr_assert(rt__injector_push(&inj, &a.node), "first push into an empty queue");
    cr_assert_not(rt__injector_push(&inj, &b.node));
    struct cds_wfcq_node *out[4];
    bool wb;
    cr_assert_eq(rt__injector_pop_batch(&inj, out, 4, &wb), 2);
    cr_assert_eq(out[0], &a.node);
    cr_assert_eq(out[1], &b.node);
    cr_assert_eq(rt__injector_pop_batch(&inj, out, 4, &wb), 0);
    cr_assert_not(wb);
    rt__injector_destroy(&inj);
}
