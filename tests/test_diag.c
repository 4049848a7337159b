/* Task dumps, lost wake-up and stall reports, poll timing (diag.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "support.h"

/* ---- Tasks that wait on purpose ------------------------------------------ */

/* A coroutine waiting for a lock that the test thread holds. */
struct locker {
    rt_coro co;
    rt_mutex *m;
    rt_mutex_lock lock;
    struct event *polled;
};

/* Written by every locker (the same value), read by the test. */
static atomic_int locker_await_line;

static rt_poll locker_poll(void *p, rt_context *cx, void **out)
{
    struct locker *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_mutex_lock_init(&s->lock, s->m);
    event_signal(s->polled);
    atomic_store(&locker_await_line, __LINE__ + 1);
    RT_AWAIT_HOLD(&s->co, cx, &s->lock);
    RT_CORO_END(&s->co, out);
}

/* A coroutine waiting on a channel nobody sends on. */
struct receiver {
    rt_coro co;
    rt_chan *ch;
    rt_chan_recv recv;
    struct event *polled;
};

static rt_poll receiver_poll(void *p, rt_context *cx, void **out)
{
    struct receiver *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_chan_recv_init(&s->recv, s->ch);
    event_signal(s->polled);
    RT_AWAIT(&s->co, cx, &s->recv);
    RT_CORO_END(&s->co, out);
}

/* What a visit saw, by kind. */
struct seen {
    int waiting, lock, recv, lost, coro_lines_ok, spawned_here, no_worker;
    uint64_t lock_id;
};

static int note_task(const rt_task_info *t, void *arg)
{
    struct seen *s = arg;
    cr_assert_geq(t->size, sizeof(rt_task_info));
    if (t->state == RT_TASK_WAITING)
        s->waiting++;
    if (t->state == RT_TASK_WAITING && (t->worker < 0 || t->worker > 1))
        s->no_worker++;
    if (t->wait.kind == RT_WAIT_LOCK) {
        s->lock++;
        s->lock_id = t->id;
        if (t->await_line == atomic_load(&locker_await_line) && t->await_file != NULL &&
            strstr(t->await_file, "test_diag.c") != NULL &&
            strcmp(t->await_function, "locker_poll") == 0)
            s->coro_lines_ok++;
    }
    if (t->wait.kind == RT_WAIT_RECV)
        s->recv++;
    if (t->lost_wakeup)
        s->lost++;
    if (t->spawned_at != NULL && strstr(t->spawned_at, "test_diag.c:") != NULL)
        s->spawned_here++;
    return 0;
}

Test(diag, tasks_says_where_each_waits_and_on_what)
{
    rt_runtime *rt = new_runtime(2);
    struct event polled = EVENT_INIT;
    rt_mutex *m;
    cr_assert_eq(rt_mutex_new(&m), 0);
    cr_assert_eq(rt_mutex_try_lock(m), 0);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(4, &ch), 0);

    enum { LOCKERS = 50 };
    for (int i = 0; i < LOCKERS; i++) {
        struct locker l = {.m = m, .polled = &polled};
        cr_assert_eq(rt_spawn(rt, locker_poll, rt_coro_drop, &l, sizeof l, NULL), 0);
    }
    struct receiver r = {.ch = ch, .polled = &polled};
    cr_assert_eq(rt_spawn(rt, receiver_poll, rt_coro_drop, &r, sizeof r, NULL), 0);
    cr_assert(event_wait_for(&polled, LOCKERS + 1));
    cr_assert(wait_all_workers_parked(rt));

    struct seen s = {0};
    cr_assert_eq(rt_runtime_tasks(rt, note_task, &s), LOCKERS + 1);
    cr_assert_eq(s.waiting, LOCKERS + 1);
    cr_assert_eq(s.lock, LOCKERS);
    cr_assert_eq(s.coro_lines_ok, LOCKERS);
    cr_assert_eq(s.recv, 1);
    cr_assert_eq(s.lost, 0, "every waiting task has its waker stored");
    cr_assert_eq(s.spawned_here, LOCKERS + 1);
    cr_assert_eq(s.no_worker, 0, "a waiting task names the worker that last polled it");

    /* The text groups the lockers into one block. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_eq(rt_runtime_dump(rt, f), 0);
    fclose(f);
    char expect[128];
    snprintf(expect, sizeof expect, "%d tasks waiting at ", LOCKERS);
    cr_assert(strstr(text, expect) != NULL, "%s", text);
    snprintf(expect, sizeof expect, "test_diag.c:%d in locker_poll",
             atomic_load(&locker_await_line));
    cr_assert(strstr(text, expect) != NULL, "%s", text);
    cr_assert(strstr(text, "1 task waiting at ") != NULL, "%s", text);
    cr_assert(strstr(text, "and 42 more") != NULL, "%s", text);
    free(text);

    /* A look lets nothing slip: every locker still gets the lock in turn. */
    rt_mutex_unlock(m);
    rt_chan_close(ch);
    rt_metrics done;
    do {
        cr_assert(wait_all_workers_parked(rt));
        rt_metrics_read(rt, &done, sizeof done);
    } while (done.completed < LOCKERS + 1);
    finish_runtime(rt, 0);
    rt_chan_sender_drop(ch);
    rt_chan_receiver_drop(ch, NULL, NULL);
    rt_mutex_drop(m);
}

/* ---- Lost wake-ups ----------------------------------------------------------- */

/* Returns pending without keeping its waker: nothing can wake it again. */
struct forgetful {
    rt_coro co;
    struct event *polled;
};

static rt_poll forgetful_poll(void *p, rt_context *cx, void **out)
{
    struct forgetful *s = p;
    (void)cx;
    RT_CORO_BEGIN(&s->co);
    event_signal(s->polled);
    RT_AWAIT_POLL(&s->co, RT_PENDING);
    RT_CORO_END(&s->co, out);
}

struct reports {
    struct event got;
    atomic_int lost, stalls;
    atomic_uint_fast64_t task_id;
    atomic_long duration_ns;
    atomic_int worker;
    atomic_int line;
    int wake_fd; /* a stall report writes here, which ends the stall */
};

static void on_report(const rt_report *rep, void *arg)
{
    struct reports *r = arg;
    cr_assert_geq(rep->size, sizeof(rt_report));
    if (rep->kind == RT_REPORT_LOST_WAKEUP)
        atomic_fetch_add(&r->lost, 1);
    /* A busy machine may hold a worker in a short poll long enough for a
     * report too: only the stall at the blocking read ends the test's. */
    if (rep->kind == RT_REPORT_STALL && rep->await_line > 0) {
        atomic_fetch_add(&r->stalls, 1);
        atomic_store(&r->duration_ns, (long)rep->duration_ns);
        atomic_store(&r->worker, rep->worker);
        atomic_store(&r->line, rep->await_line);
        if (r->wake_fd >= 0) {
            char c = 1;
            cr_assert_eq(write(r->wake_fd, &c, 1), 1);
        }
    }
    if (rep->kind == RT_REPORT_LOST_WAKEUP)
        atomic_store(&r->line, rep->await_line);
    atomic_store(&r->task_id, rep->task_id);
    event_signal(&r->got);
}

Test(diag, a_task_without_a_waker_is_reported_as_lost_once)
{
    struct reports r = {.got = EVENT_INIT, .wake_fd = -1};
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.report = on_report;
    cfg.report_arg = &r;
    rt_runtime *rt = new_runtime_config(&cfg);
    struct event polled = EVENT_INIT;
    struct forgetful fg = {.polled = &polled};
    rt_task *task;
    cr_assert_eq(rt_spawn(rt, forgetful_poll, rt_coro_drop, &fg, sizeof fg, &task), 0);
    cr_assert(event_wait_for(&polled, 1));
    /* The workers sweep their registries before they sleep. */
    cr_assert(event_wait_for(&r.got, 1));
    cr_assert_eq(atomic_load(&r.lost), 1);
    cr_assert_eq(atomic_load(&r.task_id), rt_task_id(task));
    cr_assert_gt(atomic_load(&r.line), 0, "the report names the await point");

    struct seen s = {0};
    cr_assert_eq(rt_runtime_tasks(rt, note_task, &s), 1);
    cr_assert_eq(s.lost, 1);
    rt_metrics m;
    rt_metrics_read(rt, &m, sizeof m);
    cr_assert_eq(m.lost_wakeups, 1);

    /* An abort still ends it. */
    rt_task_cancel(task);
    cr_assert_eq(task_wait_status(task, -1, NULL), -ECANCELED);
    cr_assert(wait_all_workers_parked(rt));
    cr_assert_eq(atomic_load(&r.lost), 1, "reported once");
    finish_runtime(rt, 0);
}

/* ---- Stalls -------------------------------------------------------------------- */

struct blocker {
    rt_coro co;
    int fd; /* read with the worker blocked until the report writes */
};

static atomic_int blocker_line;

static rt_poll blocker_poll(void *p, rt_context *cx, void **out)
{
    struct blocker *s = p;
    RT_CORO_BEGIN(&s->co);
    atomic_store(&blocker_line, __LINE__ + 1);
    RT_CORO_YIELD(&s->co, cx);
    {
        char c;
        /* A blocking call on a worker: exactly what the watchdog is for. */
        cr_assert_eq(read(s->fd, &c, 1), 1);
    }
    RT_CORO_END(&s->co, out);
}

Test(diag, a_poll_that_blocks_its_worker_is_reported_as_a_stall)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    struct reports r = {.got = EVENT_INIT, .wake_fd = fds[1]};
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.stall_ns = 20 * 1000000;
    cfg.report = on_report;
    cfg.report_arg = &r;
    rt_runtime *rt = new_runtime_config(&cfg);
    struct blocker b = {.fd = fds[0]};
    rt_task *task;
    cr_assert_eq(rt_spawn(rt, blocker_poll, rt_coro_drop, &b, sizeof b, &task), 0);
    cr_assert_eq(task_wait_status(task, -1, NULL), 0);
    cr_assert_geq(atomic_load(&r.stalls), 1);
    cr_assert_geq(atomic_load(&r.duration_ns), cfg.stall_ns);
    cr_assert_eq(atomic_load(&r.line), atomic_load(&blocker_line),
                 "the stall names where the poll started: %d vs %d, %d reports",
                 atomic_load(&r.line), atomic_load(&blocker_line), atomic_load(&r.stalls));
    cr_assert_geq(atomic_load(&r.worker), 0);
    rt_metrics m;
    rt_metrics_read(rt, &m, sizeof m);
    cr_assert_geq(m.stalls, 1);
    finish_runtime(rt, 0);
    close(fds[0]);
    close(fds[1]);
}

/* ---- Dumps under load ------------------------------------------------------------ */

struct churner {
    rt_coro co;
    rt_sleep nap;
    int rounds;
};

static rt_poll churner_poll(void *p, rt_context *cx, void **out)
{
    struct churner *s = p;
    RT_CORO_BEGIN(&s->co);
    while (s->rounds-- > 0) {
        if (s->rounds % 2 == 0) {
            rt_sleep_init(&s->nap, NULL, 10000);
            RT_AWAIT(&s->co, cx, &s->nap);
        } else {
            RT_CORO_YIELD(&s->co, cx);
        }
    }
    RT_CORO_END(&s->co, out);
}

static int count_only(const rt_task_info *t, void *arg)
{
    (void)t;
    (*(int *)arg)++;
    return 0;
}

Test(diag, dumps_while_tasks_spawn_finish_and_are_aborted)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.poll_timing = 1;
    rt_runtime *rt = new_runtime_config(&cfg);
    enum { TASKS = 400 };
    rt_task *tasks[TASKS];
    for (int i = 0; i < TASKS; i++) {
        struct churner c = {.rounds = 40};
        cr_assert_eq(rt_spawn(rt, churner_poll, rt_coro_drop, &c, sizeof c, &tasks[i]), 0);
        if (i % 3 == 0)
            rt_task_cancel(tasks[i]);
        if (i % 20 == 0) {
            int n = 0;
            cr_assert_geq(rt_runtime_tasks(rt, count_only, &n), 0);
            FILE *null = fopen("/dev/null", "w");
            cr_assert_eq(rt_runtime_dump(rt, null), 0);
            fclose(null);
        }
    }
    for (int i = 0; i < TASKS; i++) {
        int err = task_wait_status(tasks[i], -1, NULL);
        cr_assert(err == 0 || err == -ECANCELED);
    }
    /* A poll is counted once its worker is done with the task. */
    cr_assert(wait_all_workers_parked(rt));
    rt_worker_metrics w;
    uint64_t polls = 0, delays = 0;
    for (unsigned i = 0; i < 2; i++) {
        cr_assert_eq(rt_worker_metrics_read(rt, i, &w, sizeof w), 0);
        for (unsigned b = 0; b < RT_HIST_BUCKETS; b++)
            polls += w.poll_ns_hist[b], delays += w.sched_delay_hist[b];
    }
    rt_metrics m;
    rt_metrics_read(rt, &m, sizeof m);
    uint64_t all_polls = 0;
    for (unsigned i = 0; i < 2; i++) {
        rt_worker_metrics_read(rt, i, &w, sizeof w);
        all_polls += w.polls;
    }
    cr_assert_eq(polls, all_polls, "every poll is in the histogram");
    cr_assert_eq(delays, all_polls, "every poll has a scheduling delay");
    finish_runtime(rt, 0);
}

static int nested(const rt_task_info *t, void *arg)
{
    (void)t;
    rt_runtime *rt = arg;
    cr_assert_eq(rt_runtime_tasks(rt, count_only, NULL), -EDEADLK);
    return 7;
}

Test(diag, errors)
{
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(rt_runtime_tasks(NULL, count_only, NULL), -EINVAL);
    cr_assert_eq(rt_runtime_tasks(rt, NULL, NULL), -EINVAL);
    cr_assert_eq(rt_runtime_dump(rt, NULL), -EINVAL);
    cr_assert_eq(rt_runtime_dump_fd(rt, -1), -EBADF);
    struct event polled = EVENT_INIT;
    struct forgetful fg = {.polled = &polled};
    rt_task *task;
    cr_assert_eq(rt_spawn(rt, forgetful_poll, rt_coro_drop, &fg, sizeof fg, &task), 0);
    cr_assert(event_wait_for(&polled, 1));
    cr_assert_eq(rt_runtime_tasks(rt, nested, rt), 7, "a visit's value stops the walk");
    rt_task_cancel(task);
    cr_assert_eq(task_wait_status(task, -1, NULL), -ECANCELED);
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.stall_ns = -1;
    rt_runtime *bad;
    cr_assert_eq(rt_runtime_new(&cfg, &bad), -EINVAL);
    cr_assert_eq(rt_runtime_shutdown(rt), 0);
    int n = 0;
    cr_assert_eq(rt_runtime_tasks(rt, count_only, &n), -ESHUTDOWN);
    cr_assert_eq(rt_runtime_free(rt), 0);
}

/* ---- The dump on a signal -------------------------------------------------------- */

Test(diag, the_dump_signal_makes_the_reactor_write_a_dump)
{
    /* Blocked before the runtime starts, so its threads block it too and
     * the listener's signalfd takes it (the handler would work as well). */
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.dump_signal = SIGUSR1;
    cfg.dump_fd = fds[1];
    rt_runtime *rt = new_runtime_config(&cfg);
    struct event polled = EVENT_INIT;
    struct forgetful fg = {.polled = &polled};
    rt_task *task;
    cr_assert_eq(rt_spawn(rt, forgetful_poll, rt_coro_drop, &fg, sizeof fg, &task), 0);
    cr_assert(event_wait_for(&polled, 1));
    /* Its poll signals before it returns, and the sweep that reports it
     * lost holds it for a moment: only once the worker sleeps is it sure to
     * be dumped as waiting (and not running) at its await point. */
    cr_assert(wait_all_workers_parked(rt));

    /* Two signals, two dumps, each read to its last group. */
    for (int round = 0; round < 2; round++) {
        cr_assert_eq(kill(getpid(), SIGUSR1), 0);
        char buf[4096] = "";
        size_t len = 0;
        while (strstr(buf, "in forgetful_poll") == NULL || strstr(buf, "spawned at") == NULL) {
            ssize_t n = read(fds[0], buf + len, sizeof buf - 1 - len);
            cr_assert_gt(n, 0);
            len += (size_t)n;
            buf[len] = '\0';
        }
        cr_assert(strstr(buf, "asyncrt task dump: 1 tasks") != NULL, "%s", buf);
    }
    rt_task_cancel(task);
    cr_assert_eq(task_wait_status(task, -1, NULL), -ECANCELED);
    finish_runtime(rt, 0);
    close(fds[0]);
    close(fds[1]);
}

Test(diag, a_dump_signal_that_cannot_be_listened_for_fails_the_runtime_cleanly)
{
    int before = count_fds();
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.dump_signal = SIGKILL;
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -EINVAL);
    cr_assert_null(rt);
    cr_assert_eq(count_fds(), before);
}

/* ---- Looks never lose a wake ------------------------------------------------------ */

/* Two tasks pass a turn back and forth through two notifies, ROUNDS times:
 * a wake lost while a dump holds one of them stops the pair for good. */
#define PAIRS 16
#define ROUNDS 400

struct player {
    rt_coro co;
    rt_notify *mine, *theirs;
    int round;
    bool serves;
    rt_notified turn;
};

static rt_poll player_poll(void *p, rt_context *cx, void **out)
{
    struct player *s = p;
    RT_CORO_BEGIN(&s->co);
    for (s->round = 0; s->round < ROUNDS; s->round++) {
        if (!s->serves || s->round > 0) {
            rt_notified_init(&s->turn, s->mine);
            RT_AWAIT(&s->co, cx, &s->turn);
        }
        rt_notify_one(s->theirs);
    }
    RT_CORO_END(&s->co, out);
}

static atomic_bool stop_looking;

static void *looker(void *arg)
{
    rt_runtime *rt = arg;
    while (!atomic_load(&stop_looking)) {
        int n = 0;
        cr_assert_geq(rt_runtime_tasks(rt, count_only, &n), 0);
    }
    return NULL;
}

Test(diag, wakes_and_aborts_during_looks_are_never_lost)
{
    rt_runtime *rt = new_runtime(2);
    rt_notify *n[2 * PAIRS];
    for (int i = 0; i < 2 * PAIRS; i++)
        cr_assert_eq(rt_notify_new(&n[i]), 0);
    pthread_t lookers[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&lookers[i], NULL, looker, rt), 0);
    rt_task *tasks[2 * PAIRS];
    for (int i = 0; i < PAIRS; i++) {
        struct player a = {.mine = n[2 * i], .theirs = n[2 * i + 1], .serves = true};
        struct player b = {.mine = n[2 * i + 1], .theirs = n[2 * i]};
        cr_assert_eq(rt_spawn(rt, player_poll, rt_coro_drop, &a, sizeof a, &tasks[2 * i]), 0);
        cr_assert_eq(rt_spawn(rt, player_poll, rt_coro_drop, &b, sizeof b, &tasks[2 * i + 1]), 0);
    }
    /* A few waiting tasks aborted while the lookers hold them. */
    rt_task *doomed[PAIRS];
    struct event polled = EVENT_INIT;
    for (int i = 0; i < PAIRS; i++) {
        struct forgetful fg = {.polled = &polled};
        cr_assert_eq(rt_spawn(rt, forgetful_poll, rt_coro_drop, &fg, sizeof fg, &doomed[i]), 0);
    }
    cr_assert(event_wait_for(&polled, PAIRS));
    for (int i = 0; i < PAIRS; i++) {
        rt_task_cancel(doomed[i]);
        cr_assert_eq(task_wait_status(doomed[i], WAIT_DEADLINE_NS, NULL), -ECANCELED);
    }
    for (int i = 0; i < 2 * PAIRS; i++)
        cr_assert_eq(task_wait_status(tasks[i], WAIT_DEADLINE_NS, NULL), 0, "pair %d stopped",
                     i / 2);
    atomic_store(&stop_looking, true);
    for (int i = 0; i < 2; i++)
        pthread_join(lookers[i], NULL);
    finish_runtime(rt, 0);
    for (int i = 0; i < 2 * PAIRS; i++)
        rt_notify_drop(n[i]);
}
