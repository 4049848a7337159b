/* Fuzzes rt__parse_cpu_max with the whole input as a cgroup v2 cpu.max file. */
#include "fuzz_common.h"

#include "cpus.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = fuzz_copy(data, size);
    unsigned limit = 0;
    int r = rt__parse_cpu_max(buf, size, &limit);
    FUZZ_CHECK(r == -1 || r == 0 || r == 1);
    /* A quota always leaves at least one CPU, and only digits and
     * whitespace (no NUL) make a valid file. */
    if (r == 1)
        FUZZ_CHECK(limit >= 1);
    if (r >= 0)
        FUZZ_CHECK(memchr(buf, '\0', size) == NULL);
    /* Trailing whitespace never changes the verdict: the kernel ends the
     * file with '\n', a hand-written file might not. */
    char *nl = malloc(size + 1);
    if (nl == NULL)
        abort();
    if (size != 0)
        memcpy(nl, data, size);
    nl[size] = '\n';
    unsigned again = 0;
    int r2 = rt__parse_cpu_max(nl, size + 1, &again);
    FUZZ_CHECK(r2 == r && (r != 1 || again == limit));
    free(nl);
    free(buf);
    return 0;
}
