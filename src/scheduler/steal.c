/* Work from elsewhere: batches from the wakes queue and the injector, and
 * steals from other workers' deques. */
#include "scheduler.h"

/* Takes a batch from an injector queue: returns the first task and pushes
 * the rest onto the own deque. */
static rt_task *take_batch(rt__worker *w, rt__injector *inj, size_t share)
{
    size_t room = RT_DEQUE_CAPACITY - rt__deque_len_any(&w->deque);
    size_t max = room / 2;
    if (max > RT_INJECTOR_BATCH)
        max = RT_INJECTOR_BATCH;
    if (share != 0 && max > share)
        max = share;
    if (max == 0)
        max = 1;
    struct cds_wfcq_node *nodes[RT_INJECTOR_BATCH];
    bool would_block;
    size_t n = rt__injector_pop_batch(inj, nodes, max, &would_block);
    /* Remembered for the worker loop: a producer preempted mid-enqueue (or
     * another consumer) makes the injector look busy though it yields
     * nothing; spinning on it would compete with that producer for CPU. */
    w->own.injector_would_block = would_block;
    if (n == 0)
        return NULL;
    rt__stat_add(&w->stats.injector_batches, 1);
    for (size_t i = 1; i < n; i++)
        rt__push_local(w, rt__task_of_node(nodes[i]));
    if (n > 1)
        rt__announce_local_work(w);
    return rt__task_of_node(nodes[0]);
}

/* Work from outside the worker: first what the reactor woke (a timer or a
 * descriptor became ready: latency matters), then spawned and remote work.
 * A backlog of a hundred thousand spawned tasks must not make a timer that
 * fired wait behind all of them. */
rt_task *rt__take_from_injector(rt__worker *w)
{
    /* A fair share of the reactor's last batch, so the other workers it
     * woke take theirs from the queue rather than steal them one by one. */
    rt_runtime *rt = w->rt;
    size_t share = rt__load_relaxed_u64(&rt->wakes_batch) / rt->nworkers + 1;
    rt_task *t = take_batch(w, &rt->wakes, share);
    bool wakes_busy = w->own.injector_would_block;
    if (t == NULL)
        t = take_batch(w, &rt->injector, 0);
    w->own.injector_would_block |= wakes_busy;
    return t;
}

static uint32_t next_random(rt__worker *w)
{
    uint32_t x = w->own.rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    w->own.rng = x;
    return x;
}

rt_task *rt__steal_from_others(rt__worker *w)
{
    rt_runtime *rt = w->rt;
    unsigned n = rt->nworkers;
    if (n < 2)
        return NULL;
    unsigned start = next_random(w) % n;
    for (unsigned i = 0; i < n; i++) {
        unsigned victim = (start + i) % n;
        if (victim == w->index)
            continue;
        rt__deque *d = &rt->workers[victim].deque;
        for (int tries = 0; tries < 4; tries++) {
            rt__stat_add(&w->stats.steal_attempts, 1);
            void *item = rt__deque_steal_any(d);
            if (item == NULL)
                break;
            if (item != RT_DEQUE_LOST) {
                rt__stat_add(&w->stats.steals, 1);
                RT__EV_STEAL(((rt_task *)item)->id, w->index, victim);
                return item;
            }
        }
    }
    return NULL;
}
