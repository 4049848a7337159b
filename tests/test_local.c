/* Black-box tests of the newer parts of asyncrt/task.h: local (pinned) tasks
 * (rt_spawn_local, rt_spawn_ex with a worker index or RT_WORKER_CURRENT):
 * every poll on the one worker, whoever wakes the task, never stolen, bad
 * indices refused, aborts and shutdown; task identity (ids unique and never
 * 0, rt_task_current_id, names copied and cut at RT_TASK_NAME_MAX,
 * rt_task_current_name, rt_current_worker); and the cooperative budget
 * (rt_coop_proceed, rt_config.budget): a task that always finds its data
 * ready starves its worker with the budget off, and lets the others run with
 * it on. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#define TEST_OWN_FINISH_RUNTIME  /* this suite has its own, below */
#define TEST_WANT_COUNTING_WAKER /* the shared counting user waker */
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

TestSuite(local, .timeout = 90, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

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

static rt_spawn_options options_for(int worker, const char *name)
{
    rt_spawn_options opts;
    rt_spawn_options_init(&opts);
    opts.worker = worker;
    opts.name = name;
    return opts;
}

/* A door a task waits behind (see test_task.c). */
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

static void spin_for(int64_t ns)
{
    int64_t end = rt_now_ns() + ns;
    while (rt_now_ns() < end) {
    }
}

static atomic_int drops;
static struct event dropped = EVENT_INIT;

static void counting_drop_fn(void *state)
{
    (void)state;
    atomic_fetch_add(&drops, 1);
    event_signal(&dropped);
}

static rt_poll trivial_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = NULL;
    return RT_READY;
}

/* ---- local tasks: every poll on one worker ------------------------------------ */

#define PIN_WORKERS 4
#define PIN_TASKS 3
#define PIN_ROUNDS 150

/* Where local tasks leave their waker for the foreign waking thread. */
struct mailbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int count;
    rt_waker wakers[PIN_TASKS];
    atomic_int *flags[PIN_TASKS];
    bool stop;
};

static void mailbox_post(struct mailbox *mb, rt_waker w, atomic_int *flag)
{
    pthread_mutex_lock(&mb->mu);
    mb->wakers[mb->count] = w;
    mb->flags[mb->count] = flag;
    mb->count++;
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
}

/* The foreign thread: wakes whatever is posted, until told to stop. */
static void *mailbox_thread(void *arg)
{
    struct mailbox *mb = arg;
    pthread_mutex_lock(&mb->mu);
    for (;;) {
        while (mb->count == 0 && !mb->stop)
            pthread_cond_wait(&mb->cv, &mb->mu);
        if (mb->count == 0)
            break;
        rt_waker w = mb->wakers[--mb->count];
        atomic_int *flag = mb->flags[mb->count];
        pthread_mutex_unlock(&mb->mu);
        atomic_store(flag, 1);
        rt_waker_wake(&w);
        pthread_mutex_lock(&mb->mu);
    }
    pthread_mutex_unlock(&mb->mu);
    return NULL;
}

static atomic_int poker_wrong; /* pokers that ran off their worker */
static atomic_int pokes;

/* A task pinned to another worker that wakes a local task. */
struct poker {
    rt_waker waker;
    atomic_int *flag;
    int target;
};

static rt_poll poker_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct poker *k = state;
    if (rt_current_worker() != k->target)
        atomic_fetch_add(&poker_wrong, 1);
    atomic_fetch_add(&pokes, 1);
    atomic_store(k->flag, 1);
    rt_waker_wake(&k->waker);
    *out = NULL;
    return RT_READY;
}

static void poker_drop(void *state)
{
    struct poker *k = state;
    rt_waker_drop(&k->waker); /* the no-op waker once woken */
}

struct pin_report {
    int polls;
    int wrong; /* polls on another worker than the spawner's */
    int rounds;
    int spawn_errors;
    int first_worker;
};

/* A local task that ends each of its PIN_ROUNDS rounds one of three ways:
 * a yield, a wake from a foreign thread, or a wake from a task pinned to
 * another worker. Every poll checks the worker it runs on. */
struct pinned {
    int expected;
    int round;
    bool waiting;
    atomic_int woken;
    struct mailbox *mb;
    struct pin_report rep;
    struct pin_report *out;
};

static rt_poll pinned_poll(void *state, rt_context *cx, void **out)
{
    struct pinned *p = state;
    int w = rt_current_worker();
    if (p->rep.polls++ == 0)
        p->rep.first_worker = w;
    if (w != p->expected)
        p->rep.wrong++;
    if (p->waiting) {
        if (!atomic_load(&p->woken))
            return RT_PENDING; /* a spurious poll: the wake is still to come */
        p->waiting = false;
        p->round++;
    }
    while (p->round < PIN_ROUNDS) {
        switch (p->round % 3) {
        case 0:
            p->round++;
            return rt_yield(cx);
        case 1:
            atomic_store(&p->woken, 0);
            p->waiting = true;
            mailbox_post(p->mb, rt_waker_clone(rt_context_waker(cx)), &p->woken);
            return RT_PENDING;
        default: {
            atomic_store(&p->woken, 0);
            p->waiting = true;
            int target = (p->expected + 1 + (p->round / 3) % (PIN_WORKERS - 1)) % PIN_WORKERS;
            struct poker k = {rt_waker_clone(rt_context_waker(cx)), &p->woken, target};
            rt_spawn_options opts = options_for(target, "poker");
            if (rt_spawn_ex(NULL, &opts, poker_poll, poker_drop, &k, sizeof k, NULL) != 0) {
                rt_waker_drop(&k.waker);
                p->rep.spawn_errors++;
                p->waiting = false;
                p->round++;
                continue;
            }
            return RT_PENDING;
        }
        }
    }
    p->rep.rounds = p->round;
    *p->out = p->rep;
    *out = NULL;
    return RT_READY;
}

struct pin_spawner {
    rt_coro co;
    struct mailbox *mb;
    struct pin_report *reports;
    int *spawner_worker;
    int *spawn_rc;
    rt_task *h[PIN_TASKS];
    int k;
};

static rt_poll pin_spawner_poll(void *state, rt_context *cx, void **out)
{
    struct pin_spawner *s = state;
    RT_CORO_BEGIN(&s->co);
    *s->spawner_worker = rt_current_worker();
    for (s->k = 0; s->k < PIN_TASKS; s->k++) {
        struct pinned p;
        memset(&p, 0, sizeof p);
        p.expected = *s->spawner_worker;
        p.mb = s->mb;
        p.out = &s->reports[s->k];
        s->spawn_rc[s->k] = rt_spawn_local(NULL, pinned_poll, NULL, &p, sizeof p, &s->h[s->k]);
        if (s->spawn_rc[s->k] != 0)
            RT_RETURN(&s->co, out, 0);
    }
    for (s->k = 0; s->k < PIN_TASKS; s->k++)
        RT_AWAIT(&s->co, rt_task_join(s->h[s->k], cx, NULL, NULL));
    RT_RETURN(&s->co, out, 1);
    RT_CORO_END(&s->co, out);
}

Test(local, a_local_task_is_polled_only_on_its_worker_whoever_wakes_it)
{
    rt_runtime *rt = new_runtime_budget(PIN_WORKERS, -1);
    struct mailbox mb;
    memset(&mb, 0, sizeof mb);
    pthread_mutex_init(&mb.mu, NULL);
    pthread_cond_init(&mb.cv, NULL);
    pthread_t waker_thread;
    cr_assert_eq(pthread_create(&waker_thread, NULL, mailbox_thread, &mb), 0);

    struct pin_report reports[PIN_TASKS];
    memset(reports, 0, sizeof reports);
    int spawner_worker = -5;
    int spawn_rc[PIN_TASKS] = {INT_MIN, INT_MIN, INT_MIN};
    struct pin_spawner s;
    memset(&s, 0, sizeof s);
    s.mb = &mb;
    s.reports = reports;
    s.spawner_worker = &spawner_worker;
    s.spawn_rc = spawn_rc;
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, pin_spawner_poll, NULL, &s, sizeof s, &value), 0);

    pthread_mutex_lock(&mb.mu);
    mb.stop = true;
    pthread_cond_broadcast(&mb.cv);
    pthread_mutex_unlock(&mb.mu);
    pthread_join(waker_thread, NULL);

    for (int k = 0; k < PIN_TASKS; k++)
        cr_assert_eq(spawn_rc[k], 0, "rt_spawn_local: %s", rt_strerror(spawn_rc[k]));
    cr_assert_eq(value, (void *)1);
    cr_assert(spawner_worker >= 0 && spawner_worker < PIN_WORKERS, "spawner on worker %d",
              spawner_worker);
    for (int k = 0; k < PIN_TASKS; k++) {
        struct pin_report *r = &reports[k];
        cr_assert_eq(r->rounds, PIN_ROUNDS);
        cr_assert_eq(r->spawn_errors, 0, "pinned poker spawns failed");
        cr_assert_eq(r->first_worker, spawner_worker);
        cr_assert_eq(r->wrong, 0, "local task %d: %d of its %d polls ran off worker %d", k,
                     r->wrong, r->polls, spawner_worker);
        cr_assert_geq(r->polls, PIN_ROUNDS + 1);
    }
    cr_assert_eq(atomic_load(&pokes), PIN_TASKS * (PIN_ROUNDS / 3));
    cr_assert_eq(atomic_load(&poker_wrong), 0, "%d tasks pinned to another worker ran elsewhere",
                 atomic_load(&poker_wrong));
    finish_runtime(rt, 0);
}

/* ---- local tasks on a named worker -------------------------------------------- */

/* Yields `yields` times, checking its worker at every poll. Finishes with the
 * number of polls, or minus the number of polls off its worker. */
struct on_worker {
    int expected;
    int yields;
    int polls;
    int wrong;
    int64_t spin_ns; /* busy work per poll */
};

static rt_poll on_worker_poll(void *state, rt_context *cx, void **out)
{
    struct on_worker *s = state;
    s->polls++;
    if (rt_current_worker() != s->expected)
        s->wrong++;
    if (s->spin_ns > 0)
        spin_for(s->spin_ns);
    if (s->yields-- > 0)
        return rt_yield(cx);
    *out = (void *)(intptr_t)(s->wrong != 0 ? -s->wrong : s->polls);
    return RT_READY;
}

struct named_spawner {
    rt_runtime *rt;
    int rc[PIN_WORKERS];
    void *values[PIN_WORKERS];
    int wait_rc[PIN_WORKERS];
};

static void *named_spawner_thread(void *arg)
{
    struct named_spawner *n = arg;
    rt_task *h[PIN_WORKERS];
    for (int i = 0; i < PIN_WORKERS; i++) {
        struct on_worker s = {PIN_WORKERS - 1 - i, 25, 0, 0, 0};
        rt_spawn_options opts = options_for(PIN_WORKERS - 1 - i, NULL);
        n->rc[i] = rt_spawn_ex(n->rt, &opts, on_worker_poll, NULL, &s, sizeof s, &h[i]);
    }
    for (int i = 0; i < PIN_WORKERS; i++)
        if (n->rc[i] == 0)
            n->wait_rc[i] = rt_task_wait(h[i], WAIT_DEADLINE_NS, &n->values[i]);
    return NULL;
}

Test(local, a_task_spawned_onto_a_worker_index_from_a_foreign_thread_runs_there)
{
    rt_runtime *rt = new_runtime_budget(PIN_WORKERS, -1);
    cr_assert_eq(rt_current_worker(), -1, "the test thread is no worker");
    rt_task *h[PIN_WORKERS];
    for (int i = 0; i < PIN_WORKERS; i++) {
        struct on_worker s = {i, 25, 0, 0, 0};
        rt_spawn_options opts = options_for(i, "pinned");
        cr_assert_eq(rt_spawn_ex(rt, &opts, on_worker_poll, NULL, &s, sizeof s, &h[i]), 0);
    }
    struct named_spawner n;
    memset(&n, 0, sizeof n);
    n.rt = rt;
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, named_spawner_thread, &n), 0);
    for (int i = 0; i < PIN_WORKERS; i++) {
        void *value = NULL;
        cr_assert_eq(rt_task_wait(h[i], WAIT_DEADLINE_NS, &value), 0);
        cr_assert_eq((intptr_t)value, 26,
                     "task pinned to worker %d: %ld (negative: polls elsewhere)", i,
                     (long)(intptr_t)value);
    }
    pthread_join(thread, NULL);
    for (int i = 0; i < PIN_WORKERS; i++) {
        cr_assert_eq(n.rc[i], 0, "spawn from another thread: %s", rt_strerror(n.rc[i]));
        cr_assert_eq(n.wait_rc[i], 0);
        cr_assert_eq((intptr_t)n.values[i], 26, "task pinned to worker %d: %ld",
                     PIN_WORKERS - 1 - i, (long)(intptr_t)n.values[i]);
    }
    finish_runtime(rt, 0);
}

/* ---- bad worker indices --------------------------------------------------------- */

struct cross_runtime {
    rt_runtime *other;
    int rc_current;
    int rc_local;
    int rc_index;
    int rc_bad_index;
    int rc_local_own;
};

static rt_poll cross_runtime_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct cross_runtime *c = *(struct cross_runtime **)state;
    rt_spawn_options opts = options_for(RT_WORKER_CURRENT, NULL);
    c->rc_current = rt_spawn_ex(c->other, &opts, trivial_poll, counting_drop_fn, NULL, 0, NULL);
    c->rc_local = rt_spawn_local(c->other, trivial_poll, counting_drop_fn, NULL, 0, NULL);
    opts.worker = 0;
    c->rc_index = rt_spawn_ex(c->other, &opts, trivial_poll, NULL, NULL, 0, NULL);
    opts.worker = 7;
    c->rc_bad_index = rt_spawn_ex(NULL, &opts, trivial_poll, counting_drop_fn, NULL, 0, NULL);
    rt_task *h = NULL;
    c->rc_local_own = rt_spawn_local(rt_current(), trivial_poll, NULL, NULL, 0, &h);
    if (c->rc_local_own == 0)
        rt_task_detach(h);
    *out = NULL;
    return RT_READY;
}

Test(local, bad_worker_indices_and_current_outside_a_worker_are_einval)
{
    rt_runtime *rt = new_runtime_budget(2, -1);
    rt_task *h = NULL;
    int bad[] = {2, 3, 1000, INT_MAX, -3, INT_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rt_spawn_options opts = options_for(bad[i], NULL);
        cr_assert_eq(rt_spawn_ex(rt, &opts, trivial_poll, counting_drop_fn, NULL, 0, &h), -EINVAL,
                     "worker index %d on a 2-worker runtime", bad[i]);
    }
    rt_spawn_options opts = options_for(RT_WORKER_CURRENT, NULL);
    cr_assert_eq(rt_spawn_ex(rt, &opts, trivial_poll, counting_drop_fn, NULL, 0, &h), -EINVAL,
                 "RT_WORKER_CURRENT from the test thread");
    cr_assert_eq(rt_spawn_local(rt, trivial_poll, counting_drop_fn, NULL, 0, &h), -EINVAL);
    cr_assert_eq(rt_spawn_local(NULL, trivial_poll, counting_drop_fn, NULL, 0, &h), -EINVAL);
    /* The defaults, and opts NULL, are plain spawns. */
    opts = options_for(RT_WORKER_ANY, NULL);
    cr_assert_eq(rt_spawn_ex(rt, &opts, trivial_poll, NULL, NULL, 0, &h), 0);
    cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_spawn_ex(rt, NULL, trivial_poll, NULL, NULL, 0, &h), 0);
    cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, NULL), 0);

    /* From a task of another runtime: "current" means a worker of the wrong
     * runtime; an explicit index is fine. */
    rt_runtime *other = new_runtime_budget(1, -1);
    struct cross_runtime c = {other, INT_MIN, INT_MIN, INT_MIN, INT_MIN, INT_MIN};
    struct cross_runtime *cp = &c;
    cr_assert_eq(rt_block_on(rt, cross_runtime_poll, NULL, &cp, sizeof cp, NULL), 0);
    cr_assert_eq(c.rc_current, -EINVAL, "RT_WORKER_CURRENT onto another runtime: %d", c.rc_current);
    cr_assert_eq(c.rc_local, -EINVAL, "rt_spawn_local onto another runtime: %d", c.rc_local);
    cr_assert_eq(c.rc_index, 0, "worker index 0 of another runtime: %d", c.rc_index);
    cr_assert_eq(c.rc_bad_index, -EINVAL, "index 7 from a task: %d", c.rc_bad_index);
    cr_assert_eq(c.rc_local_own, 0, "rt_spawn_local onto its own runtime: %d", c.rc_local_own);

    rt_metrics m;
    finish_runtime_metrics(other, -1, &m);
    cr_assert_eq(m.spawned, 1);
    finish_runtime_metrics(rt, -1, &m);
    cr_assert_eq(m.spawned, 4, "two plain spawns, block_on and one local spawn");
    cr_assert_eq(atomic_load(&drops), 0, "a refused spawn ran its drop");
}

/* ---- local tasks are never stolen ----------------------------------------------- */

#define NOSTEAL_TASKS 40
#define NOSTEAL_YIELDS 20

Test(local, an_idle_worker_does_not_steal_the_local_tasks_of_a_busy_one)
{
    rt_runtime *rt = new_runtime_budget(2, -1);
    rt_task *h[NOSTEAL_TASKS];
    for (int i = 0; i < NOSTEAL_TASKS; i++) {
        struct on_worker s = {0, NOSTEAL_YIELDS, 0, 0, 30000};
        rt_spawn_options opts = options_for(0, NULL);
        cr_assert_eq(rt_spawn_ex(rt, &opts, on_worker_poll, NULL, &s, sizeof s, &h[i]), 0);
    }
    for (int i = 0; i < NOSTEAL_TASKS; i++) {
        void *value = NULL;
        cr_assert_eq(rt_task_wait(h[i], WAIT_DEADLINE_NS, &value), 0);
        cr_assert_eq((intptr_t)value, NOSTEAL_YIELDS + 1,
                     "local task %d: %ld (negative: polls on worker 1)", i, (long)(intptr_t)value);
    }
    rt_worker_metrics w0, w1;
    cr_assert_eq(rt_worker_metrics_read(rt, 0, &w0, sizeof w0), 0);
    cr_assert_eq(rt_worker_metrics_read(rt, 1, &w1, sizeof w1), 0);
    cr_log_info("worker 0: %llu polls; worker 1: %llu polls, %llu steals, %llu steal attempts",
                (unsigned long long)w0.polls, (unsigned long long)w1.polls,
                (unsigned long long)w1.steals, (unsigned long long)w1.steal_attempts);
    cr_assert_eq(w1.polls, 0, "the idle worker polled %llu times", (unsigned long long)w1.polls);
    cr_assert_eq(w1.steals, 0, "the idle worker stole %llu local tasks",
                 (unsigned long long)w1.steals);
    cr_assert_geq(w0.polls, NOSTEAL_TASKS * (NOSTEAL_YIELDS + 1));
    finish_runtime(rt, 0);
}

/* ---- aborted / cancelled local tasks -------------------------------------------- */

#define FOREVER_LOCAL 6

static struct event local_polled = EVENT_INIT;
static atomic_int local_wrong;

struct forever_local {
    struct gate *gate;
    void *buf;
    int expected; /* -1: unchecked */
    bool polled;
};

static rt_poll forever_local_poll(void *state, rt_context *cx, void **out)
{
    (void)out;
    struct forever_local *f = state;
    if (f->expected >= 0 && rt_current_worker() != f->expected)
        atomic_fetch_add(&local_wrong, 1);
    gate_pass(f->gate, cx);
    if (!f->polled) {
        f->polled = true;
        event_signal(&local_polled);
    }
    return RT_PENDING;
}

static void forever_local_drop(void *state)
{
    struct forever_local *f = state;
    gate_clear(f->gate);
    free(f->buf);
    counting_drop_fn(state);
}

struct local_spawner {
    struct gate *gates;
    int rc[2];
};

static rt_poll local_spawner_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct local_spawner *s = *(struct local_spawner **)state;
    for (int i = 0; i < 2; i++) {
        struct forever_local f = {&s->gates[i], malloc(48), -1, false};
        s->rc[i] = rt_spawn_local(NULL, forever_local_poll, forever_local_drop, &f, sizeof f, NULL);
        if (s->rc[i] != 0)
            free(f.buf);
    }
    *out = NULL;
    return RT_READY;
}

Test(local, local_tasks_aborted_or_cancelled_at_shutdown_are_dropped_once)
{
    rt_runtime *rt = new_runtime_budget(2, -1);
    struct gate gates[FOREVER_LOCAL + 2];
    for (int i = 0; i < FOREVER_LOCAL + 2; i++)
        gate_init(&gates[i]);
    rt_task *h[FOREVER_LOCAL];
    for (int i = 0; i < FOREVER_LOCAL; i++) {
        struct forever_local f = {&gates[i], malloc(64), 1, false};
        rt_spawn_options opts = options_for(1, "forever");
        cr_assert_eq(
            rt_spawn_ex(rt, &opts, forever_local_poll, forever_local_drop, &f, sizeof f, &h[i]), 0);
    }
    cr_assert(event_wait_for(&local_polled, FOREVER_LOCAL));
    for (int i = 0; i < FOREVER_LOCAL / 2; i++) {
        rt_task_abort(h[i]);
        cr_assert_eq(rt_task_wait(h[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    }
    cr_assert_eq(atomic_load(&drops), FOREVER_LOCAL / 2);
    for (int i = FOREVER_LOCAL / 2; i < FOREVER_LOCAL; i++)
        rt_task_detach(h[i]);

    struct local_spawner s = {&gates[FOREVER_LOCAL], {INT_MIN, INT_MIN}};
    struct local_spawner *sp = &s;
    cr_assert_eq(rt_block_on(rt, local_spawner_poll, NULL, &sp, sizeof sp, NULL), 0);
    cr_assert_eq(s.rc[0], 0);
    cr_assert_eq(s.rc[1], 0);

    rt_metrics m;
    finish_runtime_metrics(rt, FOREVER_LOCAL / 2 + 2, &m);
    cr_assert_eq(atomic_load(&drops), FOREVER_LOCAL + 2, "drops: %d", atomic_load(&drops));
    cr_assert_eq(m.cancelled, FOREVER_LOCAL + 2);
    cr_assert_eq(atomic_load(&local_wrong), 0, "a task pinned to worker 1 was polled elsewhere");
}

/* ---- task ids --------------------------------------------------------------------- */

/* Finishes with rt_task_current_id(). */
static rt_poll report_id_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = (void *)(uintptr_t)rt_task_current_id();
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
    t->outside = rt_task_current_id();
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
        if (rt_task_wait(h[i], WAIT_DEADLINE_NS, &value) != 0)
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
    int k;
    void *value;
};

static rt_poll id_parent_poll(void *state, rt_context *cx, void **out)
{
    struct id_parent *p = state;
    RT_CORO_BEGIN(&p->co);
    p->ids[ID_CHILDREN] = rt_task_current_id();
    for (p->k = 0; p->k < ID_CHILDREN; p->k++) {
        if (rt_spawn(NULL, report_id_poll, NULL, NULL, 0, &p->h[p->k]) != 0) {
            (*p->errors)++;
            RT_RETURN(&p->co, out, 0);
        }
        p->ids[p->k] = rt_task_id(p->h[p->k]);
    }
    /* Spawning does not change whose poll this is. */
    if (rt_task_current_id() != p->ids[ID_CHILDREN])
        (*p->mismatches)++;
    for (p->k = 0; p->k < ID_CHILDREN; p->k++) {
        RT_AWAIT(&p->co, rt_task_join(p->h[p->k], cx, &p->value, NULL));
        if ((uint64_t)(uintptr_t)p->value != p->ids[p->k])
            (*p->mismatches)++;
        if (rt_task_current_id() != p->ids[ID_CHILDREN])
            (*p->mismatches)++;
    }
    RT_RETURN(&p->co, out, 1);
    RT_CORO_END(&p->co, out);
}

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

Test(local, ids_are_unique_and_never_0_whoever_spawns)
{
    cr_assert_eq(rt_task_current_id(), 0, "the test thread runs no task");
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
    cr_assert_eq(rt_block_on(rt, id_parent_poll, NULL, &p, sizeof p, &value), 0);
    cr_assert_eq(value, (void *)1);
    cr_assert_eq(errors, 0);
    cr_assert_eq(mismatches, 0, "%d ids seen inside tasks differ from their handles'", mismatches);
    for (int t = 0; t < ID_THREADS; t++) {
        pthread_join(tids[t], NULL);
        cr_assert_eq(threads[t].outside, 0, "rt_task_current_id on a foreign thread");
        cr_assert_eq(threads[t].errors, 0);
        cr_assert_eq(threads[t].mismatches, 0,
                     "%d tasks saw another rt_task_current_id than rt_task_id of their handle",
                     threads[t].mismatches);
        memcpy(&all[t * ID_PER_THREAD], threads[t].ids, sizeof threads[t].ids);
    }
    n = ID_THREADS * ID_PER_THREAD + ID_CHILDREN + 1;
    /* Blocking jobs get ids from the same counter. */
    for (int i = 0; i < ID_JOBS; i++) {
        rt_task *h = NULL;
        cr_assert_eq(rt_spawn_blocking(rt, report_id_job, NULL, &h), 0);
        all[n++] = rt_task_id(h);
        cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, NULL), 0);
    }
    cr_assert_eq(n, ID_TOTAL);
    qsort(all, n, sizeof all[0], compare_u64);
    cr_assert_neq(all[0], 0, "a task got id 0");
    for (size_t i = 1; i < n; i++)
        cr_assert_neq(all[i], all[i - 1], "two tasks share the id %llu",
                      (unsigned long long)all[i]);
    cr_assert_eq(rt_task_current_id(), 0);
    finish_runtime(rt, 0);
}

static _Atomic uint64_t poll_id_seen;
static _Atomic uint64_t drop_id_seen;
static atomic_int id_changed;

static rt_poll id_probe_poll(void *state, rt_context *cx, void **out)
{
    int *yields = state;
    uint64_t id = rt_task_current_id();
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
    atomic_store(&drop_id_seen, rt_task_current_id());
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
    cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(atomic_load(&poll_id_seen), id, "poll saw id %llu, the handle says %llu",
                 (unsigned long long)atomic_load(&poll_id_seen), (unsigned long long)id);
    cr_assert_eq(atomic_load(&id_changed), 0, "the id changed between polls");
    cr_assert_eq(atomic_load(&drop_id_seen), id, "drop saw id %llu, the handle says %llu",
                 (unsigned long long)atomic_load(&drop_id_seen), (unsigned long long)id);
    cr_assert_eq(rt_task_current_id(), 0);
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

/* Records rt_task_current_name() at two polls. */
struct name_probe {
    struct name_report *r;
    int polls;
};

static rt_poll name_probe_poll(void *state, rt_context *cx, void **out)
{
    struct name_probe *p = state;
    copy_name(p->r->seen[p->polls], rt_task_current_name());
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
    cr_assert_null(rt_task_current_name(), "the test thread runs no task");
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
        cr_assert_eq(rt_task_wait(all[i], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_null(rt_task_current_name());
    finish_runtime(rt, 0);
}

/* ---- the cooperative budget ------------------------------------------------------ */

/* A leaf written as the header asks: ask for budget before an operation that
 * would complete at once. */
static rt_poll ready_leaf(rt_context *cx)
{
    if (!rt_coop_proceed(cx))
        return RT_PENDING; /* the task has been woken */
    return RT_READY;
}

static atomic_int flag_set;
static struct event flag_event = EVENT_INIT;

static rt_poll set_flag_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    atomic_store(&flag_set, 1);
    event_signal(&flag_event);
    *out = NULL;
    return RT_READY;
}

#define GREEDY_LIMIT 1000000L

struct greedy_report {
    long iterations;
    int saw_flag;
    int pendings;
    int polls;
    int spawn_rc;
};

/* Spawns the flag setter (onto its own worker, so the setter runs right
 * after this task yields), then completes ready leaf operations until it
 * sees the flag or reaches GREEDY_LIMIT. */
struct greedy {
    struct greedy_report *r;
    long i;
    bool spawned;
};

static rt_poll greedy_poll(void *state, rt_context *cx, void **out)
{
    struct greedy *g = state;
    g->r->polls++;
    if (!g->spawned) {
        g->spawned = true;
        g->r->spawn_rc = rt_spawn(NULL, set_flag_poll, NULL, NULL, 0, NULL);
    }
    for (;;) {
        if (atomic_load(&flag_set)) {
            g->r->saw_flag = 1;
            break;
        }
        if (g->i == GREEDY_LIMIT)
            break;
        if (ready_leaf(cx) == RT_PENDING) {
            g->r->pendings++;
            return RT_PENDING;
        }
        g->i++;
    }
    g->r->iterations = g->i;
    *out = NULL;
    return RT_READY;
}

static struct greedy_report run_greedy(rt_runtime *rt)
{
    struct greedy_report r = {-1, 0, 0, 0, INT_MIN};
    struct greedy g = {&r, 0, false};
    rt_task *h = NULL;
    cr_assert_eq(RT_SPAWN(rt, greedy_poll, NULL, &g, &h), 0);
    cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(r.spawn_rc, 0);
    cr_assert(event_wait_for(&flag_event, 1), "the flag setter never ran");
    cr_log_info("greedy task: %ld iterations, %d polls, %d pending leaves, flag %s", r.iterations,
                r.polls, r.pendings, r.saw_flag ? "seen" : "not seen");
    return r;
}

Test(local, with_the_budget_off_a_task_that_always_finds_data_ready_starves_its_worker)
{
    rt_runtime *rt = new_runtime_budget(1, 0);
    struct greedy_report r = run_greedy(rt);
    cr_assert_not(r.saw_flag, "the other task ran after %ld iterations with the budget off",
                  r.iterations);
    cr_assert_eq(r.iterations, GREEDY_LIMIT);
    cr_assert_eq(r.pendings, 0, "rt_coop_proceed returned false with budget 0");
    cr_assert_eq(r.polls, 1);
    finish_runtime(rt, 0);
}

Test(local, with_the_default_budget_the_other_task_runs_once_the_budget_is_spent)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cr_assert_eq(cfg.budget, 128);
    rt_runtime *rt = new_runtime_budget(1, -1);
    struct greedy_report r = run_greedy(rt);
    cr_assert(r.saw_flag, "the other task never ran while the greedy one went on (%ld iterations)",
              r.iterations);
    cr_assert_eq(r.iterations, 128, "the other task ran after %ld iterations, budget 128",
                 r.iterations);
    cr_assert_eq(r.pendings, 1);
    cr_assert_eq(r.polls, 2);
    finish_runtime(rt, 0);
}

Test(local, a_small_budget_lets_the_other_task_run_after_that_many_operations)
{
    rt_runtime *rt = new_runtime_budget(1, 10);
    struct greedy_report r = run_greedy(rt);
    cr_assert(r.saw_flag);
    cr_assert_eq(r.iterations, 10, "the other task ran after %ld iterations, budget 10",
                 r.iterations);
    cr_assert_eq(r.polls, 2);
    finish_runtime(rt, 0);
}

#define BUDGET_POLLS 3

/* Counts how many times rt_coop_proceed says yes in each poll, and returns
 * RT_PENDING without storing any waker when it says no: only the wake the
 * budget promises brings the next poll. */
struct budget_counter {
    int counts[BUDGET_POLLS];
    int polls;
};

static rt_poll budget_counter_poll(void *state, rt_context *cx, void **out)
{
    struct budget_counter *b = state;
    int n = 0;
    while (rt_coop_proceed(cx) && n < 100000)
        n++;
    b->counts[b->polls++] = n;
    if (b->polls < BUDGET_POLLS)
        return RT_PENDING;
    *out = (void *)(intptr_t)(b->counts[0] * 1000000 + b->counts[1] * 1000 + b->counts[2]);
    return RT_READY;
}

Test(local, a_poll_completes_exactly_budget_operations_and_a_refused_leaf_woke_the_task)
{
    rt_runtime *rt = new_runtime_budget(2, 7);
    struct budget_counter b;
    memset(&b, 0, sizeof b);
    rt_task *h = NULL;
    cr_assert_eq(RT_SPAWN(rt, budget_counter_poll, NULL, &b, &h), 0);
    void *value = NULL;
    int rc = rt_task_wait(h, 10 * SEC, &value);
    if (rc == -ETIMEDOUT) {
        rt_task_abort(h);
        cr_assert_eq(rt_task_wait(h, WAIT_DEADLINE_NS, NULL), -ECANCELED);
        finish_runtime(rt, 0);
        cr_assert_fail("rt_coop_proceed returned false without waking the task");
    }
    cr_assert_eq(rc, 0);
    cr_assert_eq((intptr_t)value, 7 * 1000000 + 7 * 1000 + 7,
                 "operations per poll: %ld (3 polls, 3 digits each), expected 7 each",
                 (long)(intptr_t)value);
    finish_runtime(rt, 0);
}

Test(local, coop_proceed_is_always_true_outside_a_worker_and_wakes_nothing)
{
    struct counting_waker w;
    counting_waker_init(&w);
    rt_context cx = counting_context(&w);
    for (int i = 0; i < 10000; i++)
        cr_assert(rt_coop_proceed(&cx), "rt_coop_proceed false at call %d on the test thread", i);
    /* Also while a runtime with a tiny budget exists. */
    rt_runtime *rt = new_runtime_budget(1, 1);
    for (int i = 0; i < 1000; i++)
        cr_assert(rt_coop_proceed(&cx));
    cr_assert_eq(atomic_load(&w.wakes_by_ref) + atomic_load(&w.wakes_by_value), 0);
    cr_assert_eq(counting_outstanding(&w), 0);
    finish_runtime(rt, 0);
}
