/* The library's version, as compiled into it. */
#include <asyncrt/version.h>

#include "common.h"

RT_EXPORT unsigned rt_version(void)
{
    return ASYNCRT_VERSION_HEX;
}

RT_EXPORT const char *rt_version_string(void)
{
    return ASYNCRT_VERSION_STRING;
}
