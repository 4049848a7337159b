/* How many workers a runtime starts when rt_config.workers is 0: the CPUs of
 * the process's affinity mask, lowered by the CPU quota of its own cgroup (v1
 * or v2, and every ancestor's), unless ASYNCRT_WORKERS says otherwise.
 *
 * Everything that parses is a pure function over a buffer that is not assumed
 * to be NUL-terminated and may hold any bytes, so that tests and fuzzers can
 * feed it whatever a kernel, a container runtime or an attacker could put in
 * those files. The one function that reads files takes the directories to
 * read from, so tests can point it at a fake tree. Internal, not installed. */
#ifndef RT_SRC_CPUS_H
#define RT_SRC_CPUS_H

#include <stddef.h>

/* Where the kernel mounts the cgroup file systems, and the file that names
 * the calling process's cgroups. */
#define RT__CGROUP_ROOT "/sys/fs/cgroup"
#define RT__PROC_SELF_CGROUP "/proc/self/cgroup"

/* Finds the cgroup v2 line "0::<path>" in the contents of /proc/self/cgroup
 * (buf, len bytes) and writes its path to out as a NUL-terminated string that
 * can be appended to the mount point: "" for the root cgroup, "/a/b" for any
 * other (empty components, as in "/a//b/", are dropped). Returns the length
 * written (without the NUL), -ENOENT when there is no such line, -EINVAL when
 * the path does not start with '/', holds a NUL byte or a "." or ".."
 * component (which could leave the mount point), -ENAMETOOLONG when it does
 * not fit in outlen bytes. out is written only on success; it may be NULL when
 * outlen is 0. */
int rt__cgroup_path_v2(const char *buf, size_t len, char *out, size_t outlen);

/* The same for the cgroup v1 line whose controller list contains "cpu" (for
 * example "4:cpu,cpuacct:/a/b" or "3:cpuacct,cpu:/a/b", but not a line with
 * only "cpuacct" or "cpuset"). Same returns. */
int rt__cgroup_path_v1_cpu(const char *buf, size_t len, char *out, size_t outlen);

/* Parses the contents of a cgroup v2 cpu.max file (buf, len bytes): "max
 * <period>" or "<quota> <period>", decimal, separated by spaces or tabs, then
 * optional trailing whitespace (the kernel writes one '\n'). Returns 1 and
 * sets *limit to quota / period rounded up (at least 1, at most UINT_MAX)
 * when there is a quota, 0 when the quota is "max", -1 when the contents are
 * anything else (a zero quota or period, a number beyond 64 bits, a sign, a
 * NUL byte, missing or extra fields). *limit is written only when 1 is
 * returned. */
int rt__parse_cpu_max(const char *buf, size_t len, unsigned *limit);

/* Parses the contents of cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us:
 * each a decimal number with optional surrounding whitespace; the quota is -1
 * when unlimited. Returns as rt__parse_cpu_max: 1 with *limit set, 0 for a
 * quota of -1, -1 for anything else. */
int rt__parse_cfs(const char *quota, size_t quota_len, const char *period, size_t period_len,
                  unsigned *limit);

/* Parses the value of ASYNCRT_WORKERS: a positive decimal number (digits
 * only, no sign or space) that fits in an unsigned int, clamped to
 * RT_MAX_WORKERS. Returns it, or 0 when s is NULL or anything else. */
unsigned rt__parse_workers_env(const char *s);

/* The CPU limit that the cgroup quotas put on the process whose
 * /proc/self/cgroup is the file at proc_self_cgroup, with the cgroup file
 * systems mounted under sysfs_cgroup_root (RT__CGROUP_ROOT on a real
 * system): for cgroup v2 <root>/<path>/cpu.max, for v1
 * <root>/cpu,cpuacct/<path>/cpu.cfs_quota_us and cpu.cfs_period_us (or under
 * <root>/cpu or <root>/cpuacct,cpu), in the process's own cgroup and in each
 * of its ancestors up to the mount point, since a parent's quota limits its
 * children too. Directories that do not exist are skipped, so a container
 * whose /proc/self/cgroup names a path of the host still gets the quota at
 * its mount point. Returns the smallest limit found, or 0 when there is
 * none (no quota, or files missing or unreadable). */
unsigned rt__cpu_quota_limit(const char *sysfs_cgroup_root, const char *proc_self_cgroup);

/* The number of CPUs this process may run on: its affinity mask (or the
 * online CPUs when that cannot be read), lowered by rt__cpu_quota_limit on
 * the real system. At least 1. */
unsigned rt__available_cpus(void);

/* How many workers rt_config.workers = 0 means: ASYNCRT_WORKERS when it
 * holds a valid value (rt__parse_workers_env), else rt__available_cpus().
 * Reads the environment at each call. At least 1, at most RT_MAX_WORKERS. */
unsigned rt__default_workers(void);

#endif
