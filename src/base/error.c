/* Error descriptions, from one table (libuv style). */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include <asyncrt/error.h>

#include "common.h"

/* asyncrt's meaning of the codes it produces itself. */
static const struct {
    int code;
    const char *text;
} rt_errors[] = {
    {0, "success"},
    {EINVAL, "invalid argument"},
    {ENOMEM, "out of memory"},
    {EAGAIN, "resource temporarily unavailable (could not create a thread)"},
    {ESHUTDOWN, "the runtime is shutting down or shut down"},
    {ECANCELED, "the task was cancelled (aborted or stopped by runtime shutdown)"},
    {ETIMEDOUT, "the deadline passed"},
    {EDEADLK, "blocking call from a runtime worker thread would deadlock"},
};

RT_EXPORT const char *rt_strerror(int err)
{
    if (err == INT_MIN)
        return "unknown error";
    int code = err < 0 ? -err : err;
    for (size_t i = 0; i < sizeof(rt_errors) / sizeof(rt_errors[0]); i++)
        if (rt_errors[i].code == code)
            return rt_errors[i].text;
    /* glibc's table: static strings, safe from any thread. */
    const char *text = strerrordesc_np(code);
    return text != NULL ? text : "unknown error";
}
