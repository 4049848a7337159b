/* The scheduler's side of the trace recorder (trace.c): the public
 * rt_trace_start/rt_trace_stop, and which track a thread of the traced
 * runtime records into (base's trace_buf.h does the recording). Internal,
 * not installed. */
#ifndef RT_SRC_TRACE_H
#define RT_SRC_TRACE_H

#include <asyncrt/runtime.h>
#include <asyncrt/trace.h>

/* Stops and writes the trace of `rt`, if one records (rt_runtime_shutdown,
 * after it has refused new spawns and before the workers stop). */
void rt__trace_shutdown(rt_runtime *rt);

#endif
