/* Black-box tests of asyncrt/metrics.h: reading totals and per-worker
 * figures, the size-versioning rules, printing, and the exact totals a shut
 * down runtime reports. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(metrics, .timeout = 120, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* Frees a runtime after shut_down (support.h) and a look at its workers. */
static void free_runtime(rt_runtime *rt)
{
    cr_assert_eq(rt_runtime_free(rt), 0);
}

/* Yields as many times as its state says, then finishes; counts polls. */
static rt_poll yielding_poll(void *state, rt_context *cx, void **out)
{
    int *yields_left = state;
    atomic_fetch_add(&polls, 1);
    if ((*yields_left)-- > 0)
        return rt_yield(cx);
    *out = NULL;
    return RT_READY;
}

/* Spawns that failed inside a task, checked by the test thread. */
static atomic_int spawn_failures;

static uint64_t sum_worker_polls(rt_runtime *rt)
{
    uint64_t sum = 0;
    for (unsigned i = 0; i < rt_runtime_workers(rt); i++) {
        rt_worker_metrics wm;
        cr_assert_eq(rt_worker_metrics_read(rt, i, &wm, sizeof wm), 0);
        sum += wm.polls;
    }
    return sum;
}

/* ---- totals ------------------------------------------------------------ */

Test(metrics, fresh_runtime_reports_its_workers_and_no_tasks)
{
    rt_runtime *rt = new_runtime(3);
    rt_metrics m;
    memset(&m, 0xAB, sizeof m);
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.workers, 3);
    cr_assert_eq(m.spawned, 0);
    cr_assert_eq(m.completed, 0);
    cr_assert_eq(m.cancelled, 0);
    cr_assert_eq(m.alive, 0);
    for (unsigned i = 0; i < 3; i++) {
        rt_worker_metrics wm;
        memset(&wm, 0xAB, sizeof wm);
        cr_assert_eq(rt_worker_metrics_read(rt, i, &wm, sizeof wm), 0);
        cr_assert_eq(wm.polls, 0);
        cr_assert_eq(wm.steals, 0);
        cr_assert_eq(wm.spills, 0);
        cr_assert_eq(wm.injector_batches, 0);
        cr_assert_leq(wm.steals, wm.steal_attempts);
    }
    rt_metrics final;
    finish_runtime_metrics(rt, 0, &final);
    cr_assert_eq(final.spawned, 0);
}

#define COMPLETED_TASKS 100
#define ABORTED_TASKS 5
#define PENDING_TASKS 7

Test(metrics, totals_after_shutdown_are_exact)
{
    rt_runtime *rt = new_runtime(3);
    rt_task *handles[COMPLETED_TASKS];
    for (int i = 0; i < COMPLETED_TASKS; i++) {
        int yields = i % 3;
        cr_assert_eq(
            rt_spawn(rt, yielding_poll, counting_drop, &yields, sizeof yields, &handles[i]), 0);
    }
    for (int i = 0; i < COMPLETED_TASKS; i++)
        cr_assert_eq(task_wait_status(handles[i], WAIT_DEADLINE_NS, NULL), 0);

    rt_task *aborted[ABORTED_TASKS];
    for (int i = 0; i < ABORTED_TASKS; i++)
        cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, &aborted[i]), 0);
    cr_assert(event_wait_for(&polled, ABORTED_TASKS));
    for (int i = 0; i < ABORTED_TASKS; i++) {
        rt_task_cancel(aborted[i]);
        cr_assert_eq(task_wait_status(aborted[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    }
    /* Every aborted task is dropped before shutdown, so shutdown itself
     * cancels only the pending ones. */
    cr_assert(event_wait_for(&dropped, COMPLETED_TASKS + ABORTED_TASKS));

    for (int i = 0; i < PENDING_TASKS; i++)
        cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, NULL), 0);
    cr_assert(event_wait_for(&polled, ABORTED_TASKS + PENDING_TASKS));

    rt_metrics m = shut_down(rt, PENDING_TASKS);
    cr_assert_eq(m.workers, 3);
    cr_assert_eq(m.spawned, COMPLETED_TASKS + ABORTED_TASKS + PENDING_TASKS);
    cr_assert_eq(m.completed, COMPLETED_TASKS);
    cr_assert_eq(m.cancelled, ABORTED_TASKS + PENDING_TASKS);
    cr_assert_eq(m.spawned, m.completed + m.cancelled);
    uint64_t worker_polls = sum_worker_polls(rt);
    free_runtime(rt);
    cr_assert_eq(worker_polls, (uint64_t)atomic_load(&polls),
                 "worker polls add up to %llu, but the poll functions ran %d times",
                 (unsigned long long)worker_polls, atomic_load(&polls));
    cr_assert_eq(atomic_load(&drops), COMPLETED_TASKS + ABORTED_TASKS + PENDING_TASKS);
}

#define FOREIGN_SPAWNS 20
#define LOCAL_CHILDREN 3

static rt_poll spawns_locally_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    atomic_fetch_add(&polls, 1);
    for (int i = 0; i < LOCAL_CHILDREN; i++) {
        int yields = 1;
        if (rt_spawn(NULL, yielding_poll, counting_drop, &yields, sizeof yields, NULL) != 0)
            atomic_fetch_add(&spawn_failures, 1);
    }
    *out = NULL;
    return RT_READY;
}

Test(metrics, spawns_from_a_worker_are_counted_but_do_not_go_through_the_injector)
{
    rt_runtime *rt = new_runtime(1);
    for (int i = 0; i < FOREIGN_SPAWNS; i++) {
        rt_task *task = NULL;
        cr_assert_eq(rt_spawn(rt, spawns_locally_poll, NULL, NULL, 0, &task), 0);
        cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), 0);
    }
    cr_assert(event_wait_for(&dropped, FOREIGN_SPAWNS * LOCAL_CHILDREN));
    rt_metrics m = shut_down(rt, 0);
    cr_assert_eq(atomic_load(&spawn_failures), 0);
    cr_assert_eq(m.spawned, FOREIGN_SPAWNS * (1 + LOCAL_CHILDREN));
    cr_assert_eq(m.completed, m.spawned);
    uint64_t worker_polls = sum_worker_polls(rt);
    rt_worker_metrics wm;
    cr_assert_eq(rt_worker_metrics_read(rt, 0, &wm, sizeof wm), 0);
    free_runtime(rt);
    /* Parents poll once, each child twice (one yield). */
    cr_assert_eq(worker_polls, FOREIGN_SPAWNS * (1 + 2 * LOCAL_CHILDREN), "%llu polls",
                 (unsigned long long)worker_polls);
    /* Each parent was spawned from the test thread only after the previous
     * one finished, so each reached the injector alone and was taken in a
     * batch of its own; children spawned (and yielding) on the worker stay on
     * its deque and add no batch. */
    cr_assert_eq(wm.injector_batches, FOREIGN_SPAWNS,
                 "%llu injector batches for %d foreign spawns: worker-side spawns or yields "
                 "went through the injector",
                 (unsigned long long)wm.injector_batches, FOREIGN_SPAWNS);
    cr_assert_eq(wm.spills, 0);
}

#define PARALLEL_PARENTS 200
#define PARALLEL_CHILDREN 20

static rt_poll fan_out_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    atomic_fetch_add(&polls, 1);
    for (int i = 0; i < PARALLEL_CHILDREN; i++) {
        int yields = i % 2;
        if (rt_spawn(NULL, yielding_poll, counting_drop, &yields, sizeof yields, NULL) != 0)
            atomic_fetch_add(&spawn_failures, 1);
    }
    *out = NULL;
    return RT_READY;
}

Test(metrics, worker_figures_are_consistent_after_parallel_work)
{
    rt_runtime *rt = new_runtime(4);
    for (int i = 0; i < PARALLEL_PARENTS; i++)
        cr_assert_eq(rt_spawn(rt, fan_out_poll, counting_drop, NULL, 0, NULL), 0);
    cr_assert(event_wait_for(&dropped, PARALLEL_PARENTS * (1 + PARALLEL_CHILDREN)));
    rt_metrics m = shut_down(rt, 0);
    cr_assert_eq(atomic_load(&spawn_failures), 0);
    cr_assert_eq(m.spawned, PARALLEL_PARENTS * (1 + PARALLEL_CHILDREN));
    cr_assert_eq(m.completed, m.spawned);
    rt_worker_metrics workers[4];
    for (unsigned i = 0; i < 4; i++)
        cr_assert_eq(rt_worker_metrics_read(rt, i, &workers[i], sizeof workers[i]), 0);
    free_runtime(rt);
    uint64_t polls_sum = 0;
    for (unsigned i = 0; i < 4; i++) {
        const rt_worker_metrics wm = workers[i];
        polls_sum += wm.polls;
        cr_assert_leq(wm.steals, wm.steal_attempts, "worker %u: %llu steals in %llu attempts", i,
                      (unsigned long long)wm.steals, (unsigned long long)wm.steal_attempts);
        cr_assert_leq(wm.unparks, wm.parks, "worker %u woke more often than it slept", i);
        cr_assert_leq(wm.parks, wm.unparks + 1, "worker %u slept twice without waking", i);
    }
    cr_assert_eq(polls_sum, (uint64_t)atomic_load(&polls), "worker polls %llu, poll calls %d",
                 (unsigned long long)polls_sum, atomic_load(&polls));
}

#define BURST 100

static rt_poll burst_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    for (int i = 0; i < BURST; i++) {
        int yields = 0;
        if (rt_spawn(NULL, yielding_poll, counting_drop, &yields, sizeof yields, NULL) != 0)
            atomic_fetch_add(&spawn_failures, 1);
    }
    *out = NULL;
    return RT_READY;
}

Test(metrics, deque_high_water_sees_a_burst_spawned_in_one_poll)
{
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(block_on_status(rt, burst_poll, NULL, NULL, 0, NULL), 0);
    cr_assert(event_wait_for(&dropped, BURST));
    shut_down(rt, 0);
    cr_assert_eq(atomic_load(&spawn_failures), 0);
    rt_worker_metrics wm;
    cr_assert_eq(rt_worker_metrics_read(rt, 0, &wm, sizeof wm), 0);
    free_runtime(rt);
    cr_assert_leq(wm.deque_high_water, BURST, "more tasks in the deque than ever existed");
    /* With a single worker nothing was stolen, so the whole burst (but
     * possibly one task held aside as "next") sat in the deque, unless the
     * deque was built smaller than the burst and spilled. */
    if (wm.spills == 0)
        cr_assert_geq(wm.deque_high_water, BURST - 1, "high water %llu after a burst of %d",
                      (unsigned long long)wm.deque_high_water, BURST);
    cr_assert_eq(wm.steals, 0);
}

/* More than the largest deque a build may have (65536), so it must spill. */
#define SPILL_BURST 70000

static atomic_uchar spill_runs[SPILL_BURST];
static atomic_int spill_done;
static struct event spill_all_done = EVENT_INIT;

static rt_poll spill_child_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    int index = *(int *)state;
    atomic_fetch_add(&spill_runs[index], 1);
    if (atomic_fetch_add(&spill_done, 1) + 1 == SPILL_BURST)
        event_signal(&spill_all_done);
    *out = NULL;
    return RT_READY;
}

static atomic_int spill_spawn_failures;

static rt_poll spill_parent_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    for (int i = 0; i < SPILL_BURST; i++)
        if (rt_spawn(NULL, spill_child_poll, NULL, &i, sizeof i, NULL) != 0)
            atomic_fetch_add(&spill_spawn_failures, 1);
    *out = NULL;
    return RT_READY;
}

Test(metrics, full_deque_spills_to_the_injector_and_loses_no_task)
{
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(rt_spawn(rt, spill_parent_poll, NULL, NULL, 0, NULL), 0);
    cr_assert(event_wait_for(&spill_all_done, 1), "only %d of %d children ran",
              atomic_load(&spill_done), SPILL_BURST);
    rt_metrics m = shut_down(rt, 0);
    cr_assert_eq(atomic_load(&spill_spawn_failures), 0);
    rt_worker_metrics wm;
    cr_assert_eq(rt_worker_metrics_read(rt, 0, &wm, sizeof wm), 0);
    free_runtime(rt);
    cr_assert_geq(wm.spills, 1, "%d tasks spawned in one poll never spilled", SPILL_BURST);
    cr_assert_leq(wm.deque_high_water, 65536);
    /* One batch brought the parent; spilled children come back in more. */
    cr_assert_geq(wm.injector_batches, 2, "spilled tasks never came back from the injector");
    cr_assert_eq(m.spawned, SPILL_BURST + 1);
    cr_assert_eq(m.completed, SPILL_BURST + 1);
    for (int i = 0; i < SPILL_BURST; i++)
        cr_assert_eq(atomic_load(&spill_runs[i]), 1, "child %d ran %d times", i,
                     atomic_load(&spill_runs[i]));
}

/* ---- arguments and versioning ------------------------------------------- */

Test(metrics, read_functions_reject_bad_arguments)
{
    rt_runtime *rt = new_runtime(2);
    rt_metrics m;
    rt_worker_metrics wm;
    cr_assert_eq(rt_metrics_read(NULL, &m, sizeof m), -EINVAL);
    cr_assert_eq(rt_metrics_read(rt, NULL, sizeof m), -EINVAL);
    cr_assert_eq(rt_worker_metrics_read(NULL, 0, &wm, sizeof wm), -EINVAL);
    cr_assert_eq(rt_worker_metrics_read(rt, 0, NULL, sizeof wm), -EINVAL);
    cr_assert_eq(rt_worker_metrics_read(rt, 2, &wm, sizeof wm), -EINVAL, "index == workers");
    cr_assert_eq(rt_worker_metrics_read(rt, 1000, &wm, sizeof wm), -EINVAL);
    cr_assert_eq(rt_worker_metrics_read(rt, 1, &wm, sizeof wm), 0, "the last worker is valid");
    finish_runtime(rt, 0);
}

/* Checks that bytes [from, to) of buf all hold `value`. */
static void assert_bytes(const unsigned char *buf, size_t from, size_t to, unsigned char value,
                         const char *what)
{
    for (size_t i = from; i < to; i++)
        cr_assert_eq(buf[i], value, "%s: byte %zu is 0x%02x, expected 0x%02x", what, i, buf[i],
                     value);
}

Test(metrics, smaller_size_writes_nothing_past_it)
{
    rt_runtime *rt = new_runtime(3);
    cr_assert_eq(block_on_status(rt, yielding_poll, NULL, &(int){1}, sizeof(int), NULL), 0);

    /* An older caller that only knew `workers` and `spawned`. */
    union {
        rt_metrics m;
        unsigned char bytes[sizeof(rt_metrics)];
    } old;
    const size_t known = offsetof(rt_metrics, completed);
    memset(&old, 0xAB, sizeof old);
    cr_assert_eq(rt_metrics_read(rt, &old.m, known), 0);
    cr_assert_eq(old.m.workers, 3);
    cr_assert_eq(old.m.spawned, 1);
    assert_bytes(old.bytes, known, sizeof old, 0xAB, "rt_metrics past size");

    /* A size that ends inside a field: nothing at or past it is written. */
    memset(&old, 0xAB, sizeof old);
    cr_assert_eq(rt_metrics_read(rt, &old.m, 12), 0);
    cr_assert_eq(old.m.workers, 3);
    assert_bytes(old.bytes, 12, sizeof old, 0xAB, "rt_metrics past a 12-byte size");

    union {
        rt_worker_metrics wm;
        unsigned char bytes[sizeof(rt_worker_metrics)];
    } old_worker;
    const size_t known_worker = offsetof(rt_worker_metrics, steals);
    for (unsigned i = 0; i < 3; i++) {
        memset(&old_worker, 0xAB, sizeof old_worker);
        cr_assert_eq(rt_worker_metrics_read(rt, i, &old_worker.wm, known_worker), 0);
        cr_assert_neq(old_worker.wm.polls, 0xABABABABABABABABull, "polls was not filled");
        assert_bytes(old_worker.bytes, known_worker, sizeof old_worker, 0xAB,
                     "rt_worker_metrics past size");
    }
    finish_runtime(rt, 0);
}

Test(metrics, bigger_size_zeroes_the_fields_the_library_does_not_know)
{
    rt_runtime *rt = new_runtime(2);
    cr_assert_eq(block_on_status(rt, yielding_poll, NULL, &(int){2}, sizeof(int), NULL), 0);

    /* A newer caller whose struct has more fields than this library. */
    struct newer_metrics {
        rt_metrics m;
        uint64_t future_fields[5];
    } newer;
    memset(&newer, 0xAB, sizeof newer);
    cr_assert_eq(rt_metrics_read(rt, &newer.m, sizeof newer), 0);
    cr_assert_eq(newer.m.workers, 2);
    cr_assert_eq(newer.m.spawned, 1);
    cr_assert_eq(newer.m.completed, 1);
    assert_bytes((const unsigned char *)&newer, sizeof(rt_metrics), sizeof newer, 0,
                 "rt_metrics extension");

    struct newer_worker_metrics {
        rt_worker_metrics wm;
        uint64_t future_fields[3];
    } newer_worker;
    uint64_t polls_sum = 0;
    for (unsigned i = 0; i < 2; i++) {
        memset(&newer_worker, 0xAB, sizeof newer_worker);
        cr_assert_eq(rt_worker_metrics_read(rt, i, &newer_worker.wm, sizeof newer_worker), 0);
        polls_sum += newer_worker.wm.polls;
        assert_bytes((const unsigned char *)&newer_worker, sizeof(rt_worker_metrics),
                     sizeof newer_worker, 0, "rt_worker_metrics extension");
    }
    /* The task has finished (block_on returned), so its three polls are in. */
    cr_assert_eq(polls_sum, 3);
    finish_runtime(rt, 0);
}

/* ---- printing ---------------------------------------------------------- */

#define PRINTED_TASKS 1237

Test(metrics, print_mentions_the_totals_and_one_line_per_worker)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *handles[PRINTED_TASKS];
    for (int i = 0; i < PRINTED_TASKS; i++) {
        int yields = 0;
        cr_assert_eq(rt_spawn(rt, yielding_poll, NULL, &yields, sizeof yields, &handles[i]), 0);
    }
    for (int i = 0; i < PRINTED_TASKS; i++)
        cr_assert_eq(task_wait_status(handles[i], WAIT_DEADLINE_NS, NULL), 0);
    rt_metrics m = shut_down(rt, 0);
    cr_assert_eq(m.spawned, PRINTED_TASKS);

    char *text = NULL;
    size_t length = 0;
    FILE *out = open_memstream(&text, &length);
    cr_assert_not_null(out);
    cr_assert_eq(rt_metrics_print(rt, out), 0);
    cr_assert_eq(fclose(out), 0);
    cr_assert_not_null(text);

    char figure[32];
    snprintf(figure, sizeof figure, "%d", PRINTED_TASKS);
    cr_assert_not_null(strstr(text, figure), "the spawned/completed total %s is not printed:\n%s",
                       figure, text);
    for (unsigned i = 0; i < 2; i++) {
        rt_worker_metrics wm;
        cr_assert_eq(rt_worker_metrics_read(rt, i, &wm, sizeof wm), 0);
        snprintf(figure, sizeof figure, "%" PRIu64, wm.polls);
        cr_assert_not_null(strstr(text, figure), "worker %u's %s polls are not printed:\n%s", i,
                           figure, text);
    }
    cr_assert_not_null(strstr(text, "blocking pool: "), "the blocking pool is not printed:\n%s",
                       text);
    cr_assert_not_null(strstr(text, "reactor: "), "the reactor is not printed:\n%s", text);
    int lines = 0;
    for (const char *p = text; *p != '\0'; p++)
        if (*p == '\n')
            lines++;
    cr_assert_geq(lines, 1 + 2, "expected the totals and a line per worker:\n%s", text);
    free(text);

    /* A regular file works as well. */
    FILE *file = tmpfile();
    cr_assert_not_null(file);
    cr_assert_eq(rt_metrics_print(rt, file), 0);
    cr_assert_gt(ftell(file), 0, "nothing was written to the file");
    fclose(file);
    free_runtime(rt);
}

Test(metrics, print_rejects_null_arguments_and_reports_stream_errors)
{
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(rt_metrics_print(NULL, stdout), -EINVAL);
    cr_assert_eq(rt_metrics_print(rt, NULL), -EINVAL);

    /* A stream opened for reading only fails every write. */
    FILE *read_only = fopen("/dev/null", "r");
    cr_assert_not_null(read_only);
    cr_assert_eq(rt_metrics_print(rt, read_only), -EIO);
    fclose(read_only);
    finish_runtime(rt, 0);
}
