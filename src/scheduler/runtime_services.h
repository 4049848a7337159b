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

#include "reactor.h"

struct rt_io;

/* The runtime's reactor: where descriptors are watched and timers
 * submitted. Valid from rt_runtime_new until rt_runtime_free. Any thread. */
rt__reactor *rt__runtime_reactor(rt_runtime *rt);

/* Whether rt_runtime_shutdown has begun (an acquire load: what shutdown
 * wrote before it set the flag is visible once this is true). Any thread;
 * a waiting operation checks it to end with -ESHUTDOWN rather than wait for
 * a wake that shutdown will not send. */
bool rt__runtime_closing(rt_runtime *rt);

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

/* rt_runtime_tasks; with wait false it gives up with -ESHUTDOWN rather
 * than wait for a shutdown in progress (the reactor's dump). dump.c. */
int rt__runtime_tasks(rt_runtime *rt, rt_task_visit_fn fn, void *arg, bool wait);

#endif
