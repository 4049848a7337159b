/* Fuzzes rt__parse_workers_env with the input as a NUL-terminated string and
 * compares it with a plain strtoull reading of the rule it documents. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>

#include <asyncrt/runtime.h>

#include "fuzz_common.h"

#include "cpus.h"

static unsigned reference(const char *s)
{
    if (s[0] == '\0')
        return 0;
    for (const char *c = s; *c != '\0'; c++)
        if (!isdigit((unsigned char)*c))
            return 0;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno == ERANGE || v == 0 || v > UINT_MAX)
        return 0;
    return v > RT_MAX_WORKERS ? RT_MAX_WORKERS : (unsigned)v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = fuzz_string(data, size);
    unsigned n = rt__parse_workers_env(s);
    FUZZ_CHECK(n <= RT_MAX_WORKERS);
    FUZZ_CHECK(n == reference(s));
    free(s);
    return 0;
}
