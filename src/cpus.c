/* How many CPUs this process may really use: the affinity mask, lowered by a
 * cgroup CPU quota when one is set (a container limited to 2 CPUs on a
 * 64-CPU host should not start 64 workers). */
#include <sched.h>
#include <stdlib.h>
#include <stdio.h>
#include <unistd.h>

#include "runtime.h"

/* cgroup v2: "max 100000" or "<quota> <period>" in cpu.max. */
static unsigned cgroup_v2_limit(void)
{
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "re");
    if (f == NULL)
        return 0;
    char quota[32];
    long period = 0;
    unsigned limit = 0;
    if (fscanf(f, "%31s %ld", quota, &period) == 2 && period > 0 && quota[0] != 'm') {
        long q = atol(quota);
        if (q > 0)
            limit = (unsigned)((q + period - 1) / period);
    }
    fclose(f);
    return limit;
}

/* cgroup v1: cpu.cfs_quota_us (-1 when unlimited) over cpu.cfs_period_us. */
static unsigned cgroup_v1_limit(void)
{
    long quota = -1, period = 0;
    FILE *f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "re");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld", &quota) != 1)
        quota = -1;
    fclose(f);
    f = fopen("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "re");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld", &period) != 1)
        period = 0;
    fclose(f);
    if (quota <= 0 || period <= 0)
        return 0;
    return (unsigned)((quota + period - 1) / period);
}

unsigned rt__available_cpus(void)
{
    unsigned n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = (unsigned)CPU_COUNT(&set);
    if (n == 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n = online > 0 ? (unsigned)online : 1;
    }
    unsigned limit = cgroup_v2_limit();
    if (limit == 0)
        limit = cgroup_v1_limit();
    if (limit != 0 && limit < n)
        n = limit;
    return n;
}
