/* Black-box tests of task identity (asyncrt/task.h): ids unique and never 0
 * whoever spawns, rt_current_task_id in poll and drop, names copied at spawn
 * and cut at RT_TASK_NAME_MAX, rt_current_task_name, and rt_current_worker. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_local.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(local, .timeout = 90, .fini = fail_on_leaks);

/* ---- task ids --------------------------------------------------------------------- */

/* Finishes with rt_current_task_id(). */
static rt_poll report_id_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = (void *)(uintptr_t)rt_current_task_id();
    return RT_READY;
}

static void *report_id_job(void *arg)
{
    (void)arg;
    return NULL;
}

#define ID_THREADS 4
#define ID_PER_THREAD 100
#define ID_CHILDREN 100
#define ID_JOBS 10
#define ID_TOTAL (ID_THREADS * ID_PER_THREAD + ID_CHILDREN + 1 + ID_JOBS)

struct id_thread {
    rt_runtime *rt;
    uint64_t outside;
    uint64_t ids[ID_PER_THREAD];
    int errors;
    int mismatches;
};

static void *id_thread(void *arg)
{
    struct id_thread *t = arg;
    t->outside = rt_current_task_id();
    rt_task *h[ID_PER_THREAD];
    for (int i = 0; i < ID_PER_THREAD; i++) {
        if (rt_spawn(t->rt, report_id_poll, NULL, NULL, 0, &h[i]) != 0) {
            t->errors++;
            h[i] = NULL;
            continue;
        }
        t->ids[i] = rt_task_id(h[i]);
    }
    for (int i = 0; i < ID_PER_THREAD; i++) {
        void *value = NULL;
        if (h[i] == NULL)
            continue;
        if (task_wait_status(h[i], WAIT_DEADLINE_NS, &value) != 0)
            t->errors++;
        else if ((uint64_t)(uintptr_t)value != t->ids[i])
            t->mismatches++;
    }
    return NULL;
}

struct id_parent {
    rt_coro co;
    uint64_t *ids; /* ID_CHILDREN + 1 */
    int *mismatches;
    int *errors;
    rt_task *h[ID_CHILDREN];
    rt_task_join join;
    int k;
};

static rt_poll id_parent_poll(void *state, rt_context *cx, void **out)
{
    struct id_parent *p = state;
    RT_CORO_BEGIN(&p->co);
    p->ids[ID_CHILDREN] = rt_current_task_id();
    for (p->k = 0; p->k < ID_CHILDREN; p->k++) {
        if (rt_spawn(NULL, report_id_poll, NULL, NULL, 0, &p->h[p->k]) != 0) {
            (*p->errors)++;
            RT_RETURN(&p->co, out, 0);
        }
        p->ids[p->k] = rt_task_id(p->h[p->k]);
    }
    /* Spawning does not change whose poll this is. */
    if (rt_current_task_id() != p->ids[ID_CHILDREN])
        (*p->mismatches)++;
    for (p->k = 0; p->k < ID_CHILDREN; p->k++) {
        rt_task_join_init(&p->join, p->h[p->k]);
        RT_AWAIT(&p->co, cx, &p->join);
        if ((uint64_t)(uintptr_t)p->join.value != p->ids[p->k])
            (*p->mismatches)++;
        if (rt_current_task_id() != p->ids[ID_CHILDREN])
            (*p->mismatches)++;
    }
    RT_RETURN(&p->co, out, 1);
    RT_CORO_END(&p->co, out);
}

Test(local, ids_are_unique_and_never_0_whoever_spawns)
{
    cr_assert_eq(rt_current_task_id(), 0, "the test thread runs no task");
    rt_runtime *rt = new_runtime_budget(2, -1);
    static uint64_t all[ID_TOTAL];
    size_t n = 0;

    struct id_thread threads[ID_THREADS];
    pthread_t tids[ID_THREADS];
    for (int t = 0; t < ID_THREADS; t++) {
        memset(&threads[t], 0, sizeof threads[t]);
        threads[t].rt = rt;
        threads[t].outside = 12345;
        cr_assert_eq(pthread_create(&tids[t], NULL, id_thread, &threads[t]), 0);
    }
    int mismatches = 0, errors = 0;
    struct id_parent p;
    memset(&p, 0, sizeof p);
    p.ids = &all[ID_THREADS * ID_PER_THREAD];
    p.mismatches = &mismatches;
    p.errors = &errors;
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, id_parent_poll, NULL, &p, sizeof p, &value), 0);
    cr_assert_eq(value, (void *)1);
    cr_assert_eq(errors, 0);
    cr_assert_eq(mismatches, 0, "%d ids seen inside tasks differ from their handles'", mismatches);
    for (int t = 0; t < ID_THREADS; t++) {
        pthread_join(tids[t], NULL);
        cr_assert_eq(threads[t].outside, 0, "rt_current_task_id on a foreign thread");
        cr_assert_eq(threads[t].errors, 0);
        cr_assert_eq(threads[t].mismatches, 0,
                     "%d tasks saw another rt_current_task_id than rt_task_id of their handle",
                     threads[t].mismatches);
        memcpy(&all[t * ID_PER_THREAD], threads[t].ids, sizeof threads[t].ids);
    }
    n = ID_THREADS * ID_PER_THREAD + ID_CHILDREN + 1;
    /* Blocking jobs get ids from the same counter. */
    for (int i = 0; i < ID_JOBS; i++) {
        rt_task *h = NULL;
        cr_assert_eq(rt_spawn_blocking(rt, report_id_job, NULL, &h), 0);
        all[n++] = rt_task_id(h);
        cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, NULL), 0);
    }
    cr_assert_eq(n, ID_TOTAL);
    qsort(all, n, sizeof all[0], compare_u64);
    cr_assert_neq(all[0], 0, "a task got id 0");
    for (size_t i = 1; i < n; i++)
        cr_assert_neq(all[i], all[i - 1], "two tasks share the id %llu",
                      (unsigned long long)all[i]);
    cr_assert_eq(rt_current_task_id(), 0);
    finish_runtime(rt, 0);
}

static _Atomic uint64_t poll_id_seen;
static _Atomic uint64_t drop_id_seen;
static atomic_int id_changed;

static rt_poll id_probe_poll(void *state, rt_context *cx, void **out)
{
    int *yields = state;
    uint64_t id = rt_current_task_id();
    uint64_t expected = 0;
    if (!atomic_compare_exchange_strong(&poll_id_seen, &expected, id) && expected != id)
        atomic_fetch_add(&id_changed, 1);
    if ((*yields)-- > 0)
        return rt_yield(cx);
    *out = NULL;
    return RT_READY;
}

static void id_probe_drop(void *state)
{
    (void)state;
    atomic_store(&drop_id_seen, rt_current_task_id());
}

Test(local, current_id_in_poll_and_drop_is_the_handles_id)
{
    rt_runtime *rt = new_runtime_budget(2, -1);
    int yields = 5;
    rt_task *h = NULL;
    rt_spawn_options opts = options_for(RT_WORKER_ANY, "probe");
    cr_assert_eq(rt_spawn_ex(rt, &opts, id_probe_poll, id_probe_drop, &yields, sizeof yields, &h),
                 0);
    uint64_t id = rt_task_id(h);
    cr_assert_neq(id, 0);
    cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(atomic_load(&poll_id_seen), id, "poll saw id %llu, the handle says %llu",
                 (unsigned long long)atomic_load(&poll_id_seen), (unsigned long long)id);
    cr_assert_eq(atomic_load(&id_changed), 0, "the id changed between polls");
    cr_assert_eq(atomic_load(&drop_id_seen), id, "drop saw id %llu, the handle says %llu",
                 (unsigned long long)atomic_load(&drop_id_seen), (unsigned long long)id);
    cr_assert_eq(rt_current_task_id(), 0);
    finish_runtime(rt, 0);
}

/* ---- task names ------------------------------------------------------------------ */

struct name_report {
    char seen[2][100];
    struct event done;
};

static void copy_name(char *dst, const char *name)
{
    if (name == NULL)
        strcpy(dst, "(null)");
    else
        snprintf(dst, 100, "[%s]", name);
}

/* Records rt_current_task_name() at two polls. */
struct name_probe {
    struct name_report *r;
    int polls;
};

static rt_poll name_probe_poll(void *state, rt_context *cx, void **out)
{
    struct name_probe *p = state;
    copy_name(p->r->seen[p->polls], rt_current_task_name());
    if (p->polls++ == 0)
        return rt_yield(cx);
    *out = NULL;
    return RT_READY;
}

static void name_probe_drop(void *state)
{
    struct name_probe *p = state;
    event_signal(&p->r->done);
}

static rt_task *spawn_named(rt_runtime *rt, const rt_spawn_options *opts, struct name_report *r)
{
    memset(r->seen, 0, sizeof r->seen);
    pthread_mutex_init(&r->done.mu, NULL);
    pthread_cond_init(&r->done.cv, NULL);
    r->done.count = 0;
    struct name_probe p = {r, 0};
    rt_task *h = NULL;
    cr_assert_eq(rt_spawn_ex(rt, opts, name_probe_poll, name_probe_drop, &p, sizeof p, &h), 0);
    return h;
}

Test(local, names_are_copied_at_spawn_cut_at_the_maximum_and_null_when_absent)
{
    rt_spawn_options opts;
    memset(&opts, 0xAB, sizeof opts);
    rt_spawn_options_init(&opts);
    cr_assert_null(opts.name);
    cr_assert_eq(opts.worker, RT_WORKER_ANY);
    cr_assert_null(rt_current_task_name(), "the test thread runs no task");
    cr_assert_eq(rt_current_worker(), -1);

    rt_runtime *rt = new_runtime_budget(2, -1);
    struct name_report r[6];

    /* A name in a buffer the caller changes right after the spawn. */
    char buffer[32] = "alpha";
    opts.name = buffer;
    rt_task *alpha = spawn_named(rt, &opts, &r[0]);
    strcpy(buffer, "XXXXXXXXXX");

    /* Longer than RT_TASK_NAME_MAX: cut. */
    char longname[200];
    for (int i = 0; i < 199; i++)
        longname[i] = (char)('a' + i % 26);
    longname[199] = '\0';
    opts.name = longname;
    rt_task *cut = spawn_named(rt, &opts, &r[1]);

    /* Exactly RT_TASK_NAME_MAX: kept whole. */
    char exact[RT_TASK_NAME_MAX + 1];
    memcpy(exact, longname, RT_TASK_NAME_MAX);
    exact[RT_TASK_NAME_MAX] = '\0';
    opts.name = exact;
    rt_task *whole = spawn_named(rt, &opts, &r[2]);

    /* No name: options with NULL, options NULL. */
    opts.name = NULL;
    rt_task *unnamed = spawn_named(rt, &opts, &r[3]);
    rt_task *no_opts = spawn_named(rt, NULL, &r[4]);

    /* A named local task. */
    rt_spawn_options local = options_for(1, "local-one");
    rt_task *named_local = spawn_named(rt, &local, &r[5]);
    memset(longname, 'Z', 199);

    /* Names stay readable through the handle after the task has finished. */
    for (int i = 0; i < 6; i++)
        cr_assert(event_wait_for(&r[i].done, 1));

    char expected_cut[100];
    snprintf(expected_cut, sizeof expected_cut, "[%.*s]", RT_TASK_NAME_MAX, exact);

    cr_assert_str_eq(rt_task_name(alpha), "alpha");
    cr_assert_str_eq(r[0].seen[0], "[alpha]");
    cr_assert_str_eq(r[0].seen[1], "[alpha]", "the name changed between polls");

    const char *cut_name = rt_task_name(cut);
    cr_assert_not_null(cut_name);
    cr_assert_eq(strlen(cut_name), RT_TASK_NAME_MAX, "a 199-byte name kept %zu bytes",
                 strlen(cut_name));
    cr_assert_eq(memcmp(cut_name, exact, RT_TASK_NAME_MAX), 0);
    cr_assert_str_eq(r[1].seen[0], expected_cut);
    cr_assert_str_eq(r[1].seen[1], expected_cut);

    cr_assert_str_eq(rt_task_name(whole), exact);
    cr_assert_str_eq(r[2].seen[0], expected_cut);

    cr_assert_null(rt_task_name(unnamed));
    cr_assert_str_eq(r[3].seen[0], "(null)");
    cr_assert_str_eq(r[3].seen[1], "(null)");
    cr_assert_null(rt_task_name(no_opts));
    cr_assert_str_eq(r[4].seen[0], "(null)");

    cr_assert_str_eq(rt_task_name(named_local), "local-one");
    cr_assert_str_eq(r[5].seen[0], "[local-one]");

    rt_task *all[] = {alpha, cut, whole, unnamed, no_opts, named_local};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(task_wait_status(all[i], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_null(rt_current_task_name());
    finish_runtime(rt, 0);
}
