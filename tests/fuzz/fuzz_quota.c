/* Fuzzes rt__cpu_quota_limit: the input is written as /proc/self/cgroup and
 * the function walks a fake cgroup tree made once in a temporary directory,
 * so that the way it joins the mount point, the parsed path and the file
 * names into one buffer, and walks up from there, meets every path the
 * parsers let through. The tree's quotas are 3 CPUs in v2 "/a", 2 in v2
 * "/a/b", 5 in v1 "/a" and 1 beside the root (which no path may reach), so
 * the result can only be 0, 2, 3 or 5. */
#include <fcntl.h>
#include <ftw.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"

#include "cpus.h"

static char dir[256];
static char root[300];
static char self[300];

static void put(const char *rel, const char *contents)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    for (char *p = path + strlen(dir) + 1; *p != '\0'; p++) {
        if (*p == '/') {
            *p = '\0';
            mkdir(path, 0700);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "w");
    if (f == NULL || fputs(contents, f) < 0 || fclose(f) != 0)
        abort();
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_tree(void)
{
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/asyncrt-fuzz-quota-XXXXXX", tmp != NULL ? tmp : "/tmp");
    if (mkdtemp(dir) == NULL)
        abort();
    snprintf(root, sizeof(root), "%s/root", dir);
    snprintf(self, sizeof(self), "%s/self", dir);
    put("root/a/cpu.max", "300000 100000\n");
    put("root/a/b/cpu.max", "200000 100000\n");
    put("root/a/b/c/cpu.max", "max 100000\n");
    put("root/cpu,cpuacct/a/cpu.cfs_quota_us", "500000\n");
    put("root/cpu,cpuacct/a/cpu.cfs_period_us", "100000\n");
    put("escape/cpu.max", "100000 100000\n");
    atexit(remove_tree);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = open(self, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        abort();
    size_t done = 0;
    while (done < size) {
        ssize_t n = write(fd, data + done, size - done);
        if (n <= 0)
            abort();
        done += (size_t)n;
    }
    close(fd);
    unsigned limit = rt__cpu_quota_limit(root, self);
    FUZZ_CHECK(limit == 0 || limit == 2 || limit == 3 || limit == 5);
    return 0;
}
