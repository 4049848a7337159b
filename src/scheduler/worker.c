/* The worker loop: finding work in the worker's own queues, in order, and
 * polling it.
 *
 * Finding work, in order:
 *   1. every check_interval-th look for work: a batch from the injector (so
 *      injected work never starves behind local work), after noting
 *      whether the own deque's oldest tasks have waited RT__STARVATION_NS.
 *      check_interval is rt_config.injector_interval while polls are
 *      short, fewer while they are long (fairness.c, "The injector's
 *      interval");
 *   2. while a rescue lasts, the own deque's top: the tasks that have
 *      waited that long, oldest first (fairness.c, "Starving tasks");
 *   3. the LIFO slot (the task scheduled last on this worker), then the own
 *      deque's bottom (the next newest);
 *   4. the deferred list (tasks woken during their own poll, yields), FIFO;
 *   5. a batch from the injector (steal.c);
 *   6. searching: steal one task from random victims, spin_rounds times
 *      (steal.c);
 *   7. park.
 * Local (pinned) tasks are taken right after the injector in step 1 and
 * right after the own deque in step 3 (pop_pinned).
 * Fairness therefore has three bounds: a yielded task runs after everything
 * runnable on its worker, and tasks that keep waking each other through the
 * LIFO slot get at most RT__LIFO_STREAK_MAX polls in a row ahead of it; a
 * deque task waits at most about twice RT__STARVATION_NS (plus a check
 * interval, plus one look per older starved task) behind newer work;
 * injected work at most injector_interval polls, and about
 * RT__INJECTOR_CHECK_NS of polling once the worker has measured its polls. */
#include <assert.h>
#include <errno.h>
#include <sched.h>

#include <asyncrt/coro.h>

#include "budget.h"
#include "scheduler.h"
#include "spawning.h"

/* Moves the older half of the deferred list (at most half the deque's free
 * room) onto the deque, where thieves can take it, and says so. Local tasks
 * stay on the list, in their order: no other worker may run them. */
static void share_deferred(rt__worker *w)
{
    /* Only local tasks wait: nothing to share (and no list walk). */
    size_t n = w->own.deferred_len - w->own.deferred_pinned;
    size_t room = (RT_DEQUE_CAPACITY - rt__deque_len_any(&w->deque)) / 2;
    size_t share = n / 2 < room ? n / 2 : room;
    if (share == 0)
        return;
    rt_task *kept_head = NULL, *kept_tail = NULL;
    size_t moved = 0;
    for (size_t i = 0; i < share && w->own.deferred_head != NULL; i++) {
        rt_task *t = w->own.deferred_head;
        w->own.deferred_head = (rt_task *)t->node.next;
        if (rt__task_pinned(t) >= 0) {
            rt__task_fifo_append(&kept_head, &kept_tail, t);
            continue;
        }
        rt__push_local(w, t);
        moved++;
    }
    if (kept_head != NULL) {
        kept_tail->node.next = (struct cds_wfcq_node *)w->own.deferred_head;
        if (w->own.deferred_head == NULL)
            w->own.deferred_tail = kept_tail;
        w->own.deferred_head = kept_head;
    } else if (w->own.deferred_head == NULL) {
        w->own.deferred_tail = NULL;
    }
    w->own.deferred_len -= moved;
    if (moved > 0)
        rt__announce_local_work(w);
}

/* Takes the oldest deferred (yielded) task. Deferred tasks run from this
 * private FIFO without any atomic operation; they are shared through the
 * deque only when another worker is idle or searching and could use them.
 * That is a matter of speed, not of liveness: this worker runs them all
 * anyway before it parks. */
static rt_task *pop_deferred(rt__worker *w)
{
    rt_task *t = w->own.deferred_head;
    if (t == NULL)
        return NULL;
    w->own.deferred_head = (rt_task *)t->node.next;
    w->own.deferred_len--;
    if (rt__task_pinned(t) >= 0)
        w->own.deferred_pinned--;
    if (w->own.deferred_head == NULL) {
        w->own.deferred_tail = NULL;
        return t;
    }
    rt_runtime *rt = w->rt;
    uint64_t idle = rt__load_relaxed_u64(&rt->idle_state);
    if (rt->nworkers > 1 &&
        (rt__idle_unparked(idle) < rt->nworkers || rt__idle_searching(idle) > 0))
        share_deferred(w);
    return t;
}

/* The oldest woken local task of this worker: from the private FIFO, else a
 * batch from the inbox (the first is returned, the rest queued privately). */
static rt_task *pop_pinned(rt__worker *w)
{
    rt_task *t = w->own.local_head;
    if (t != NULL) {
        w->own.local_head = (rt_task *)t->node.next;
        if (w->own.local_head == NULL)
            w->own.local_tail = NULL;
        return t;
    }
    if (rt__injector_is_empty(&w->inbox))
        return NULL;
    struct cds_wfcq_node *nodes[RT_INJECTOR_BATCH];
    bool would_block;
    size_t n = rt__injector_pop_batch(&w->inbox, nodes, RT_INJECTOR_BATCH, &would_block);
    for (size_t i = 1; i < n; i++)
        rt__push_pinned_local(w, rt__task_of_node(nodes[i]));
    return n > 0 ? rt__task_of_node(nodes[0]) : NULL;
}

static rt_task *find_local_work(rt__worker *w)
{
    rt_runtime *rt = w->rt;
    rt_task *t;
    if (--w->own.until_check == 0) {
        int64_t now = rt__now_ns();
        rt__retune_check_interval(w, now);
        w->own.until_check = w->own.check_interval;
        /* A reactor overdue by half a millisecond is waiting for a CPU that
         * busy workers hold (reactor.h): this one gives its own, once per
         * interval at most. */
        if (rt__reactor_overdue(&rt->reactor, now)) {
            rt__stat_add(&w->stats.reactor_yields, 1);
            sched_yield();
        }
        /* Before the injector: its batches are what may be burying them. */
        rt__watch_for_starving_top(w, now);
        t = rt__take_from_injector(w);
        if (t != NULL)
            return t;
        /* Local tasks wait at most this long behind a busy deque too. */
        t = pop_pinned(w);
        if (t != NULL)
            return t;
    }
    if (rt__unlikely(w->own.rescue_end != 0)) {
        t = rt__take_starved_top(w);
        if (t != NULL)
            return t;
    }
    t = w->own.lifo;
    if (t != NULL) {
        w->own.lifo = NULL;
        /* Tasks that keep waking each other through the LIFO slot would
         * otherwise hold the worker forever while yielded tasks wait: after
         * a short streak, the LIFO task queues behind them (Tokio caps its
         * LIFO slot the same way). Without yielded tasks waiting nobody is
         * passed over, and fork-join and chains keep their depth-first,
         * cache-warm order. */
        if (w->own.lifo_streak < RT__LIFO_STREAK_MAX || w->own.deferred_head == NULL) {
            w->own.lifo_streak++;
            return t;
        }
        rt__defer(w, t);
    }
    w->own.lifo_streak = 0;
    t = rt__deque_take_owner(&w->deque);
    if (t != NULL) {
        rt__note_deque_low(w);
        return t;
    }
    t = pop_pinned(w);
    if (t != NULL)
        return t;
    t = pop_deferred(w);
    if (t != NULL)
        return t;
    return rt__take_from_injector(w);
}

/* The worker owns RUNNING and saw CANCELLED: drop instead of polling. */
static void cancel_running(rt__worker *w, rt_task *t)
{
    /* The drop runs as the task (rt_current_task_id works in it); a wake of
     * its own waker from there is harmless, the task completes next. */
    rt__store_relaxed_ptr((void **)&w->own.current, t);
    rt__task_drop_future(t);
    rt__task_finish(t, NULL, -ECANCELED, true);
    rt__store_relaxed_ptr((void **)&w->own.current, NULL);
    rt__stat_add(&w->cancelled, 1);
    rt__task_complete(t, true, 1); /* and the run queue's reference */
}

#ifdef RT_HAVE_DIAGNOSTICS
/* The log2 bucket of a duration (metrics.h, RT_HIST_BUCKETS). */
static inline unsigned hist_bucket(uint64_t ns)
{
    if (ns < 1024)
        return 0;
    unsigned b = (unsigned)(63 - __builtin_clzll(ns)) - 9;
    return b < RT_HIST_BUCKETS - 1 ? b : RT_HIST_BUCKETS - 1;
}

/* rt_config.poll_timing, before a poll: the scheduling delay since the task
 * was queued, and the poll's start. Returns the start. */
static int64_t timed_poll_start(rt__worker *w, rt_task *t)
{
    rt__task_timing *tm = rt__task_timing_of(t);
    int64_t now = rt__now_ns();
    uint64_t queued = rt__load_relaxed_u64(&tm->woken_ns);
    if (queued != 0 && (uint64_t)now >= queued)
        rt__stat_add(&w->stats.sched_delay_hist[hist_bucket((uint64_t)now - queued)], 1);
    rt__store_relaxed_u64(&tm->poll_start_ns, (uint64_t)now);
    return now;
}

/* After the poll, before the task can be queued again (so that a wake's
 * note of when it was queued is never overwritten): the poll's duration,
 * counted for the task and in the worker's histogram. A task the worker
 * requeues itself (a yield) counts its delay from here. */
static void timed_poll_end(rt__worker *w, rt_task *t, int64_t start)
{
    rt__task_timing *tm = rt__task_timing_of(t);
    int64_t end = rt__now_ns();
    uint64_t took = end > start ? (uint64_t)(end - start) : 0;
    rt__stat_add(&w->stats.poll_ns_hist[hist_bucket(took)], 1);
    rt__store_relaxed_u64(&tm->polls, rt__load_relaxed_u64(&tm->polls) + 1);
    rt__store_relaxed_u64(&tm->busy_ns, rt__load_relaxed_u64(&tm->busy_ns) + took);
    rt__store_relaxed_u64(&tm->last_end_ns, (uint64_t)end);
    rt__store_relaxed_u64(&tm->last_worker, (uint64_t)w->index + 1);
    rt__store_relaxed_u64(&tm->woken_ns, (uint64_t)end);
}

/* The stall watchdog is on: before a poll, note where a coroutine task
 * resumes from, which a stall report names (the watchdog must not read
 * the task's own state while it runs). */
static void note_poll_origin(rt__worker *w, rt_task *t, uint64_t s)
{
    const rt_coro *co = (s & RT__TASK_CORO) ? (const rt_coro *)t->future_state : NULL;
    rt__store_relaxed_u32(&w->poll_origin_line, co != NULL ? (uint32_t)co->line : 0);
    rt__store_relaxed_ptr((void **)&w->poll_origin_site, co != NULL ? (void *)co->site : NULL);
}

/* The poll of run_task while something watches polls: poll timing, the
 * stall watchdog's note of where a coroutine resumes, the trace's events
 * (RT__EV_POLL_START and END: probe and trace). */
__attribute__((noinline, cold)) static rt_poll watched_poll(rt__worker *w, rt_task *t, uint64_t s,
                                                            rt_context *cx, void **out)
{
    int64_t start = 0;
    bool timed = w->instrumented && (s & RT__TASK_TIMED);
    if (timed)
        start = timed_poll_start(w, t);
    if (w->watched)
        note_poll_origin(w, t, s);
    RT__EV_POLL_START(t->id, w->index);
    rt_poll r = t->u.poll(t->future_state, cx, out);
    RT__EV_POLL_END(t->id, w->index, r == RT_READY);
    if (timed)
        timed_poll_end(w, t, start);
    return r;
}
#endif

/* Polls `t`, popped from a run queue with the queue's reference: claims it,
 * polls it with the worker's budget, and completes, requeues or idles it by
 * what the poll returned and what happened meanwhile. */
static void run_task(rt__worker *w, rt_task *t)
{
    uint64_t s = rt__load_acquire_u64(&t->state);
    if (s & RT__TASK_RUNNING) {
        /* Queued already claimed (spawned, woken by a worker, or requeued
         * by a yield): ours without a read-modify-write. An abort may have
         * come meanwhile, or a wake (NOTIFIED), which this poll consumes as
         * the claim of a NOTIFIED task would. */
        if (rt__unlikely(s & (RT__TASK_CANCELLED | RT__TASK_NOTIFIED))) {
            if (s & RT__TASK_CANCELLED) {
                cancel_running(w, t);
                return;
            }
            rt__task_state_consume_notified(t);
        }
    } else {
        /* Shutdown completes tasks only after every worker has exited. */
        uint64_t prev = rt__task_state_claim(t);
        assert((prev & (RT__TASK_NOTIFIED | RT__TASK_RUNNING | RT__TASK_COMPLETE)) ==
               RT__TASK_NOTIFIED);
        if (rt__unlikely(prev & RT__TASK_CANCELLED)) {
            cancel_running(w, t);
            return;
        }
    }

    rt_context cx = {{&rt__task_waker_vtable, t}};
    void *out = NULL;
    rt__store_relaxed_ptr((void **)&w->own.current, t);
    w->own.current_notified = false;
    w->own.yield_elsewhere = false;
    w->own.poll_status = 0;
    rt__budget_open(w->budget_limit);
    rt_poll r;
#ifdef RT_HAVE_DIAGNOSTICS
    /* Everything that watches polls (timing, the watchdog, a trace) behind
     * one test per poll while all are off; nothing at all in a build
     * without diagnostics. */
    if (rt__unlikely((w->instrumented | rt__load_relaxed_u32(&rt__trace_active)) != 0))
        r = watched_poll(w, t, s, &cx, &out);
    else
#endif
    {
        RT__EV_PROBE2(poll_start, t->id, (int)w->index);
        r = t->u.poll(t->future_state, &cx, &out);
        RT__EV_PROBE3(poll_end, t->id, (int)w->index, r == RT_READY ? 1 : 0);
    }
    rt__budget_close();

    /* A poll is counted once it is over, and (but for a finished task)
     * after the state change that follows it: the stall watchdog sees the
     * count unchanged through one poll only, and a registry sweep that saw
     * the task running has this poll to make the next sweep worthwhile
     * (registry.c), which finds the task idle. */
    if (r == RT_READY) {
        /* The status: rt_task_set_status's, else a coroutine's own (RT_FAIL).
         * CORO may have been set by this very poll: read the word again. */
        int status = w->own.poll_status;
        if (status == 0 && (rt__load_relaxed_u64(&t->state) & RT__TASK_CORO))
            status = ((const rt_coro *)t->future_state)->status;
        rt__task_drop_future(t);
        rt__task_finish(t, out, status, false);
        rt__store_relaxed_ptr((void **)&w->own.current, NULL);
        rt__stat_add(&w->stats.polls, 1);
        rt__stat_add(&w->completed, 1);
        rt__task_complete(t, false, 1); /* and the run queue's reference */
        return;
    }
    rt__store_relaxed_ptr((void **)&w->own.current, NULL);

    if (w->own.current_notified) {
        /* A yield: requeue behind the other runnable tasks, keeping RUNNING
         * and the queue reference. An abort that came during the poll is
         * honoured now rather than at the next pop. */
        if (rt__load_acquire_u64(&t->state) & RT__TASK_CANCELLED)
            cancel_running(w, t);
        else if (rt__unlikely(w->own.yield_elsewhere) && rt__task_pinned(t) < 0)
            rt__requeue_elsewhere(w, t);
        else
            rt__defer(w, t);
        rt__stat_add(&w->stats.polls, 1);
        return;
    }

    /* Pending: back to idle, unless woken or aborted during the poll. */
    switch (rt__task_state_pending(t, w->worker_bits)) {
    case RT__TASK_CANCEL_IT:
        cancel_running(w, t);
        break;
    case RT__TASK_REQUEUE:
        rt__defer(w, t);
        break;
    case RT__TASK_IDLE:
        break;
    }
    rt__stat_add(&w->stats.polls, 1);
}

static rt_task *search(rt__worker *w)
{
    rt_runtime *rt = w->rt;
    for (unsigned round = 0; round < rt->config.spin_rounds; round++) {
        if (!rt__transition_to_searching(w))
            return NULL;
        rt_task *t = rt__steal_from_others(w);
        if (t == NULL)
            t = rt__take_from_injector(w);
        if (t != NULL)
            return t;
        rt__cpu_relax();
    }
    return NULL;
}

void *rt__worker_main(void *arg)
{
    rt__worker *w = arg;
    rt_runtime *rt = w->rt;
    rt__set_current_worker(w);
    rt__restart_check_window(w);
    while (!rt__load_acquire_u32(&rt->closing)) {
        rt_task *t = find_local_work(w);
        if (t == NULL)
            t = search(w);
        if (t != NULL) {
            /* A worker woken as a searcher stops counting as one as soon as
             * it has work, wherever it found it. */
            rt__transition_from_searching(w);
            uint64_t readings = rt__tls_clock.count;
            run_task(w, t);
            /* The batch's age is checked after every poll while a batch
             * waits, so a batched sleep waits RT__TIMER_BATCH_WAIT_NS plus
             * about two polls at most (reactor.h). A poll that read the
             * clock (every sleep arming itself does) lends its reading, at
             * most that poll old; only a poll that did not costs a reading. */
            if (w->own.timer_batch.len > 0) {
                int64_t now = rt__tls_clock.count != readings ? rt__tls_clock.last : rt__now_ns();
                if (now - w->own.timer_batch.since >= RT__TIMER_BATCH_WAIT_NS)
                    rt__timer_batch_flush(&w->rt->reactor, &w->own.timer_batch);
            }
            if (w->own.announce_after_poll) {
                w->own.announce_after_poll = false;
                rt__announce_local_work(w);
            }
            continue;
        }
        if (w->own.injector_would_block || !rt__injector_is_empty(&w->inbox)) {
            /* Work is in flight in the injector (or the inbox): give its
             * producer the CPU instead of parking (the re-check would refuse
             * to) or spinning. */
            w->own.injector_would_block = false;
            sched_yield();
            continue;
        }
        rt__park_worker(w);
        rt__restart_check_window(w);
    }
    rt__timer_batch_flush(&w->rt->reactor, &w->own.timer_batch);
    rt__set_current_worker(NULL);
    return NULL;
}
