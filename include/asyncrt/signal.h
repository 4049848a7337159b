/* asyncrt: waiting for signals.
 *
 * An rt_signal listens for one signal number (SIGINT, SIGTERM, SIGHUP,
 * SIGUSR1, ...) from its creation until it is freed; receiving from it is
 * an operation (see future.h) that finishes once the signal has arrived
 * since the previous receive. Several listeners may listen for the same
 * signal: each sees every arrival. A graceful stop is
 *
 *     rt_signal_new(NULL, SIGTERM, &s->term);     // in the task, once
 *     rt_signal_recv_init(&s->got, s->term);
 *     RT_AWAIT(&s->co, cx, &s->got);              // then stop cleanly
 *
 * How a signal reaches the listeners, whichever thread the kernel picks:
 * - While a signal has a listener, the library's own handler is installed
 *   for it (sigaction, SA_RESTART): a thread that does not block the signal
 *   may run the handler, which only counts the arrival and wakes the
 *   listeners (async-signal-safe, a few instructions). This holds for
 *   threads the user created too, and for a signal the process started
 *   with ignored (a background job starts with SIGINT and SIGQUIT ignored):
 *   a listener replaces SIG_IGN while it listens.
 * - A signal blocked in every thread stays pending; each listener also has
 *   a signalfd that takes it from there, so blocking the signals in main
 *   before the runtime starts (its threads inherit the mask) works as well.
 * When the last listener for a signal is freed, the action the signal had
 * before the first one was created is put back. The library changes no
 * thread's signal mask.
 * Under ThreadSanitizer, a handler is held back until its thread next
 * enters a call TSan intercepts, which a thread asleep in the runtime's
 * futex waits does not do for a long time: block the signals in every
 * thread (in main, before rt_runtime_new) so that the signalfds take them.
 * Arrivals coalesce as the kernel coalesces them: a standard signal sent
 * several times while it is pending arrives once; a receive reports how
 * many arrivals it covers.
 * Errors of a listener's creation and what they leave: see rt_signal_new.
 * Threads: rt_signal_new and rt_signal_free from any thread; one receive at
 * a time per listener (from one task or thread polling by hand). */
#ifndef ASYNCRT_SIGNAL_H
#define ASYNCRT_SIGNAL_H

#include <stdint.h>

#include "future.h"
#include "io.h"
#include "runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rt_signal rt_signal;

/* Most listeners the process may hold at once. */
#define RT_SIGNAL_LISTENERS_MAX 128

/* Starts listening for `signo` on `rt` (NULL: rt_current_runtime()): arrivals from
 * now on are seen by this listener's receives. Errors: -EINVAL (out NULL,
 * no runtime, signo not a signal a process can catch and handle
 * asynchronously: SIGKILL, SIGSTOP, the synchronous SIGSEGV, SIGBUS,
 * SIGFPE, SIGILL and SIGTRAP, and numbers out of range or reserved by the C
 * library), -ENOSPC (RT_SIGNAL_LISTENERS_MAX listeners already), -EMFILE
 * and the other errors of eventfd(2), signalfd(2) and rt_io_open,
 * -ESHUTDOWN. On error nothing was changed (no action installed, no
 * descriptor left). Any thread. */
int rt_signal_new(rt_runtime *rt, int signo, rt_signal **out);

/* Stops listening and frees the listener (its receive must have finished
 * or been dropped). The last listener of a signal puts back the action the
 * signal had before. Call it before rt_runtime_free of the listener's
 * runtime; after rt_runtime_shutdown it still frees what the shutdown left.
 * NULL is a no-op. Any thread. */
void rt_signal_free(rt_signal *s);

/* The signal number (0 for NULL). */
int rt_signal_number(const rt_signal *s);

/* A receive: an operation that finishes with result the number of arrivals
 * since the listener's previous receive (>= 1; or since its creation), or
 * a negative errno (-ESHUTDOWN when the runtime shuts down while it
 * waits). Dropped while it waits, it loses nothing: the arrivals it did not
 * report are reported by the next receive. */
typedef struct rt_signal_recv {
    RT_FUTURE_HEADER;
    rt_signal *signal;  /* NULL once finished or dropped */
    rt_io_ready wakeup; /* the listener's wake-up descriptor */
    rt_io_ready queued; /* its signalfd, for a signal blocked everywhere */
} rt_signal_recv;

/* Prepares a receive. Errors: -EINVAL (op or s NULL), -EBUSY (another
 * receive on s is unfinished). The init claims s (marks it busy) until the
 * receive finishes or is dropped, so one initialised and never polled must
 * still be dropped (or awaited), before rt_signal_free. Otherwise every
 * later receive on s, the same operation initialised again included, is
 * refused with -EBUSY. */
int rt_signal_recv_init(rt_signal_recv *op, rt_signal *s);

#ifdef __cplusplus
}
#endif
#endif
