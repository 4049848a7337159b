/* What the sync.h suites (test_semaphore.c, test_semaphore_tasks.c,
 * test_mutex.c, test_notify.c) share: tasks that wait on a semaphore or a
 * mutex and record the order in which they were served, and the sizes of the
 * FIFO and race tests. support_sync.c has the functions. */
#ifndef RT_TESTS_SUPPORT_SYNC_H
#define RT_TESTS_SUPPORT_SYNC_H

#include "support.h"

/* Tasks queued one after another in the FIFO tests. */
#define FIFO_TASKS 16
/* Rounds of the tests where an abort races a release, unlock or notify. */
#define RACE_ROUNDS 200

/* Order in which tasks got what they waited for: record_rank(index) stores
 * the task's index at rank_order[rank_next++]. */
#define MAX_RANKS 64
extern atomic_int rank_next;
extern int rank_order[MAX_RANKS];

void record_rank(int index);

/* Acquires `want` permits; announces `queued` once waiting, records its rank
 * and signals `acquired` once it has them; then either keeps them (the test
 * releases them) or, with release_after, gives them straight back. Returns
 * 1 once acquired, or the acquisition's negative result when it failed. The
 * drop drops the operation and signals `dropped`. */
struct sem_waiter {
    rt_coro co;
    rt_semaphore *sem;
    size_t want;
    int index;
    bool release_after;
    bool announced;
    struct event *queued;
    struct event *acquired;
    struct event *dropped;
    rt_semaphore_acquire op;
};

rt_poll sem_waiter_poll(void *state, rt_context *cx, void **out);
void sem_waiter_drop(void *state);
rt_task *spawn_sem_waiter(rt_runtime *rt, struct sem_waiter *w);

/* The same for the mutex: locks, records its rank, signals, then unlocks
 * (unlock_after) or keeps the lock. */
struct mutex_waiter {
    rt_coro co;
    rt_mutex *m;
    int index;
    bool unlock_after;
    bool announced;
    struct event *queued;
    struct event *acquired;
    struct event *dropped;
    rt_mutex_lock op;
};

rt_poll mutex_waiter_poll(void *state, rt_context *cx, void **out);
void mutex_waiter_drop(void *state);

#endif
