/* The hand-polled group operations, boxes and children of support_group.h,
 * shared by the group suites. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support_group.h"

#include <string.h>

struct event hand_woken = EVENT_INIT;

rt_context hand_context(void)
{
    return event_context(&hand_woken);
}

/* Polls op (the timeout t around it when timed) by hand until ready and
 * returns the result. */
static int64_t hand_poll(rt_future *op, rt_timeout *t, bool timed, const char *what)
{
    rt_future *f = timed ? &t->future : op;
    rt_context cx = hand_context();
    for (;;) {
        unsigned long seen = event_count(&hand_woken);
        if (rt_future_poll(f, &cx) == RT_READY)
            break;
        cr_assert(event_wait_for(&hand_woken, seen + 1),
                  "%s returned pending and never woke its waker", what);
    }
    int64_t result = f->result;
    /* Finished: polled again it reports the same, and drops do nothing. */
    cr_assert_eq(rt_future_poll(f, &cx), RT_READY, "%s: a second poll", what);
    cr_assert_eq(f->result, result, "%s: a second poll changed the result", what);
    rt_future_drop(f);
    rt_future_drop(f); /* idempotent */
    cr_assert_eq(f->result, result, "%s: a drop after RT_READY changed the result", what);
    if (timed) {
        cr_assert(rt_future_is_done(op), "%s: the timeout left its inner operation running", what);
        if (result == -ETIMEDOUT || result == -ENOMEM || result == -ESHUTDOWN)
            cr_assert_eq(op->result, -ECANCELED, "%s: the limit ended it (%s), but it has %lld",
                         what, rt_strerror((int)result), (long long)op->result);
        else
            cr_assert_eq(op->result, result, "%s: the timeout changed the result", what);
    }
    return result;
}

int hand_next(rt_runtime *rt, rt_group *g, int64_t timeout_ns, rt_group_result *res)
{
    rt_group_next op;
    memset(&op, 0, sizeof op);
    int rc = rt_group_next_init(&op, g);
    cr_assert_eq(rc, 0, "rt_group_next_init: %s", rt_strerror(rc));
    rt_timeout t;
    memset(&t, 0, sizeof t);
    bool timed = timeout_ns >= 0;
    if (timed) {
        rc = rt_timeout_init(&t, rt, &op.future, timeout_ns);
        cr_assert_eq(rc, 0, "rt_timeout_init: %s", rt_strerror(rc));
    }
    int64_t result = hand_poll(&op.future, &t, timed, "rt_group_next");
    if (result == 0)
        *res = op.child;
    return (int)result;
}

void assert_group_drained(rt_runtime *rt, rt_group *g)
{
    rt_group_result res;
    cr_assert_eq(hand_next(rt, g, 0, &res), -ETIMEDOUT,
                 "a next on an empty open group did not wait");
    size_t failed;
    cr_assert_eq(hand_wait(rt, g, true, -1, &failed, NULL), 0);
    cr_assert_eq(hand_next(rt, g, -1, &res), -ECHILD, "a next on an empty closed group");
}

int hand_wait(rt_runtime *rt, rt_group *g, bool closing, int64_t timeout_ns, size_t *failed,
              size_t *cancelled)
{
    rt_group_join op;
    memset(&op, 0, sizeof op);
    int rc = closing ? rt_group_close_init(&op, g) : rt_group_join_all_init(&op, g);
    cr_assert_eq(rc, 0, "wait init: %s", rt_strerror(rc));
    rt_timeout t;
    memset(&t, 0, sizeof t);
    bool timed = timeout_ns >= 0;
    if (timed) {
        rc = rt_timeout_init(&t, rt, &op.future, timeout_ns);
        cr_assert_eq(rc, 0, "rt_timeout_init: %s", rt_strerror(rc));
    }
    *failed = (size_t)-1;
    if (cancelled != NULL)
        *cancelled = (size_t)-1;
    int64_t result =
        hand_poll(&op.future, &t, timed, closing ? "rt_group_close" : "rt_group_join_all");
    if (result == 0) {
        *failed = op.failed;
        if (cancelled != NULL)
            *cancelled = op.cancelled;
    }
    return (int)result;
}

static void *box_new(int index)
{
    struct box *b = malloc(sizeof *b);
    if (b != NULL) {
        b->magic = BOX_MAGIC;
        b->index = index;
    }
    return b;
}

struct dispose_log dlog = {0, 0, 0, 0, EVENT_INIT};

void dispose_box(void *value, void *arg)
{
    struct dispose_log *log = arg;
    if (value == NULL) {
        atomic_fetch_add(&log->nulls, 1);
    } else {
        struct box *b = value;
        if (b->magic != BOX_MAGIC || b->index < 0 || b->index >= 64) {
            atomic_fetch_add(&log->bad, 1);
        } else {
            atomic_fetch_or(&log->indices, 1ul << b->index);
            b->magic = 0;
            free(b);
        }
        atomic_fetch_add(&log->boxes, 1);
        event_signal(&log->called);
    }
}

static atomic_int child_first_polls;
atomic_int child_drops;
atomic_int child_off_worker;
struct event child_polled = EVENT_INIT;
struct event child_dropped = EVENT_INIT;

rt_poll child_poll(void *state, rt_context *cx, void **out)
{
    struct child *c = state;
    bool open = true;
    if (c->kind == CHILD_GATED)
        open = gate_pass(c->gate, cx);
    if (c->worker_out != NULL && rt_current_worker() != c->pinned_to)
        atomic_fetch_add(&child_off_worker, 1);
    if (!c->polled) {
        c->polled = true;
        if (c->worker_out != NULL)
            *c->worker_out = rt_current_worker();
        if (c->name_out != NULL) {
            const char *name = rt_current_task_name();
            snprintf(c->name_out, 80, "%s", name != NULL ? name : "(null)");
        }
        atomic_fetch_add(&child_first_polls, 1);
        event_signal(&child_polled);
    }
    if (c->kind == CHILD_FOREVER || !open)
        return RT_PENDING;
    if (c->yields > 0) {
        c->yields--;
        return rt_yield(cx);
    }
    *out = c->kind == CHILD_BOX ? box_new(c->index) : (void *)c->value;
    return RT_READY;
}

void child_drop(void *state)
{
    struct child *c = state;
    if (c->kind == CHILD_GATED)
        gate_clear(c->gate);
    free(c->buf);
    c->buf = NULL;
    atomic_fetch_add(&child_drops, 1);
    event_signal(&child_dropped);
}

uint64_t spawn_child(rt_group *g, const struct child *c)
{
    uint64_t id = 0;
    int rc = rt_group_spawn(g, NULL, child_poll, child_drop, c, sizeof *c, &id);
    cr_assert_eq(rc, 0, "rt_group_spawn: %s", rt_strerror(rc));
    cr_assert_neq(id, 0, "rt_group_spawn gave the child id 0");
    return id;
}

rt_group *new_group(rt_runtime *rt, bool with_dispose)
{
    rt_group *g = NULL;
    int rc =
        with_dispose ? rt_group_new(rt, dispose_box, &dlog, &g) : rt_group_new(rt, NULL, NULL, &g);
    cr_assert_eq(rc, 0, "rt_group_new: %s", rt_strerror(rc));
    cr_assert_not_null(g);
    return g;
}

size_t index_of_id(const uint64_t *ids, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return i;
    return n;
}
