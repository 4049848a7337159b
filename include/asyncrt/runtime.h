/* asyncrt: creating, running and stopping a runtime.
 *
 * A runtime is a pool of worker threads that poll tasks. Each worker owns a
 * work-stealing deque; tasks spawned or woken from threads that are not its
 * workers ("foreign threads") go through a global injector queue. Idle workers
 * sleep on a futex and use no CPU.
 *
 * Errors are negative errno values (rt_strerror() names them); no function
 * aborts or exits the process on a failed system call or a failed
 * allocation. What each function does with a NULL argument follows the rule
 * in error.h ("NULL arguments"). */
#ifndef ASYNCRT_RUNTIME_H
#define ASYNCRT_RUNTIME_H

#include <stdint.h>

#include "future.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_runtime rt_runtime;
struct rt_report;

/* How a runtime is built. Fill it with rt_config_init, then change fields;
 * fields are only ever added at the end. */
typedef struct rt_config {
    /* Worker threads. 0: the number of CPUs this process may use: the CPUs
     * of its affinity mask, lowered by the CPU quota of its own cgroup or of
     * any ancestor (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us over
     * cpu.cfs_period_us), rounded up: a quota of 1.5 CPUs gives 2 workers.
     * With 0, the environment variable ASYNCRT_WORKERS, when it holds a
     * positive decimal number, is used instead (read by each rt_runtime_new,
     * clamped to RT_MAX_WORKERS; any other value is ignored). At most
     * RT_MAX_WORKERS. Default 0. */
    unsigned workers;
    /* A busy worker still looks at the global injector at least once every
     * this many polls, so injected work (tasks spawned from outside, and
     * tasks the reactor woke) never starves behind local work. While polls
     * are long it looks more often, down to every second poll, aiming at one
     * look per 200 us of polling; it measures its polls once per look.
     * Default 61 (Go's choice: a prime, so it does not beat with task
     * patterns). >= 1. */
    unsigned injector_interval;
    /* Rounds of stealing attempts an idle worker makes before it parks. The
     * higher, the lower the wake-up latency for bursty work and the more CPU an
     * idle moment burns. >= 1. Default 2. */
    unsigned spin_rounds;
    /* Cooperative budget: how many leaf operations (channel sends and
     * receives, semaphore and mutex acquisitions, notifications, socket and
     * descriptor reads and writes, joins, sleeps: everything that calls
     * rt_coop_proceed) one poll of a task may complete before they start
     * returning RT_PENDING with the task woken, so that a task which always
     * finds its data ready still lets the other tasks of its worker run.
     * 0 turns the budget off. Default 128 (Tokio's). */
    unsigned budget;
    /* Most threads the blocking pool (rt_spawn_blocking) runs at once; jobs
     * beyond them queue. >= 1. Default 512. */
    unsigned blocking_threads;
    /* A blocking-pool thread with nothing to do for this long exits.
     * > 0. Default 10 s. */
    int64_t blocking_idle_ns;
    /* How long rt_runtime_shutdown waits for blocking jobs that are running;
     * those still running then are abandoned (their threads finish them
     * detached) and counted in rt_metrics.blocking_abandoned. Jobs that have
     * not started are cancelled. < 0: wait for ever. Default 10 s. */
    int64_t blocking_shutdown_ns;
    /* While every worker is busy, the reactor waits up to this long before
     * it collects descriptor events again, instead of being woken by each
     * event as it arrives: on a machine with fewer cores than busy threads
     * every such wake takes a CPU from a worker. A worker that runs out of
     * work ends the wait at once, and timers still fire on time; the cost is
     * that a task woken by an event during the wait is queued only when it
     * ends, where a busy worker could have taken it at its next look at the
     * queues. A wait that lasts its whole length (workers busy with work
     * other than the events) halves the next one, down to 25 us; one that a
     * worker ends by running out of work restores this length. Without
     * epoll_pwait2 (Linux < 5.11) waits are rounded up to 1 ms. The reactor
     * naps only after a
     * batch of 2 or more events. 0 turns naps off (every event wakes the
     * reactor at once). >= 0. Default 500 us. */
    int64_t reactor_nap_ns;

    /* ---- Diagnostics (diag.h) ----
     * A library built without diagnostics refuses poll_timing, stall_ns and
     * dump_signal with -ENOSYS and ignores ASYNCRT_STALL_MS. */

    /* Time every poll: per-task poll counts, busy and idle time in task
     * dumps, and the per-worker histograms of poll durations and scheduling
     * delays in rt_worker_metrics. Costs two clock readings per poll and
     * one per wake, and every task of the runtime is allocated with malloc
     * rather than from the task block cache (docs/debugging.md has the
     * measured cost). Default 0 (off); 1: on. */
    int poll_timing;
    /* Report a poll that has run longer than this (a task that blocks its
     * worker: a blocking call, a long computation) through `report`, once,
     * then again each time it has run this long again. A watchdog thread
     * samples the workers every stall_ns / 4 (so a stall is seen within
     * 1.25 stall_ns); it costs the polls nothing. 0: off, unless the
     * environment variable ASYNCRT_STALL_MS holds a positive number of
     * milliseconds (read by rt_runtime_new). Default 0. >= 0. */
    int64_t stall_ns;
    /* Where stall, lost wake-up and misuse reports go (diag.h,
     * rt_report_fn). NULL: rt_report_print (one line on standard error).
     * Lost wake-ups are always looked for, by the workers' registry
     * sweeps; misuse (a reference released beyond its count) is reported
     * here when a task of this runtime makes it. */
    void (*report)(const struct rt_report *report, void *arg);
    void *report_arg; /* passed to `report` */
    /* A signal (SIGQUIT, SIGUSR1, ...) at which the reactor thread writes a
     * task dump (rt_runtime_dump_fd) to dump_fd, then goes on: the signal
     * reaches the runtime through a listener of signal.h (the same rules
     * apply: its handler only wakes the reactor; block the signal in every
     * thread, before rt_runtime_new, under ThreadSanitizer), so the dump is
     * never written from a signal handler, and is written even when every
     * worker is stuck in a poll. The reactor does nothing else while it
     * writes: a dump_fd that blocks (a full pipe) holds up timers and I/O.
     * 0: none. Default 0. */
    int dump_signal;
    /* Where the signal's dumps go: a descriptor the caller keeps open for
     * the runtime's life. Default 2 (standard error). */
    int dump_fd;
    /* Usable stack bytes of a fiber spawned without a size of its own
     * (fiber.h). Default 256 KiB (512 KiB in an AddressSanitizer build,
     * whose frames are larger); 0 means the default. */
    size_t fiber_stack_size;
    /* How long rt_runtime_shutdown lets cancelled fibers run their cleanup
     * (fiber.h, "Cancellation"), from when it begins. Default 1 s. >= 0. */
    int64_t fiber_shutdown_ns;
    /* A debugging aid: 1 makes every await of a fiber first move it to
     * another worker (the next one, with two or more), so that code keeping
     * errno, a thread-local or a thread's lock across an await fails in
     * tests rather than in production. Pinned fibers stay put. Also turned
     * on by the environment variable ASYNCRT_FIBER_MIGRATE=1. Default 0. */
    int fiber_migrate;
} rt_config;

/* Largest accepted rt_config.workers. */
#define RT_MAX_WORKERS 1024u

/* Fills *cfg with the defaults above. cfg NULL: nothing is done. Any thread. */
void rt_config_init(rt_config *cfg);

/* Creates a runtime and starts its worker threads and its reactor thread.
 * The threads are named for top, perf and gdb: "asyncrt-w0", "asyncrt-w1",
 * ... for workers, "asyncrt-reactor", and "asyncrt-block" for the blocking
 * pool's threads.
 * cfg: read during the call only; NULL means the defaults. *out receives the
 * runtime, owned by the caller until rt_runtime_free.
 * Errors: -EINVAL (out NULL, workers > RT_MAX_WORKERS, injector_interval 0,
 * spin_rounds 0, blocking_threads 0, blocking_idle_ns <= 0,
 * reactor_nap_ns < 0), -ENOMEM, -EMFILE / -ENFILE (no descriptor for the
 * reactor's epoll instances or eventfd), -EAGAIN (a thread could not be
 * created). On any error nothing is left running or allocated: every thread
 * the runtime starts is given all it needs before it starts, so a runtime
 * that rt_runtime_new returned has all its parts running.
 * Any thread. */
int rt_runtime_new(const rt_config *cfg, rt_runtime **out);

/* Stops the runtime: new spawns fail with -ESHUTDOWN from now on, the workers
 * finish the poll they are in and exit, then every task that has not finished
 * is cancelled: its drop function runs exactly once (on the calling thread)
 * and its joiner gets -ECANCELED. Then the reactor thread stops, every rt_io
 * still open is closed and freed, and pending timers are released. Blocking
 * jobs (rt_spawn_blocking) that have not started are cancelled; running ones
 * are waited for up to rt_config.blocking_shutdown_ns, then abandoned. A sleep
 * polled by hand outside a task and still pending then reports -ESHUTDOWN
 * when polled; it must be dropped before rt_runtime_free.
 * Returns the number of tasks cancelled (>= 0; blocking jobs cancelled before
 * they started are not counted here).
 * After it returns every task of the runtime is finished, so a waker that
 * outlives it is inert: waking it or dropping it only releases memory.
 * Calling it again returns 0. Errors: -EINVAL (rt NULL), -EDEADLK (called from
 * one of this runtime's own workers, which cannot join itself, or from a drop
 * function this shutdown is running).
 * Drop functions run by shutdown must not block on other tasks of the runtime:
 * rt_task_wait fails there with -EDEADLK.
 * Any thread but the runtime's workers; not concurrently with rt_runtime_free. */
int rt_runtime_shutdown(rt_runtime *rt);

/* Shuts the runtime down if needed (as above), then frees it. NULL is a no-op.
 * Wakers and join handles of its tasks stay safe to use afterwards: each task's
 * memory lives until its last waker or handle is released, and a finished task
 * never touches its runtime. The one thing forbidden is racing this call: no
 * other thread may be inside rt_spawn or rt_task_cancel on this runtime, or
 * inside a wake that began before rt_runtime_shutdown returned, while it runs.
 * Errors: -EDEADLK (called from one of its workers, or from a drop function
 * run by its shutdown: nothing is freed).
 * Any thread but the runtime's workers. */
int rt_runtime_free(rt_runtime *rt);

/* The runtime whose worker is calling, or NULL on any other thread. */
rt_runtime *rt_current_runtime(void);

/* The number of worker threads of `rt` (0 for NULL). */
unsigned rt_runtime_workers(const rt_runtime *rt);

/* Runs a future to completion on the runtime and blocks the calling thread
 * until it finishes; the future runs as an ordinary task (rt_current_runtime() works
 * inside it), over a copy of the `size` bytes at `state`, as rt_spawn.
 * Returns 0 once the future ran: *value holds its result and *status its
 * status (0, its own error, or -ECANCELED when the runtime was shut down
 * while it ran; task.h, "Results and status"), either may be NULL, and its
 * state as its drop left it is copied back to `state`, so the caller reads
 * what the task kept there (a coordinator's totals, say) without a pointer.
 * The drop has run by then: what it released must not be used.
 * Errors, and then the future never ran, its drop was not called and
 * `state` is unchanged (the memory for the wait is allocated before the
 * future is spawned): -EINVAL (rt or poll NULL, state NULL with size > 0),
 * -ENOMEM, -ESHUTDOWN (runtime shut down), -EDEADLK (called from a worker
 * thread of any asyncrt runtime, where blocking could deadlock it, a fiber
 * included, which spawns the future and awaits an rt_task_join instead, or
 * from a drop function run by rt_runtime_shutdown).
 * Any thread that is not a worker. rt_fiber_block_on (fiber.h) runs a
 * fiber the same way. */
#define rt_block_on(rt, poll, drop, state, size, value, status)                                    \
    rt_block_on_with_site(__FILE__ ":" RT__BLOCK_ON_STR(__LINE__), (rt), (poll), (drop), (state),  \
                          (size), (value), (status))

/* rt_block_on recording `site` ("file:line" with static storage, or NULL)
 * as where the task was spawned: what rt_block_on expands to (task.h,
 * "Spawn sites"). */
int rt_block_on_with_site(const char *site, rt_runtime *rt, rt_poll_fn poll, rt_drop_fn drop,
                          void *state, size_t size, void **value, int *status);
#define RT__BLOCK_ON_STR(x) RT__BLOCK_ON_STR_(x)
#define RT__BLOCK_ON_STR_(x) #x

#ifdef __cplusplus
}
#endif
#endif
