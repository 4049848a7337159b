/* The task dump on a signal (rt_config.dump_signal; dump_signal.c).
 * Internal, not installed. */
#ifndef RT_SRC_DUMP_SIGNAL_H
#define RT_SRC_DUMP_SIGNAL_H

#include <asyncrt/future.h>
#include <asyncrt/runtime.h>

struct rt__dump_trigger;

/* Listens for `signo` on rt (running: the reactor must be up) and writes a
 * task dump to `fd` from the reactor thread at every arrival. Errors: those
 * of rt_signal_new, -ENOMEM; nothing is left on error. */
int rt__dump_trigger_start(rt_runtime *rt, int signo, int fd, struct rt__dump_trigger **out);

/* Shutdown, once the runtime is closing and before descriptors are
 * closed: no poll of the listener starts after it, and it waits for one in
 * progress (a dump in it gives up on the closing runtime). */
void rt__dump_trigger_stop(struct rt__dump_trigger *tr);

/* Shutdown, once the reactor has stopped: frees the listener. NULL: no-op. */
void rt__dump_trigger_free(struct rt__dump_trigger *tr);

/* rt_runtime_dump_fd for the reactor thread (diag.c): instead of waiting
 * for a shutdown that holds the runtime's lifecycle lock (and will stop
 * this very thread), it gives up with -ESHUTDOWN. */
int rt__runtime_dump_fd_nowait(rt_runtime *rt, int fd);

#endif
