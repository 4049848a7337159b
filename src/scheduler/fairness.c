/* Fairness beyond the order of the worker loop: the starvation guard over
 * the own deque's oldest tasks, and the injector's interval, which bounds in
 * time how long injected work waits behind local work. worker.c says in
 * which order a worker looks for work; docs/design.md gives the bounds that
 * follow. */
#include "scheduler.h"

/* Starving tasks.
 *
 * The owner pops its deque's bottom, which is what makes fork-join run
 * depth-first in little memory, and batches from the injector are pushed
 * there too. So the oldest tasks, at the top, wait while newer ones keep
 * arriving below them: a task that keeps waking a partner (or respawning
 * itself), or a steady backlog in the injector, would hold them forever.
 * Nobody steals them while every worker is busy.
 *
 * At every look at the injector the worker watches its deque, with the
 * clock reading that look took anyway. A watch begins with the tasks then
 * in the deque: the indices from the top up to the bottom. The top only
 * grows (steals, spills, the last task taken), and the owner's pops lower
 * `watched_low`, the lowest the bottom has been since the watch began,
 * because a push after a pop reuses an index with a new task. So [top, watched_low) always
 * holds tasks that were there when the watch began. Once they have waited
 * RT__STARVATION_NS, the worker takes them from the top in order, one per
 * look, before anything else but the check look itself (rescue_end).
 * A watch ends when none of its tasks is left; a task pushed just after a
 * watch began is covered by the next one, so it waits at most about twice
 * RT__STARVATION_NS, plus a check interval. Taking only one task per
 * RT__STARVATION_NS would let the hundredth buried task wait a second. */
void rt__watch_for_starving_top(rt__worker *w, int64_t now)
{
    uint64_t top = rt__deque_top_owner(&w->deque);
    if ((int64_t)(w->own.watched_low - top) <= 0) {
        /* None of this watch's tasks is left (an empty deque included). */
        w->own.watched_since = now;
        w->own.watched_low = rt__deque_bottom_owner(&w->deque);
        return;
    }
    if (now - w->own.watched_since < RT__STARVATION_NS)
        return;
    w->own.rescue_end = w->own.watched_low;
    w->own.watched_since = now;
}

/* The next starved task from the own deque's top, or NULL when the rescue
 * is over (or lost a race with a thief, which took the task instead). */
rt_task *rt__take_starved_top(rt__worker *w)
{
    uint64_t top = rt__deque_top_owner(&w->deque);
    /* rescue_end never exceeds the bottom (note_deque_low), so this also
     * ends a rescue whose tasks thieves have taken. */
    if ((int64_t)(w->own.rescue_end - top) <= 0) {
        w->own.rescue_end = 0;
        return NULL;
    }
    void *item = rt__deque_steal_any(&w->deque);
    return item != RT_DEQUE_LOST ? item : NULL;
}

/* ---- The injector's interval ----------------------------------------------
 *
 * A busy worker looks at the injector (where the reactor's wakes go) every
 * check_interval looks for work. A fixed count is a fixed wait only while
 * polls are short: at 61 polls of 1 ms, a task woken by the reactor could
 * wait 61 ms behind a busy task on its worker (test_timer,
 * sleeps_batched_beside_a_busy_task_are_armed_within_a_few_polls). So the
 * count follows the measured time per poll, aiming at RT__INJECTOR_CHECK_NS
 * between looks, from 2 (1 if so configured) up to
 * rt_config.injector_interval. It shrinks fast (the newest window weighs a
 * quarter of the average: polls going from 3 to 150 us give windows of 61,
 * 5, then 2) but at most doubles per window, and a worker starts again from
 * RT__INJECTOR_CHECK_FIRST whenever it parks: work that arrives after an
 * idle moment is measured within a few polls. What is left unbounded in
 * time is a worker whose polls turn from short to long without it ever
 * parking: one window of the old count, and a few shrinking ones after it.
 * A window's time includes what the worker did besides polling (yields to
 * an overdue reactor, searching). The clock is read once per look at the
 * injector, where the overdue check needs it anyway, and once per park. */

/* Begins a window of looks for work: at the worker's start and after each
 * park, whose window measured sleep, not polls. */
void rt__restart_check_window(rt__worker *w)
{
    w->own.check_interval = RT__INJECTOR_CHECK_FIRST < w->rt->config.injector_interval
                                ? RT__INJECTOR_CHECK_FIRST
                                : w->rt->config.injector_interval;
    w->own.until_check = w->own.check_interval;
    w->own.last_check_ns = rt__now_ns();
}

/* Ends a window at `now`: measures it and sets the next one's count. */
void rt__retune_check_interval(rt__worker *w, int64_t now)
{
    int64_t per_poll = (now - w->own.last_check_ns) / (int64_t)w->own.check_interval;
    w->own.poll_ns_avg =
        w->own.poll_ns_avg == 0 ? per_poll : (3 * w->own.poll_ns_avg + per_poll) / 4;
    int64_t fit = RT__INJECTOR_CHECK_NS / (w->own.poll_ns_avg > 0 ? w->own.poll_ns_avg : 1);
    int64_t most = w->rt->config.injector_interval;
    /* At 1 every look would take injected work before local work, and a
     * steady stream of it would starve the LIFO slot, the deque and the
     * local tasks (Tokio's floor is 2 for the same reason); a configured 1
     * stays 1. */
    int64_t least = most < 2 ? most : 2;
    if (most > 2 * (int64_t)w->own.check_interval)
        most = 2 * (int64_t)w->own.check_interval;
    if (fit > most)
        fit = most;
    w->own.check_interval = (unsigned)(fit > least ? fit : least);
    w->own.last_check_ns = now;
}
