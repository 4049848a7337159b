/* The one await of fibers, for the blocking-style helpers (helpers.c),
 * which are each an operation's init and this await. Internal, not
 * installed. */
#ifndef RT_SRC_FIBER_FIBER_AWAIT_H
#define RT_SRC_FIBER_FIBER_AWAIT_H

#include <stdint.h>

#include <asyncrt/future.h>
#include <asyncrt/runtime.h>

typedef struct rt__fiber rt__fiber;

/* The calling fiber, with its await site noted for the task dump: the
 * caller's file, line and function, the operation awaited (NULL for none)
 * and `frame`, the frame of the public function called at the await site,
 * where the dump's backtrace starts. NULL outside a fiber (nothing noted).
 * Call it at the entry of the public function, before anything can switch
 * the fiber out: the fiber is found through a thread-local variable. */
rt__fiber *rt__fiber_begin_await(const char *file, int line, const char *function, rt_future *op,
                                 const void *frame);

/* Awaits op in fiber f (rt_fiber_await without the checks). */
int64_t rt__fiber_await(rt__fiber *f, rt_future *op);

/* The runtime fiber f runs on. */
rt_runtime *rt__fiber_runtime(const rt__fiber *f);

#endif
