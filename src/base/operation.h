/* The library's own side of the operation header (asyncrt/future.h): the
 * shared vtable of finished operations, and finishing without a call. */
#ifndef RT_SRC_OPERATION_H
#define RT_SRC_OPERATION_H

#include <asyncrt/future.h>

/* Reports the stored result and releases nothing (future.c). */
extern const rt_future_vtable rt__finished_vtable;

/* rt_future_finish, inline for the library's hot paths. */
static inline rt_poll rt__future_finish(rt_future *f, int64_t result)
{
    f->vtable = &rt__finished_vtable;
    f->result = result;
    return RT_READY;
}

#endif
