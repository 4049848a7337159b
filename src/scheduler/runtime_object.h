/* The runtime object, which ties the workers, the queues, the reactor and
 * the blocking pool together, and the scheduler's entry points (schedule.c,
 * idle.c). It belongs to the scheduler layer: the task layer and the
 * reactor below it never see it. The task object is in task_internal.h,
 * the registry in registry.h, a worker in worker.h. Internal, not
 * installed. */
#ifndef RT_SRC_RUNTIME_OBJECT_H
#define RT_SRC_RUNTIME_OBJECT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <asyncrt/diag.h>
#include <asyncrt/runtime.h>
#include <asyncrt/task.h>

#include "common.h"
#include "atomic.h"
#include "injector.h"
#include "reactor.h"
#include "registry.h"
#include "runtime_services.h"
#include "task_internal.h"
#include "worker.h"
#include "current.h"

/* ---- Runtime ------------------------------------------------------------*/

/* The idle coordinator's word: workers searching for work in the low 32 bits,
 * workers not parked in the high 32 bits. */
#define RT__IDLE_SEARCHING_ONE 1ull
#define RT__IDLE_UNPARKED_ONE (1ull << 32)

struct rt_runtime {
    rt_config config;
    unsigned nworkers;
    rt__worker *workers; /* nworkers entries, cache-line aligned */

    /* Tasks spawned or woken off-worker, and spills of full deques. */
    rt__injector injector;
    /* Tasks the reactor woke (timers fired, descriptors ready): taken before
     * the injector, so they do not wait behind a spawn backlog. */
    rt__injector wakes;
    /* Size of the reactor's last batch of wakes (a hint for fair shares). */
    uint64_t wakes_batch;

    /* Idle coordination (idle.c). */
    RT_ALIGNED_CACHELINE uint64_t idle_state;
    pthread_mutex_t sleepers_lock;
    unsigned *sleepers; /* stack of parked worker indices */
    unsigned nsleepers;

    /* Set once by shutdown; workers and spawns check it. */
    RT_ALIGNED_CACHELINE uint32_t closing;

    /* Registries of tasks spawned by foreign threads. */
    unsigned nforeign;
    rt__foreign_shard *foreign;
    /* Tasks cancelled by shutdown (written by the shutdown thread only). */
    uint64_t shutdown_cancelled;

    /* The reactor thread: epoll, timers. */
    rt__reactor reactor;
    /* Open rt_io objects, closed by shutdown if the user has not
     * (runtime_services.c). */
    pthread_mutex_t io_lock;
    struct rt_io *io_list;
    bool io_closed; /* shutdown closed the list: rt_io_open fails */

    /* The blocking pool (rt_spawn_blocking), and what shutdown found. */
    struct rt__blocking_pool *blocking;
    uint64_t blocking_abandoned;

    /* The stall watchdog, or NULL; stalls it reported. */
    struct rt__watchdog *watchdog;
    /* The dump on rt_config.dump_signal, or NULL (dump_signal.c). */
    struct rt__dump_trigger *dump_trigger;
    uint64_t stalls;
    /* Fibers: when shutdown abandons them (-1 before it), and how many it
     * abandoned (fiber.h). */
    int64_t fiber_deadline;
    uint64_t fibers_abandoned;
    uint64_t fiber_stack_deepest; /* rt_metrics.fiber_stack_deepest */

    /* Serializes rt_runtime_shutdown callers, and keeps task dumps
     * (dump.c) and shutdown apart. */
    pthread_mutex_t lifecycle_lock;
    bool shut_down;
    unsigned threads_started;
};

/* Schedules n such tasks of `rt` from a thread that is not its worker: the
 * reactor's wake batch (rt__reactor_hooks.schedule_woken). Local tasks go to
 * their worker's inbox; the others in one splice into the wakes queue, then
 * up to min(n, parked) workers are woken. `tasks` is used as scratch. */
void rt__schedule_woken(rt_runtime *rt, rt_task **tasks, unsigned n);

/* Drops the queue reference of every task still in a run queue of `rt`: the
 * workers' LIFO slots, deques, deferred and local lists and inboxes, the
 * injector and the wakes queue. Shutdown, once every worker has exited and
 * every task is finished. */
void rt__scheduler_drain(rt_runtime *rt);

/* Whether no worker of `rt` is parked or announcing its park (a seq_cst
 * snapshot of the idle word; the reactor's nap check). */
bool rt__every_worker_unparked(rt_runtime *rt);

#endif
