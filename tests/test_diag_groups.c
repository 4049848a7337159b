/* Tasks of every kind in the diagnostics: a coroutine spawned into a group
 * dumps exactly as the same coroutine spawned plainly (its await point, its
 * spawn site, what it waits on), and lost wake-ups are found for plain,
 * grouped and pinned tasks alike, a thousand of each reported within 2 s on
 * an otherwise idle runtime. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "support.h"

TestSuite(diag_groups, .timeout = 120, .fini = fail_on_leaks);

/* Closes a group from a task: every child is cancelled and has finished
 * when it returns, so the shutdown that follows finds none of them. */
struct closer {
    rt_coro co;
    rt_group *g;
    rt_group_join close;
};

static rt_poll closer_poll(void *p, rt_context *cx, void **out)
{
    struct closer *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_group_close_init(&s->close, s->g);
    RT_AWAIT(&s->co, cx, &s->close);
    RT_CORO_END(&s->co, out);
}

static void close_and_free(rt_runtime *rt, rt_group *g)
{
    struct closer c = {.g = g};
    cr_assert_eq(block_on_status(rt, closer_poll, rt_coro_drop, &c, sizeof c, NULL), 0);
    rt_group_free(g);
}

/* ---- A grouped coroutine in a dump --------------------------------------- */

/* Sleeps for a long time, so that the test finds it waiting. */
struct napper {
    rt_coro co;
    struct event *polled;
    rt_sleep nap;
};

static atomic_int napper_line;

static rt_poll napper_poll(void *p, rt_context *cx, void **out)
{
    struct napper *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_sleep_init(&s->nap, NULL, RT_SEC(60));
    event_signal(s->polled);
    atomic_store(&napper_line, __LINE__ + 1);
    RT_AWAIT(&s->co, cx, &s->nap);
    RT_CORO_END(&s->co, out);
}

/* What the visit found for each task. */
struct found {
    int tasks, coro_ok, sleeping, spawned_ok;
    int spawn_line_plain, spawn_line_grouped;
    int plain, grouped;
};

static int note(const rt_task_info *t, void *arg)
{
    struct found *f = arg;
    f->tasks++;
    if (t->state == RT_TASK_WAITING && t->await_line == atomic_load(&napper_line) &&
        t->await_function != NULL && strcmp(t->await_function, "napper_poll") == 0 &&
        t->await_file != NULL && strstr(t->await_file, "test_diag_groups.c") != NULL)
        f->coro_ok++;
    if (t->wait.kind == RT_WAIT_SLEEP && t->wait.deadline_ns > 0 &&
        strstr(t->wait.text, "sleep until") != NULL)
        f->sleeping++;
    char site[64];
    snprintf(site, sizeof site, "test_diag_groups.c:%d", f->spawn_line_plain);
    if (t->spawned_at != NULL && strstr(t->spawned_at, site) != NULL)
        f->plain++;
    snprintf(site, sizeof site, "test_diag_groups.c:%d", f->spawn_line_grouped);
    if (t->spawned_at != NULL && strstr(t->spawned_at, site) != NULL)
        f->grouped++;
    return 0;
}

Test(diag_groups, a_grouped_coroutine_dumps_as_a_plain_one)
{
    rt_runtime *rt = new_runtime(2);
    struct event polled = EVENT_INIT;
    rt_group *g;
    cr_assert_eq(rt_group_new(rt, NULL, NULL, &g), 0);
    struct napper n = {.polled = &polled};
    struct found f = {0};
    f.spawn_line_plain = __LINE__ + 1;
    cr_assert_eq(rt_spawn(rt, napper_poll, rt_coro_drop, &n, sizeof n, NULL), 0);
    f.spawn_line_grouped = __LINE__ + 1;
    cr_assert_eq(rt_group_spawn(g, NULL, napper_poll, rt_coro_drop, &n, sizeof n, NULL), 0);
    cr_assert(event_wait_for(&polled, 2));
    cr_assert(wait_all_workers_parked(rt));
    cr_assert_eq(rt_runtime_tasks(rt, note, &f), 2);
    cr_assert_eq(f.coro_ok, 2, "tasks at napper_poll's await: %d of 2", f.coro_ok);
    cr_assert_eq(f.sleeping, 2, "tasks described as sleeping: %d of 2", f.sleeping);
    cr_assert_eq(f.plain, 1, "the plain task's spawn site");
    cr_assert_eq(f.grouped, 1, "the grouped task's spawn site");

    /* The text puts both in one block: same state, await point and wait. */
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    cr_assert_eq(rt_runtime_dump(rt, out), 0);
    fclose(out);
    char expect[128];
    snprintf(expect, sizeof expect, "test_diag_groups.c:%d in napper_poll",
             atomic_load(&napper_line));
    cr_assert(strstr(text, expect) != NULL, "%s", text);
    cr_assert(strstr(text, "no coroutine") == NULL, "%s", text);
    free(text);
    close_and_free(rt, g);
    finish_runtime(rt, 1); /* the plain napper */
}

/* ---- Lost wake-ups of every kind ------------------------------------------ */

/* Returns pending without keeping its waker: nothing can wake it again. */
struct forgetful {
    rt_coro co;
};

static rt_poll forgetful_poll(void *p, rt_context *cx, void **out)
{
    struct forgetful *s = p;
    (void)cx;
    RT_CORO_BEGIN(&s->co);
    RT_AWAIT_POLL(&s->co, RT_PENDING);
    RT_CORO_END(&s->co, out);
}

enum { EACH = 1000 };

/* Spawn lines of the three kinds (set before the first spawn of each), and
 * what the reports said. */
static atomic_int line_plain, line_grouped, line_pinned;

struct lost_reports {
    struct event got;
    atomic_int plain, grouped, pinned, other;
};

static void on_lost(const rt_report *rep, void *arg)
{
    struct lost_reports *r = arg;
    if (rep->kind != RT_REPORT_LOST_WAKEUP)
        return;
    const char *colon = rep->spawned_at != NULL ? strrchr(rep->spawned_at, ':') : NULL;
    int line = colon != NULL ? atoi(colon + 1) : -1;
    if (line == atomic_load(&line_plain))
        atomic_fetch_add(&r->plain, 1);
    else if (line == atomic_load(&line_grouped))
        atomic_fetch_add(&r->grouped, 1);
    else if (line == atomic_load(&line_pinned))
        atomic_fetch_add(&r->pinned, 1);
    else
        atomic_fetch_add(&r->other, 1);
    event_signal(&r->got);
}

/* Spawns EACH pinned forgetful tasks from a task, so that
 * RT_WORKER_CURRENT names its worker, and a thousand grouped ones. */
struct spawner {
    rt_group *g;
};

static rt_poll spawner_poll(void *p, rt_context *cx, void **out)
{
    struct spawner *s = p;
    (void)cx;
    rt_spawn_options o;
    rt_spawn_options_init(&o);
    o.worker = RT_WORKER_CURRENT;
    struct forgetful f = {0};
    atomic_store(&line_pinned, __LINE__ + 2);
    for (int i = 0; i < EACH; i++)
        cr_assert_eq(rt_spawn_ex(NULL, &o, forgetful_poll, rt_coro_drop, &f, sizeof f, NULL), 0);
    atomic_store(&line_grouped, __LINE__ + 2);
    for (int i = 0; i < EACH; i++)
        cr_assert_eq(rt_group_spawn(s->g, NULL, forgetful_poll, rt_coro_drop, &f, sizeof f, NULL),
                     0);
    *out = NULL;
    return RT_READY;
}

Test(diag_groups, lost_wakeups_of_plain_grouped_and_pinned_tasks_are_all_reported)
{
    struct lost_reports r = {.got = EVENT_INIT};
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.report = on_lost;
    cfg.report_arg = &r;
    rt_runtime *rt = new_runtime_config(&cfg);
    rt_group *g;
    cr_assert_eq(rt_group_new(rt, NULL, NULL, &g), 0);
    int64_t start = rt_now_ns();
    struct forgetful f = {0};
    atomic_store(&line_plain, __LINE__ + 2);
    for (int i = 0; i < EACH; i++)
        cr_assert_eq(rt_spawn(rt, forgetful_poll, rt_coro_drop, &f, sizeof f, NULL), 0);
    struct spawner sp = {.g = g};
    cr_assert_eq(block_on_status(rt, spawner_poll, NULL, &sp, sizeof sp, NULL), 0);
    bool all = event_wait_for_ms(&r.got, 3 * EACH, 2000);
    int64_t took = rt_now_ns() - start;
    cr_assert(all, "within 2 s: %d plain, %d grouped, %d pinned of %d each", atomic_load(&r.plain),
              atomic_load(&r.grouped), atomic_load(&r.pinned), EACH);
    cr_assert_eq(atomic_load(&r.plain), EACH);
    cr_assert_eq(atomic_load(&r.grouped), EACH);
    cr_assert_eq(atomic_load(&r.pinned), EACH);
    cr_assert_eq(atomic_load(&r.other), 0);
    cr_log_info("3 x %d lost tasks reported in %lld ms", EACH, (long long)(took / MS));
    rt_metrics m;
    rt_metrics_read(rt, &m, sizeof m);
    cr_assert_eq(m.lost_wakeups, 3 * EACH);
    close_and_free(rt, g);
    finish_runtime(rt, 2 * EACH); /* the plain and the pinned ones */
}
