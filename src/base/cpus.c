/* How many CPUs this process may really use: the affinity mask, lowered by the
 * CPU quota of its own cgroup and its ancestors (a container limited to 2
 * CPUs on a 64-CPU host should not start 64 workers), unless ASYNCRT_WORKERS
 * says how many workers to start. See cpus.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asyncrt/runtime.h>

#include "cpus.h"
#include "fault.h"

/* ---- Pure parsers ---------------------------------------------------------
 *
 * None of them assumes a NUL terminator or looks at a byte at or past len:
 * the buffers come straight from read(2). */

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static bool is_space(char c)
{
    return is_blank(c) || c == '\n';
}

/* Reads one or more decimal digits at buf[*pos] into *value and moves *pos
 * past them. Returns false when there is no digit there or the number does
 * not fit in 64 bits. */
static bool parse_u64(const char *buf, size_t len, size_t *pos, uint64_t *value)
{
    size_t i = *pos;
    uint64_t v = 0;
    if (i >= len || !is_digit(buf[i]))
        return false;
    for (; i < len && is_digit(buf[i]); i++) {
        unsigned d = (unsigned)(buf[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *pos = i;
    *value = v;
    return true;
}

static size_t skip_space(const char *buf, size_t len, size_t i)
{
    while (i < len && is_space(buf[i]))
        i++;
    return i;
}

/* quota / period rounded up: a quota of 1.5 CPUs keeps two busy part of the
 * time, and rounding down would leave half a CPU unused. Both are > 0, so
 * the result is >= 1; it is clamped to what an unsigned holds. */
static unsigned quota_to_cpus(uint64_t quota, uint64_t period)
{
    uint64_t cpus = quota / period + (quota % period != 0);
    return cpus > UINT_MAX ? UINT_MAX : (unsigned)cpus;
}

int rt__parse_cpu_max(const char *buf, size_t len, unsigned *limit)
{
    if (buf == NULL || limit == NULL)
        return -1;
    size_t i = skip_space(buf, len, 0);
    bool unlimited = false;
    uint64_t quota = 0, period = 0;
    if (len - i >= 3 && memcmp(buf + i, "max", 3) == 0) {
        unlimited = true;
        i += 3;
    } else if (!parse_u64(buf, len, &i, &quota) || quota == 0) {
        return -1;
    }
    /* At least one blank between the fields: "max100000" is not "max". */
    if (i >= len || !is_blank(buf[i]))
        return -1;
    while (i < len && is_blank(buf[i]))
        i++;
    if (!parse_u64(buf, len, &i, &period) || period == 0)
        return -1;
    if (skip_space(buf, len, i) != len)
        return -1;
    if (unlimited)
        return 0;
    *limit = quota_to_cpus(quota, period);
    return 1;
}

/* One cgroup v1 number file: optional whitespace, the number, optional
 * whitespace, nothing else. Sets *negative_one for exactly "-1". */
static bool parse_cfs_file(const char *buf, size_t len, uint64_t *value, bool *negative_one)
{
    size_t i = skip_space(buf, len, 0);
    *negative_one = false;
    if (i < len && buf[i] == '-') {
        if (len - i < 2 || buf[i + 1] != '1')
            return false;
        *negative_one = true;
        i += 2;
    } else if (!parse_u64(buf, len, &i, value)) {
        return false;
    }
    return skip_space(buf, len, i) == len;
}

int rt__parse_cfs(const char *quota, size_t quota_len, const char *period, size_t period_len,
                  unsigned *limit)
{
    if (quota == NULL || period == NULL || limit == NULL)
        return -1;
    uint64_t q = 0, p = 0;
    bool q_unlimited, p_negative;
    if (!parse_cfs_file(quota, quota_len, &q, &q_unlimited))
        return -1;
    /* The period matters only with a quota, but a malformed one still says
     * the files are not what this code understands. */
    if (!parse_cfs_file(period, period_len, &p, &p_negative) || p_negative || p == 0)
        return -1;
    if (q_unlimited)
        return 0;
    if (q == 0)
        return -1;
    *limit = quota_to_cpus(q, p);
    return 1;
}

unsigned rt__parse_workers_env(const char *s)
{
    if (s == NULL)
        return 0;
    size_t len = strlen(s);
    size_t i = 0;
    uint64_t v;
    /* Only digits, and the whole string: "4 " or "4x" is a typo, not 4. */
    if (!parse_u64(s, len, &i, &v) || i != len || v == 0 || v > UINT_MAX)
        return 0;
    return v > RT_MAX_WORKERS ? RT_MAX_WORKERS : (unsigned)v;
}

/* Writes the canonical form of the cgroup path (path, plen bytes) to out, or
 * only measures it when out is NULL: see rt__cgroup_path_v2. Returns its
 * length or a negative errno. */
static int canonical_path(const char *path, size_t plen, char *out, size_t outlen)
{
    if (plen == 0 || path[0] != '/' || memchr(path, '\0', plen) != NULL)
        return -EINVAL;
    size_t n = 0;
    size_t i = 0;
    while (i < plen) {
        while (i < plen && path[i] == '/')
            i++;
        size_t start = i;
        while (i < plen && path[i] != '/')
            i++;
        size_t clen = i - start;
        if (clen == 0)
            continue;
        /* "." and ".." would let the path leave the mount point (the kernel
         * shows a cgroup outside the reader's namespace as "/../x"); the
         * kernel never prints "." but it is no cgroup name either. */
        if ((clen == 1 && path[start] == '.') ||
            (clen == 2 && path[start] == '.' && path[start + 1] == '.'))
            return -EINVAL;
        /* '/', the component and, at the end, the NUL must fit. */
        if (outlen < 2 || n > outlen - 2 || clen > outlen - 2 - n)
            return -ENAMETOOLONG;
        if (out != NULL) {
            out[n] = '/';
            memcpy(out + n + 1, path + start, clen);
        }
        n += 1 + clen;
    }
    if (n >= outlen)
        return -ENAMETOOLONG;
    if (n > INT_MAX)
        return -ENAMETOOLONG;
    if (out != NULL)
        out[n] = '\0';
    return (int)n;
}

/* Whether the comma-separated controller list (list, len bytes) names the
 * controller `name` exactly. */
static bool has_controller(const char *list, size_t len, const char *name)
{
    size_t nlen = strlen(name);
    size_t i = 0;
    while (i <= len) {
        size_t start = i;
        while (i < len && list[i] != ',')
            i++;
        if (i - start == nlen && memcmp(list + start, name, nlen) == 0)
            return true;
        i++;
    }
    return false;
}

/* Which line of /proc/self/cgroup to take. */
enum cgroup_line { LINE_V2, LINE_V1_CPU };

/* Finds the first line "<id>:<controllers>:<path>" of the wanted kind and
 * writes its path as rt__cgroup_path_v2 says. Lines that do not have that
 * shape are skipped: a later kernel may add kinds of lines. */
static int cgroup_path(const char *buf, size_t len, enum cgroup_line kind, char *out, size_t outlen)
{
    if (buf == NULL || (out == NULL && outlen != 0))
        return -EINVAL;
    size_t line = 0;
    while (line < len) {
        const char *nl = memchr(buf + line, '\n', len - line);
        size_t end = nl != NULL ? (size_t)(nl - buf) : len;
        const char *l = buf + line;
        size_t llen = end - line;
        line = end + 1;

        const char *c1 = memchr(l, ':', llen);
        if (c1 == NULL)
            continue;
        size_t idlen = (size_t)(c1 - l);
        const char *ctl = c1 + 1;
        size_t rest = llen - idlen - 1;
        const char *c2 = memchr(ctl, ':', rest);
        if (c2 == NULL)
            continue;
        size_t ctllen = (size_t)(c2 - ctl);
        const char *path = c2 + 1;
        size_t plen = rest - ctllen - 1;

        if (idlen == 0)
            continue;
        bool digits = true;
        for (size_t i = 0; i < idlen; i++)
            digits = digits && is_digit(l[i]);
        if (!digits)
            continue;
        bool match;
        if (kind == LINE_V2)
            match = idlen == 1 && l[0] == '0' && ctllen == 0;
        else
            match = has_controller(ctl, ctllen, "cpu");
        if (!match)
            continue;
        /* Measure first, so that out is written only on success. */
        int n = canonical_path(path, plen, NULL, outlen);
        if (n < 0)
            return n;
        return canonical_path(path, plen, out, outlen);
    }
    return -ENOENT;
}

int rt__cgroup_path_v2(const char *buf, size_t len, char *out, size_t outlen)
{
    return cgroup_path(buf, len, LINE_V2, out, outlen);
}

int rt__cgroup_path_v1_cpu(const char *buf, size_t len, char *out, size_t outlen)
{
    return cgroup_path(buf, len, LINE_V1_CPU, out, outlen);
}

/* ---- Reading the files ----------------------------------------------------
 *
 * A file that cannot be opened or read just means "no limit here": the
 * default worker count must never make rt_runtime_new fail. */

/* Reads at most size bytes of the file at path into buf. Returns the number
 * read, or -1. A result of size means the file may be longer. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
    int fd = rt__open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = 0;
    while (n < size) {
        ssize_t r = read(fd, buf + n, size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    return (ssize_t)n;
}

/* The longest file name appended to a cgroup directory, with its '/'. */
#define LONGEST_FILE "/cpu.cfs_period_us"

/* Reads the file `name` in the directory dir (dirlen bytes, in a buffer of
 * PATH_MAX bytes with room for LONGEST_FILE after it). Returns its length, or
 * -1 when it cannot be read or does not fit in buf. */
static ssize_t read_in_dir(char *dir, size_t dirlen, const char *name, char *buf, size_t size)
{
    size_t nlen = strlen(name);
    dir[dirlen] = '/';
    memcpy(dir + dirlen + 1, name, nlen + 1);
    ssize_t n = read_small(dir, buf, size);
    dir[dirlen] = '\0';
    /* These files are a few dozen bytes: one that fills the buffer is not
     * one of them, and parsing its first bytes could misread a number. */
    return n >= 0 && (size_t)n < size ? n : -1;
}

/* The limit set in one cgroup v2 directory, or 0. */
static unsigned v2_limit(char *dir, size_t dirlen)
{
    char buf[64];
    unsigned limit;
    ssize_t n = read_in_dir(dir, dirlen, "cpu.max", buf, sizeof(buf));
    if (n < 0 || rt__parse_cpu_max(buf, (size_t)n, &limit) != 1)
        return 0;
    return limit;
}

/* The limit set in one cgroup v1 cpu directory, or 0. */
static unsigned v1_limit(char *dir, size_t dirlen)
{
    char quota[64], period[64];
    unsigned limit;
    ssize_t qn = read_in_dir(dir, dirlen, "cpu.cfs_quota_us", quota, sizeof(quota));
    if (qn < 0)
        return 0;
    ssize_t pn = read_in_dir(dir, dirlen, "cpu.cfs_period_us", period, sizeof(period));
    if (pn < 0 || rt__parse_cfs(quota, (size_t)qn, period, (size_t)pn, &limit) != 1)
        return 0;
    return limit;
}

/* The smaller of two limits, where 0 means none. */
static unsigned min_limit(unsigned a, unsigned b)
{
    if (a == 0)
        return b;
    if (b == 0)
        return a;
    return a < b ? a : b;
}

/* dir holds a mount point (its first baselen bytes) followed by a canonical
 * cgroup path, dirlen bytes in all. Returns the smallest limit that
 * `limit_in` finds in that directory and each of its ancestors down to the
 * mount point. A directory that does not exist has no files, so it is
 * skipped. */
static unsigned walk_up(char *dir, size_t baselen, size_t dirlen,
                        unsigned (*limit_in)(char *dir, size_t dirlen))
{
    unsigned limit = 0;
    for (;;) {
        limit = min_limit(limit, limit_in(dir, dirlen));
        if (dirlen <= baselen)
            return limit;
        /* Each component of a canonical path starts with '/', the first
         * one at baselen, so this stops at the mount point. */
        while (dirlen > baselen && dir[dirlen - 1] != '/')
            dirlen--;
        dirlen--;
        dir[dirlen] = '\0';
    }
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

unsigned rt__cpu_quota_limit(const char *sysfs_cgroup_root, const char *proc_self_cgroup)
{
    if (sysfs_cgroup_root == NULL || proc_self_cgroup == NULL)
        return 0;
    int saved_errno = errno;
    unsigned limit = 0;

    /* /proc/self/cgroup has a line per v1 hierarchy (about a dozen) plus
     * the v2 one; 8 KiB holds them with long paths. A longer file is cut
     * at its last whole line. */
    char proc[8192];
    ssize_t plen = read_small(proc_self_cgroup, proc, sizeof(proc));
    if (plen == (ssize_t)sizeof(proc)) {
        const char *last_nl = memrchr(proc, '\n', sizeof(proc));
        plen = last_nl != NULL ? last_nl - proc : 0;
    }
    size_t rootlen = strlen(sysfs_cgroup_root);
    char dir[PATH_MAX];
    /* The v1 mount point adds at most "/cpuacct,cpu" to the root. */
    static const char *const v1_mounts[] = {"/cpu,cpuacct", "/cpu", "/cpuacct,cpu"};
    const size_t reserve = sizeof("/cpuacct,cpu") - 1 + sizeof(LONGEST_FILE);
    if (plen <= 0 || rootlen >= sizeof(dir) - reserve)
        goto out;
    memcpy(dir, sysfs_cgroup_root, rootlen + 1);
    size_t space = sizeof(dir) - rootlen - sizeof(LONGEST_FILE);

    /* cgroup v2: one hierarchy, mounted at the root. On a hybrid system the
     * v2 line names the unified hierarchy, which has no cpu controller (and
     * no cpu.max files) there, so it adds nothing. */
    int n = rt__cgroup_path_v2(proc, (size_t)plen, dir + rootlen, space);
    if (n >= 0)
        limit = min_limit(limit, walk_up(dir, rootlen, rootlen + (size_t)n, v2_limit));

    /* cgroup v1: the cpu controller's own hierarchy, mounted under one of
     * these names (systemd links "cpu" to "cpu,cpuacct"; take the first
     * that exists). */
    for (size_t i = 0; i < sizeof(v1_mounts) / sizeof(v1_mounts[0]); i++) {
        size_t mlen = strlen(v1_mounts[i]);
        memcpy(dir + rootlen, v1_mounts[i], mlen + 1);
        if (!is_dir(dir))
            continue;
        size_t baselen = rootlen + mlen;
        n = rt__cgroup_path_v1_cpu(proc, (size_t)plen, dir + baselen,
                                   sizeof(dir) - baselen - sizeof(LONGEST_FILE));
        if (n >= 0)
            limit = min_limit(limit, walk_up(dir, baselen, baselen + (size_t)n, v1_limit));
        break;
    }
out:
    errno = saved_errno;
    return limit;
}

unsigned rt__available_cpus(void)
{
    unsigned n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = (unsigned)CPU_COUNT(&set);
    /* More CPUs than a cpu_set_t holds (1024) fail with EINVAL. */
    if (n == 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n = online > 0 ? (unsigned)online : 1;
    }
    unsigned limit = rt__cpu_quota_limit(RT__CGROUP_ROOT, RT__PROC_SELF_CGROUP);
    if (limit != 0 && limit < n)
        n = limit;
    return n;
}

unsigned rt__default_workers(void)
{
    /* secure_getenv: a set-user-ID program does not let whoever runs it
     * choose its thread count. */
    unsigned n = rt__parse_workers_env(secure_getenv("ASYNCRT_WORKERS"));
    if (n == 0)
        n = rt__available_cpus();
    if (n == 0)
        n = 1;
    return n > RT_MAX_WORKERS ? RT_MAX_WORKERS : n;
}
