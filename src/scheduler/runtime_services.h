/* What the layers above the scheduler (the toolkit and src/ itself) may ask
 * of a runtime. They see struct rt_runtime only as an incomplete type: its
 * fields are the scheduler's (runtime_object.h), and tests/seams_test.py
 * fails on any file outside src/scheduler and src/runtime.c that could see
 * them. Internal, not installed. */
#ifndef RT_SRC_RUNTIME_SERVICES_H
#define RT_SRC_RUNTIME_SERVICES_H

#include <stdbool.h>
#include <stdint.h>

#include <asyncrt/diag.h>
#include <asyncrt/runtime.h>

#include <pthread.h>

#include "reactor.h"
#include "registry.h"
#include "worker.h"

struct rt_io;

/* The runtime's reactor: where descriptors are watched and timers
 * submitted. Valid from rt_runtime_new until rt_runtime_free. Any thread. */
rt__reactor *rt__runtime_reactor(rt_runtime *rt);

/* Whether rt_runtime_shutdown has begun (an acquire load: what shutdown
 * wrote before it set the flag is visible once this is true). Any thread;
 * a waiting operation checks it to end with -ESHUTDOWN rather than wait for
 * a wake that shutdown will not send. */
bool rt__runtime_closing(rt_runtime *rt);

/* Schedules a task whose NOTIFIED bit the caller just set, with the queue
 * reference the caller owns: onto the calling worker's deque when it is a
 * worker of the task's runtime, else onto the injector. */
void rt__schedule(rt_task *t);

struct rt_report;

/* Sends a report to rt_config.report (or rt_report_print). report.c. */
void rt__report(rt_runtime *rt, const struct rt_report *rep);

/* ---- Open rt_io objects, closed by shutdown if the user has not ---------- */

/* Registers `io` with the reactor for `events` on `fd` and puts it on the
 * runtime's list of open objects, under the list's lock, so that shutdown
 * (rt__runtime_io_take_all) either sees and closes it or this refuses it:
 * -ESHUTDOWN once shutdown took the list, or epoll's error. Nothing is
 * changed on failure. Any thread. */
int rt__runtime_io_track(rt_runtime *rt, struct rt_io *io, int fd, uint32_t events);

/* Takes `io` off the list (rt_io_close). Any thread. */
void rt__runtime_io_untrack(rt_runtime *rt, struct rt_io *io);

/* Shutdown: refuses every later rt__runtime_io_track and hands the caller
 * the open objects, linked through their `next` fields. */
struct rt_io *rt__runtime_io_take_all(rt_runtime *rt);

/* Whether rt__runtime_io_take_all has not happened yet: a resource that
 * lives beside the rt_io objects (a child process, a signal stream) checks
 * it before it starts, as rt__runtime_io_track does. */
bool rt__runtime_io_accepted(rt_runtime *rt);

/* ---- For the diagnostics (src/diag/), which look at every worker ------- */

/* Worker `index` of rt (index < rt_runtime_workers(rt)). The part of a
 * worker others may read is documented in worker.h. Any thread. */
rt__worker *rt__runtime_worker(rt_runtime *rt, unsigned index);

/* The registries of tasks spawned by foreign threads: how many, and shard
 * `index` (each under its own lock, registry.h). Any thread. */
unsigned rt__runtime_foreign_shards(rt_runtime *rt);
rt__foreign_shard *rt__runtime_foreign_shard(rt_runtime *rt, unsigned index);

/* The lock that keeps task dumps and rt_runtime_shutdown apart, and, read
 * under it, whether shutdown has finished. */
pthread_mutex_t *rt__runtime_lifecycle_lock(rt_runtime *rt);
bool rt__runtime_shut_down(rt_runtime *rt);

/* Counts one stall the watchdog reported (rt_metrics.stalls). The
 * watchdog's thread only. */
void rt__runtime_count_stall(rt_runtime *rt);

/* Fibers (src/fiber): the default stack size (rt_config.fiber_stack_size);
 * the time by which shutdown abandons fibers (rt_config.fiber_shutdown_ns
 * after it began), -1 before shutdown; and one more fiber abandoned
 * (rt_metrics.fibers_abandoned; any thread). */
size_t rt__runtime_fiber_stack_size(rt_runtime *rt);
bool rt__runtime_fiber_migrate(rt_runtime *rt);
int64_t rt__runtime_fiber_deadline(rt_runtime *rt);
void rt__runtime_count_fiber_abandoned(rt_runtime *rt);
/* A fiber that finished went `depth` bytes deep into its stack, as far as
 * seen (rt_metrics.fiber_stack_deepest). Any thread. */
void rt__runtime_note_fiber_depth(rt_runtime *rt, uint64_t depth);

#endif
