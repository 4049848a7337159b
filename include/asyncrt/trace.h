/* asyncrt: recording a timeline of the scheduler (Chrome trace-event JSON).
 *
 * rt_trace_start makes a runtime's threads record what they do, each into
 * its own buffer: every poll of a task (when it started and ended, and
 * whether it finished), spawns, wakes, steals, parks and unparks of the
 * workers, and the reactor's turns and timer fires. rt_trace_stop stops
 * the recording and writes it to the file named at start, as a JSON trace
 * that Perfetto (ui.perfetto.dev, "Open trace file") and chrome://tracing
 * open: one track per worker ("worker N"), one for the reactor ("reactor")
 * and one for every other thread ("other threads"), polls as slices named
 * "task <id>", and an arrow from each wake to the poll it caused.
 * docs/tracing.md shows how to read it.
 *
 *     rt_trace_start(rt, "/tmp/app.json");
 *     ... run the workload ...
 *     rt_trace_stop(rt);              // writes /tmp/app.json
 *
 * Cost. While no trace records, each of those events costs one relaxed
 * load of a flag and a branch not taken. While one records, an event costs
 * a clock reading and a 32-byte store into the thread's buffer; a worker or
 * the reactor does it without any locked instruction, other threads with
 * two fetch-adds (tens of nanoseconds in all). rt_trace_stop makes one
 * membarrier(2) system call. docs/tracing.md has measurements.
 *
 * Buffers. Each track holds a fixed number of events, mapped at start and
 * only touched as they fill: 262144 (8 MiB) unless the environment
 * variable ASYNCRT_TRACE_EVENTS, read at each start, says another number
 * between 16 and 67108864. A thread whose buffer is full stops recording
 * and counts what it drops; the file reports the counts (an "events
 * dropped" instant on the track, and otherData.dropped) and closes a slice
 * cut short at the last event recorded. Recording never blocks, allocates
 * or waits.
 *
 * What is recorded. The events of the traced runtime's workers and of its
 * reactor thread, recognised exactly. Events that other threads cause
 * (rt_spawn from main or from a blocking-pool thread, a wake from a thread
 * that is no worker) go to the "other threads" track whichever runtime
 * they concern, since such a thread belongs to none; the workers and the
 * reactors of other runtimes are recognised and record nothing.
 *
 * One trace at a time per process.
 *
 * Threads. Both functions may be called from any thread, including a
 * task's (the write then holds up that worker while it lasts), and while
 * the runtime's threads keep running. */
#ifndef ASYNCRT_TRACE_H
#define ASYNCRT_TRACE_H

#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts recording the events of `rt` into memory, to be written to `path`
 * by rt_trace_stop (or by rt_runtime_shutdown). The file is created (mode
 * 0644 before the umask) or truncated now, so that a path that cannot be
 * written fails here; it stays empty until the trace is written. `path` is
 * not kept: the caller keeps ownership of the string.
 * Errors: -EINVAL (rt or path NULL), -EBUSY (a trace already records in
 * this process, of this or another runtime), -ESHUTDOWN (rt is shut down
 * or shutting down), -ENOMEM (the buffers), and the errors of open(2) on
 * path (-ENOENT, -EACCES, -EISDIR, -EMFILE, ...), -ENOSYS (a library
 * built without diagnostics: no recorder). On error nothing records,
 * nothing is allocated and no file was created. Any thread. */
int rt_trace_start(rt_runtime *rt, const char *path);

/* Stops the trace of `rt` and writes it to the file named at start, then
 * closes the file and frees the buffers. Recording stops first: threads
 * that were recording an event at that moment are waited for (a few
 * instructions each), events after it are not recorded, and the runtime's
 * threads go on running while the file is written. Slices still open at
 * the stop (a poll in progress) end at the stop's time.
 * rt_runtime_shutdown (and so rt_runtime_free) stops and writes an active
 * trace of its runtime before its workers stop; rt_trace_stop afterwards
 * returns -ENOENT.
 * Returns 0, or -EINVAL (rt NULL), -ENOENT (no trace of rt records),
 * -ENOSYS (built without diagnostics), or
 * the error of writing the file (-ENOSPC, -EIO, ...) or -ENOMEM: the trace
 * is then stopped and its buffers freed all the same, with the file cut
 * short. Any thread. */
int rt_trace_stop(rt_runtime *rt);

#ifdef __cplusplus
}
#endif
#endif
