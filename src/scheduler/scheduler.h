/* The scheduler's internal interface: what its files (schedule.c, idle.c,
 * steal.c, fairness.c, worker.c) share. docs/design.md draws how they fit
 * together; the runtime object is in runtime_object.h, spawning in spawning.h. Internal,
 * not installed. */
#ifndef RT_SRC_SCHEDULER_H
#define RT_SRC_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "atomic.h"
#include "events.h"
#include "runtime_object.h"

/* Largest injector batch a worker takes at once. */
#define RT_INJECTOR_BATCH 64

static inline rt_task *rt__task_of_node(struct cds_wfcq_node *node)
{
    return caa_container_of(node, rt_task, node);
}

/* ---- Idle coordination (idle.c) ----------------------------------------- */

/* The two halves of the idle word (runtime_object.h). */
static inline uint32_t rt__idle_searching(uint64_t s)
{
    return (uint32_t)(s & 0xffffffffu);
}

static inline uint32_t rt__idle_unparked(uint64_t s)
{
    return (uint32_t)(s >> 32);
}

/* Wakes one parked worker, as a searcher, unless one is searching already or
 * none is parked. The caller has made work visible and fenced (idle.c). */
void rt__notify_parked(rt_runtime *rt);

/* The one routine that wakes parked workers: takes up to `max` (at most
 * RT__WAKE_BATCH) off the sleepers' stack, counts them unparked and
 * searching, and unparks them; with `unless_searching`, none when a worker
 * is searching already. Returns how many it woke. The caller has made work
 * visible and fenced (idle.c). */
unsigned rt__unpark_workers(rt_runtime *rt, unsigned max, bool unless_searching);

/* Counts the worker as searching, unless half the workers already search:
 * then returns false and it should park. */
bool rt__transition_to_searching(rt__worker *w);

/* The searching worker found a task: the last searcher hands the search on
 * when there is more to find. */
void rt__stop_searching(rt__worker *w);

static inline void rt__transition_from_searching(rt__worker *w)
{
    if (w->own.searching)
        rt__stop_searching(w);
}

/* Parks the worker until work or shutdown comes (flushing its timer batch
 * and sweeping its registry first); returns at once when the re-check finds
 * work. Owner only. */
void rt__park_worker(rt__worker *w);

/* Wakes worker `w` if it is parked: a local task of its own arrived in its
 * inbox. */
void rt__unpark_worker(rt__worker *w);

/* ---- Pushing work (schedule.c) -------------------------------------------- */

/* Moves the older half of a full deque to the injector. */
void rt__spill_half(rt__worker *w);

/* Pushes onto the own deque, spilling half of it to the injector when full. */
static inline void rt__push_local(rt__worker *w, rt_task *t)
{
    while (!rt__deque_push_owner(&w->deque, t))
        rt__spill_half(w);
    uint64_t len = rt__deque_len_any(&w->deque);
    if (len > rt__load_relaxed_u64(&w->stats.deque_high_water))
        rt__store_relaxed_u64(&w->stats.deque_high_water, len);
}

/* Announces surplus work on the own deque to the sleepers. */
static inline void rt__announce_local_work(rt__worker *w)
{
    if (w->rt->nworkers == 1)
        return; /* nobody else could take it */
    rt__fence_store_load();
    rt__notify_parked(w->rt);
}

/* Appends a local task to its own worker's private FIFO (owner only). */
static inline void rt__push_pinned_local(rt__worker *w, rt_task *t)
{
    rt__task_fifo_append(&w->own.local_head, &w->own.local_tail, t);
}

/* ---- Work from elsewhere (steal.c) ------------------------------------------ */

/* A batch from the wakes queue, else from the injector: the first task is
 * returned, the rest pushed onto the own deque. Notes in
 * injector_would_block whether a producer held either up. */
rt_task *rt__take_from_injector(rt__worker *w);

/* One task stolen from a random other worker's deque, or NULL. */
rt_task *rt__steal_from_others(rt__worker *w);

/* ---- Fairness (fairness.c) --------------------------------------------------- */

/* The starvation guard, at each look at the injector: begins a watch over
 * the own deque, or starts a rescue when the watched tasks waited
 * RT__STARVATION_NS. */
void rt__watch_for_starving_top(rt__worker *w, int64_t now);

/* The next starved task from the own deque's top, or NULL when the rescue
 * is over. */
rt_task *rt__take_starved_top(rt__worker *w);

/* Notes how low the own deque's bottom went (fairness.c, "Starving tasks"):
 * the indices at and above it will hold new tasks, which a watch or a rescue
 * begun earlier must not count as old. After every pop from the bottom. */
static inline void rt__note_deque_low(rt__worker *w)
{
    uint64_t bottom = rt__deque_bottom_owner(&w->deque);
    if ((int64_t)(bottom - w->own.watched_low) < 0)
        w->own.watched_low = bottom;
    if (w->own.rescue_end != 0 && (int64_t)(bottom - w->own.rescue_end) < 0)
        w->own.rescue_end = bottom;
}

/* The injector's interval: begins a window of looks for work (at the
 * worker's start and after each park), and ends one at `now`, setting the
 * next one's count from the measured time per poll. */
void rt__restart_check_window(rt__worker *w);
void rt__retune_check_interval(rt__worker *w, int64_t now);

#endif
