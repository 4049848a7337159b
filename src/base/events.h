/* The runtime's instrumentation points: one macro per event that the
 * scheduler and the reactor report, for static probes (USDT) and for the
 * trace recorder to hook into. Every argument is a plain integer already at
 * hand where the event happens; each macro evaluates each argument once and
 * nothing else.
 *
 * worker: the worker index (0 ..), or RT__EV_REACTOR for the reactor thread,
 * or RT__EV_FOREIGN for any other thread.
 *
 * Each event reaches two consumers:
 * - A USDT probe, provider `asyncrt`, named after the event in lower case
 *   (spawn, poll_start, poll_end, wake, steal, park, unpark, reactor_turn,
 *   timer_fire), with the arguments listed at each macro, in that order,
 *   when the library is built with RT_HAVE_SDT (meson option `usdt`). A
 *   probe is one nop instruction plus an ELF note until a tracer (perf,
 *   bpftrace, SystemTap) attaches to it; its arguments need only be in
 *   registers or memory, which they mostly are already (a wake's worker is
 *   the one a call site computes: which worker the waking thread is).
 * - The trace recorder (trace_buf.h), which the public rt_trace_start turns
 *   on: while it is off, an event costs one relaxed load of
 *   rt__trace_active and a branch not taken; the recording itself is out of
 *   line.
 * Internal, not installed. */
#ifndef RT_SRC_EVENTS_H
#define RT_SRC_EVENTS_H

#include <stdint.h>

#include "atomic.h"
#include "common.h"
#include "diag_hooks.h"

#ifdef RT_HAVE_SDT
#include <sys/sdt.h>
#endif

#define RT__EV_REACTOR (-1)
#define RT__EV_FOREIGN (-2)

/* The events as the trace recorder stores them (rt__trace_rec.type). */
enum rt__ev_type {
    RT__EVT_SPAWN = 1,
    RT__EVT_POLL_START,
    RT__EVT_POLL_END,
    RT__EVT_WAKE,
    RT__EVT_STEAL,
    RT__EVT_PARK,
    RT__EVT_UNPARK,
    RT__EVT_REACTOR_TURN,
    RT__EVT_TIMER_FIRE,
};

#ifdef RT_HAVE_DIAGNOSTICS
/* While a trace records (diag_hooks.h), the event goes to the recorder. */
#define RT__EV_TRACE(type, task, worker, arg)                                                      \
    do {                                                                                           \
        if (rt__unlikely(rt__load_relaxed_u32(&rt__trace_active) != 0))                            \
            rt__trace_event((type), (task), (worker), (arg));                                      \
    } while (0)
#else
/* A build without diagnostics has no recorder: nothing at all. */
#define RT__EV_TRACE(type, task, worker, arg) ((void)0)
#endif

#ifdef RT_HAVE_SDT
#define RT__EV_PROBE1(name, a) STAP_PROBE1(asyncrt, name, a)
#define RT__EV_PROBE2(name, a, b) STAP_PROBE2(asyncrt, name, a, b)
#define RT__EV_PROBE3(name, a, b, c) STAP_PROBE3(asyncrt, name, a, b, c)
#else
#define RT__EV_PROBE1(name, a) ((void)(a))
#define RT__EV_PROBE2(name, a, b) ((void)(a), (void)(b))
#define RT__EV_PROBE3(name, a, b, c) ((void)(a), (void)(b), (void)(c))
#endif

/* A task was spawned (before it is first queued).
 * Probe spawn(uint64 task_id, int worker). */
#define RT__EV_SPAWN(task_id, worker)                                                              \
    do {                                                                                           \
        uint64_t rt__ev_task_ = (task_id);                                                         \
        int rt__ev_worker_ = (int)(worker);                                                        \
        RT__EV_PROBE2(spawn, rt__ev_task_, rt__ev_worker_);                                        \
        RT__EV_TRACE(RT__EVT_SPAWN, rt__ev_task_, rt__ev_worker_, 0);                              \
    } while (0)

/* A worker starts and ends one poll of a task; ready: 1 when it finished.
 * Probes poll_start(uint64 task_id, int worker) and
 * poll_end(uint64 task_id, int worker, int ready). */
#define RT__EV_POLL_START(task_id, worker)                                                         \
    do {                                                                                           \
        uint64_t rt__ev_task_ = (task_id);                                                         \
        int rt__ev_worker_ = (int)(worker);                                                        \
        RT__EV_PROBE2(poll_start, rt__ev_task_, rt__ev_worker_);                                   \
        RT__EV_TRACE(RT__EVT_POLL_START, rt__ev_task_, rt__ev_worker_, 0);                         \
    } while (0)
#define RT__EV_POLL_END(task_id, worker, ready)                                                    \
    do {                                                                                           \
        uint64_t rt__ev_task_ = (task_id);                                                         \
        int rt__ev_worker_ = (int)(worker);                                                        \
        int rt__ev_ready_ = (ready) ? 1 : 0;                                                       \
        RT__EV_PROBE3(poll_end, rt__ev_task_, rt__ev_worker_, rt__ev_ready_);                      \
        RT__EV_TRACE(RT__EVT_POLL_END, rt__ev_task_, rt__ev_worker_, (uint64_t)rt__ev_ready_);     \
    } while (0)

/* A wake queued an idle task (not a task waking itself during its poll).
 * Probe wake(uint64 task_id, int worker): worker is the waking thread. */
#define RT__EV_WAKE(task_id, worker)                                                               \
    do {                                                                                           \
        uint64_t rt__ev_task_ = (task_id);                                                         \
        int rt__ev_worker_ = (int)(worker);                                                        \
        RT__EV_PROBE2(wake, rt__ev_task_, rt__ev_worker_);                                         \
        RT__EV_TRACE(RT__EVT_WAKE, rt__ev_task_, rt__ev_worker_, 0);                               \
    } while (0)

/* A worker stole a task from another worker's deque.
 * Probe steal(uint64 task_id, int worker, int victim). */
#define RT__EV_STEAL(task_id, worker, victim)                                                      \
    do {                                                                                           \
        uint64_t rt__ev_task_ = (task_id);                                                         \
        int rt__ev_worker_ = (int)(worker);                                                        \
        int rt__ev_victim_ = (int)(victim);                                                        \
        RT__EV_PROBE3(steal, rt__ev_task_, rt__ev_worker_, rt__ev_victim_);                        \
        RT__EV_TRACE(RT__EVT_STEAL, rt__ev_task_, rt__ev_worker_, (uint64_t)rt__ev_victim_);       \
    } while (0)

/* A worker goes to sleep, and wakes up.
 * Probes park(int worker) and unpark(int worker). */
#define RT__EV_PARK(worker)                                                                        \
    do {                                                                                           \
        int rt__ev_worker_ = (int)(worker);                                                        \
        RT__EV_PROBE1(park, rt__ev_worker_);                                                       \
        RT__EV_TRACE(RT__EVT_PARK, 0, rt__ev_worker_, 0);                                          \
    } while (0)
#define RT__EV_UNPARK(worker)                                                                      \
    do {                                                                                           \
        int rt__ev_worker_ = (int)(worker);                                                        \
        RT__EV_PROBE1(unpark, rt__ev_worker_);                                                     \
        RT__EV_TRACE(RT__EVT_UNPARK, 0, rt__ev_worker_, 0);                                        \
    } while (0)

/* The reactor finished a turn that collected `events` descriptor events.
 * Probe reactor_turn(unsigned events). */
#define RT__EV_REACTOR_TURN(events)                                                                \
    do {                                                                                           \
        unsigned rt__ev_events_ = (unsigned)(events);                                              \
        RT__EV_PROBE1(reactor_turn, rt__ev_events_);                                               \
        RT__EV_TRACE(RT__EVT_REACTOR_TURN, 0, RT__EV_REACTOR, rt__ev_events_);                     \
    } while (0)

/* A timer fired; task_id: the task it wakes, 0 when its waker is no task's.
 * Probe timer_fire(uint64 task_id). */
#define RT__EV_TIMER_FIRE(task_id)                                                                 \
    do {                                                                                           \
        uint64_t rt__ev_task_ = (task_id);                                                         \
        RT__EV_PROBE1(timer_fire, rt__ev_task_);                                                   \
        RT__EV_TRACE(RT__EVT_TIMER_FIRE, rt__ev_task_, RT__EV_REACTOR, 0);                         \
    } while (0)

#endif
