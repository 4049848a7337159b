/* Fuzzes rt__parse_cfs. The first byte of the input is the length of the
 * cpu.cfs_quota_us contents that follow (cut to what is there); the rest is
 * cpu.cfs_period_us. */
#include "fuzz_common.h"

#include "cpus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t qlen = data[0];
    if (qlen > size - 1)
        qlen = size - 1;
    size_t plen = size - 1 - qlen;
    char *quota = fuzz_copy(data + 1, qlen);
    char *period = fuzz_copy(data + 1 + qlen, plen);
    unsigned limit = 0;
    int r = rt__parse_cfs(quota, qlen, period, plen, &limit);
    FUZZ_CHECK(r == -1 || r == 0 || r == 1);
    if (r == 1)
        FUZZ_CHECK(limit >= 1);
    if (r >= 0)
        FUZZ_CHECK(memchr(quota, '\0', qlen) == NULL && memchr(period, '\0', plen) == NULL);
    free(quota);
    free(period);
    return 0;
}
