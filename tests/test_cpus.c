/* The default worker count (white box): the parsers of /proc/self/cgroup,
 * cpu.max and the cgroup v1 cfs files on sample contents, the quota walk on
 * fake cgroup trees built in a temporary directory, and the ASYNCRT_WORKERS
 * override seen through rt_runtime_new. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asyncrt.h>

#include "support.h"

#include "cpus.h"

TestSuite(cpus, .timeout = 120, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* Copies len bytes into a buffer of exactly that size, so that a parser
 * reading one byte too far trips AddressSanitizer in the sanitizer build. */
static char *exact_copy(const char *bytes, size_t len)
{
    char *copy = malloc(len != 0 ? len : 1);
    cr_assert_not_null(copy);
    memcpy(copy, bytes, len);
    return copy;
}

/* rt__parse_cpu_max over the first len bytes of s (which may hold NULs). */
static int cpu_max_n(const char *s, size_t len, unsigned *limit)
{
    char *copy = exact_copy(s, len);
    int r = rt__parse_cpu_max(copy, len, limit);
    free(copy);
    return r;
}

static int cpu_max(const char *s, unsigned *limit)
{
    return cpu_max_n(s, strlen(s), limit);
}

static int cfs_n(const char *q, size_t qlen, const char *p, size_t plen, unsigned *limit)
{
    char *qc = exact_copy(q, qlen);
    char *pc = exact_copy(p, plen);
    int r = rt__parse_cfs(qc, qlen, pc, plen, limit);
    free(qc);
    free(pc);
    return r;
}

static int cfs(const char *q, const char *p, unsigned *limit)
{
    return cfs_n(q, strlen(q), p, strlen(p), limit);
}

/* rt__cgroup_path_v2 or _v1_cpu over len bytes of s, into out. */
static int path_n(bool v2, const char *s, size_t len, char *out, size_t outlen)
{
    char *copy = exact_copy(s, len);
    int r = v2 ? rt__cgroup_path_v2(copy, len, out, outlen)
               : rt__cgroup_path_v1_cpu(copy, len, out, outlen);
    free(copy);
    return r;
}

static int v2_path(const char *s, char *out, size_t outlen)
{
    return path_n(true, s, strlen(s), out, outlen);
}

static int v1_path(const char *s, char *out, size_t outlen)
{
    return path_n(false, s, strlen(s), out, outlen);
}

/* Asserts that the v2 (or v1) path of `proc` is `want`. */
static void expect_path(bool v2, const char *proc, const char *want)
{
    char out[256];
    int n = path_n(v2, proc, strlen(proc), out, sizeof out);
    cr_assert_eq(n, (int)strlen(want), "%s path of \"%s\": %d, want \"%s\"", v2 ? "v2" : "v1", proc,
                 n, want);
    cr_assert_str_eq(out, want);
}

/* A fake cgroup tree: a temporary directory holding "root" (standing for
 * /sys/fs/cgroup) and the file "self" (standing for /proc/self/cgroup). */
struct tree {
    char dir[64];
    char root[96];
    char self[96];
};

static void tree_make(struct tree *t)
{
    strcpy(t->dir, "/tmp/asyncrt-cpus-XXXXXX");
    cr_assert_not_null(mkdtemp(t->dir), "mkdtemp: %s", strerror(errno));
    snprintf(t->root, sizeof t->root, "%s/root", t->dir);
    snprintf(t->self, sizeof t->self, "%s/self", t->dir);
    cr_assert_eq(mkdir(t->root, 0700), 0);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void tree_remove(struct tree *t)
{
    cr_assert_eq(nftw(t->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* Writes `contents` to <base>/<rel>, creating the directories on the way. */
static void put_file(const char *base, const char *rel, const char *contents)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", base, rel);
    for (char *p = path + strlen(base) + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        cr_assert(mkdir(path, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "fopen %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(contents, 1, strlen(contents), f), strlen(contents));
    cr_assert_eq(fclose(f), 0);
}

/* Puts `self` in the tree's /proc/self/cgroup and returns the limit found. */
static unsigned limit_for(struct tree *t, const char *self)
{
    FILE *f = fopen(t->self, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(self, 1, strlen(self), f), strlen(self));
    cr_assert_eq(fclose(f), 0);
    return rt__cpu_quota_limit(t->root, t->self);
}

/* ---- cpu.max ----------------------------------------------------------- */

Test(cpus, cpu_max_max_means_no_limit)
{
    unsigned limit = 77;
    cr_assert_eq(cpu_max("max 100000\n", &limit), 0);
    cr_assert_eq(cpu_max("max 100000", &limit), 0);
    cr_assert_eq(cpu_max("max\t100000\n", &limit), 0);
    cr_assert_eq(limit, 77u, "*limit written without a quota");
}

Test(cpus, cpu_max_quota_over_period_rounds_up)
{
    const struct {
        const char *text;
        unsigned want;
    } cases[] = {
        {"150000 100000\n", 2},
        {"50000 100000\n", 1},
        {"100000 100000\n", 1},
        {"100001 100000\n", 2},
        {"200000 100000\n", 2},
        {"400000 100000", 4},
        {"1000 1000000\n", 1},
        {"1 1\n", 1},
        {"  300000  100000 \n\n", 3},
        {"1000000000000 1000\n", 1000000000u},
        /* Beyond an unsigned: clamped, not wrapped. */
        {"18446744073709551615 1\n", UINT_MAX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned limit = 0;
        cr_assert_eq(cpu_max(cases[i].text, &limit), 1, "\"%s\"", cases[i].text);
        cr_assert_eq(limit, cases[i].want, "\"%s\": %u, want %u", cases[i].text, limit,
                     cases[i].want);
    }
}

Test(cpus, cpu_max_rejects_anything_else)
{
    const char *bad[] = {
        "",
        "\n",
        "max",
        "max\n",
        "max \n",
        "max100000\n",
        "maxi 100000\n",
        "MAX 100000\n",
        "100000\n",
        "100000 0\n",
        "0 100000\n",
        "-1 100000\n",
        "+5 100000\n",
        "150000 -100000\n",
        "150000 100000 7\n",
        "150000 100000x\n",
        "1e5 100000\n",
        "0x10 100000\n",
        "abc def\n",
        "150000\n100000\n",
        "18446744073709551616 100000\n",
        "150000 18446744073709551616\n",
        "99999999999999999999999999999999999999 1\n",
        "\xff\xfe garbage \x01",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned limit = 77;
        cr_assert_eq(cpu_max(bad[i], &limit), -1, "\"%s\" accepted", bad[i]);
        cr_assert_eq(limit, 77u);
    }
}

Test(cpus, cpu_max_embedded_nul_and_length_bounds)
{
    unsigned limit = 0;
    /* A NUL is no digit and no space, wherever it is. */
    cr_assert_eq(cpu_max_n("150000\0 100000\n", 15, &limit), -1);
    cr_assert_eq(cpu_max_n("150000 100000\0", 14, &limit), -1);
    cr_assert_eq(cpu_max_n("\0max 100000\n", 12, &limit), -1);
    /* Only len bytes count: the digits after them are not read. */
    cr_assert_eq(cpu_max_n("150000 1000009999", 13, &limit), 1);
    cr_assert_eq(limit, 2u);
    cr_assert_eq(cpu_max_n("max 100000", 3, &limit), -1);
    cr_assert_eq(cpu_max_n("m", 1, &limit), -1);
    cr_assert_eq(cpu_max_n("", 0, &limit), -1);
    cr_assert_eq(rt__parse_cpu_max(NULL, 0, &limit), -1);
}

/* ---- cgroup v1 cfs files ----------------------------------------------- */

Test(cpus, cfs_quota_over_period)
{
    unsigned limit = 77;
    cr_assert_eq(cfs("-1\n", "100000\n", &limit), 0);
    cr_assert_eq(limit, 77u);
    cr_assert_eq(cfs("150000\n", "100000\n", &limit), 1);
    cr_assert_eq(limit, 2u);
    cr_assert_eq(cfs("50000", "100000", &limit), 1);
    cr_assert_eq(limit, 1u);
    cr_assert_eq(cfs(" 300000 \n", "\t100000\n", &limit), 1);
    cr_assert_eq(limit, 3u);
    cr_assert_eq(cfs("18446744073709551615\n", "1\n", &limit), 1);
    cr_assert_eq(limit, UINT_MAX);
}

Test(cpus, cfs_rejects_anything_else)
{
    const char *bad[][2] = {
        {"0\n", "100000\n"},
        {"100000\n", "0\n"},
        {"-2\n", "100000\n"},
        {"-10\n", "100000\n"},
        {"-\n", "100000\n"},
        {"-1\n", "-1\n"},
        {"-1\n", "\n"},
        {"\n", "100000\n"},
        {"", ""},
        {"150000 7\n", "100000\n"},
        {"150000\n", "100000 7\n"},
        {"+150000\n", "100000\n"},
        {"18446744073709551616\n", "100000\n"},
        {"150000\n", "99999999999999999999999\n"},
        {"max\n", "100000\n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned limit = 77;
        cr_assert_eq(cfs(bad[i][0], bad[i][1], &limit), -1, "\"%s\" / \"%s\" accepted", bad[i][0],
                     bad[i][1]);
        cr_assert_eq(limit, 77u);
    }
    unsigned limit = 77;
    cr_assert_eq(cfs_n("150000\0", 7, "100000\n", 7, &limit), -1);
    cr_assert_eq(cfs_n("150000\n", 7, "100\0000\n", 7, &limit), -1);
    /* Only len bytes count. */
    cr_assert_eq(cfs_n("1500009", 6, "1000009", 6, &limit), 1);
    cr_assert_eq(limit, 2u);
}

/* ---- ASYNCRT_WORKERS parsing ------------------------------------------- */

Test(cpus, workers_env_accepts_positive_decimal_numbers)
{
    cr_assert_eq(rt__parse_workers_env("1"), 1u);
    cr_assert_eq(rt__parse_workers_env("4"), 4u);
    cr_assert_eq(rt__parse_workers_env("0004"), 4u);
    cr_assert_eq(rt__parse_workers_env("1024"), RT_MAX_WORKERS);
    /* Clamped like rt_config.workers would be. */
    cr_assert_eq(rt__parse_workers_env("1025"), RT_MAX_WORKERS);
    cr_assert_eq(rt__parse_workers_env("4294967295"), RT_MAX_WORKERS);
}

Test(cpus, workers_env_ignores_anything_else)
{
    const char *bad[] = {
        "",
        "0",
        "000",
        "-1",
        "-4",
        "+4",
        " 4",
        "4 ",
        "4\n",
        "4x",
        "x4",
        "four",
        "0x10",
        "4.0",
        "1e3",
        "4294967296",
        "18446744073709551616",
        "99999999999999999999999999999999",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(rt__parse_workers_env(bad[i]), 0u, "\"%s\" accepted", bad[i]);
    cr_assert_eq(rt__parse_workers_env(NULL), 0u);
}

/* ---- /proc/self/cgroup ------------------------------------------------- */

/* A cgroup v2 only system (Debian 12, Fedora, recent Ubuntu). */
static const char v2_only[] = "0::/user.slice/user-1000.slice/session-3.scope\n";

/* A cgroup v1 only system (CentOS 7; a Docker container on it). */
static const char v1_only[] = "11:hugetlb:/docker/4f1c2a\n"
                              "10:memory:/docker/4f1c2a\n"
                              "9:cpuset:/docker/4f1c2a\n"
                              "8:pids:/docker/4f1c2a\n"
                              "7:perf_event:/docker/4f1c2a\n"
                              "6:cpu,cpuacct:/docker/4f1c2a\n"
                              "5:blkio:/docker/4f1c2a\n"
                              "4:net_cls,net_prio:/docker/4f1c2a\n"
                              "3:devices:/docker/4f1c2a\n"
                              "2:freezer:/docker/4f1c2a\n"
                              "1:name=systemd:/docker/4f1c2a\n";

/* A hybrid system (Ubuntu 20.04): v1 controllers plus the unified line. */
static const char hybrid[] = "12:cpu,cpuacct:/user.slice\n"
                             "11:memory:/user.slice/user-1000.slice/session-2.scope\n"
                             "4:cpuset:/\n"
                             "1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n"
                             "0::/user.slice/user-1000.slice/session-2.scope\n";

Test(cpus, proc_cgroup_v2_only)
{
    char out[128];
    expect_path(true, v2_only, "/user.slice/user-1000.slice/session-3.scope");
    cr_assert_eq(v1_path(v2_only, out, sizeof out), -ENOENT);
    /* The root cgroup, as inside a container with its own cgroup namespace. */
    expect_path(true, "0::/\n", "");
    expect_path(true, "0::/", "");
}

Test(cpus, proc_cgroup_v1_only)
{
    char out[128];
    expect_path(false, v1_only, "/docker/4f1c2a");
    cr_assert_eq(v2_path(v1_only, out, sizeof out), -ENOENT);
}

Test(cpus, proc_cgroup_hybrid)
{
    expect_path(true, hybrid, "/user.slice/user-1000.slice/session-2.scope");
    expect_path(false, hybrid, "/user.slice");
}

Test(cpus, proc_cgroup_v1_controller_list_in_any_order)
{
    expect_path(false, "4:cpuacct,cpu:/a\n", "/a");
    expect_path(false, "4:cpu:/a\n", "/a");
    expect_path(false, "4:cpuset,cpu,cpuacct:/a\n", "/a");
    /* Only whole names count. */
    char out[64];
    cr_assert_eq(v1_path("3:cpuacct:/a\n2:cpuset:/b\n1:name=cpu:/c\n5:cpux:/d\n", out, sizeof out),
                 -ENOENT);
    /* The first matching line wins; a separate cpuacct line is no match. */
    expect_path(false, "2:cpuacct:/x\n1:cpu:/y\n", "/y");
}

Test(cpus, proc_cgroup_paths_as_the_kernel_prints_them)
{
    expect_path(true, "0::/my group/with space\n", "/my group/with space");
    expect_path(true, "0::/a:b\n", "/a:b");
    expect_path(true, "0::/a/..b/c..\n", "/a/..b/c..");
    expect_path(true, "0::/a//b/\n", "/a/b");
    /* The last line need not end in a newline. */
    expect_path(true, "1:cpu:/x\n0::/last", "/last");
    expect_path(false, "0::/x\n1:cpu:/last", "/last");
}

Test(cpus, proc_cgroup_rejects_paths_that_could_escape)
{
    const char *bad[] = {
        "0::/../sibling\n", "0::/a/../../b\n", "0::/..\n", "0::/a/..\n",
        "0::/./a\n",        "0::relative\n",   "0::\n",    "0::",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char out[64] = "untouched";
        cr_assert_eq(v2_path(bad[i], out, sizeof out), -EINVAL, "\"%s\"", bad[i]);
        cr_assert_str_eq(out, "untouched");
    }
    char out[64];
    cr_assert_eq(v1_path("4:cpu,cpuacct:/docker/../../etc\n", out, sizeof out), -EINVAL);
    /* A NUL in the path could not be opened as the path it claims to be. */
    cr_assert_eq(path_n(true, "0::/a\0b\n", 7, out, sizeof out), -EINVAL);
}

Test(cpus, proc_cgroup_skips_malformed_lines)
{
    expect_path(true, "garbage\nx::/a\n:cpu:/b\n::/c\n0:cpu:/d\n00::/e\n0::/good\n", "/good");
    char out[64];
    cr_assert_eq(v2_path("", out, sizeof out), -ENOENT);
    cr_assert_eq(v2_path("\n\n\n", out, sizeof out), -ENOENT);
    cr_assert_eq(v2_path("0:/a\n", out, sizeof out), -ENOENT);
    cr_assert_eq(path_n(true, "0\0:/a\n", 6, out, sizeof out), -ENOENT);
    cr_assert_eq(path_n(false, "4:cpu\0:/a\n", 10, out, sizeof out), -ENOENT);
    cr_assert_eq(rt__cgroup_path_v2(NULL, 0, out, sizeof out), -EINVAL);
    /* Only len bytes count: the line is cut at "/ab". */
    cr_assert_eq(path_n(true, "0::/abcdef\n", 6, out, sizeof out), 3);
    cr_assert_str_eq(out, "/ab");
}

Test(cpus, proc_cgroup_output_size)
{
    char out[8];
    /* "/a/b" and its NUL need 5 bytes. */
    cr_assert_eq(v2_path("0::/a/b\n", out, 5), 4);
    cr_assert_str_eq(out, "/a/b");
    memcpy(out, "keep", 5);
    cr_assert_eq(v2_path("0::/a/b\n", out, 4), -ENAMETOOLONG);
    cr_assert_str_eq(out, "keep", "written on failure");
    cr_assert_eq(v2_path("0::/\n", out, 1), 0);
    cr_assert_str_eq(out, "");
    cr_assert_eq(v2_path("0::/\n", NULL, 0), -ENAMETOOLONG);
    cr_assert_eq(v2_path("0::/a\n", NULL, 0), -ENAMETOOLONG);
}

/* ---- The quota walk on fake trees -------------------------------------- */

Test(cpus, v2_parent_quota_limits_the_child)
{
    struct tree t;
    tree_make(&t);
    put_file(t.root, "parent/cpu.max", "200000 100000\n");
    put_file(t.root, "parent/child/cpu.max", "400000 100000\n");
    cr_assert_eq(limit_for(&t, "0::/parent/child\n"), 2u);
    /* And the child's own quota when it is the smaller. */
    put_file(t.root, "parent/cpu.max", "max 100000\n");
    put_file(t.root, "parent/child/cpu.max", "150000 100000\n");
    cr_assert_eq(limit_for(&t, "0::/parent/child\n"), 2u);
    /* The mount point itself counts: a container's own cgroup. */
    put_file(t.root, "cpu.max", "50000 100000\n");
    cr_assert_eq(limit_for(&t, "0::/parent/child\n"), 1u);
    cr_assert_eq(limit_for(&t, "0::/\n"), 1u);
    tree_remove(&t);
}

Test(cpus, v2_without_quota_or_files_is_no_limit)
{
    struct tree t;
    tree_make(&t);
    cr_assert_eq(limit_for(&t, "0::/a/b\n"), 0u, "no files at all");
    put_file(t.root, "a/cpu.max", "max 100000\n");
    put_file(t.root, "a/b/cpu.max", "max 100000\n");
    cr_assert_eq(limit_for(&t, "0::/a/b\n"), 0u, "max everywhere");
    put_file(t.root, "a/b/cpu.max", "garbage\n");
    cr_assert_eq(limit_for(&t, "0::/a/b\n"), 0u, "garbage");
    /* A path that does not exist reaches the existing ancestors. */
    put_file(t.root, "a/cpu.max", "300000 100000\n");
    cr_assert_eq(limit_for(&t, "0::/a/gone/deeper\n"), 3u);
    tree_remove(&t);
}

Test(cpus, v1_layout)
{
    struct tree t;
    tree_make(&t);
    put_file(t.root, "cpu,cpuacct/a/cpu.cfs_quota_us", "300000\n");
    put_file(t.root, "cpu,cpuacct/a/cpu.cfs_period_us", "100000\n");
    put_file(t.root, "cpu,cpuacct/a/b/cpu.cfs_quota_us", "-1\n");
    put_file(t.root, "cpu,cpuacct/a/b/cpu.cfs_period_us", "100000\n");
    /* Without a v1 cpu line the v1 files are not looked at. */
    cr_assert_eq(limit_for(&t, v2_only), 0u);
    cr_assert_eq(limit_for(&t, "6:cpu,cpuacct:/a/b\n1:name=systemd:/a/b\n"), 3u);
    cr_assert_eq(limit_for(&t, "6:cpuacct,cpu:/a/b\n"), 3u);
    put_file(t.root, "cpu,cpuacct/a/b/cpu.cfs_quota_us", "50000\n");
    cr_assert_eq(limit_for(&t, "6:cpu,cpuacct:/a/b\n"), 1u);
    /* A quota file without its period file is no limit: the parent's holds. */
    char period[PATH_MAX];
    snprintf(period, sizeof period, "%s/cpu,cpuacct/a/b/cpu.cfs_period_us", t.root);
    cr_assert_eq(remove(period), 0);
    cr_assert_eq(limit_for(&t, "6:cpu,cpuacct:/a/b\n"), 3u);
    tree_remove(&t);
}

Test(cpus, v1_container_falls_back_to_the_mount_point)
{
    struct tree t;
    tree_make(&t);
    /* Docker without a cgroup namespace: /proc/self/cgroup names the host's
     * path, but the container sees its own cgroup at the mount point. */
    put_file(t.root, "cpu/cpu.cfs_quota_us", "50000\n");
    put_file(t.root, "cpu/cpu.cfs_period_us", "100000\n");
    put_file(t.root, "cpuacct/cpuacct.usage", "0\n");
    cr_assert_eq(limit_for(&t, v1_only), 1u);
    tree_remove(&t);
}

Test(cpus, hybrid_takes_the_smaller_of_both_hierarchies)
{
    struct tree t;
    tree_make(&t);
    put_file(t.root, "cpu,cpuacct/user.slice/cpu.cfs_quota_us", "200000\n");
    put_file(t.root, "cpu,cpuacct/user.slice/cpu.cfs_period_us", "100000\n");
    cr_assert_eq(limit_for(&t, hybrid), 2u);
    put_file(t.root, "user.slice/cpu.max", "100000 100000\n");
    cr_assert_eq(limit_for(&t, hybrid), 1u);
    tree_remove(&t);
}

Test(cpus, escaping_paths_and_missing_files_are_no_limit)
{
    struct tree t;
    tree_make(&t);
    /* A quota beside the root that "/../escape" would reach. */
    put_file(t.dir, "escape/cpu.max", "100000 100000\n");
    cr_assert_eq(limit_for(&t, "0::/../escape\n"), 0u);
    cr_assert_eq(limit_for(&t, ""), 0u);
    char missing[PATH_MAX];
    snprintf(missing, sizeof missing, "%s/missing", t.dir);
    cr_assert_eq(rt__cpu_quota_limit(t.root, missing), 0u);
    cr_assert_eq(rt__cpu_quota_limit(missing, t.self), 0u);
    cr_assert_eq(rt__cpu_quota_limit(NULL, t.self), 0u);
    tree_remove(&t);
}

Test(cpus, long_paths_do_not_overflow)
{
    struct tree t;
    tree_make(&t);
    /* A path longer than PATH_MAX is refused, not cut. */
    size_t n = PATH_MAX + 100;
    char *self = malloc(n + 8);
    cr_assert_not_null(self);
    strcpy(self, "0::");
    for (size_t i = 3; i < n; i++)
        self[i] = i % 50 == 3 ? '/' : 'x';
    strcpy(self + n, "\n");
    cr_assert_eq(limit_for(&t, self), 0u);
    free(self);
    tree_remove(&t);
}

/* ---- The real system and ASYNCRT_WORKERS ------------------------------- */

static unsigned affinity_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    return (unsigned)CPU_COUNT(&set);
}

Test(cpus, available_cpus_within_the_affinity_mask)
{
    unsigned n = rt__available_cpus();
    cr_assert_geq(n, 1u);
    cr_assert_leq(n, affinity_cpus());
}

static unsigned workers_of_default_runtime(unsigned workers)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = workers;
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), 0);
    unsigned n = rt_runtime_workers(rt);
    cr_assert_eq(rt_runtime_free(rt), 0);
    return n;
}

Test(cpus, asyncrt_workers_overrides_the_default)
{
    cr_assert_eq(setenv("ASYNCRT_WORKERS", "3", 1), 0);
    cr_assert_eq(workers_of_default_runtime(0), 3u);
    /* Read at each rt_runtime_new. */
    cr_assert_eq(setenv("ASYNCRT_WORKERS", "5", 1), 0);
    cr_assert_eq(workers_of_default_runtime(0), 5u);
    /* An explicit count wins over the variable. */
    cr_assert_eq(workers_of_default_runtime(2), 2u);
    /* Clamped to RT_MAX_WORKERS (checked without starting 1024 threads). */
    cr_assert_eq(setenv("ASYNCRT_WORKERS", "100000", 1), 0);
    cr_assert_eq(rt__default_workers(), RT_MAX_WORKERS);
    cr_assert_eq(unsetenv("ASYNCRT_WORKERS"), 0);
}

Test(cpus, invalid_asyncrt_workers_is_ignored)
{
    cr_assert_eq(unsetenv("ASYNCRT_WORKERS"), 0);
    unsigned plain = workers_of_default_runtime(0);
    cr_assert_eq(plain, rt__available_cpus());
    const char *bad[] = {"", "0", "-3", "junk", "3x", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(setenv("ASYNCRT_WORKERS", bad[i], 1), 0);
        cr_assert_eq(workers_of_default_runtime(0), plain, "\"%s\" was used", bad[i]);
    }
    cr_assert_eq(unsetenv("ASYNCRT_WORKERS"), 0);
}
