/* Black-box tests of collecting a task group's children (asyncrt/group.h):
 * rt_group_next hands them out in the order they finish, with their ids and
 * values, and wakes an owner polling by hand; a next on an empty group waits
 * until the group is closed (-ECHILD), bad
 * arguments, spawn options; join_all; rt_group_next in an rt_timeout; the
 * dispose function receiving every result nobody collected; ids from spawn
 * matching the children collected meanwhile; and a failed spawn waking an
 * owner that saw its child counted. Nothing may leak (LeakSanitizer in the
 * sanitizer build). */
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
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(group, .timeout = 90, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* Whether ids[0..n) are all different and none is 0. */
static bool ids_unique_nonzero(const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == 0)
            return false;
        for (size_t j = i + 1; j < n; j++)
            if (ids[i] == ids[j])
                return false;
    }
    return true;
}

/* ---- rt_group_next: completion order, ids, values --------------------------- */

#define ORDER_N 8

/* The order in which the owner opens the children's gates. */
static const int order_perm[ORDER_N] = {5, 2, 7, 0, 3, 6, 1, 4};

struct order_report {
    int next_rc[ORDER_N + 1];
    rt_group_result res[ORDER_N + 1];
    size_t len_before[ORDER_N];
    size_t len_after;
    int owner_worker;
};

struct order_owner {
    rt_coro co;
    rt_group *g;
    struct gate *gates;
    struct order_report *r;
    int k;
    rt_group_next op;
    rt_timeout limit;
};

/* Opens one gate at a time, in order_perm's order, and collects the child it
 * let through before opening the next: the completion order is the gate
 * order, whatever the scheduling. Then one more next, in a zero timeout:
 * the group is empty but open, so it waits and times out. */
static rt_poll order_owner_poll(void *state, rt_context *cx, void **out)
{
    struct order_owner *o = state;
    RT_CORO_BEGIN(&o->co);
    o->r->owner_worker = rt_current_worker();
    for (o->k = 0; o->k < ORDER_N; o->k++) {
        o->r->len_before[o->k] = rt_group_len(o->g);
        gate_open(&o->gates[order_perm[o->k]]);
        if (rt_group_next_init(&o->op, o->g) != 0)
            RT_RETURN(&o->co, out, 0);
        RT_AWAIT(&o->co, cx, &o->op);
        o->r->next_rc[o->k] = (int)o->op.result;
        if (o->op.result == 0)
            o->r->res[o->k] = o->op.child;
        RT_DROP(&o->op); /* finished: nothing to do */
    }
    if (rt_group_next_init(&o->op, o->g) != 0 ||
        rt_timeout_init(&o->limit, NULL, &o->op.future, 0) != 0)
        RT_RETURN(&o->co, out, 0);
    RT_AWAIT(&o->co, cx, &o->limit);
    o->r->next_rc[ORDER_N] = (int)o->limit.result;
    if (o->limit.result == 0)
        o->r->res[ORDER_N] = o->op.child;
    o->r->len_after = rt_group_len(o->g);
    RT_RETURN(&o->co, out, 1);
    RT_CORO_END(&o->co, out);
}

static void order_owner_drop(void *state)
{
    struct order_owner *o = state;
    RT_DROP(&o->limit);
    RT_DROP(&o->op);
}

struct foreign_spawner {
    rt_group *g;
    struct gate *gates;
    int first, count;
    uint64_t *ids;
    int rc[ORDER_N];
};

static void *foreign_spawner_thread(void *arg)
{
    struct foreign_spawner *f = arg;
    for (int i = f->first; i < f->first + f->count; i++) {
        struct child c = {
            .kind = CHILD_GATED, .index = i, .value = 1000 + (uintptr_t)i, .gate = &f->gates[i]};
        f->rc[i] = rt_group_spawn(f->g, NULL, child_poll, child_drop, &c, sizeof c, &f->ids[i]);
    }
    return NULL;
}

Test(group, next_collects_children_in_completion_order_with_their_ids_and_values)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    struct gate gates[ORDER_N];
    for (int i = 0; i < ORDER_N; i++)
        gate_init(&gates[i]);
    uint64_t ids[ORDER_N] = {0};

    /* Half the children from this thread, half from another foreign thread. */
    for (int i = 0; i < ORDER_N / 2; i++) {
        struct child c = {
            .kind = CHILD_GATED, .index = i, .value = 1000 + (uintptr_t)i, .gate = &gates[i]};
        ids[i] = spawn_child(g, &c);
    }
    struct foreign_spawner f = {g, gates, ORDER_N / 2, ORDER_N / 2, ids, {0}};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, foreign_spawner_thread, &f), 0);
    pthread_join(thread, NULL);
    for (int i = ORDER_N / 2; i < ORDER_N; i++)
        cr_assert_eq(f.rc[i], 0, "spawn %d from a foreign thread: %s", i, rt_strerror(f.rc[i]));
    cr_assert(ids_unique_nonzero(ids, ORDER_N), "child ids are not unique and non-zero");
    cr_assert_eq(rt_group_len(g), ORDER_N);

    struct order_report r;
    memset(&r, 0, sizeof r);
    for (int k = 0; k <= ORDER_N; k++)
        r.next_rc[k] = INT_MIN;
    struct order_owner owner;
    memset(&owner, 0, sizeof owner);
    owner.g = g;
    owner.gates = gates;
    owner.r = &r;
    void *value = NULL;
    cr_assert_eq(
        block_on_status(rt, order_owner_poll, order_owner_drop, &owner, sizeof owner, &value), 0);
    cr_assert_eq(value, (void *)1, "the owner failed to init a wait");
    cr_assert_geq(r.owner_worker, 0);

    for (int k = 0; k < ORDER_N; k++) {
        int i = order_perm[k];
        cr_assert_eq(r.next_rc[k], 0, "next #%d: %s", k, rt_strerror(r.next_rc[k]));
        cr_assert_eq(r.len_before[k], (size_t)(ORDER_N - k), "len before next #%d: %zu", k,
                     r.len_before[k]);
        size_t got = index_of_id(ids, ORDER_N, r.res[k].id);
        cr_assert_eq(r.res[k].id, ids[i],
                     "next #%d collected child %zu, expected child %d (the one let through)", k,
                     got, i);
        cr_assert_eq(r.res[k].value, (void *)(1000 + (uintptr_t)i), "value of child %d", i);
        cr_assert_eq(r.res[k].status, 0);
    }
    cr_assert_eq(r.next_rc[ORDER_N], -ETIMEDOUT, "next on an emptied open group: %d",
                 r.next_rc[ORDER_N]);
    cr_assert_eq(r.len_after, 0);
    cr_assert_eq(atomic_load(&child_drops), ORDER_N);
    rt_group_free(g);

    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.spawned, ORDER_N + 1, "spawned %llu", (unsigned long long)m.spawned);
    cr_assert_eq(m.completed, ORDER_N + 1, "metrics: completed %llu",
                 (unsigned long long)m.completed);
    cr_assert_eq(atomic_load(&child_drops), ORDER_N);
}

/* A finished child collected by a hand-polled next carries its value; a
 * child collected while still running is not (the poll waits). */
Test(group, next_polled_by_hand_waits_for_a_running_child_and_wakes_its_waker)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    struct gate gate;
    gate_init(&gate);
    struct child c = {.kind = CHILD_GATED, .value = 77, .gate = &gate};
    uint64_t id = spawn_child(g, &c);
    cr_assert(event_wait_for(&child_polled, 1));

    rt_group_next op;
    memset(&op, 0, sizeof op);
    cr_assert_eq(rt_group_next_init(&op, g), 0);
    rt_context cx = hand_context();
    unsigned long seen = event_count(&hand_woken);
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_PENDING,
                 "next is ready while its only child waits behind a shut gate");
    cr_assert_eq(rt_group_len(g), 1);
    gate_open(&gate);
    cr_assert(event_wait_for(&hand_woken, seen + 1), "the finishing child never woke next");
    for (;;) {
        seen = event_count(&hand_woken);
        if (RT_POLL_OP(&op, &cx) == RT_READY)
            break;
        cr_assert(event_wait_for(&hand_woken, seen + 1));
    }
    RT_DROP(&op);
    cr_assert_eq(op.result, 0);
    cr_assert_eq(op.child.id, id);
    cr_assert_eq(op.child.value, (void *)77);
    cr_assert_eq(op.child.status, 0);
    cr_assert_eq(rt_group_len(g), 0);
    rt_group_free(g);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&child_drops), 1);
}

/* ---- empty groups, bad arguments ---------------------------------------------- */

struct in_task_group {
    int new_rc;
    int next_rc;
    int wait_rc;
    size_t failed;
};

/* Makes a group on rt_current_runtime() (rt NULL), asks it for a child (pending: it
 * is empty but open) and for all of them (0 straight away), then frees it. */
static rt_poll in_task_group_poll(void *state, rt_context *cx, void **out)
{
    struct in_task_group *s = *(struct in_task_group **)state;
    rt_group *g = NULL;
    s->new_rc = rt_group_new(NULL, NULL, NULL, &g);
    if (s->new_rc == 0) {
        rt_group_next op;
        memset(&op, 0, sizeof op);
        s->next_rc = INT_MIN;
        if (rt_group_next_init(&op, g) == 0)
            s->next_rc = RT_POLL_OP(&op, cx) != RT_READY ? INT_MAX /* pending on an empty group */
                                                         : (int)op.result;
        RT_DROP(&op);
        rt_group_join w;
        memset(&w, 0, sizeof w);
        s->wait_rc = INT_MIN;
        if (rt_group_join_all_init(&w, g) == 0) {
            if (RT_POLL_OP(&w, cx) != RT_READY) {
                s->wait_rc = INT_MAX;
            } else {
                s->wait_rc = (int)w.result;
                s->failed = w.failed;
            }
        }
        RT_DROP(&w);
        rt_group_free(g);
    }
    *out = NULL;
    return RT_READY;
}

Test(group, next_on_an_empty_group_waits_until_it_is_closed_and_join_all_is_ready)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    cr_assert_eq(rt_group_len(g), 0);
    rt_group_result res;
    cr_assert_eq(hand_next(rt, g, 0, &res), -ETIMEDOUT, "an empty open group: the next waits");
    size_t failed;
    cr_assert_eq(hand_wait(rt, g, false, -1, &failed, NULL), 0);
    cr_assert_eq(failed, 0);
    cr_assert_eq(hand_wait(rt, g, true, -1, &failed, NULL), 0, "closing an empty group");
    cr_assert_eq(hand_next(rt, g, -1, &res), -ECHILD, "an empty closed group");
    cr_assert_eq(hand_next(rt, g, 50 * MS, &res), -ECHILD, "with a timeout too, at once");
    rt_group_free(g);

    /* The same from inside a task, with the group on rt_current_runtime(). */
    struct in_task_group s = {INT_MIN, INT_MIN, INT_MIN, 99};
    struct in_task_group *sp = &s;
    cr_assert_eq(block_on_status(rt, in_task_group_poll, NULL, &sp, sizeof sp, NULL), 0);
    cr_assert_eq(s.new_rc, 0, "rt_group_new(NULL) in a task: %s", rt_strerror(s.new_rc));
    cr_assert_eq(s.next_rc, INT_MAX, "next in a task on an empty group: %d", s.next_rc);
    cr_assert_eq(s.wait_rc, 0, "join_all in a task: %d", s.wait_rc);
    cr_assert_eq(s.failed, 0);
    finish_runtime(rt, 0);
}

Test(group, bad_arguments_are_einval_and_spawn_nothing)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = NULL;
    cr_assert_eq(rt_group_new(rt, NULL, NULL, NULL), -EINVAL, "out NULL");
    cr_assert_eq(rt_group_new(NULL, NULL, NULL, &g), -EINVAL, "no runtime outside a task");
    g = new_group(rt, false);

    struct child c = {.kind = CHILD_VALUE, .value = 1};
    uint64_t id = 0;
    cr_assert_eq(rt_group_spawn(g, NULL, NULL, child_drop, &c, sizeof c, &id), -EINVAL,
                 "poll NULL");
    cr_assert_eq(rt_group_spawn(g, NULL, child_poll, child_drop, NULL, sizeof c, &id), -EINVAL,
                 "state NULL with size > 0");
    rt_spawn_options opts;
    rt_spawn_options_init(&opts);
    opts.worker = 2; /* two workers: 0 and 1 */
    cr_assert_eq(rt_group_spawn(g, &opts, child_poll, child_drop, &c, sizeof c, &id), -EINVAL,
                 "worker index out of range");
    opts.worker = RT_WORKER_CURRENT;
    cr_assert_eq(rt_group_spawn(g, &opts, child_poll, child_drop, &c, sizeof c, &id), -EINVAL,
                 "RT_WORKER_CURRENT from a thread that is not a worker");
    cr_assert_eq(rt_group_len(g), 0, "a refused spawn was counted as a child");

    rt_group_next op;
    memset(&op, 0, sizeof op);
    rt_context cx = noop_context();
    cr_assert_eq(rt_group_next_init(NULL, g), -EINVAL);
    cr_assert_eq(rt_group_next_init(&op, NULL), -EINVAL);
    /* A failed init leaves the operation finished with its error. */
    cr_assert_eq(RT_POLL_OP(&op, &cx), RT_READY);
    cr_assert_eq(op.result, -EINVAL);
    rt_group_join w;
    memset(&w, 0, sizeof w);
    cr_assert_eq(rt_group_join_all_init(NULL, g), -EINVAL);
    cr_assert_eq(rt_group_join_all_init(&w, NULL), -EINVAL);
    cr_assert_eq(RT_POLL_OP(&w, &cx), RT_READY);
    cr_assert_eq(w.result, -EINVAL);
    memset(&w, 0, sizeof w);
    cr_assert_eq(rt_group_close_init(NULL, g), -EINVAL);
    cr_assert_eq(rt_group_close_init(&w, NULL), -EINVAL);
    cr_assert_eq(RT_POLL_OP(&w, &cx), RT_READY);
    cr_assert_eq(w.result, -EINVAL);
    /* Zero-initialised operations may be dropped. */
    memset(&op, 0, sizeof op);
    memset(&w, 0, sizeof w);
    RT_DROP(&op);
    RT_DROP(&w);

    rt_group_free(NULL); /* a no-op */
    rt_group_free(g);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.spawned, 0, "a refused spawn was counted as spawned");
    cr_assert_eq(atomic_load(&child_drops), 0, "a refused child was dropped");
}

Test(group, spawn_options_make_named_local_children)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    enum { PINNED = 8 };
    int worker[PINNED];
    char name[PINNED][80];
    uint64_t ids[PINNED];
    char buf[16] = "kid";
    for (int i = 0; i < PINNED; i++) {
        rt_spawn_options opts;
        rt_spawn_options_init(&opts);
        opts.name = buf;
        opts.worker = 1;
        worker[i] = -5;
        name[i][0] = '\0';
        struct child c = {.kind = CHILD_VALUE,
                          .value = 9,
                          .yields = 10,
                          .pinned_to = 1,
                          .worker_out = &worker[i],
                          .name_out = name[i]};
        cr_assert_eq(rt_group_spawn(g, &opts, child_poll, child_drop, &c, sizeof c, &ids[i]), 0);
    }
    strcpy(buf, "XXX"); /* the name was copied at spawn */
    for (int k = 0; k < PINNED; k++) {
        rt_group_result res;
        cr_assert_eq(hand_next(rt, g, -1, &res), 0);
        cr_assert_lt(index_of_id(ids, PINNED, res.id), PINNED);
        cr_assert_eq(res.value, (void *)9);
    }
    for (int i = 0; i < PINNED; i++) {
        cr_assert_eq(worker[i], 1, "child %d pinned to worker 1 first ran on %d", i, worker[i]);
        cr_assert_str_eq(name[i], "kid");
    }
    cr_assert_eq(atomic_load(&child_off_worker), 0,
                 "%d polls of children pinned to worker 1 ran "
                 "elsewhere",
                 atomic_load(&child_off_worker));
    rt_group_free(g);
    finish_runtime(rt, 0);
}

/* ---- join_all ---------------------------------------------------------------- */

#define JOIN_N 6

Test(group, join_all_waits_for_every_child_and_hands_the_results_to_dispose)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, true);
    struct gate gate;
    gate_init(&gate);
    for (int i = 0; i < JOIN_N; i++) {
        struct child c = {.kind = CHILD_BOX, .index = i, .yields = i * 3};
        spawn_child(g, &c);
    }
    struct child last = {.kind = CHILD_GATED, .index = JOIN_N, .value = 0, .gate = &gate};
    spawn_child(g, &last);
    cr_assert(event_wait_for(&child_polled, JOIN_N + 1));

    /* The gated child holds the group: a join_all in an rt_timeout times
     * out, and may be waited on again. */
    size_t failed = 12345;
    int64_t t0 = rt_now_ns();
    cr_assert_eq(hand_wait(rt, g, false, 30 * MS, &failed, NULL), -ETIMEDOUT);
    cr_assert_geq(rt_now_ns() - t0, 30 * MS - 1 * MS, "join_all timed out early");
    cr_assert_geq(rt_group_len(g), 1, "the gated child is still running");
    cr_assert_lt(atomic_load(&child_drops), JOIN_N + 1, "the gated child finished");

    gate_open(&gate);
    cr_assert_eq(hand_wait(rt, g, false, -1, &failed, NULL), 0);
    cr_assert_eq(failed, 0, "%zu children failed", failed);
    cr_assert_eq(rt_group_len(g), 0);
    cr_assert_eq(atomic_load(&child_drops), JOIN_N + 1,
                 "join_all was ready before every child had finished");
    rt_group_free(g);

    /* Every box reached dispose exactly once; the gated child's NULL value
     * is not a box. */
    cr_assert(event_wait_for(&dlog.called, JOIN_N));
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&dlog.boxes), JOIN_N, "dispose got %d boxes",
                 atomic_load(&dlog.boxes));
    cr_assert_eq(atomic_load(&dlog.bad), 0);
    cr_assert_eq(atomic_load(&dlog.indices), (1ul << JOIN_N) - 1);
    cr_assert_eq(atomic_load(&child_drops), JOIN_N + 1);
}

/* ---- timeouts ----------------------------------------------------------------- */

Test(group, next_with_a_timeout_reports_etimedout_and_the_child_is_still_collectable)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    struct gate gate;
    gate_init(&gate);
    struct child c = {.kind = CHILD_GATED, .value = 31337, .gate = &gate};
    uint64_t id = spawn_child(g, &c);
    cr_assert(event_wait_for(&child_polled, 1));

    rt_group_result res = {0, (void *)1, 12345};
    int64_t t0 = rt_now_ns();
    cr_assert_eq(hand_next(rt, g, 50 * MS, &res), -ETIMEDOUT);
    int64_t elapsed = rt_now_ns() - t0;
    cr_assert_geq(elapsed, 50 * MS, "timed out after %lld ns only", (long long)elapsed);
    cr_assert_lt(elapsed, 5 * SEC, "the timeout took %lld ns", (long long)elapsed);
    cr_assert_eq(rt_group_len(g), 1, "the timed-out wait collected something");
    cr_assert_eq(atomic_load(&child_drops), 0);

    /* A zero timeout with nothing finished: -ETIMEDOUT too. */
    cr_assert_eq(hand_next(rt, g, 0, &res), -ETIMEDOUT);

    gate_open(&gate);
    cr_assert_eq(hand_next(rt, g, 10 * SEC, &res), 0);
    cr_assert_eq(res.id, id);
    cr_assert_eq(res.value, (void *)31337);
    cr_assert_eq(res.status, 0);
    assert_group_drained(rt, g);
    rt_group_free(g);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&child_drops), 1);
}

/* ---- dispose ------------------------------------------------------------------ */

#define DISPOSE_N 5

Test(group, dispose_receives_every_result_nobody_collected)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = NULL;
    cr_assert_eq(rt_group_new(rt, dispose_box, &dlog, &g), 0);
    uint64_t ids[DISPOSE_N];
    for (int i = 0; i < DISPOSE_N; i++) {
        struct child c = {.kind = CHILD_BOX, .index = i, .yields = i};
        ids[i] = spawn_child(g, &c);
    }
    cr_assert(event_wait_for(&child_dropped, DISPOSE_N));
    cr_assert_eq(rt_group_len(g), DISPOSE_N, "finished, uncollected children are counted");

    /* Collect two and free their boxes ourselves. */
    unsigned long collected = 0;
    for (int k = 0; k < 2; k++) {
        rt_group_result res;
        cr_assert_eq(hand_next(rt, g, -1, &res), 0);
        size_t i = index_of_id(ids, DISPOSE_N, res.id);
        cr_assert_lt(i, DISPOSE_N);
        struct box *b = res.value;
        cr_assert_not_null(b);
        cr_assert_eq(b->magic, BOX_MAGIC);
        cr_assert_eq((size_t)b->index, i, "child %zu returned box %d", i, b->index);
        collected |= 1ul << b->index;
        free(b);
    }
    cr_assert_eq(rt_group_len(g), DISPOSE_N - 2);
    cr_assert_eq(atomic_load(&dlog.boxes), 0, "dispose ran while the group was alive");

    rt_group_free(g);
    cr_assert(event_wait_for(&dlog.called, DISPOSE_N - 2));
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&dlog.boxes), DISPOSE_N - 2, "dispose got %d boxes",
                 atomic_load(&dlog.boxes));
    cr_assert_eq(atomic_load(&dlog.nulls), 0);
    cr_assert_eq(atomic_load(&dlog.bad), 0);
    cr_assert_eq(atomic_load(&dlog.indices) | collected, (1ul << DISPOSE_N) - 1);
    cr_assert_eq(atomic_load(&dlog.indices) & collected, 0, "a collected result was disposed");
}

/* ---- corner cases ------------------------------------------------------------- */

#define RACE_N 3000

struct racing_spawner {
    rt_group *g;
    uint64_t ids[RACE_N];
    int bad_spawns; /* failing spawns to make instead (an invalid worker) */
    int failures;   /* of those, how many failed as they must */
};

static void *racing_spawner_thread(void *arg)
{
    struct racing_spawner *s = arg;
    if (s->bad_spawns > 0) {
        rt_spawn_options opts;
        rt_spawn_options_init(&opts);
        opts.worker = 1 << 20;
        struct child c = {.kind = CHILD_VALUE, .value = 1};
        for (int i = 0; i < s->bad_spawns; i++)
            if (rt_group_spawn(s->g, &opts, child_poll, child_drop, &c, sizeof c, NULL) == -EINVAL)
                __atomic_fetch_add(&s->failures, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    for (int i = 0; i < RACE_N; i++) {
        struct child c = {.kind = CHILD_VALUE, .index = i, .value = (uintptr_t)i + 1};
        cr_assert_eq(rt_group_spawn(s->g, NULL, child_poll, child_drop, &c, sizeof c, &s->ids[i]),
                     0);
    }
    return NULL;
}

Test(group, ids_from_spawn_match_children_collected_while_they_are_spawned)
{
    /* Children finish at once and the owner collects (and frees their
     * records) while a foreign thread is still inside rt_group_spawn: the
     * id it returns must not be read from the freed record. */
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    struct racing_spawner *s = calloc(1, sizeof *s);
    s->g = g;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, racing_spawner_thread, s), 0);
    uint64_t *collected = calloc(RACE_N, sizeof *collected);
    size_t n = 0;
    while (n < RACE_N) {
        rt_group_result res;
        int err = hand_next(rt, g, -1, &res); /* empty for a moment: it waits */
        cr_assert_eq(err, 0);
        cr_assert_eq(res.status, 0);
        collected[n++] = res.id;
    }
    pthread_join(th, NULL);
    qsort(collected, RACE_N, sizeof *collected, compare_u64);
    qsort(s->ids, RACE_N, sizeof *s->ids, compare_u64);
    for (size_t i = 0; i < RACE_N; i++)
        cr_assert_eq(collected[i], s->ids[i], "id %zu: collected %llu, spawn returned %llu", i,
                     (unsigned long long)collected[i], (unsigned long long)s->ids[i]);
    cr_assert(ids_unique_nonzero(s->ids, RACE_N));
    free(collected);
    free(s);
    rt_group_free(g);
    finish_runtime(rt, 0);
}

Test(group, a_spawn_that_fails_wakes_an_owner_that_saw_its_child_counted)
{
    /* A failing spawn lists its child for a moment: an owner joining the
     * group in that moment waits for it, and must be woken when the child
     * is taken back. */
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    struct racing_spawner *s = calloc(1, sizeof *s);
    s->g = g;
    s->bad_spawns = 200000;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, racing_spawner_thread, s), 0);
    rt_context cx = hand_context();
    int pending = 0;
    rt_group_join op;
    for (;;) {
        memset(&op, 0, sizeof op);
        cr_assert_eq(rt_group_join_all_init(&op, g), 0);
        unsigned long seen = event_count(&hand_woken);
        rt_poll r = RT_POLL_OP(&op, &cx);
        if (r == RT_PENDING) {
            pending++;
            cr_assert(event_wait_for_s(&hand_woken, seen + 1, 10),
                      "the owner waited on a child whose spawn failed and was never woken");
        } else {
            cr_assert_eq(op.result, 0);
        }
        RT_DROP(&op);
        if (r == RT_READY && __atomic_load_n(&s->failures, __ATOMIC_RELAXED) == s->bad_spawns)
            break;
        if (r == RT_READY)
            sched_yield();
    }
    pthread_join(th, NULL);
    cr_assert_eq(s->failures, s->bad_spawns);
    cr_log_info("the owner waited %d times in a failing spawn's window", pending);
    free(s);
    rt_group_free(g);
    finish_runtime(rt, 0);
}
