/* Black-box tests of local (pinned) tasks (asyncrt/task.h: rt_spawn_local,
 * rt_spawn_ex with a worker index or RT_WORKER_CURRENT): every poll on the
 * one worker, whoever wakes the task (the reactor included); a task spawned onto a worker index
 * from a foreign thread runs there; bad indices are refused; an idle worker
 * never steals them; and local tasks aborted or cancelled at shutdown are
 * dropped once. */
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

/* ---- helpers ----------------------------------------------------------- */

/* Keeps the calling thread busy for about `ns`. */
static void spin_for(int64_t ns)
{
    int64_t end = rt_now_ns() + ns;
    while (rt_now_ns() < end) {
    }
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
    rt_task_join joins[PIN_TASKS];
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
    for (s->k = 0; s->k < PIN_TASKS; s->k++) {
        rt_task_join_init(&s->joins[s->k], s->h[s->k]);
        RT_AWAIT(&s->co, cx, &s->joins[s->k]);
    }
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
    cr_assert_eq(block_on_status(rt, pin_spawner_poll, NULL, &s, sizeof s, &value), 0);

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

/* ---- local tasks woken by the reactor ------------------------------------------ */

#define SLEEPER_ROUNDS 40

struct local_sleeper {
    int expected; /* the worker it is pinned to */
    int rounds;   /* sleeps still to take */
    int wrong;    /* polls on another worker */
    int armed;    /* `sleep` is initialised */
    rt_sleep sleep;
};

/* Sleeps SLEEPER_ROUNDS times: every wake comes from the reactor's batch,
 * which must send a local task to its own worker, never to the shared wakes
 * queue that any worker takes from. */
static rt_poll local_sleeper_poll(void *state, rt_context *cx, void **out)
{
    struct local_sleeper *s = state;
    if (rt_current_worker() != s->expected)
        s->wrong++;
    for (;;) {
        if (!s->armed) {
            if (s->rounds == 0) {
                *out = (void *)(intptr_t)s->wrong;
                return RT_READY;
            }
            cr_assert_eq(rt_sleep_init(&s->sleep, NULL, 200000), 0);
            s->armed = 1;
        }
        if (RT_POLL_OP(&s->sleep, cx) == RT_PENDING)
            return RT_PENDING;
        cr_assert_eq(s->sleep.result, 0);
        /* A finished sleep has released its timer: nothing to drop. */
        s->armed = 0;
        s->rounds--;
    }
}

static void local_sleeper_drop(void *state)
{
    struct local_sleeper *s = state;
    if (s->armed)
        RT_DROP(&s->sleep);
}

Test(local, a_local_task_woken_by_the_reactor_is_polled_only_on_its_worker)
{
    rt_runtime *rt = new_runtime_budget(PIN_WORKERS, -1);
    rt_task *h[PIN_WORKERS * PIN_TASKS];
    for (int i = 0; i < PIN_WORKERS * PIN_TASKS; i++) {
        int worker = i % PIN_WORKERS;
        struct local_sleeper s = {.expected = worker, .rounds = SLEEPER_ROUNDS};
        rt_spawn_options opts = options_for(worker, NULL);
        cr_assert_eq(
            rt_spawn_ex(rt, &opts, local_sleeper_poll, local_sleeper_drop, &s, sizeof s, &h[i]), 0);
    }
    for (int i = 0; i < PIN_WORKERS * PIN_TASKS; i++) {
        void *v = NULL;
        cr_assert_eq(task_wait_status(h[i], WAIT_DEADLINE_NS, &v), 0);
        cr_assert_eq((intptr_t)v, 0, "local task %d was polled %d times on another worker", i,
                     (int)(intptr_t)v);
    }
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
            n->wait_rc[i] = task_wait_status(h[i], WAIT_DEADLINE_NS, &n->values[i]);
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
        cr_assert_eq(task_wait_status(h[i], WAIT_DEADLINE_NS, &value), 0);
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
    c->rc_current = rt_spawn_ex(c->other, &opts, trivial_poll, counting_drop, NULL, 0, NULL);
    c->rc_local = rt_spawn_local(c->other, trivial_poll, counting_drop, NULL, 0, NULL);
    opts.worker = 0;
    c->rc_index = rt_spawn_ex(c->other, &opts, trivial_poll, NULL, NULL, 0, NULL);
    opts.worker = 7;
    c->rc_bad_index = rt_spawn_ex(NULL, &opts, trivial_poll, counting_drop, NULL, 0, NULL);
    rt_task *h = NULL;
    c->rc_local_own = rt_spawn_local(rt_current_runtime(), trivial_poll, NULL, NULL, 0, &h);
    if (c->rc_local_own == 0)
        rt_task_drop(h);
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
        cr_assert_eq(rt_spawn_ex(rt, &opts, trivial_poll, counting_drop, NULL, 0, &h), -EINVAL,
                     "worker index %d on a 2-worker runtime", bad[i]);
    }
    rt_spawn_options opts = options_for(RT_WORKER_CURRENT, NULL);
    cr_assert_eq(rt_spawn_ex(rt, &opts, trivial_poll, counting_drop, NULL, 0, &h), -EINVAL,
                 "RT_WORKER_CURRENT from the test thread");
    cr_assert_eq(rt_spawn_local(rt, trivial_poll, counting_drop, NULL, 0, &h), -EINVAL);
    cr_assert_eq(rt_spawn_local(NULL, trivial_poll, counting_drop, NULL, 0, &h), -EINVAL);
    /* The defaults, and opts NULL, are plain spawns. */
    opts = options_for(RT_WORKER_ANY, NULL);
    cr_assert_eq(rt_spawn_ex(rt, &opts, trivial_poll, NULL, NULL, 0, &h), 0);
    cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_spawn_ex(rt, NULL, trivial_poll, NULL, NULL, 0, &h), 0);
    cr_assert_eq(task_wait_status(h, WAIT_DEADLINE_NS, NULL), 0);

    /* From a task of another runtime: "current" means a worker of the wrong
     * runtime; an explicit index is fine. */
    rt_runtime *other = new_runtime_budget(1, -1);
    struct cross_runtime c = {other, INT_MIN, INT_MIN, INT_MIN, INT_MIN, INT_MIN};
    struct cross_runtime *cp = &c;
    cr_assert_eq(block_on_status(rt, cross_runtime_poll, NULL, &cp, sizeof cp, NULL), 0);
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
        cr_assert_eq(task_wait_status(h[i], WAIT_DEADLINE_NS, &value), 0);
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
    counting_drop(state);
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
        rt_task_cancel(h[i]);
        cr_assert_eq(task_wait_status(h[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    }
    cr_assert_eq(atomic_load(&drops), FOREVER_LOCAL / 2);
    for (int i = FOREVER_LOCAL / 2; i < FOREVER_LOCAL; i++)
        rt_task_drop(h[i]);

    struct local_spawner s = {&gates[FOREVER_LOCAL], {INT_MIN, INT_MIN}};
    struct local_spawner *sp = &s;
    cr_assert_eq(block_on_status(rt, local_spawner_poll, NULL, &sp, sizeof sp, NULL), 0);
    cr_assert_eq(s.rc[0], 0);
    cr_assert_eq(s.rc[1], 0);

    rt_metrics m;
    finish_runtime_metrics(rt, FOREVER_LOCAL / 2 + 2, &m);
    cr_assert_eq(atomic_load(&drops), FOREVER_LOCAL + 2, "drops: %d", atomic_load(&drops));
    cr_assert_eq(m.cancelled, FOREVER_LOCAL + 2);
    cr_assert_eq(atomic_load(&local_wrong), 0, "a task pinned to worker 1 was polled elsewhere");
}
