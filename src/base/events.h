/* The runtime's instrumentation points: one macro per event that the
 * scheduler and the reactor report, for static probes (USDT) and for the
 * trace recorder to hook into. Every argument is a plain integer already at
 * hand where the event happens; the macros evaluate nothing else.
 *
 * worker: the worker index (0 ..), or RT__EV_REACTOR for the reactor thread,
 * or RT__EV_FOREIGN for any other thread.
 * Internal, not installed. */
#ifndef RT_SRC_EVENTS_H
#define RT_SRC_EVENTS_H

#include <stdint.h>

#define RT__EV_REACTOR (-1)
#define RT__EV_FOREIGN (-2)

/* A task was spawned (before it is first queued). */
#define RT__EV_SPAWN(task_id, worker) ((void)(task_id), (void)(worker))
/* A worker starts and ends one poll of a task; ready: 1 when it finished. */
#define RT__EV_POLL_START(task_id, worker) ((void)(task_id), (void)(worker))
#define RT__EV_POLL_END(task_id, worker, ready) ((void)(task_id), (void)(worker), (void)(ready))
/* A wake queued an idle task (not a task waking itself during its poll). */
#define RT__EV_WAKE(task_id, worker) ((void)(task_id), (void)(worker))
/* A worker stole a task from another worker's deque. */
#define RT__EV_STEAL(task_id, worker, victim) ((void)(task_id), (void)(worker), (void)(victim))
/* A worker goes to sleep, and wakes up. */
#define RT__EV_PARK(worker) ((void)(worker))
#define RT__EV_UNPARK(worker) ((void)(worker))
/* The reactor finished a turn that collected `events` descriptor events. */
#define RT__EV_REACTOR_TURN(events) ((void)(events))
/* A timer fired; task_id: the task it wakes, 0 when its waker is no task's. */
#define RT__EV_TIMER_FIRE(task_id) ((void)(task_id))

#endif
