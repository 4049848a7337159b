/* Tasks that finish with an error status beside their value: RT_FAIL and
 * RT_RETURN_STATUS in coroutines, rt_task_set_status in plain poll
 * functions, reported by a join, rt_task_wait (which keeps the task's
 * status apart from its own errors), rt_join_all, rt_group_next and the
 * group waits (failed and cancelled counted apart), and rt_block_on, which
 * also hands the task's final state back. */
#include "support.h"

#include <string.h>

TestSuite(task_status, .fini = fail_on_leaks);

/* A coroutine that finishes with `status` and `value` after one yield,
 * signalling `done` (when set) in its last poll: from then on an abort
 * cannot take its outcome away. */
struct failer {
    rt_coro co;
    int status;
    uintptr_t value;
    struct event *done;
};

static rt_poll failer_poll(void *p, rt_context *cx, void **out)
{
    struct failer *f = p;
    RT_CORO_BEGIN(&f->co);
    RT_CORO_YIELD(&f->co, cx);
    if (f->done != NULL)
        event_signal(f->done);
    if (f->value == 0)
        RT_FAIL(&f->co, out, f->status);
    RT_RETURN_STATUS(&f->co, out, f->value, f->status);
    RT_CORO_END(&f->co, out);
}

/* Waits behind a gate, then finishes with a NULL result. */
static rt_poll gated_poll(void *p, rt_context *cx, void **out)
{
    if (!gate_pass(*(struct gate **)p, cx))
        return RT_PENDING;
    *out = NULL;
    return RT_READY;
}

static rt_task *spawn_gated(rt_runtime *rt, struct gate *g)
{
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, gated_poll, NULL, &g, &t), 0);
    return t;
}

/* A plain poll function that sets its status with rt_task_set_status. */
struct plain_failer {
    int status;
    int set_rc; /* what rt_task_set_status returned (checked by the test) */
};

static int plain_set_rc;

static rt_poll plain_failer_poll(void *p, rt_context *cx, void **out)
{
    struct plain_failer *f = p;
    plain_set_rc = rt_task_set_status(cx, -EINTR); /* replaced below */
    if (plain_set_rc == 0)
        plain_set_rc = rt_task_set_status(cx, f->status);
    *out = (void *)(uintptr_t)77;
    return RT_READY;
}

Test(task_status, rt_task_wait_reports_the_status_apart_from_its_own_errors)
{
    rt_runtime *rt = new_runtime(2);
    /* A task failing with -ETIMEDOUT: the wait returns 0 (the handle is
     * gone) and the status says -ETIMEDOUT; a wait that times out returns
     * -ETIMEDOUT itself and leaves the status alone. */
    struct failer f = {.status = -ETIMEDOUT};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, failer_poll, rt_coro_drop, &f, &t), 0);
    void *value = (void *)1;
    int status = 1;
    cr_assert_eq(rt_task_wait(t, WAIT_DEADLINE_NS, &value, &status), 0);
    cr_assert_eq(status, -ETIMEDOUT);
    cr_assert_null(value);

    struct gate g;
    gate_init(&g);
    rt_task *slow = spawn_gated(rt, &g);
    value = (void *)1;
    status = 1;
    cr_assert_eq(rt_task_wait(slow, 10 * MS, &value, &status), -ETIMEDOUT);
    cr_assert_eq(status, 1, "a wait that timed out wrote a status");
    cr_assert_eq(value, (void *)1, "a wait that timed out wrote a value");
    gate_open(&g);
    cr_assert_eq(rt_task_wait(slow, WAIT_DEADLINE_NS, NULL, &status), 0);
    cr_assert_eq(status, 0);

    /* A value comes with the error when the task returns both. */
    struct failer both = {.status = -EPROTO, .value = 42};
    cr_assert_eq(RT_SPAWN_STATE(rt, failer_poll, rt_coro_drop, &both, &t), 0);
    cr_assert_eq(rt_task_wait(t, WAIT_DEADLINE_NS, &value, &status), 0);
    cr_assert_eq(status, -EPROTO);
    cr_assert_eq(value, (void *)42);

    /* Aborted: -ECANCELED, also for a task that would have failed. */
    cr_assert_eq(rt_spawn(rt, never_poll, NULL, NULL, 0, &t), 0);
    rt_task_cancel(t);
    cr_assert_eq(rt_task_wait(t, WAIT_DEADLINE_NS, &value, &status), 0);
    cr_assert_eq(status, -ECANCELED);
    cr_assert_null(value);
    finish_runtime(rt, 0);
}

Test(task_status, a_plain_poll_function_sets_its_status)
{
    rt_runtime *rt = new_runtime(1);
    struct plain_failer f = {.status = -ENOTCONN};
    rt_task *t;
    cr_assert_eq(RT_SPAWN_STATE(rt, plain_failer_poll, NULL, &f, &t), 0);
    void *value;
    int status = 1;
    cr_assert_eq(rt_task_wait(t, WAIT_DEADLINE_NS, &value, &status), 0);
    cr_assert_eq(plain_set_rc, 0, "rt_task_set_status in a task's poll: %d", plain_set_rc);
    cr_assert_eq(status, -ENOTCONN, "the later call replaces the status: %d", status);
    cr_assert_eq(value, (void *)77);

    /* A status of 0 finishes as a success. */
    f.status = 0;
    cr_assert_eq(RT_SPAWN_STATE(rt, plain_failer_poll, NULL, &f, &t), 0);
    cr_assert_eq(rt_task_wait(t, WAIT_DEADLINE_NS, NULL, &status), 0);
    cr_assert_eq(status, 0);

    /* Refused: a positive status, no context, a context that is not the
     * task's, and a future polled by hand on this thread. */
    rt_context noop = noop_context();
    cr_assert_eq(rt_task_set_status(NULL, -EIO), -EINVAL);
    cr_assert_eq(rt_task_set_status(&noop, -EIO), -EINVAL);
    struct plain_failer by_hand = {.status = -EIO};
    void *out;
    plain_set_rc = 1;
    cr_assert_eq(plain_failer_poll(&by_hand, &noop, &out), RT_READY);
    cr_assert_eq(plain_set_rc, -EINVAL, "a status set outside a task: %d", plain_set_rc);
    f.status = 5;
    cr_assert_eq(RT_SPAWN_STATE(rt, plain_failer_poll, NULL, &f, &t), 0);
    cr_assert_eq(rt_task_wait(t, WAIT_DEADLINE_NS, NULL, &status), 0);
    cr_assert_eq(plain_set_rc, -EINVAL, "a positive status was taken");
    cr_assert_eq(status, -EINTR, "the refused call replaced the status");
    finish_runtime(rt, 0);
}

/* Joins three children, one failing, with rt_join_all, and a fourth alone. */
struct joiner {
    rt_coro co;
    rt_task_join joins[3];
    rt_join_all all;
    rt_task_join last;
    rt_task *last_task;
    int64_t last_result;
    void *last_value;
};

static rt_poll joiner_poll(void *p, rt_context *cx, void **out)
{
    struct joiner *j = p;
    RT_CORO_BEGIN(&j->co);
    rt_join_all_init(&j->all,
                     RT_FUTURES(&j->joins[0].future, &j->joins[1].future, &j->joins[2].future), 0);
    RT_AWAIT(&j->co, cx, &j->all);
    rt_task_join_init(&j->last, j->last_task);
    RT_AWAIT(&j->co, cx, &j->last);
    j->last_result = j->last.result;
    j->last_value = j->last.value;
    RT_RETURN(&j->co, out, (intptr_t)j->all.result);
    RT_CORO_END(&j->co, out);
}

static void joiner_drop(void *p)
{
    struct joiner *j = p;
    rt_coro_cleanup(&j->co);
    for (int i = 0; i < 3; i++)
        RT_DROP(&j->joins[i]);
}

Test(task_status, joins_and_join_all_report_the_status)
{
    rt_runtime *rt = new_runtime(2);
    struct joiner j;
    memset(&j, 0, sizeof j);
    const int statuses[3] = {0, -EBADMSG, 0};
    for (int i = 0; i < 3; i++) {
        struct failer f = {.status = statuses[i], .value = (uintptr_t)(10 + i)};
        rt_task *t;
        cr_assert_eq(RT_SPAWN_STATE(rt, failer_poll, rt_coro_drop, &f, &t), 0);
        cr_assert_eq(rt_task_join_init(&j.joins[i], t), 0);
    }
    struct failer f = {.status = -ENOSPC};
    cr_assert_eq(RT_SPAWN_STATE(rt, failer_poll, rt_coro_drop, &f, &j.last_task), 0);
    void *value = NULL;
    int status = 1;
    cr_assert_eq(rt_block_on(rt, joiner_poll, joiner_drop, &j, sizeof j, &value, &status), 0);
    cr_assert_eq(status, 0, "the joiner itself succeeded");
    cr_assert_eq((intptr_t)value, -EBADMSG, "join_all's result: %ld", (long)(intptr_t)value);
    /* rt_block_on handed the joiner's final state back. */
    cr_assert_eq(j.all.failed, 1);
    cr_assert_eq(j.joins[0].result, 0);
    cr_assert_eq(j.joins[1].result, -EBADMSG);
    cr_assert_eq(j.joins[1].value, (void *)11, "the failed child's value came with its status");
    cr_assert_eq(j.joins[2].value, (void *)12);
    cr_assert_eq(j.last_result, -ENOSPC);
    cr_assert_null(j.last_value);
    finish_runtime(rt, 0);
}

/* A nested coroutine's status stays its own: the task finishes with the
 * parent's. */
struct nest {
    rt_coro co;
    struct failer inner;
    int inner_status;
};

static rt_poll nest_poll(void *p, rt_context *cx, void **out)
{
    struct nest *n = p;
    RT_CORO_BEGIN(&n->co);
    RT_AWAIT_POLL(&n->co, failer_poll(&n->inner, cx, out));
    n->inner_status = n->inner.co.status;
    RT_RETURN(&n->co, out, 5);
    RT_CORO_END(&n->co, out);
}

Test(task_status, block_on_reports_the_status_and_a_nested_coroutine_keeps_its_own)
{
    rt_runtime *rt = new_runtime(1);
    struct nest n = {.inner = {.status = -EILSEQ}};
    void *value = NULL;
    int status = 1;
    cr_assert_eq(rt_block_on(rt, nest_poll, rt_coro_drop, &n, sizeof n, &value, &status), 0);
    cr_assert_eq(status, 0, "the nested coroutine's RT_FAIL became the task's status");
    cr_assert_eq(value, (void *)5);
    cr_assert_eq(n.inner_status, -EILSEQ, "the parent read the child's status");
    cr_assert_eq(n.co.line, RT_CORO_DONE, "the state was not handed back");

    struct failer f = {.status = -EXDEV};
    cr_assert_eq(rt_block_on(rt, failer_poll, rt_coro_drop, &f, sizeof f, &value, &status), 0);
    cr_assert_eq(status, -EXDEV);
    cr_assert_eq(f.co.status, -EXDEV, "the state handed back holds the status too");

    /* Refused: the state stays as it was, nothing is written. */
    struct failer untouched = {.status = -EIO};
    value = (void *)1;
    status = 1;
    cr_assert_eq(rt_block_on(rt, NULL, NULL, &untouched, sizeof untouched, &value, &status),
                 -EINVAL);
    cr_assert_eq(value, (void *)1);
    cr_assert_eq(status, 1);
    cr_assert_eq(untouched.co.line, 0);
    finish_runtime(rt, 0);
}

/* ---- Groups -------------------------------------------------------------- */

static void count_dispose(void *value, void *arg)
{
    (void)value;
    atomic_fetch_add((atomic_int *)arg, 1);
}

/* Spawns three children into g (ok, failing, failing with a value) and one
 * that never ends, then collects the three with rt_group_next and closes
 * the group, which cancels the fourth. */
struct reaper {
    rt_coro co;
    rt_group *g;
    rt_group_next next;
    rt_group_join close;
    int k;
    int statuses[3];
    uintptr_t values[3];
};

static rt_poll reaper_poll(void *p, rt_context *cx, void **out)
{
    struct reaper *r = p;
    RT_CORO_BEGIN(&r->co);
    for (r->k = 0; r->k < 3; r->k++) {
        rt_group_next_init(&r->next, r->g);
        RT_AWAIT(&r->co, cx, &r->next);
        if (r->next.result != 0)
            RT_FAIL(&r->co, out, (int)r->next.result);
        uintptr_t v = (uintptr_t)r->next.child.value;
        int slot = v == 1 ? 0 : v == 0 ? 1 : 2;
        r->statuses[slot] = r->next.child.status;
        r->values[slot] = v;
    }
    rt_group_close_init(&r->close, r->g);
    RT_AWAIT(&r->co, cx, &r->close);
    RT_RETURN(&r->co, out, (uintptr_t)(r->close.failed * 10 + r->close.cancelled));
    RT_CORO_END(&r->co, out);
}

Test(task_status, groups_report_each_childs_status_and_count_failed_and_cancelled_apart)
{
    rt_runtime *rt = new_runtime(2);
    atomic_int disposed = 0;
    rt_group *g;
    cr_assert_eq(rt_group_new(rt, count_dispose, &disposed, &g), 0);
    struct event done = EVENT_INIT;
    struct failer ok = {.status = 0, .value = 1, .done = &done};
    struct failer bad = {.status = -ECONNREFUSED, .done = &done};
    struct failer bad_with_value = {.status = -EHOSTUNREACH, .value = 3, .done = &done};
    cr_assert_eq(rt_group_spawn(g, NULL, failer_poll, rt_coro_drop, &ok, sizeof ok, NULL), 0);
    cr_assert_eq(rt_group_spawn(g, NULL, failer_poll, rt_coro_drop, &bad, sizeof bad, NULL), 0);
    cr_assert_eq(rt_group_spawn(g, NULL, failer_poll, rt_coro_drop, &bad_with_value,
                                sizeof bad_with_value, NULL),
                 0);
    cr_assert_eq(rt_group_spawn(g, NULL, never_poll, NULL, NULL, 0, NULL), 0);
    struct reaper r;
    memset(&r, 0, sizeof r);
    r.g = g;
    void *value = NULL;
    int status = 1;
    cr_assert_eq(rt_block_on(rt, reaper_poll, rt_coro_drop, &r, sizeof r, &value, &status), 0);
    cr_assert_eq(status, 0, "the reaper failed: %s", rt_strerror(status));
    cr_assert_eq(r.statuses[0], 0);
    cr_assert_eq(r.statuses[1], -ECONNREFUSED);
    cr_assert_eq(r.statuses[2], -EHOSTUNREACH);
    cr_assert_eq(r.values[2], 3);
    cr_assert_eq((uintptr_t)value, 0 * 10 + 1, "the close counted %lu (failed*10+cancelled)",
                 (unsigned long)(uintptr_t)value);
    cr_assert_eq(atomic_load(&disposed), 0, "everything was collected");
    rt_group_free(g);

    /* Nobody collects: the close counts 2 failed and 1 cancelled, and every
     * child that returned (failed or not) has its value disposed of. */
    cr_assert_eq(rt_group_new(rt, count_dispose, &disposed, &g), 0);
    cr_assert_eq(rt_group_spawn(g, NULL, failer_poll, rt_coro_drop, &ok, sizeof ok, NULL), 0);
    cr_assert_eq(rt_group_spawn(g, NULL, failer_poll, rt_coro_drop, &bad, sizeof bad, NULL), 0);
    cr_assert_eq(rt_group_spawn(g, NULL, failer_poll, rt_coro_drop, &bad_with_value,
                                sizeof bad_with_value, NULL),
                 0);
    cr_assert(event_wait_for(&done, 6), "the three children did not finish");
    cr_assert_eq(rt_group_spawn(g, NULL, never_poll, NULL, NULL, 0, NULL), 0);
    rt_group_join close;
    cr_assert_eq(rt_group_close_init(&close, g), 0);
    struct event woken = EVENT_INIT;
    rt_context cx = event_context(&woken);
    for (unsigned long seen = 0; RT_POLL_OP(&close, &cx) == RT_PENDING; seen++)
        cr_assert(event_wait_for(&woken, seen + 1));
    cr_assert_eq(close.result, 0);
    cr_assert_eq(close.failed, 2, "failed: %zu", close.failed);
    cr_assert_eq(close.cancelled, 1, "cancelled: %zu", close.cancelled);
    cr_assert_eq(atomic_load(&disposed), 3, "values disposed of: %d", atomic_load(&disposed));
    rt_group_free(g);
    finish_runtime(rt, 0);
}

Test(task_status, a_discarding_group_counts_failed_and_cancelled_apart)
{
    rt_runtime *rt = new_runtime(2);
    atomic_int disposed = 0;
    rt_group_options o;
    rt_group_options_init(&o);
    o.discard = 1;
    o.dispose = count_dispose;
    o.dispose_arg = &disposed;
    rt_group *g;
    cr_assert_eq(rt_group_new_ex(rt, &o, &g), 0);
    struct event done = EVENT_INIT;
    struct failer ok = {.status = 0, .value = 1, .done = &done};
    struct failer bad = {.status = -ECONNRESET, .done = &done};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(rt_group_spawn(g, NULL, failer_poll, rt_coro_drop, &bad, sizeof bad, NULL), 0);
    cr_assert_eq(rt_group_spawn(g, NULL, failer_poll, rt_coro_drop, &ok, sizeof ok, NULL), 0);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(rt_group_spawn(g, NULL, never_poll, NULL, NULL, 0, NULL), 0);
    cr_assert(event_wait_for(&done, 4), "the four children did not finish");
    rt_group_join close;
    cr_assert_eq(rt_group_close_init(&close, g), 0);
    struct event woken = EVENT_INIT;
    rt_context cx = event_context(&woken);
    for (unsigned long seen = 0; RT_POLL_OP(&close, &cx) == RT_PENDING; seen++)
        cr_assert(event_wait_for(&woken, seen + 1));
    cr_assert_eq(close.failed, 3, "failed: %zu", close.failed);
    cr_assert_eq(close.cancelled, 2, "cancelled: %zu", close.cancelled);
    cr_assert_eq(atomic_load(&disposed), 4, "values disposed of: %d", atomic_load(&disposed));
    rt_group_free(g);
    finish_runtime(rt, 0);
}

/* A child may finish with -ECANCELED as its own status and a result: that
 * result is disposed of like any other (a cancelled child has none), and
 * the child counts as failed, not cancelled. LeakSanitizer sees a result
 * that was lost. */
struct own_cancel {
    rt_coro co;
    struct event *done;
};

static rt_poll own_cancel_poll(void *p, rt_context *cx, void **out)
{
    struct own_cancel *c = p;
    (void)cx;
    RT_CORO_BEGIN(&c->co);
    event_signal(c->done);
    RT_RETURN_STATUS(&c->co, out, malloc(16), -ECANCELED);
    RT_CORO_END(&c->co, out);
}

static void free_dispose(void *value, void *arg)
{
    free(value);
    atomic_fetch_add((atomic_int *)arg, 1);
}

Test(task_status, a_child_failing_with_ecanceled_itself_has_its_result_disposed)
{
    rt_runtime *rt = new_runtime(2);
    atomic_int disposed = 0;
    rt_group_options o;
    rt_group_options_init(&o);
    o.dispose = free_dispose;
    o.dispose_arg = &disposed;
    for (int discard = 0; discard < 2; discard++) {
        o.discard = discard;
        rt_group *g;
        cr_assert_eq(rt_group_new_ex(rt, &o, &g), 0);
        struct event done = EVENT_INIT;
        struct own_cancel c = {.done = &done};
        cr_assert_eq(rt_group_spawn(g, NULL, own_cancel_poll, rt_coro_drop, &c, sizeof c, NULL), 0);
        cr_assert(event_wait_for(&done, 1));
        rt_group_join w;
        cr_assert_eq(rt_group_join_all_init(&w, g), 0);
        struct event woken = EVENT_INIT;
        rt_context cx = event_context(&woken);
        for (unsigned long seen = 0; RT_POLL_OP(&w, &cx) == RT_PENDING; seen++)
            cr_assert(event_wait_for(&woken, seen + 1));
        cr_assert_eq(w.failed, 1, "discard %d: failed %zu", discard, w.failed);
        cr_assert_eq(w.cancelled, 0, "discard %d: cancelled %zu", discard, w.cancelled);
        cr_assert_eq(atomic_load(&disposed), discard + 1, "discard %d: the result was lost",
                     discard);
        rt_group_free(g);
    }
    finish_runtime(rt, 0);
}
