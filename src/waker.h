/* The no-op waker, inline for the library's own hot paths (an empty waker
 * slot is written on every wake). Internal, not installed. */
#ifndef RT_SRC_WAKER_H
#define RT_SRC_WAKER_H

#include <asyncrt/future.h>

extern const rt_waker_vtable rt__noop_waker_vtable;

static inline rt_waker rt__waker_noop(void)
{
    rt_waker w = {&rt__noop_waker_vtable, NULL};
    return w;
}

#endif
