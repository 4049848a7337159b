/* Black-box tests of discarding groups and of waits on an empty group
 * (asyncrt/group.h): a group made with `discard` hands each result to its
 * dispose function as the child finishes and keeps nothing, its joins count
 * the failed children, rt_group_next is refused on it; a next waiting on an
 * empty open group collects a child spawned later (closed, the group reports
 * -ECHILD instead). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_group.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

TestSuite(group, .timeout = 120, .fini = fail_on_leaks);

/* A discarding group of rt, with dispose_box and dlog. */
static rt_group *new_discarding_group(rt_runtime *rt)
{
    rt_group_options opts;
    rt_group_options_init(&opts);
    opts.dispose = dispose_box;
    opts.dispose_arg = &dlog;
    opts.discard = 1;
    rt_group *g = NULL;
    cr_assert_eq(rt_group_new_ex(rt, &opts, &g), 0);
    return g;
}

/* ---- discard ------------------------------------------------------------------ */

#define DISCARD_N 20000

Test(group, a_discarding_group_disposes_each_result_as_its_child_finishes)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_discarding_group(rt);
    for (int i = 0; i < DISCARD_N; i++) {
        struct child c = {.kind = CHILD_BOX, .index = i % 64, .yields = i % 3};
        spawn_child(g, &c);
    }
    /* Nobody collects: every result reaches dispose anyway, and the group
     * holds nothing once the children are gone. */
    cr_assert(event_wait_for(&dlog.called, DISCARD_N), "only %lu of %d results were disposed",
              event_count(&dlog.called), DISCARD_N);
    cr_assert(event_wait_for(&child_dropped, DISCARD_N));
    cr_assert_eq(atomic_load(&dlog.boxes), DISCARD_N);
    cr_assert_eq(atomic_load(&dlog.bad), 0);
    size_t failed = 99;
    cr_assert_eq(hand_wait(rt, g, false, -1, &failed, NULL), 0);
    cr_assert_eq(failed, 0);
    cr_assert_eq(rt_group_len(g), 0);
    rt_group_free(g);
    finish_runtime(rt, 0);
}

Test(group, a_discarding_group_counts_its_cancelled_children)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_discarding_group(rt);
    struct gate gates[8]; /* a gate wakes one waiter: one each */
    for (int i = 0; i < 8; i++) {
        gate_init(&gates[i]);
        struct child c = {.kind = CHILD_GATED, .value = 0, .gate = &gates[i]};
        spawn_child(g, &c);
    }
    for (int i = 0; i < 5; i++) {
        struct child c = {.kind = CHILD_FOREVER};
        spawn_child(g, &c);
    }
    cr_assert(event_wait_for(&child_polled, 13));
    cr_assert_eq(rt_group_len(g), 13);
    for (int i = 0; i < 8; i++)
        gate_open(&gates[i]);
    /* Their results reach dispose (NULL values) with nobody collecting. */
    cr_assert(event_wait_for(&child_dropped, 8));
    /* The close cancels the five that never finish. */
    size_t failed = 99, cancelled = 0;
    cr_assert_eq(hand_wait(rt, g, true, -1, &failed, &cancelled), 0);
    cr_assert_eq(cancelled, 5, "cancelled %zu", cancelled);
    cr_assert_eq(failed, 0, "failed %zu", failed);
    cr_assert_eq(rt_group_len(g), 0);
    cr_assert_eq(atomic_load(&dlog.nulls), 8, "the gated children's NULL results");
    cr_assert_eq(atomic_load(&dlog.boxes), 0);
    rt_group_free(g);
    finish_runtime(rt, 0);
}

Test(group, next_on_a_discarding_group_is_refused_at_its_init)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_discarding_group(rt);
    struct child c = {.kind = CHILD_BOX, .index = 1};
    spawn_child(g, &c);
    rt_group_next next;
    cr_assert_eq(rt_group_next_init(&next, g), -EINVAL);
    cr_assert_eq(next.result, -EINVAL, "the refused next is not finished with its error");
    rt_context cx = hand_context();
    cr_assert_eq(RT_POLL_OP(&next, &cx), RT_READY);
    cr_assert_eq(next.child.id, 0, "the refused next handed out a child");
    size_t failed;
    cr_assert_eq(hand_wait(rt, g, false, -1, &failed, NULL), 0);
    cr_assert_eq(atomic_load(&dlog.boxes), 1);
    rt_group_free(g);
    finish_runtime(rt, 0);
}

Test(group, group_options_default_to_keeping_results)
{
    rt_group_options opts;
    memset(&opts, 0xff, sizeof opts);
    rt_group_options_init(&opts);
    cr_assert_null(opts.dispose);
    cr_assert_null(opts.dispose_arg);
    cr_assert_eq(opts.discard, 0);
    rt_group_options_init(NULL); /* a no-op */

    rt_runtime *rt = new_runtime(1);
    rt_group *g = NULL;
    cr_assert_eq(rt_group_new_ex(rt, NULL, NULL), -EINVAL);
    cr_assert_eq(rt_group_new_ex(rt, NULL, &g), 0, "NULL options: the defaults");
    struct child c = {.kind = CHILD_VALUE, .value = 5};
    uint64_t id = spawn_child(g, &c);
    rt_group_result res;
    cr_assert_eq(hand_next(rt, g, -1, &res), 0);
    cr_assert_eq(res.id, id);
    cr_assert_eq(res.value, (void *)5);
    rt_group_free(g);
    finish_runtime(rt, 0);
}

/* ---- waiting on an empty group --------------------------------------------------- */

struct later_spawner {
    rt_group *g;
    uint64_t id;
};

/* Spawns a child into the group whose owner waits on it, empty. */
static void *later_spawner_thread(void *arg)
{
    struct later_spawner *s = arg;
    struct child c = {.kind = CHILD_VALUE, .value = 77, .yields = 1};
    s->id = spawn_child(s->g, &c);
    return NULL;
}

Test(group, a_next_waiting_on_an_empty_group_collects_a_child_spawned_later)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    rt_group_next op;
    memset(&op, 0, sizeof op);
    cr_assert_eq(rt_group_next_init(&op, g), 0);
    rt_context cx = hand_context();
    unsigned long seen = event_count(&hand_woken);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING, "a next on an empty open group did not wait");
    cr_assert_not(rt_future_is_done(&op.future), "a waiting next reports itself finished");

    struct later_spawner s = {g, 0};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, later_spawner_thread, &s), 0);
    pthread_join(th, NULL);
    for (;;) {
        cr_assert(event_wait_for(&hand_woken, seen + 1),
                  "the waiting next was not woken by the child spawned later");
        seen = event_count(&hand_woken);
        if (RT_POLL_OP(&op, &cx) == RT_READY)
            break;
    }
    RT_DROP(&op);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(op.child.id, s.id);
    cr_assert_eq(op.child.value, (void *)77);
    assert_group_drained(rt, g);
    rt_group_free(g);
    finish_runtime(rt, 0);
}
