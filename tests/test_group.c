/* Black-box tests of asyncrt/group.h: children collected in the order they
 * finish with their ids and values, -ECHILD on an empty group, join_all,
 * cancel (children come back -ECANCELED, each dropped exactly once), close
 * (cancel + wait, later spawns refused with -EPIPE), nested groups freed from
 * a child's drop function (cancelling the outer group cancels the whole tree),
 * timeouts on rt_group_next, the dispose function receiving every result
 * nobody collected, rt_group_free from the drop function of an aborted owner,
 * and runtime shutdown with groups in flight. Nothing may leak (LeakSanitizer
 * in the sanitizer build). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#define TEST_OWN_FINISH_RUNTIME /* this suite has its own, below */
#include "support.h"

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

#define MS (1000000LL)
#define SEC (1000000000LL)

/* Seconds any wait for an event may take before the test reports a hang. */
#define EVENT_DEADLINE_S 30
/* The same bound, for rt_task_wait calls that must not hang the suite. */
#define WAIT_DEADLINE_NS (30LL * SEC)

TestSuite(group, .timeout = 90, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* Shuts the runtime down, checks how many tasks shutdown cancelled (negative:
 * unchecked) and that none is alive, hands the final (exact) metrics to the
 * caller when asked, and frees the runtime. */
static void finish_runtime_metrics(rt_runtime *rt, int expected_cancelled, rt_metrics *final)
{
    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_geq(cancelled, 0, "rt_runtime_shutdown failed: %s", rt_strerror(cancelled));
    if (expected_cancelled >= 0)
        cr_assert_eq(cancelled, expected_cancelled, "shutdown cancelled %d tasks, expected %d",
                     cancelled, expected_cancelled);
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.alive, 0, "%llu tasks still alive after shutdown", (unsigned long long)m.alive);
    if (final != NULL)
        *final = m;
    cr_assert_eq(rt_runtime_free(rt), 0);
}

static void finish_runtime(rt_runtime *rt, int expected_cancelled)
{
    finish_runtime_metrics(rt, expected_cancelled, NULL);
}

/* A door a task waits behind. While it is shut the task's poll stores a clone
 * of its waker here and returns RT_PENDING; opening it wakes that waker. */
struct gate {
    pthread_mutex_t mu;
    bool open;
    bool has_waiter;
    rt_waker waiter;
};

static void gate_init(struct gate *g)
{
    pthread_mutex_init(&g->mu, NULL);
    g->open = false;
    g->has_waiter = false;
    g->waiter = rt_waker_noop();
}

static bool gate_pass(struct gate *g, rt_context *cx)
{
    bool open;
    rt_waker stale = rt_waker_noop();
    pthread_mutex_lock(&g->mu);
    open = g->open;
    if (!open && (!g->has_waiter || !rt_waker_will_wake(&g->waiter, rt_context_waker(cx)))) {
        if (g->has_waiter)
            stale = g->waiter;
        g->waiter = rt_waker_clone(rt_context_waker(cx));
        g->has_waiter = true;
    }
    pthread_mutex_unlock(&g->mu);
    rt_waker_drop(&stale);
    return open;
}

static void gate_open(struct gate *g)
{
    rt_waker w = rt_waker_noop();
    pthread_mutex_lock(&g->mu);
    g->open = true;
    if (g->has_waiter) {
        w = g->waiter;
        g->has_waiter = false;
    }
    pthread_mutex_unlock(&g->mu);
    rt_waker_wake(&w);
}

/* Releases a waker the gate may still hold (a cancelled task leaves one). */
static void gate_clear(struct gate *g)
{
    rt_waker w = rt_waker_noop();
    pthread_mutex_lock(&g->mu);
    if (g->has_waiter) {
        w = g->waiter;
        g->has_waiter = false;
    }
    pthread_mutex_unlock(&g->mu);
    rt_waker_drop(&w);
}

/* A user waker whose data is a struct event: every wake signals it. It keeps
 * no reference count, so clone and drop are free. The test thread uses it to
 * poll group operations by hand. */
static const rt_waker_vtable event_waker_vtable;

static rt_waker event_waker_clone(const void *data)
{
    rt_waker w = {&event_waker_vtable, data};
    return w;
}

static void event_waker_wake(const void *data)
{
    event_signal((struct event *)data);
}

static void event_waker_drop(const void *data)
{
    (void)data;
}

static const rt_waker_vtable event_waker_vtable = {
    event_waker_clone,
    event_waker_wake,
    event_waker_wake,
    event_waker_drop,
};

static struct event hand_woken = EVENT_INIT;

static rt_context hand_context(void)
{
    rt_waker w = {&event_waker_vtable, &hand_woken};
    return rt_context_from_waker(w);
}

/* rt_group_next polled by hand on the test thread until ready. Returns the
 * status the poll reported. */
static int hand_next(rt_group *g, int64_t timeout_ns, rt_group_result *res)
{
    rt_group_next op;
    memset(&op, 0, sizeof op);
    int rc = rt_group_next_init(&op, g, timeout_ns);
    cr_assert_eq(rc, 0, "rt_group_next_init: %s", rt_strerror(rc));
    rt_context cx = hand_context();
    int err = INT_MIN;
    for (;;) {
        unsigned long seen = event_count(&hand_woken);
        if (rt_group_next_poll(&op, &cx, res, &err) == RT_READY)
            break;
        cr_assert(event_wait_for(&hand_woken, seen + 1),
                  "rt_group_next_poll returned pending and never woke its waker");
    }
    rt_group_next_drop(&op);
    rt_group_next_drop(&op); /* idempotent */
    cr_assert_neq(err, INT_MIN, "rt_group_next_poll did not write *err");
    return err;
}

/* rt_group_join_all (closing false) or rt_group_close (true) polled by hand
 * until ready. Returns the status; *failed receives the failed count. */
static int hand_wait(rt_group *g, bool closing, int64_t timeout_ns, size_t *failed)
{
    rt_group_wait op;
    memset(&op, 0, sizeof op);
    int rc = closing ? rt_group_close_init(&op, g, timeout_ns)
                     : rt_group_join_all_init(&op, g, timeout_ns);
    cr_assert_eq(rc, 0, "wait init: %s", rt_strerror(rc));
    rt_context cx = hand_context();
    int err = INT_MIN;
    *failed = (size_t)-1;
    for (;;) {
        unsigned long seen = event_count(&hand_woken);
        if (rt_group_wait_poll(&op, &cx, failed, &err) == RT_READY)
            break;
        cr_assert(event_wait_for(&hand_woken, seen + 1),
                  "rt_group_wait_poll returned pending and never woke its waker");
    }
    rt_group_wait_drop(&op);
    rt_group_wait_drop(&op); /* idempotent */
    cr_assert_neq(err, INT_MIN, "rt_group_wait_poll did not write *err");
    return err;
}

/* A result that owns memory, so that a lost one shows up as a leak. */
#define BOX_MAGIC 0xB0C5B0C5u

struct box {
    unsigned magic;
    int index;
};

static void *box_new(int index)
{
    struct box *b = malloc(sizeof *b);
    if (b != NULL) {
        b->magic = BOX_MAGIC;
        b->index = index;
    }
    return b;
}

/* What the dispose function saw. */
struct dispose_log {
    atomic_int boxes;     /* non-NULL values (each freed) */
    atomic_int nulls;     /* NULL values */
    atomic_int bad;       /* values that were not boxes */
    atomic_ulong indices; /* bit per box index */
    struct event called;  /* signalled once per non-NULL value */
};

static struct dispose_log dlog = {0, 0, 0, 0, EVENT_INIT};

static void dispose_box(void *value, void *arg)
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

/* The children. Counters are global; each test runs in its own process. */
static atomic_int child_first_polls;
static atomic_int child_drops;
static atomic_int child_off_worker; /* polls of pinned children elsewhere */
static struct event child_polled = EVENT_INIT;
static struct event child_dropped = EVENT_INIT;

enum child_kind {
    CHILD_VALUE,   /* finishes with `value` (after `yields` yields) */
    CHILD_BOX,     /* finishes with box_new(index) (after `yields` yields) */
    CHILD_GATED,   /* finishes with `value` once its gate opens */
    CHILD_FOREVER, /* never finishes; stores no waker (only a cancel ends it) */
};

struct child {
    enum child_kind kind;
    int index;
    int yields;
    bool polled;
    uintptr_t value;
    struct gate *gate; /* CHILD_GATED */
    void *buf;         /* freed by the drop when not NULL */
    int pinned_to;     /* checked at every poll when worker_out is set */
    int *worker_out;   /* where the first poll reports its worker (may be NULL) */
    char *name_out;    /* where the first poll copies rt_task_current_name() */
};

static rt_poll child_poll(void *state, rt_context *cx, void **out)
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
            const char *name = rt_task_current_name();
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

static void child_drop(void *state)
{
    struct child *c = state;
    if (c->kind == CHILD_GATED)
        gate_clear(c->gate);
    free(c->buf);
    c->buf = NULL;
    atomic_fetch_add(&child_drops, 1);
    event_signal(&child_dropped);
}

static uint64_t spawn_child(rt_group *g, const struct child *c)
{
    uint64_t id = 0;
    int rc = rt_group_spawn(g, NULL, child_poll, child_drop, c, sizeof *c, &id);
    cr_assert_eq(rc, 0, "rt_group_spawn: %s", rt_strerror(rc));
    cr_assert_neq(id, 0, "rt_group_spawn gave the child id 0");
    return id;
}

static rt_group *new_group(rt_runtime *rt, bool with_dispose)
{
    rt_group *g = NULL;
    int rc =
        with_dispose ? rt_group_new(rt, dispose_box, &dlog, &g) : rt_group_new(rt, NULL, NULL, &g);
    cr_assert_eq(rc, 0, "rt_group_new: %s", rt_strerror(rc));
    cr_assert_not_null(g);
    return g;
}

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

static size_t index_of_id(const uint64_t *ids, size_t n, uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return i;
    return n;
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
};

/* Opens one gate at a time, in order_perm's order, and collects the child it
 * let through before opening the next: the completion order is the gate
 * order, whatever the scheduling. Then one more next: -ECHILD. */
static rt_poll order_owner_poll(void *state, rt_context *cx, void **out)
{
    struct order_owner *o = state;
    RT_CORO_BEGIN(&o->co);
    o->r->owner_worker = rt_current_worker();
    for (o->k = 0; o->k < ORDER_N; o->k++) {
        o->r->len_before[o->k] = rt_group_len(o->g);
        gate_open(&o->gates[order_perm[o->k]]);
        if (rt_group_next_init(&o->op, o->g, -1) != 0)
            RT_RETURN(&o->co, out, 0);
        RT_AWAIT(&o->co, rt_group_next_poll(&o->op, cx, &o->r->res[o->k], &o->r->next_rc[o->k]));
        rt_group_next_drop(&o->op);
    }
    if (rt_group_next_init(&o->op, o->g, -1) != 0)
        RT_RETURN(&o->co, out, 0);
    RT_AWAIT(&o->co, rt_group_next_poll(&o->op, cx, &o->r->res[ORDER_N], &o->r->next_rc[ORDER_N]));
    rt_group_next_drop(&o->op);
    o->r->len_after = rt_group_len(o->g);
    RT_RETURN(&o->co, out, 1);
    RT_CORO_END(&o->co, out);
}

static void order_owner_drop(void *state)
{
    struct order_owner *o = state;
    rt_group_next_drop(&o->op);
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
    cr_assert_eq(rt_block_on(rt, order_owner_poll, order_owner_drop, &owner, sizeof owner, &value),
                 0);
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
    cr_assert_eq(r.next_rc[ORDER_N], -ECHILD, "next on an emptied group: %d", r.next_rc[ORDER_N]);
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
    cr_assert_eq(rt_group_next_init(&op, g, -1), 0);
    rt_context cx = hand_context();
    rt_group_result res = {0, NULL, 12345};
    int err = INT_MIN;
    unsigned long seen = event_count(&hand_woken);
    cr_assert_eq(rt_group_next_poll(&op, &cx, &res, &err), RT_PENDING,
                 "next is ready while its only child waits behind a shut gate");
    cr_assert_eq(rt_group_len(g), 1);
    gate_open(&gate);
    cr_assert(event_wait_for(&hand_woken, seen + 1), "the finishing child never woke next");
    for (;;) {
        seen = event_count(&hand_woken);
        if (rt_group_next_poll(&op, &cx, &res, &err) == RT_READY)
            break;
        cr_assert(event_wait_for(&hand_woken, seen + 1));
    }
    rt_group_next_drop(&op);
    cr_assert_eq(err, 0);
    cr_assert_eq(res.id, id);
    cr_assert_eq(res.value, (void *)77);
    cr_assert_eq(res.status, 0);
    cr_assert_eq(rt_group_len(g), 0);
    rt_group_free(g);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&child_drops), 1);
}

/* ---- -ECHILD, bad arguments -------------------------------------------------- */

struct in_task_group {
    int new_rc;
    int next_rc;
    int wait_rc;
    size_t failed;
};

/* Makes a group on rt_current() (rt NULL), asks it for a child and for all
 * of them: -ECHILD and 0 straight away, then frees it. */
static rt_poll in_task_group_poll(void *state, rt_context *cx, void **out)
{
    struct in_task_group *s = *(struct in_task_group **)state;
    rt_group *g = NULL;
    s->new_rc = rt_group_new(NULL, NULL, NULL, &g);
    if (s->new_rc == 0) {
        rt_group_next op;
        memset(&op, 0, sizeof op);
        rt_group_result res;
        s->next_rc = INT_MIN;
        if (rt_group_next_init(&op, g, -1) == 0 &&
            rt_group_next_poll(&op, cx, &res, &s->next_rc) != RT_READY)
            s->next_rc = INT_MAX; /* pending on an empty group */
        rt_group_next_drop(&op);
        rt_group_wait w;
        memset(&w, 0, sizeof w);
        s->wait_rc = INT_MIN;
        if (rt_group_join_all_init(&w, g, -1) == 0 &&
            rt_group_wait_poll(&w, cx, &s->failed, &s->wait_rc) != RT_READY)
            s->wait_rc = INT_MAX;
        rt_group_wait_drop(&w);
        rt_group_free(g);
    }
    *out = NULL;
    return RT_READY;
}

Test(group, next_on_an_empty_group_is_echild_and_join_all_is_ready)
{
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    cr_assert_eq(rt_group_len(g), 0);
    rt_group_result res;
    cr_assert_eq(hand_next(g, -1, &res), -ECHILD);
    cr_assert_eq(hand_next(g, 50 * MS, &res), -ECHILD, "with a timeout too, at once");
    size_t failed;
    cr_assert_eq(hand_wait(g, false, -1, &failed), 0);
    cr_assert_eq(failed, 0);
    rt_group_free(g);

    /* The same from inside a task, with the group on rt_current(). */
    struct in_task_group s = {INT_MIN, INT_MIN, INT_MIN, 99};
    struct in_task_group *sp = &s;
    cr_assert_eq(rt_block_on(rt, in_task_group_poll, NULL, &sp, sizeof sp, NULL), 0);
    cr_assert_eq(s.new_rc, 0, "rt_group_new(NULL) in a task: %s", rt_strerror(s.new_rc));
    cr_assert_eq(s.next_rc, -ECHILD, "next in a task: %d", s.next_rc);
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
    cr_assert_eq(rt_group_next_init(NULL, g, -1), -EINVAL);
    cr_assert_eq(rt_group_next_init(&op, NULL, -1), -EINVAL);
    rt_group_wait w;
    memset(&w, 0, sizeof w);
    cr_assert_eq(rt_group_join_all_init(NULL, g, -1), -EINVAL);
    cr_assert_eq(rt_group_join_all_init(&w, NULL, -1), -EINVAL);
    cr_assert_eq(rt_group_close_init(NULL, g, -1), -EINVAL);
    cr_assert_eq(rt_group_close_init(&w, NULL, -1), -EINVAL);
    /* Zero-initialised operations may be dropped. */
    rt_group_next_drop(&op);
    rt_group_wait_drop(&w);

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
        cr_assert_eq(hand_next(g, -1, &res), 0);
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

    /* The gated child holds the group: a bounded join_all times out, and may
     * be waited on again. */
    size_t failed = 12345;
    int64_t t0 = rt_now_ns();
    cr_assert_eq(hand_wait(g, false, 30 * MS, &failed), -ETIMEDOUT);
    cr_assert_geq(rt_now_ns() - t0, 30 * MS - 1 * MS, "join_all timed out early");
    cr_assert_geq(rt_group_len(g), 1, "the gated child is still running");
    cr_assert_lt(atomic_load(&child_drops), JOIN_N + 1, "the gated child finished");

    gate_open(&gate);
    cr_assert_eq(hand_wait(g, false, -1, &failed), 0);
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
        cr_assert_eq(hand_next(g, -1, &res), 0);
        size_t i = index_of_id(ids, CANCEL_N, res.id);
        cr_assert_lt(i, CANCEL_N, "next returned an unknown id %llu", (unsigned long long)res.id);
        cr_assert_not(seen[i], "child %zu collected twice", i);
        seen[i] = true;
        cr_assert_eq(res.status, -ECANCELED, "child %zu: status %d", i, res.status);
        cr_assert_null(res.value);
    }
    rt_group_result res;
    cr_assert_eq(hand_next(g, -1, &res), -ECHILD);
    cr_assert(event_wait_for(&child_dropped, CANCEL_N));
    cr_assert_eq(atomic_load(&child_drops), CANCEL_N);

    /* The group stays usable: a child spawned after the cancel runs. */
    struct child later = {.kind = CHILD_VALUE, .value = 4242, .yields = 2};
    uint64_t later_id = spawn_child(g, &later);
    cr_assert_eq(hand_next(g, -1, &res), 0);
    cr_assert_eq(res.id, later_id);
    cr_assert_eq(res.status, 0);
    cr_assert_eq(res.value, (void *)4242);

    /* Cancelled children count as failed for join_all. */
    for (int i = 0; i < 3; i++) {
        struct child c = {.kind = CHILD_FOREVER, .index = i};
        spawn_child(g, &c);
    }
    cr_assert(event_wait_for(&child_polled, CANCEL_N + 1 + 3));
    rt_group_cancel(g);
    rt_group_cancel(g); /* twice is fine */
    size_t failed = 0;
    cr_assert_eq(hand_wait(g, false, -1, &failed), 0);
    cr_assert_eq(failed, 3, "join_all counted %zu failed, expected the 3 cancelled", failed);
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
    size_t failed;
    int drops_at_close;
    size_t len_at_close;
};

struct closer {
    rt_coro co;
    rt_group *g;
    rt_group_wait w;
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
    RT_YIELD(&s->co, cx);
    if (rt_group_close_init(&s->w, s->g, -1) != 0)
        RT_RETURN(&s->co, out, 0);
    RT_AWAIT(&s->co, rt_group_wait_poll(&s->w, cx, &s->r->failed, &s->r->close_rc));
    rt_group_wait_drop(&s->w);
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
    rt_group_wait_drop(&s->w);
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

    size_t failed = 12345;
    cr_assert_eq(hand_wait(g, true, -1, &failed), 0);
    cr_assert_eq(failed, 4, "close counted %zu failed children, expected the 4 cancelled", failed);
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
    struct closer_report r = {INT_MIN, INT_MIN, INT_MIN, 12345, -1, 12345};
    struct closer s;
    memset(&s, 0, sizeof s);
    s.g = g;
    s.r = &r;
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, closer_poll, closer_drop, &s, sizeof s, &value), 0);
    cr_assert_eq(value, (void *)1, "the owner stopped early (spawn: %d)", r.spawn_rc);
    cr_assert_eq(r.close_rc, 0, "close: %d", r.close_rc);
    cr_assert_eq(r.failed, 3, "close counted %zu failed", r.failed);
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
    rt_group_result res;
    int err;
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
    if (rt_group_next_init(&m->op, m->inner, -1) != 0) {
        atomic_fetch_add(&mid_errors, 1);
        event_signal(&mid_ready);
        RT_RETURN(&m->co, out, NULL);
    }
    event_signal(&mid_ready);
    RT_AWAIT(&m->co, rt_group_next_poll(&m->op, cx, &m->res, &m->err));
    /* Not reached: the grandchildren never finish. */
    atomic_fetch_add(&mid_errors, 1);
    RT_RETURN(&m->co, out, NULL);
    RT_CORO_END(&m->co, out);
}

static void mid_drop(void *state)
{
    struct mid *m = state;
    rt_group_next_drop(&m->op);
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
        cr_assert_eq(hand_next(outer, -1, &res), 0);
        cr_assert_lt(index_of_id(ids, NEST_MID, res.id), NEST_MID);
        cr_assert_eq(res.status, -ECANCELED);
        cr_assert_null(res.value);
    }
    cr_assert_eq(atomic_load(&mid_drops), NEST_MID);
    cr_assert(event_wait_for(&grand_dropped, NEST_MID * NEST_GRAND),
              "only %lu of %d grandchildren were dropped after the outer cancel",
              event_count(&grand_dropped), NEST_MID * NEST_GRAND);
    cr_assert_eq(atomic_load(&grand_alive), 0);
    rt_group_result res;
    cr_assert_eq(hand_next(outer, -1, &res), -ECHILD);
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
    cr_assert_eq(hand_next(g, 50 * MS, &res), -ETIMEDOUT);
    int64_t elapsed = rt_now_ns() - t0;
    cr_assert_geq(elapsed, 50 * MS, "timed out after %lld ns only", (long long)elapsed);
    cr_assert_lt(elapsed, 5 * SEC, "the timeout took %lld ns", (long long)elapsed);
    cr_assert_eq(rt_group_len(g), 1, "the timed-out wait collected something");
    cr_assert_eq(atomic_load(&child_drops), 0);

    /* A zero timeout with nothing finished: -ETIMEDOUT too. */
    cr_assert_eq(hand_next(g, 0, &res), -ETIMEDOUT);

    gate_open(&gate);
    cr_assert_eq(hand_next(g, 10 * SEC, &res), 0);
    cr_assert_eq(res.id, id);
    cr_assert_eq(res.value, (void *)31337);
    cr_assert_eq(res.status, 0);
    cr_assert_eq(hand_next(g, 10 * SEC, &res), -ECHILD);
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
        cr_assert_eq(hand_next(g, -1, &res), 0);
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
    cr_assert_eq(RT_SPAWN(rt, owner_poll, owner_drop, &o, &task), 0);
    cr_assert(event_wait_for(&owner_ready, 1));
    cr_assert_eq(atomic_load(&owner_errors), 0);
    cr_assert(event_wait_for(&child_polled, OWNER_FOREVER + OWNER_BOXES));
    cr_assert(event_wait_for(&child_dropped, OWNER_BOXES), "the boxed children did not finish");

    rt_task_abort(task);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
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
    cr_assert_eq(RT_SPAWN(rt, owner_poll, owner_drop, &o, NULL), 0);
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
        cr_assert_eq(hand_next(a, -1, &res), 0);
        cr_assert_lt(index_of_id(a_ids, 3, res.id), 3);
        cr_assert_eq(res.status, -ECANCELED);
        cr_assert_null(res.value);
    }
    rt_group_result res;
    cr_assert_eq(hand_next(a, -1, &res), -ECHILD);
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

/* ---- corner cases ------------------------------------------------------------- */

#define RACE_N 3000

static int compare_ids(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

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
        int err = hand_next(g, -1, &res);
        if (err == -ECHILD) {
            sched_yield(); /* empty for a moment: more are coming */
            continue;
        }
        cr_assert_eq(err, 0);
        cr_assert_eq(res.status, 0);
        collected[n++] = res.id;
    }
    pthread_join(th, NULL);
    qsort(collected, RACE_N, sizeof *collected, compare_ids);
    qsort(s->ids, RACE_N, sizeof *s->ids, compare_ids);
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
    /* A failing spawn lists its child for a moment: an owner that polls in
     * that moment waits, and must be woken when the child is taken back. */
    rt_runtime *rt = new_runtime(2);
    rt_group *g = new_group(rt, false);
    struct racing_spawner *s = calloc(1, sizeof *s);
    s->g = g;
    s->bad_spawns = 200000;
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, racing_spawner_thread, s), 0);
    rt_context cx = hand_context();
    int pending = 0;
    rt_group_next op;
    for (;;) {
        memset(&op, 0, sizeof op);
        cr_assert_eq(rt_group_next_init(&op, g, -1), 0);
        unsigned long seen = event_count(&hand_woken);
        int err = 0;
        rt_group_result res;
        rt_poll r = rt_group_next_poll(&op, &cx, &res, &err);
        if (r == RT_PENDING) {
            pending++;
            cr_assert(event_wait_for_s(&hand_woken, seen + 1, 10),
                      "the owner waited on a child whose spawn failed and was never woken");
        } else {
            cr_assert_eq(err, -ECHILD);
        }
        rt_group_next_drop(&op);
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
