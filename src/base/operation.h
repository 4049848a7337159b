/* The library's own side of the operation header (asyncrt/future.h): the
 * shared vtable of finished operations, finishing without a call, and what
 * the describe functions share. */
#ifndef RT_SRC_OPERATION_H
#define RT_SRC_OPERATION_H

#include <stdbool.h>
#include <stdint.h>

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

/* For the vtables' describe functions (future.c). Each appends to
 * info->text, cut at its size with "..." and always terminated. */
struct rt_wait_info;
/* Appends printf-style text. */
void rt__wait_printf(struct rt_wait_info *info, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends a duration as seconds with milliseconds ("1.500 s"), with its
 * sign ("+1.500 s") when `sign` is set; a negative one always has it. */
void rt__wait_seconds(struct rt_wait_info *info, int64_t ns, bool sign);
/* Appends how far a CLOCK_MONOTONIC deadline lies from now ("+1.500 s"),
 * and " (due)" once it has passed ("-0.002 s (due)"): a dump's reader wants
 * the time left, not a clock reading. */
void rt__wait_from_now(struct rt_wait_info *info, int64_t deadline_ns);

#endif
