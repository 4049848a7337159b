/* Error descriptions, from one table (libuv style). */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include <asyncrt/error.h>

#include "common.h"

/* Plain words for the codes asyncrt produces itself, each true of every
 * call that returns it (docs/guide.md, "Errors", says what each means for
 * each kind of call): never one of its causes only. ESHUTDOWN and EDEADLK
 * have one meaning in asyncrt, which their text says. */
static const struct {
    int code;
    const char *text;
} rt_errors[] = {
    {0, "success"},
    {EINVAL, "invalid argument"},
    {ENOMEM, "out of memory"},
    {EAGAIN, "resource temporarily unavailable; try again"},
    {ESHUTDOWN, "the runtime is shutting down or shut down"},
    {ECANCELED, "operation cancelled"},
    {ETIMEDOUT, "timed out"},
    {EDEADLK, "blocking here would deadlock (a blocking call on a runtime worker thread)"},
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
