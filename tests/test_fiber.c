/* Black-box tests of fibers (asyncrt/fiber.h): a fiber is a task (joined,
 * waited for, in a group, pinned), keeps its locals across awaits on every
 * kind of operation, migrates between workers, talks to stackless tasks
 * over one channel and one mutex, and stops cleanly when cancelled or shut
 * down: the await in progress returns -ECANCELED, so does every later
 * one, a shield lets cleanup do I/O, and a fiber that ignores the cancel
 * past shutdown's deadline is abandoned and counted. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(fiber, .timeout = 120, .fini = fail_on_leaks);

/* ---- a fiber is a task -------------------------------------------------- */

static void *add_one(void *arg)
{
    return (void *)((uintptr_t)arg + 1);
}

Test(fiber, spawned_from_a_thread_returns_its_result_to_a_wait)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, add_one, (void *)41, &t), 0);
    void *value = NULL;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_eq((uintptr_t)value, 42);
    finish_runtime(rt, 0);
}

static void *fails(void *arg)
{
    (void)arg;
    cr_assert_eq(rt_fiber_set_status(1), -EINVAL);
    rt_fiber_set_status(-EPROTO);
    return NULL;
}

Test(fiber, finishes_with_the_status_it_set)
{
    rt_runtime *rt = new_runtime(1);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, fails, NULL, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), -EPROTO);
    finish_runtime(rt, 0);
}

Test(fiber, calls_outside_a_fiber_fail_with_eperm)
{
    cr_assert(!rt_in_fiber());
    cr_assert(!rt_fiber_cancelled());
    rt_sleep op;
    rt_sleep_init(&op, NULL, 0);
    cr_assert_eq(rt_fiber_await(&op.future), -EPERM);
    cr_assert_eq(rt_sleep_await(1), -EPERM);
    cr_assert_eq(rt_fiber_yield(), -EPERM);
    cr_assert_eq(rt_fiber_set_status(0), -EPERM);
    cr_assert_eq(rt_fiber_shield(0), -EPERM);
    void *v = (void *)1;
    cr_assert_eq(rt_chan_recv_await(NULL, &v), -EPERM);
    cr_assert_null(v);
    cr_assert_eq(rt_fiber_spawn(NULL, add_one, NULL, NULL), -EINVAL);
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(rt_fiber_spawn(rt, NULL, NULL, NULL), -EINVAL);
    finish_runtime(rt, 0);
}

/* Locals across awaits: a buffer filled before each sleep is intact after
 * it, on whatever worker the fiber resumes. */
static void *keeps_locals(void *arg)
{
    (void)arg;
    unsigned char buf[2048];
    uint64_t sum = 0;
    for (unsigned round = 0; round < 20; round++) {
        memset(buf, (int)round, sizeof buf);
        cr_assert_eq(rt_fiber_yield(), 0);
        cr_assert_eq(rt_sleep_await(100 * 1000), 0);
        for (size_t i = 0; i < sizeof buf; i++)
            cr_assert_eq(buf[i], round);
        sum += round;
    }
    return (void *)(uintptr_t)sum;
}

Test(fiber, keeps_its_locals_across_awaits)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *t[8];
    for (int i = 0; i < 8; i++)
        cr_assert_eq(rt_fiber_spawn(rt, keeps_locals, NULL, &t[i]), 0);
    for (int i = 0; i < 8; i++) {
        void *v;
        cr_assert_eq(task_wait_status(t[i], WAIT_DEADLINE_NS, &v), 0);
        cr_assert_eq((uintptr_t)v, 190);
    }
    finish_runtime(rt, 0);
}

/* ---- fibers spawn and join fibers and stackless tasks ------------------- */

static void *fib(void *arg)
{
    uintptr_t n = (uintptr_t)arg;
    if (n < 2)
        return (void *)n;
    rt_task *a, *b;
    cr_assert_eq(rt_fiber_spawn(NULL, fib, (void *)(n - 1), &a), 0);
    cr_assert_eq(rt_fiber_spawn(NULL, fib, (void *)(n - 2), &b), 0);
    rt_task_join ja, jb;
    rt_task_join_init(&ja, a);
    rt_task_join_init(&jb, b);
    cr_assert_eq(rt_fiber_await(&ja.future), 0);
    cr_assert_eq(rt_fiber_await(&jb.future), 0);
    return (void *)((uintptr_t)ja.value + (uintptr_t)jb.value);
}

Test(fiber, fork_join_of_fibers)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, fib, (void *)15, &t), 0);
    void *v;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq((uintptr_t)v, 610);
    finish_runtime(rt, 0);
}

/* A stackless task that receives n values and sends back their sum. */
struct summer {
    rt_coro co;
    rt_chan *in, *out;
    uintptr_t n, sum;
    rt_chan_recv recv;
    rt_chan_send send;
};

static void summer_drop(void *state)
{
    struct summer *s = state;
    RT_DROP(&s->recv);
    RT_DROP(&s->send);
    rt_chan_receiver_drop(s->in, NULL, NULL);
    rt_chan_sender_drop(s->out);
}

static rt_poll summer_poll(void *state, rt_context *cx, void **out)
{
    struct summer *s = state;
    RT_CORO_BEGIN(&s->co);
    while (s->n > 0) {
        rt_chan_recv_init(&s->recv, s->in);
        RT_AWAIT(&s->co, cx, &s->recv);
        cr_assert_eq(s->recv.result, 0);
        s->sum += (uintptr_t)s->recv.value;
        s->n--;
    }
    rt_chan_send_init(&s->send, s->out, (void *)s->sum);
    RT_AWAIT(&s->co, cx, &s->send);
    RT_RETURN(&s->co, out, (void *)s->sum);
    RT_CORO_END(&s->co, out);
}

static void *feeds_a_task(void *arg)
{
    (void)arg;
    rt_chan *to, *from;
    cr_assert_eq(rt_chan_new(1, &to), 0);
    cr_assert_eq(rt_chan_new(1, &from), 0);
    struct summer s = {.in = to, .out = from, .n = 100};
    rt_task *t;
    cr_assert_eq(rt_spawn(NULL, summer_poll, summer_drop, &s, sizeof s, &t), 0);
    for (uintptr_t i = 1; i <= 100; i++)
        cr_assert_eq(rt_chan_send_await(to, (void *)i), 0);
    void *sum;
    cr_assert_eq(rt_chan_recv_await(from, &sum), 0);
    rt_task_join j;
    rt_task_join_init(&j, t);
    cr_assert_eq(rt_fiber_await(&j.future), 0);
    cr_assert_eq((uintptr_t)j.value, 5050);
    rt_chan_sender_drop(to);
    rt_chan_receiver_drop(from, NULL, NULL);
    return sum;
}

Test(fiber, and_a_stackless_task_share_channels_and_join)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, feeds_a_task, NULL, &t), 0);
    void *v;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq((uintptr_t)v, 5050);
    finish_runtime(rt, 0);
}

/* Many fibers increment one counter under one async mutex, yielding while
 * they hold it, so that a lost exclusion shows as a lost update. */
struct shared_count {
    rt_mutex *m;
    uint64_t value;
};

static void *count_under_lock(void *arg)
{
    struct shared_count *c = arg;
    for (int i = 0; i < 200; i++) {
        cr_assert_eq(rt_mutex_lock_await(c->m), 0);
        uint64_t v = c->value;
        rt_fiber_yield();
        c->value = v + 1;
        rt_mutex_unlock(c->m);
    }
    return NULL;
}

Test(fiber, a_mutex_excludes_across_workers)
{
    rt_runtime *rt = new_runtime(2);
    struct shared_count c = {0};
    cr_assert_eq(rt_mutex_new(&c.m), 0);
    rt_task *t[16];
    for (int i = 0; i < 16; i++)
        cr_assert_eq(rt_fiber_spawn(rt, count_under_lock, &c, &t[i]), 0);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(task_wait_status(t[i], WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(c.value, 16 * 200);
    rt_mutex_drop(c.m);
    finish_runtime(rt, 0);
}

/* ---- migration ---------------------------------------------------------- */

static void *notes_workers(void *arg)
{
    atomic_uint *seen = arg; /* a bit per worker the fiber ran on */
    for (int i = 0; i < 2000; i++) {
        atomic_fetch_or(seen, 1u << rt_current_worker());
        if (atomic_load(seen) == 3u)
            break;
        rt_sleep_await(10 * 1000);
    }
    return NULL;
}

Test(fiber, resumes_on_another_worker)
{
    /* Busy fibers keep both workers in play, so that a sleeper woken by the
     * reactor goes to whichever worker takes it from the injector. */
    rt_runtime *rt = new_runtime(2);
    atomic_uint seen[8];
    rt_task *t[8];
    for (int i = 0; i < 8; i++) {
        atomic_init(&seen[i], 0);
        cr_assert_eq(rt_fiber_spawn(rt, notes_workers, &seen[i], &t[i]), 0);
    }
    bool migrated = false;
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(task_wait_status(t[i], WAIT_DEADLINE_NS, NULL), 0);
        migrated |= atomic_load(&seen[i]) == 3u;
    }
    cr_assert(migrated, "no fiber ran on both workers");
    finish_runtime(rt, 0);
}

static void *stays_put(void *arg)
{
    int *where = arg;
    int first = rt_current_worker();
    for (int i = 0; i < 200; i++) {
        rt_sleep_await(10 * 1000);
        if (rt_current_worker() != first)
            *where = -1;
    }
    if (*where != -1)
        *where = first;
    return NULL;
}

Test(fiber, a_pinned_fiber_never_migrates)
{
    rt_runtime *rt = new_runtime(2);
    rt_fiber_options o;
    rt_fiber_options_init(&o);
    o.worker = 1;
    o.name = "pinned";
    int where = 0;
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn_ex(rt, &o, stays_put, &where, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(where, 1);
    finish_runtime(rt, 0);
}

/* ---- cancellation and shutdown ------------------------------------------ */

struct cancel_probe {
    struct event started;
    int first, second, yield;
    bool ran;
};

static void *waits_forever(void *arg)
{
    struct cancel_probe *p = arg;
    p->ran = true;
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    event_signal(&p->started);
    void *v;
    p->first = rt_chan_recv_await(ch, &v); /* nobody sends */
    p->second = rt_sleep_await(1);
    p->yield = rt_fiber_yield();
    cr_assert(rt_fiber_cancelled());
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    return (void *)1; /* discarded: the joiner sees NULL */
}

Test(fiber, cancel_fails_the_await_in_progress_and_every_later_one)
{
    rt_runtime *rt = new_runtime(2);
    struct cancel_probe p = {0};
    p.started = (struct event)EVENT_INIT;
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, waits_forever, &p, &t), 0);
    cr_assert(event_wait_for_s(&p.started, 1, EVENT_DEADLINE_S));
    rt_task_cancel(t);
    void *v = (void *)1;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), -ECANCELED);
    cr_assert_null(v);
    cr_assert_eq(p.first, -ECANCELED);
    cr_assert_eq(p.second, -ECANCELED);
    cr_assert_eq(p.yield, -ECANCELED);
    finish_runtime(rt, 0);
}

static void *frees_its_arg(void *arg)
{
    int *seen = arg;
    seen[0] = rt_sleep_await(1);
    seen[1] = 1;
    return NULL;
}

/* Holds the only worker until the test lets it go. */
struct hold {
    struct event running;
    atomic_bool release;
};

static rt_poll hold_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct hold *h = *(struct hold **)state;
    event_signal(&h->running);
    while (!atomic_load(&h->release))
        sched_yield();
    *out = NULL;
    return RT_READY;
}

Test(fiber, cancelled_before_it_ran_still_runs_to_release_its_arg)
{
    rt_runtime *rt = new_runtime(1);
    /* The worker is held, so the fiber is queued, not run, when the cancel
     * comes. */
    struct hold h = {.running = EVENT_INIT};
    atomic_init(&h.release, false);
    struct hold *hp = &h;
    rt_task *hold;
    cr_assert_eq(rt_spawn(rt, hold_poll, NULL, &hp, sizeof hp, &hold), 0);
    cr_assert(event_wait_for_s(&h.running, 1, EVENT_DEADLINE_S));
    int seen[2] = {0, 0};
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, frees_its_arg, seen, &t), 0);
    rt_task_cancel(t);
    atomic_store(&h.release, true);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(seen[1], 1);
    cr_assert_eq(seen[0], -ECANCELED);
    cr_assert_eq(task_wait_status(hold, WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
}

/* After a cancel, a shield lets the cleanup write a goodbye line. */
struct goodbye {
    rt_runtime *rt;
    int fd; /* the write end of a pipe */
    struct event started;
    int before, inside, after;
};

static void *says_goodbye(void *arg)
{
    struct goodbye *g = arg;
    rt_io *io;
    cr_assert_eq(rt_io_open(g->rt, g->fd, &io), 0);
    event_signal(&g->started);
    g->before = rt_sleep_await(3600 * SEC);
    cr_assert_eq(rt_fiber_shield(10 * SEC), 0);
    g->inside = (int)rt_io_write_all_await(io, "bye\n", 4);
    rt_fiber_unshield();
    g->after = rt_sleep_await(1);
    rt_io_close(io);
    return NULL;
}

Test(fiber, a_shield_lets_cleanup_do_io_after_a_cancel)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    make_pipe(fds);
    struct goodbye g = {.rt = rt, .fd = fds[1]};
    g.started = (struct event)EVENT_INIT;
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, says_goodbye, &g, &t), 0);
    cr_assert(event_wait_for_s(&g.started, 1, EVENT_DEADLINE_S));
    rt_task_cancel(t);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert_eq(g.before, -ECANCELED);
    cr_assert_eq(g.inside, 4);
    cr_assert_eq(g.after, -ECANCELED);
    char buf[8] = {0};
    cr_assert_eq(read(fds[0], buf, sizeof buf), 4);
    cr_assert_str_eq(buf, "bye\n");
    close(fds[0]);
    finish_runtime(rt, 0);
}

static void *sleeps_long(void *arg)
{
    int *result = arg;
    *result = rt_sleep_await(3600 * SEC);
    return NULL;
}

Test(fiber, shutdown_cancels_waiting_fibers_which_return)
{
    rt_runtime *rt = new_runtime(2);
    int results[4] = {1, 1, 1, 1};
    rt_task *fibers[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(rt_fiber_spawn(rt, sleeps_long, &results[i], &fibers[i]), 0);
    /* Each must be waiting in its sleep: one that first runs after the
     * shutdown began gets -ESHUTDOWN from its sleep and returns uncancelled.
     * Without diagnostics, parked workers tell it, which a worker just woken
     * for the last of them can still fool. */
    for (int i = 0; i < 4; i++)
        if (!wait_task_waiting(rt, rt_task_id(fibers[i])))
            cr_assert(wait_all_workers_parked(rt));
    rt_metrics m = shut_down(rt, 4);
    cr_assert_eq(m.fibers_abandoned, 0);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(results[i], -ECANCELED);
        cr_assert_eq(task_wait_status(fibers[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    }
    rt_runtime_free(rt);
}

/* Ignores the cancel: keeps awaiting until shutdown's deadline abandons it. */
static void *ignores_cancel(void *arg)
{
    atomic_int *awaits = arg;
    for (;;) {
        atomic_fetch_add(awaits, 1);
        rt_sleep_await(3600 * SEC);
    }
    return NULL;
}

Test(fiber, shutdown_abandons_a_fiber_that_ignores_the_cancel)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.fiber_shutdown_ns = 20 * MS;
    rt_runtime *rt = new_runtime_config(&cfg);
    atomic_int awaits;
    atomic_init(&awaits, 0);
    rt_fiber_options o;
    rt_fiber_options_init(&o);
    o.stack_size = 16 * 1024;
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn_ex(rt, &o, ignores_cancel, &awaits, &t), 0);
    /* Waiting in its sleep, as above. */
    if (!wait_task_waiting(rt, rt_task_id(t)))
        cr_assert(wait_all_workers_parked(rt));
    rt_task_drop(t);
    rt_metrics m = shut_down(rt, 1);
    cr_assert_eq(m.fibers_abandoned, 1);
    cr_assert_gt(atomic_load(&awaits), 1);
    rt_runtime_free(rt);
}

/* ---- stacks ------------------------------------------------------------- */

static void *deep(void *arg)
{
    uintptr_t depth = (uintptr_t)arg;
    volatile char frame[1024];
    frame[0] = (char)depth;
    if (depth > 0) {
        if (depth % 16 == 0)
            rt_fiber_yield();
        void *r = deep((void *)(depth - 1));
        return (void *)((uintptr_t)r + (uintptr_t)frame[0] - (uintptr_t)(char)depth + 1);
    }
    return (void *)0;
}

Test(fiber, a_stack_of_the_size_asked_for_holds_deep_frames)
{
    rt_runtime *rt = new_runtime(2);
    rt_fiber_options o;
    rt_fiber_options_init(&o);
    o.stack_size = 1024 * 1024;
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn_ex(rt, &o, deep, (void *)400, &t), 0);
    void *v;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq((uintptr_t)v, 400);
    finish_runtime(rt, 0);
}

/* Stacks are reused: many short fibers one after the other. */
Test(fiber, many_fibers_in_sequence_reuse_stacks)
{
    rt_runtime *rt = new_runtime(2);
    for (int i = 0; i < 2000; i++) {
        rt_task *t;
        cr_assert_eq(rt_fiber_spawn(rt, add_one, (void *)(uintptr_t)i, &t), 0);
        void *v;
        cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), 0);
        cr_assert_eq((uintptr_t)v, (uintptr_t)i + 1);
    }
    finish_runtime(rt, 0);
}

/* ---- the blocking pool -------------------------------------------------- */

static void *blocking_double(void *arg)
{
    usleep(1000);
    return (void *)((uintptr_t)arg * 2);
}

static void *runs_blocking(void *arg)
{
    void *r = NULL;
    cr_assert_eq(rt_fiber_run_blocking(blocking_double, arg, &r), 0);
    /* A thread-blocking call fails at once inside a fiber. */
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(NULL, add_one, NULL, &t), 0);
    cr_assert_eq(rt_task_wait(t, 0, NULL, NULL), -EDEADLK);
    rt_task_join j;
    rt_task_join_init(&j, t);
    cr_assert_eq(rt_fiber_await(&j.future), 0);
    return r;
}

Test(fiber, runs_a_blocking_function_on_the_pool)
{
    rt_runtime *rt = new_runtime(1);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, runs_blocking, (void *)21, &t), 0);
    void *v;
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, &v), 0);
    cr_assert_eq((uintptr_t)v, 42);
    finish_runtime(rt, 0);
}

/* A job that writes into the fiber's locals once it is let go. */
struct local_job {
    struct event started, release;
    char buf[4096];
};

static void *fills_the_fiber_buffer(void *arg)
{
    struct local_job *j = arg;
    event_signal(&j->started);
    cr_assert(event_wait_for_s(&j->release, 1, EVENT_DEADLINE_S));
    memset(j->buf, 'j', sizeof j->buf);
    return NULL;
}

static struct local_job *_Atomic shared_job; /* the fiber's local, for the test */
static _Atomic int buffer_after_cancel;

static void *lends_its_locals(void *arg)
{
    (void)arg;
    struct local_job job = {EVENT_INIT, EVENT_INIT, {0}};
    shared_job = &job;
    int e = rt_fiber_run_blocking(fills_the_fiber_buffer, &job, NULL);
    cr_assert_eq(e, -ECANCELED);
    atomic_store(&buffer_after_cancel, job.buf[0] == 'j' && job.buf[4095] == 'j');
    return NULL;
}

Test(fiber, a_cancel_waits_for_the_blocking_job_that_uses_the_fiber_locals)
{
    rt_runtime *rt = new_runtime(2);
    if (!diagnostics_built_in(rt)) {
        finish_runtime(rt, 0);
        cr_skip_test("the fiber's state cannot be seen without diagnostics");
    }
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, lends_its_locals, NULL, &t), 0);
    struct local_job *job;
    while ((job = atomic_load(&shared_job)) == NULL) /* set before the job starts */
        sched_yield();
    cr_assert(event_wait_for_s(&job->started, 1, EVENT_DEADLINE_S));
    /* A cancel that comes while the fiber still runs (before it switched out
     * in the await) takes effect at its next switch: the job could finish
     * first and the await succeed. */
    cr_assert(wait_task_waiting(rt, rt_task_id(t)));
    rt_task_cancel(t); /* the fiber must not return while the job runs */
    event_signal(&job->release);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(atomic_load(&buffer_after_cancel), "the fiber went on before the job ended");
    finish_runtime(rt, 0);
}

/* ---- rt_config.fiber_migrate -------------------------------------------- */

static void *hops(void *arg)
{
    unsigned *seen = arg;
    for (int i = 0; i < 500 && *seen != 3u; i++) {
        *seen |= 1u << rt_current_worker();
        cr_assert_eq(rt_sleep_await(0), 0);
    }
    return NULL;
}

Test(fiber, the_migrate_option_moves_a_lone_fiber_between_workers)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.fiber_migrate = 1;
    rt_runtime *rt = new_runtime_config(&cfg);
    unsigned seen = 0;
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, hops, &seen, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(seen, 3u, "the fiber stayed on worker %u", seen == 1u ? 0u : 1u);
    finish_runtime(rt, 0);
}

/* ---- a stack overflow names the fiber ----------------------------------- */

/* Sanitizers report an overflow themselves; qemu-user cannot fork a
 * process whose other threads run (support.h). */
#if !defined(TEST_HAVE_LSAN) && !defined(TEST_HAVE_TSAN) && !defined(TEST_UNDER_EMULATOR)
/* Deep enough for any stack of the test: each frame holds 512 bytes. */
static uintptr_t descend(uintptr_t depth)
{
    volatile char frame[512];
    frame[0] = (char)depth;
    if (depth == 0)
        return (uintptr_t)frame[0];
    return descend(depth - 1) + (uintptr_t)frame[0];
}

static void *recurses(void *arg)
{
    (void)arg;
    return (void *)descend(1u << 20);
}

/* In a child process, since the overflow ends it: its standard error must
 * name the fiber's spawn site, and it must die of SIGSEGV. */
Test(fiber, an_overflow_into_the_guard_page_names_the_fiber)
{
    int err_pipe[2];
    cr_assert_eq(pipe(err_pipe), 0);
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        dup2(err_pipe[1], 2);
        close(err_pipe[0]);
        rt_runtime *rt;
        if (rt_runtime_new(NULL, &rt) < 0)
            _exit(3);
        rt_fiber_options o;
        rt_fiber_options_init(&o);
        o.stack_size = 64 * 1024;
        rt_task *t;
        if (rt_fiber_spawn_ex(rt, &o, recurses, NULL, &t) < 0)
            _exit(4);
        rt_task_wait(t, -1, NULL, NULL);
        _exit(5); /* never: the overflow kills the process */
    }
    close(err_pipe[1]);
    char buf[1024] = {0};
    size_t got = 0;
    ssize_t n;
    while (got < sizeof buf - 1 && (n = read(err_pipe[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)n;
    close(err_pipe[0]);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "status %#x, stderr: %s", status,
              buf);
    cr_assert(strstr(buf, "fiber stack overflow") != NULL, "stderr: %s", buf);
    cr_assert(strstr(buf, "test_fiber.c:") != NULL, "stderr: %s", buf);
}
#endif
