/* Pushing work: where a task goes when it becomes runnable (the LIFO slot,
 * the own deque, a local task's worker, the injector, the wakes queue), and
 * the drain of every queue at shutdown. Each push that makes work visible
 * to other workers announces it to the idle coordinator (idle.c). */
#include "scheduler.h"

void rt__spill_half(rt__worker *w)
{
    void *items[RT_DEQUE_CAPACITY / 2];
    size_t n = rt__deque_spill_owner(&w->deque, items, RT_DEQUE_CAPACITY / 2);
    if (n == 0)
        return; /* thieves made room meanwhile */
    struct cds_wfcq_node *nodes[RT_DEQUE_CAPACITY / 2];
    for (size_t i = 0; i < n; i++)
        nodes[i] = &((rt_task *)items[i])->node;
    rt__injector_push_batch(&w->rt->injector, nodes, n);
    rt__stat_add(&w->stats.spills, 1);
    /* The injector's exchange was the full barrier before this check. */
    rt__notify_parked(w->rt);
}

/* Schedules a local task: onto its worker's private FIFO when that worker is
 * the caller, else into the worker's inbox, waking it. Never onto a deque,
 * the LIFO slot or the injector, where another worker could take it. */
static void schedule_pinned(rt_task *t, int pinned)
{
    rt__worker *target = &t->rt->workers[pinned];
    if (rt__worker_current() == target) {
        rt__push_pinned_local(target, t);
        return;
    }
    rt__injector_push(&target->inbox, &t->node);
    RT__DEBUG_YIELD(); /* the worker may be parking right here */
    rt__unpark_worker(target);
}

void rt__schedule(rt_task *t)
{
    rt__worker *w = rt__worker_current();
    rt_runtime *rt = t->rt;
    int pinned = rt__task_pinned(t);
    if (rt__unlikely(pinned >= 0)) {
        schedule_pinned(t, pinned);
        return;
    }
    if (w != NULL && w->rt == rt) {
        /* The task scheduled last runs next, from the worker's LIFO slot: no
         * deque traffic and no fence for the spawn-then-finish and
         * wake-then-wait patterns (chained spawns, request/response pairs).
         * Waking a sleeper for it would only make the sleeper find nothing.
         * The task it displaces is surplus: it goes to the deque, where
         * thieves can take it, and is announced, from inside a poll only once
         * when the poll returns (a task spawning a thousand children pays one
         * StoreLoad fence, not a thousand). A full deque spills to the
         * injector and notifies at once (spill_half), so a long poll still
         * gets help with a large burst. */
        rt_task *displaced = w->own.lifo;
        w->own.lifo = t;
        if (displaced == NULL)
            return;
        rt__push_local(w, displaced);
        if (w->own.current != NULL)
            w->own.announce_after_poll = true;
        else
            rt__announce_local_work(w);
        return;
    }
    rt__injector_push(&rt->injector, &t->node);
    RT__DEBUG_YIELD(); /* the last worker may be parking right here */
    rt__notify_parked(rt);
}

void rt__schedule_woken(rt_runtime *rt, rt_task **tasks, unsigned n)
{
    /* A local task goes to its own worker's inbox, never the shared queue. */
    unsigned shared = 0;
    for (unsigned i = 0; i < n; i++) {
        int pinned = rt__task_pinned(tasks[i]);
        if (rt__unlikely(pinned >= 0))
            schedule_pinned(tasks[i], pinned);
        else
            tasks[shared++] = tasks[i];
    }
    n = shared;
    if (n == 0)
        return;
    struct cds_wfcq_node *nodes[RT__WAKE_BATCH];
    for (unsigned done = 0; done < n;) {
        unsigned k = n - done < RT__WAKE_BATCH ? n - done : RT__WAKE_BATCH;
        for (unsigned i = 0; i < k; i++)
            nodes[i] = &tasks[done + i]->node;
        rt__injector_push_batch(&rt->wakes, nodes, k);
        done += k;
    }
    rt__store_relaxed_u64(&rt->wakes_batch, n);
    /* The splice's exchange was the StoreLoad barrier. Wake as many parked
     * workers as there are tasks, at most: each takes a share. */
    rt__unpark_workers(rt, n, false);
}

void rt__requeue_elsewhere(rt__worker *w, rt_task *t)
{
    rt_runtime *rt = w->rt;
    if (rt->nworkers == 1) {
        rt__defer(w, t);
        return;
    }
    /* The next worker's inbox, as a local task's wake from another thread
     * goes (schedule_pinned): that worker runs it next, this one cannot
     * take it back. Still claimed (RUNNING): the popping worker polls it
     * without a read-modify-write; the inbox's enqueue is the release its
     * dequeue acquires. The task is not pinned, so its later wakes go
     * wherever any task's go. */
    rt__worker *target = &rt->workers[(w->index + 1) % rt->nworkers];
    rt__injector_push(&target->inbox, &t->node);
    RT__DEBUG_YIELD(); /* the worker may be parking right here */
    rt__unpark_worker(target);
}

void rt__yield_elsewhere(rt_context *cx)
{
    rt__worker *w = rt__worker_current();
    rt_waker_wake_by_ref(rt_context_waker(cx));
    if (w != NULL && w->own.current_notified)
        w->own.yield_elsewhere = true;
}

void rt__defer(rt__worker *w, rt_task *t)
{
    if (rt__task_pinned(t) >= 0)
        w->own.deferred_pinned++;
    rt__task_fifo_append(&w->own.deferred_head, &w->own.deferred_tail, t);
    w->own.deferred_len++;
}

/* Drops the queue reference of every task still sitting in a run queue. By
 * now each of them is COMPLETE (shutdown cancelled it), so that is all. */
void rt__scheduler_drain(rt_runtime *rt)
{
    for (unsigned i = 0; i < rt->nworkers; i++) {
        rt__worker *w = &rt->workers[i];
        rt_task *t;
        if (w->own.lifo != NULL) {
            rt__task_unref(w->own.lifo, 1);
            w->own.lifo = NULL;
        }
        while ((t = rt__deque_take_owner(&w->deque)) != NULL)
            rt__task_unref(t, 1);
        rt_task *lists[2] = {w->own.deferred_head, w->own.local_head};
        for (int l = 0; l < 2; l++) {
            t = lists[l];
            while (t != NULL) {
                rt_task *next = (rt_task *)t->node.next;
                rt__task_unref(t, 1);
                t = next;
            }
        }
        w->own.deferred_head = w->own.deferred_tail = NULL;
        w->own.deferred_len = 0;
        w->own.deferred_pinned = 0;
        w->own.local_head = w->own.local_tail = NULL;
        struct cds_wfcq_node *local_nodes[64];
        bool local_would_block;
        for (;;) {
            size_t n = rt__injector_pop_batch(&w->inbox, local_nodes, 64, &local_would_block);
            for (size_t i = 0; i < n; i++)
                rt__task_unref(caa_container_of(local_nodes[i], rt_task, node), 1);
            if (n == 0 && !local_would_block)
                break;
        }
    }
    struct cds_wfcq_node *nodes[64];
    bool would_block;
    rt__injector *queues[2] = {&rt->injector, &rt->wakes};
    for (int q = 0; q < 2; q++) {
        for (;;) {
            size_t n = rt__injector_pop_batch(queues[q], nodes, 64, &would_block);
            for (size_t i = 0; i < n; i++)
                rt__task_unref(caa_container_of(nodes[i], rt_task, node), 1);
            if (n == 0 && !would_block)
                break;
        }
    }
}
