/* Fuzzes rt__cgroup_path_v2 and rt__cgroup_path_v1_cpu with the whole input
 * as /proc/self/cgroup, and checks that what they accept is a path that
 * stays under the mount point it is appended to. */
#include <errno.h>

#include "fuzz_common.h"

#include "cpus.h"

/* The path is "" or "/c1/c2..." with no empty, "." or ".." component. */
static void check_canonical(const char *out, size_t n)
{
    FUZZ_CHECK(strlen(out) == n);
    if (n == 0)
        return;
    FUZZ_CHECK(out[0] == '/' && out[n - 1] != '/');
    FUZZ_CHECK(strstr(out, "//") == NULL);
    for (const char *c = out; c != NULL; c = strchr(c + 1, '/')) {
        size_t clen = strcspn(c + 1, "/");
        FUZZ_CHECK(!(clen == 1 && c[1] == '.'));
        FUZZ_CHECK(!(clen == 2 && c[1] == '.' && c[2] == '.'));
    }
}

static void check(int (*parse)(const char *, size_t, char *, size_t), const char *buf, size_t size)
{
    char out[4096];
    int n = parse(buf, size, out, sizeof(out));
    FUZZ_CHECK(n >= 0 || n == -ENOENT || n == -EINVAL || n == -ENAMETOOLONG);
    if (n < 0)
        return;
    check_canonical(out, (size_t)n);
    /* It needs exactly n + 1 bytes: one fewer fails and leaves out alone. */
    char *exact = malloc((size_t)n + 1);
    if (exact == NULL)
        abort();
    memset(exact, 'z', (size_t)n + 1);
    FUZZ_CHECK(parse(buf, size, exact, (size_t)n) == -ENAMETOOLONG);
    for (int i = 0; i <= n; i++)
        FUZZ_CHECK(exact[i] == 'z');
    FUZZ_CHECK(parse(buf, size, exact, (size_t)n + 1) == n);
    FUZZ_CHECK(memcmp(exact, out, (size_t)n + 1) == 0);
    free(exact);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = fuzz_copy(data, size);
    check(rt__cgroup_path_v2, buf, size);
    check(rt__cgroup_path_v1_cpu, buf, size);
    free(buf);
    return 0;
}
