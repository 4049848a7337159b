/* Black-box tests of ending a task group early (asyncrt/group.h): cancel
 * (running children come back -ECANCELED, each dropped exactly once), close
 * (cancel and wait, later spawns refused with -EPIPE, awaited from the owner
 * task), nested groups freed from a child's drop function (cancelling the
 * outer group cancels the whole tree), rt_group_free from the drop function
 * of an aborted owner, and runtime shutdown with groups in flight. Nothing
 * may leak (LeakSanitizer in the sanitizer build). */
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
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

TestSuite(group, .timeout = 90, .fini = fail_on_leaks);

/* ---- cancel ------------------------------------------------------------------ */

#define CANCEL_N 6

Test(group, cancel_makes_running_children_come_back_ecanceled_each_dropped_once)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    struct gate gates[CANCEL_N];
    uint64_t ids[CANCEL_N];
    for (int i = 0; i < CANCEL_N; i++) {
        gate_init(&gates[i]);
        /* Half wait behind a gate that never opens (holding a waker), half
         * store no waker at all. */
        struct child c = {.kind = i % 2 ? CHILD_GATED : CHILD_FOREVER,
                          .index = i,
                          .gate = &gates[i],
                          .buf = malloc(32)};
        ids[i] = spawn_child(g, &c);
    }
    cr_assert(event_wait_for(&child_polled, CANCEL_N), "the children were not all polled");
    cr_assert_eq(atomic_load(&child_drops), 0);

    rt_group_cancel(g);
    /* Cancelled children are still collected, by next. */
    bool seen[CANCEL_N] = {false};
    for (int k = 0; k < CANCEL_N; k++) {
        rt_group_result res = {0, (void *)1, 12345};
        cr_assert_eq(hand_next(rt, g, -1, &res), 0);
        size_t i = index_of_id(ids, CANCEL_N, res.id);
        cr_assert_lt(i, CANCEL_N, "next returned an unknown id %llu", (unsigned long long)res.id);
        cr_assert_not(seen[i], "child %zu collected twice", i);
        seen[i] = true;
        cr_assert_eq(res.status, -ECANCELED, "child %zu: status %d", i, res.status);
        cr_assert_null(res.value);
    }
    rt_group_result res;
    cr_assert_eq(hand_next(rt, g, 0, &res), -ETIMEDOUT, "nothing left to collect: the next waits");
    cr_assert(event_wait_for(&child_dropped, CANCEL_N));
    cr_assert_eq(atomic_load(&child_drops), CANCEL_N);

    /* The group stays usable: a child spawned after the cancel runs. */
    struct child later = {.kind = CHILD_VALUE, .value = 4242, .yields = 2};
    uint64_t later_id = spawn_child(g, &later);
    cr_assert_eq(hand_next(rt, g, -1, &res), 0);
    cr_assert_eq(res.id, later_id);
    cr_assert_eq(res.status, 0);
    cr_assert_eq(res.value, (void *)4242);

    /* join_all counts the cancelled children apart from the failed ones. */
    for (int i = 0; i < 3; i++) {
        struct child c = {.kind = CHILD_FOREVER, .index = i};
        spawn_child(g, &c);
    }
    cr_assert(event_wait_for(&child_polled, CANCEL_N + 1 + 3));
    rt_group_cancel(g);
    rt_group_cancel(g); /* twice is fine */
    size_t failed = 99, cancelled = 0;
    cr_assert_eq(hand_wait(rt, g, false, -1, &failed, &cancelled), 0);
    cr_assert_eq(cancelled, 3, "join_all counted %zu cancelled, expected 3", cancelled);
    cr_assert_eq(failed, 0, "join_all counted %zu cancelled children as failed", failed);
    rt_group_free(g);

    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&child_drops), CANCEL_N + 1 + 3, "drops: %d",
                 atomic_load(&child_drops));
    cr_assert_eq(m.cancelled, CANCEL_N + 3, "metrics: cancelled %llu",
                 (unsigned long long)m.cancelled);
    cr_assert_eq(m.completed, 1, "metrics: completed %llu", (unsigned long long)m.completed);
}

/* ---- close ------------------------------------------------------------------- */

struct closer_report {
    int spawn_rc;
    int close_rc;
    int epipe_rc;
    size_t failed, cancelled;
    int drops_at_close;
    size_t len_at_close;
};

struct closer {
    rt_coro co;
    rt_group *g;
    rt_group_join w;
    int k;
    struct closer_report *r;
};

/* Spawns three children that never finish, closes the group (awaiting it),
 * then tries one more spawn. */
static rt_poll closer_poll(void *state, rt_context *cx, void **out)
{
    struct closer *s = state;
    RT_CORO_BEGIN(&s->co);
    for (s->k = 0; s->k < 3; s->k++) {
        struct child c = {.kind = CHILD_FOREVER, .index = s->k};
        s->r->spawn_rc = rt_group_spawn(s->g, NULL, child_poll, child_drop, &c, sizeof c, NULL);
        if (s->r->spawn_rc != 0)
            RT_RETURN(&s->co, out, 0);
    }
    RT_CORO_YIELD(&s->co, cx);
    if (rt_group_close_init(&s->w, s->g) != 0)
        RT_RETURN(&s->co, out, 0);
    RT_AWAIT(&s->co, cx, &s->w);
    s->r->close_rc = (int)s->w.result;
    if (s->w.result == 0) {
        s->r->failed = s->w.failed;
        s->r->cancelled = s->w.cancelled;
    }
    RT_DROP(&s->w); /* finished: nothing to do */
    s->r->drops_at_close = atomic_load(&child_drops);
    s->r->len_at_close = rt_group_len(s->g);
    {
        struct child c = {.kind = CHILD_VALUE};
        s->r->epipe_rc = rt_group_spawn(s->g, NULL, child_poll, child_drop, &c, sizeof c, NULL);
    }
    RT_RETURN(&s->co, out, 1);
    RT_CORO_END(&s->co, out);
}

static void closer_drop(void *state)
{
    struct closer *s = state;
    RT_DROP(&s->w);
}

Test(group, close_cancels_and_awaits_the_children_then_refuses_spawns_with_epipe)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, true);
    /* Two children finish by themselves and stay uncollected; four never do. */
    for (int i = 0; i < 2; i++) {
        struct child c = {.kind = CHILD_BOX, .index = i};
        spawn_child(g, &c);
    }
    for (int i = 2; i < 6; i++) {
        struct child c = {.kind = CHILD_FOREVER, .index = i, .buf = malloc(16)};
        spawn_child(g, &c);
    }
    cr_assert(event_wait_for(&child_polled, 6));
    cr_assert(event_wait_for(&child_dropped, 2));

    size_t failed = 12345, cancelled = 0;
    cr_assert_eq(hand_wait(rt, g, true, -1, &failed, &cancelled), 0);
    cr_assert_eq(cancelled, 4, "close counted %zu cancelled children, expected 4", cancelled);
    cr_assert_eq(failed, 0, "close counted %zu failed", failed);
    /* When close is ready, nothing spawned into the group runs any more. */
    cr_assert_eq(atomic_load(&child_drops), 6, "close was ready with children not dropped");
    cr_assert_eq(rt_group_len(g), 0);

    struct child c = {.kind = CHILD_VALUE};
    uint64_t id = 0;
    cr_assert_eq(rt_group_spawn(g, NULL, child_poll, child_drop, &c, sizeof c, &id), -EPIPE);
    cr_assert_eq(rt_group_spawn(g, NULL, child_poll, child_drop, &c, sizeof c, NULL), -EPIPE);
    rt_group_free(g);
    cr_assert(event_wait_for(&dlog.called, 2));

    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.spawned, 6, "a refused spawn was counted");
    cr_assert_eq(atomic_load(&child_drops), 6, "a refused spawn was dropped");
    /* The two finished children's boxes reached dispose (cancelled children
     * have no value to dispose of). */
    cr_assert_eq(atomic_load(&dlog.boxes), 2, "dispose got %d boxes", atomic_load(&dlog.boxes));
    cr_assert_eq(atomic_load(&dlog.indices), 3ul);
    cr_assert_eq(atomic_load(&dlog.bad), 0);
}

Test(group, close_awaited_from_the_owner_task)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    struct closer_report r = {INT_MIN, INT_MIN, INT_MIN, 12345, 12345, -1, 12345};
    struct closer s;
    memset(&s, 0, sizeof s);
    s.g = g;
    s.r = &r;
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, closer_poll, closer_drop, &s, sizeof s, &value), 0);
    cr_assert_eq(value, (void *)1, "the owner stopped early (spawn: %d)", r.spawn_rc);
    cr_assert_eq(r.close_rc, 0, "close: %d", r.close_rc);
    cr_assert_eq(r.cancelled, 3, "close counted %zu cancelled", r.cancelled);
    cr_assert_eq(r.failed, 0, "close counted %zu failed", r.failed);
    cr_assert_eq(r.drops_at_close, 3, "close was ready with %d of 3 children dropped",
                 r.drops_at_close);
    cr_assert_eq(r.len_at_close, 0);
    cr_assert_eq(r.epipe_rc, -EPIPE, "spawn after close from the owner: %d", r.epipe_rc);
    struct child c = {.kind = CHILD_VALUE};
    cr_assert_eq(rt_group_spawn(g, NULL, child_poll, child_drop, &c, sizeof c, NULL), -EPIPE);
    rt_group_free(g);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&child_drops), 3);
    cr_assert_eq(m.cancelled, 3, "metrics: cancelled %llu", (unsigned long long)m.cancelled);
    cr_assert_eq(m.spawned, 4, "three children and the owner");
}

/* ---- nested groups ----------------------------------------------------------- */

#define NEST_MID 3
#define NEST_GRAND 4

static atomic_int grand_alive;
static atomic_int mid_drops;
static atomic_int mid_errors;
static struct event grand_polled = EVENT_INIT;
static struct event grand_dropped = EVENT_INIT;
static struct event mid_ready = EVENT_INIT;

static rt_poll grand_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    (void)out;
    bool *polled = state;
    if (!*polled) {
        *polled = true;
        event_signal(&grand_polled);
    }
    return RT_PENDING; /* forever; no waker kept */
}

static void grand_drop(void *state)
{
    (void)state;
    atomic_fetch_sub(&grand_alive, 1);
    event_signal(&grand_dropped);
}

/* A child that owns a group of grandchildren and waits on it; its drop
 * function frees that group. */
struct mid {
    rt_coro co;
    rt_group *inner;
    rt_group_next op;
    int k;
};

static rt_poll mid_poll(void *state, rt_context *cx, void **out)
{
    struct mid *m = state;
    RT_CORO_BEGIN(&m->co);
    if (rt_group_new(NULL, NULL, NULL, &m->inner) != 0) {
        atomic_fetch_add(&mid_errors, 1);
        RT_RETURN(&m->co, out, NULL);
    }
    for (m->k = 0; m->k < NEST_GRAND; m->k++) {
        bool polled = false;
        if (rt_group_spawn(m->inner, NULL, grand_poll, grand_drop, &polled, sizeof polled, NULL) !=
            0)
            atomic_fetch_add(&mid_errors, 1);
        else
            atomic_fetch_add(&grand_alive, 1);
    }
    if (rt_group_next_init(&m->op, m->inner) != 0) {
        atomic_fetch_add(&mid_errors, 1);
        event_signal(&mid_ready);
        RT_RETURN(&m->co, out, NULL);
    }
    event_signal(&mid_ready);
    RT_AWAIT(&m->co, cx, &m->op);
    /* Not reached: the grandchildren never finish. */
    atomic_fetch_add(&mid_errors, 1);
    RT_RETURN(&m->co, out, NULL);
    RT_CORO_END(&m->co, out);
}

static void mid_drop(void *state)
{
    struct mid *m = state;
    RT_DROP(&m->op);
    rt_group_free(m->inner);
    m->inner = NULL;
    atomic_fetch_add(&mid_drops, 1);
}

Test(group, cancelling_the_outer_group_cancels_the_grandchildren)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *outer = new_group(rt, false);
    uint64_t ids[NEST_MID];
    for (int i = 0; i < NEST_MID; i++) {
        struct mid m;
        memset(&m, 0, sizeof m);
        cr_assert_eq(rt_group_spawn(outer, NULL, mid_poll, mid_drop, &m, sizeof m, &ids[i]), 0);
    }
    cr_assert(event_wait_for(&mid_ready, NEST_MID));
    cr_assert(event_wait_for(&grand_polled, NEST_MID * NEST_GRAND));
    cr_assert_eq(atomic_load(&mid_errors), 0);
    cr_assert_eq(atomic_load(&grand_alive), NEST_MID * NEST_GRAND);
    cr_assert_eq(rt_group_len(outer), NEST_MID);

    rt_group_cancel(outer);
    for (int k = 0; k < NEST_MID; k++) {
        rt_group_result res = {0, (void *)1, 0};
        cr_assert_eq(hand_next(rt, outer, -1, &res), 0);
        cr_assert_lt(index_of_id(ids, NEST_MID, res.id), NEST_MID);
        cr_assert_eq(res.status, -ECANCELED);
        cr_assert_null(res.value);
    }
    cr_assert_eq(atomic_load(&mid_drops), NEST_MID);
    cr_assert(event_wait_for(&grand_dropped, NEST_MID * NEST_GRAND),
              "only %lu of %d grandchildren were dropped after the outer cancel",
              event_count(&grand_dropped), NEST_MID * NEST_GRAND);
    cr_assert_eq(atomic_load(&grand_alive), 0);
    assert_group_drained(rt, outer);
    rt_group_free(outer);

    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.spawned, NEST_MID + NEST_MID * NEST_GRAND, "metrics: spawned %llu",
                 (unsigned long long)m.spawned);
    cr_assert_eq(m.cancelled, NEST_MID + NEST_MID * NEST_GRAND, "metrics: cancelled %llu",
                 (unsigned long long)m.cancelled);
    cr_assert_eq(m.completed, 0, "metrics: completed %llu", (unsigned long long)m.completed);
    cr_assert_eq(atomic_load(&mid_drops), NEST_MID);
    cr_assert_eq(event_count(&grand_dropped), NEST_MID * NEST_GRAND, "a grandchild dropped twice");
    cr_assert_eq(atomic_load(&mid_errors), 0);
}

/* ---- rt_group_free from the owner's drop --------------------------------------- */

#define OWNER_FOREVER 3
#define OWNER_BOXES 2

static atomic_int owner_drops;
static atomic_int owner_errors;
static struct event owner_ready = EVENT_INIT;

struct owner {
    rt_group *g;
    bool started;
};

/* Makes a group, spawns children that never finish and children that finish
 * with boxes it never collects, then waits for ever (no waker kept). */
static rt_poll owner_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    (void)out;
    struct owner *o = state;
    if (o->started)
        return RT_PENDING;
    o->started = true;
    if (rt_group_new(NULL, dispose_box, &dlog, &o->g) != 0) {
        atomic_fetch_add(&owner_errors, 1);
        event_signal(&owner_ready);
        return RT_PENDING;
    }
    for (int i = 0; i < OWNER_FOREVER + OWNER_BOXES; i++) {
        struct child c = {
            .kind = i < OWNER_FOREVER ? CHILD_FOREVER : CHILD_BOX, .index = i, .buf = malloc(24)};
        if (rt_group_spawn(o->g, NULL, child_poll, child_drop, &c, sizeof c, NULL) != 0) {
            free(c.buf);
            atomic_fetch_add(&owner_errors, 1);
        }
    }
    event_signal(&owner_ready);
    return RT_PENDING;
}

static void owner_drop(void *state)
{
    struct owner *o = state;
    rt_group_free(o->g);
    o->g = NULL;
    atomic_fetch_add(&owner_drops, 1);
}

Test(group, free_from_the_drop_of_an_aborted_owner_cancels_the_children_and_disposes)
{
    rt_runtime *rt = new_runtime(2);
    struct owner o = {NULL, false};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, owner_poll, owner_drop, &o, &task), 0);
    cr_assert(event_wait_for(&owner_ready, 1));
    cr_assert_eq(atomic_load(&owner_errors), 0);
    cr_assert(event_wait_for(&child_polled, OWNER_FOREVER + OWNER_BOXES));
    cr_assert(event_wait_for(&child_dropped, OWNER_BOXES), "the boxed children did not finish");

    rt_task_cancel(task);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&owner_drops), 1);
    cr_assert(event_wait_for(&child_dropped, OWNER_FOREVER + OWNER_BOXES),
              "the children of the freed group were not all dropped");
    cr_assert(event_wait_for(&dlog.called, OWNER_BOXES),
              "the uncollected boxes never reached dispose");

    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&child_drops), OWNER_FOREVER + OWNER_BOXES);
    cr_assert_eq(atomic_load(&owner_drops), 1);
    cr_assert_eq(m.cancelled, OWNER_FOREVER + 1, "metrics: cancelled %llu",
                 (unsigned long long)m.cancelled);
    cr_assert_eq(m.completed, OWNER_BOXES, "metrics: completed %llu",
                 (unsigned long long)m.completed);
    cr_assert_eq(atomic_load(&dlog.boxes), OWNER_BOXES);
    cr_assert_eq(atomic_load(&dlog.indices), ((1ul << OWNER_BOXES) - 1) << OWNER_FOREVER);
    cr_assert_eq(atomic_load(&dlog.bad), 0);
}

/* ---- shutdown with groups in flight --------------------------------------------- */

Test(group, shutdown_with_groups_in_flight_cancels_everything_and_leaks_nothing)
{
    rt_runtime *rt = new_runtime(2);
    /* A: three children that never finish, owned by the test thread. */
    rt_group *a = new_group(rt, true);
    uint64_t a_ids[3];
    struct gate gates[3];
    for (int i = 0; i < 3; i++) {
        gate_init(&gates[i]);
        struct child c = {.kind = i == 1 ? CHILD_GATED : CHILD_FOREVER,
                          .index = i,
                          .gate = &gates[i],
                          .buf = malloc(40)};
        a_ids[i] = spawn_child(a, &c);
    }
    /* B: two finished children whose boxes nobody collected. */
    rt_group *b = new_group(rt, true);
    for (int i = 0; i < 2; i++) {
        struct child c = {.kind = CHILD_BOX, .index = 10 + i, .yields = 1};
        spawn_child(b, &c);
    }
    /* C: a task owning a group with three forever children and two boxes. */
    struct owner o = {NULL, false};
    cr_assert_eq(RT_SPAWN_STATE(rt, owner_poll, owner_drop, &o, NULL), 0);
    cr_assert(event_wait_for(&owner_ready, 1));
    cr_assert_eq(atomic_load(&owner_errors), 0);
    cr_assert(event_wait_for(&child_polled, 3 + 2 + OWNER_FOREVER + OWNER_BOXES));
    cr_assert(event_wait_for(&child_dropped, 2 + OWNER_BOXES));

    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_eq(cancelled, 3 + OWNER_FOREVER + 1,
                 "shutdown cancelled %d tasks: expected A's 3, C's %d and C itself", cancelled,
                 OWNER_FOREVER);
    cr_assert_eq(atomic_load(&owner_drops), 1);
    cr_assert_eq(atomic_load(&child_drops), 3 + 2 + OWNER_FOREVER + OWNER_BOXES);

    /* The groups owned by the test thread are still to be ended. A spawn
     * into one now fails as rt_spawn would. */
    struct child c = {.kind = CHILD_VALUE};
    cr_assert_eq(rt_group_spawn(a, NULL, child_poll, child_drop, &c, sizeof c, NULL), -ESHUTDOWN);
    /* A's children were cancelled by the shutdown: they are collected so. */
    for (int k = 0; k < 3; k++) {
        rt_group_result res = {0, (void *)1, 0};
        cr_assert_eq(hand_next(rt, a, -1, &res), 0);
        cr_assert_lt(index_of_id(a_ids, 3, res.id), 3);
        cr_assert_eq(res.status, -ECANCELED);
        cr_assert_null(res.value);
    }
    assert_group_drained(rt, a);
    rt_group_free(a);
    rt_group_free(b);

    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.alive, 0);
    cr_assert_eq(m.cancelled, 3 + OWNER_FOREVER + 1, "metrics: cancelled %llu",
                 (unsigned long long)m.cancelled);
    cr_assert_eq(m.completed, 2 + OWNER_BOXES, "metrics: completed %llu",
                 (unsigned long long)m.completed);
    cr_assert_eq(rt_runtime_free(rt), 0);
    cr_assert_eq(atomic_load(&dlog.boxes), 2 + OWNER_BOXES, "dispose got %d boxes",
                 atomic_load(&dlog.boxes));
    cr_assert_eq(atomic_load(&dlog.bad), 0);
}

/* ---- A cancel that comes before a child's handle is installed ------------ */

/* In debug-yield builds the library has named race windows a test may use
 * (src/base/atomic.h, RT__DEBUG_WINDOW); elsewhere this weak reference is
 * NULL. */
extern void (*volatile rt__debug_window_hook)(const char *window) __attribute__((weak));

static rt_group *_Atomic window_group;

static void cancel_in_window(const char *window)
{
    rt_group *g = atomic_load(&window_group);
    if (g != NULL && strcmp(window, "group.spawn") == 0)
        rt_group_cancel(g);
}

Test(group, a_cancel_between_a_spawn_and_its_handle_still_cancels_the_child)
{
    if (&rt__debug_window_hook == NULL)
        cr_skip_test("the spawn's window is named in debug-yield builds only");
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    rt__debug_window_hook = cancel_in_window;
    atomic_store(&window_group, g);
    /* A child that never finishes by itself: only the cancel made while its
     * spawn had not yet installed its handle can end it. */
    struct child c = {.kind = CHILD_FOREVER};
    spawn_child(g, &c);
    atomic_store(&window_group, NULL);
    rt__debug_window_hook = NULL;
    size_t failed = 99, cancelled = 0;
    cr_assert_eq(hand_wait(rt, g, false, 10 * SEC, &failed, &cancelled), 0,
                 "the child was not cancelled: join_all timed out");
    cr_assert_eq(cancelled, 1);
    cr_assert_eq(failed, 0);
    rt_group_free(g);
    finish_runtime(rt, 0);
}

/* ---- A group freed while a spawn into it is in progress ------------------ */

static rt_group *_Atomic free_window_group;

/* In the spawn's window (the child spawned, its handle not yet installed),
 * the owner frees the group and the child finishes and reports: only the
 * spawn in progress still holds the group then. */
static void free_in_window(const char *window)
{
    rt_group *g = atomic_exchange(&free_window_group, NULL);
    if (g == NULL || strcmp(window, "group.spawn") != 0)
        return;
    rt_group_free(g);
    cr_assert(event_wait_for(&child_dropped, 1), "the child never finished");
    /* Its report follows its drop on the same thread; the spawn's
     * reference keeps the group readable until then. */
    while (rt_group_len(g) > 0)
        sched_yield();
}

Test(group, a_spawn_in_progress_keeps_the_group_while_its_owner_frees_it)
{
    if (&rt__debug_window_hook == NULL)
        cr_skip_test("the spawn's window is named in debug-yield builds only");
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    rt__debug_window_hook = free_in_window;
    atomic_store(&free_window_group, g);
    /* Without its own reference the spawn would lock a freed group once
     * the window ends (ASan reports it; elsewhere memory is corrupted). */
    struct child c = {.kind = CHILD_VALUE, .value = 1};
    spawn_child(g, &c);
    rt__debug_window_hook = NULL;
    cr_assert_null(atomic_load(&free_window_group), "the window was never reached");
    finish_runtime(rt, 0);
}
