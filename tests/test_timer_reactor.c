/* Black-box tests of the timer protocol between pollers and the reactor:
 * sleeps dropped and polled again while the reactor fires them keep every
 * promise, sleeps armed while the runtime shuts down are woken and leak
 * nothing, a backlog of several reactor turns is released whole at shutdown,
 * a busy worker yields to a reactor overdue for a deadline or held after its
 * nap (debug-yield builds hold the reactor in a named window), and without
 * epoll_pwait2 the reactor falls back and neither spins nor fires early. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_timer.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

TestSuite(timer, .timeout = 110, .fini = fail_on_leaks);

/* ---- the timer's protocol under races ------------------------------------------------- */

/* Threads poll sleeps by hand while the reactor fires them: drops race the
 * reactor taking the arm command and firing, and polls that replace the
 * waker race the fire. timer_internal.h promises: a timer fires or is
 * cancelled, never both; a waker stored by a poll that returns pending is
 * the one woken (a poll that loses the race to the fire sees it fired);
 * every waker reference is given back; nothing is freed while in use. */
#define RACE_THREADS 3
#define RACE_ROUNDS 3000

enum race_mode { RACE_DROP_AT_ONCE, RACE_REPOLL_NEAR_FIRE, RACE_WAIT_FOR_WAKE };

struct race_round {
    struct counting_waker first;  /* given to the first poll */
    struct counting_waker second; /* given to the re-poll (RACE_REPOLL_NEAR_FIRE) */
    enum race_mode mode;
    bool ready_at_once; /* the first poll found the deadline passed */
    rt_poll repoll;     /* what the re-poll returned */
    bool woke_before_deadline;
};

struct race_thread {
    rt_runtime *rt;
    struct race_round *rounds;
    unsigned seed;
    bool hung; /* a wake the protocol promises never came */
};

static void *race_thread_main(void *arg)
{
    struct race_thread *th = arg;
    for (int i = 0; i < RACE_ROUNDS && !th->hung; i++) {
        struct race_round *r = &th->rounds[i];
        counting_waker_init(&r->first);
        counting_waker_init(&r->second);
        r->mode = (enum race_mode)(i % 3);
        rt_context first = counting_context(&r->first);
        rt_context second = counting_context(&r->second);
        /* 0 to 400 us: around the wheel's 250 us tick, so the reactor files
         * and fires while this thread is still busy with the sleep. */
        int64_t duration = (int64_t)(rand_r(&th->seed) % 5) * 100000;
        rt_sleep s;
        rt_sleep_init(&s, th->rt, duration);
        if (RT_POLL_OP(&s, &first) == RT_READY) {
            r->ready_at_once = true;
            RT_DROP(&s);
            continue;
        }
        if (r->mode == RACE_REPOLL_NEAR_FIRE) {
            /* Spin (not sleep) to a random point near the deadline, to land
             * the re-poll on either side of the fire. */
            int64_t until = s.deadline_ns + (int64_t)(rand_r(&th->seed) % 600000) - 200000;
            while (rt_now_ns() < until) {
            }
            r->repoll = RT_POLL_OP(&s, &second);
            if (r->repoll == RT_PENDING) {
                if (!event_wait_for(&r->second.woken, 1))
                    th->hung = true;
                else if (RT_POLL_OP(&s, &second) != RT_READY)
                    th->hung = true;
            }
        } else if (r->mode == RACE_WAIT_FOR_WAKE) {
            if (!event_wait_for(&r->first.woken, 1) || RT_POLL_OP(&s, &first) != RT_READY)
                th->hung = true;
            r->woke_before_deadline = rt_now_ns() < s.deadline_ns;
        }
        RT_DROP(&s);
    }
    return NULL;
}

Test(timer, sleeps_dropped_and_repolled_while_the_reactor_fires_keep_every_promise)
{
    rt_runtime *rt = new_runtime(2);
    struct race_thread threads[RACE_THREADS];
    pthread_t tids[RACE_THREADS];
    for (int t = 0; t < RACE_THREADS; t++) {
        threads[t] = (struct race_thread){rt, calloc(RACE_ROUNDS, sizeof(struct race_round)),
                                          0x7157u + (unsigned)t, false};
        cr_assert_not_null(threads[t].rounds);
        cr_assert_eq(pthread_create(&tids[t], NULL, race_thread_main, &threads[t]), 0);
    }
    for (int t = 0; t < RACE_THREADS; t++)
        pthread_join(tids[t], NULL);
    /* Shutdown joins the reactor: after it, no wake can still be on its way. */
    finish_runtime(rt, 0);

    long raced = 0, repoll_pending = 0, repoll_ready = 0;
    for (int t = 0; t < RACE_THREADS; t++) {
        cr_assert(!threads[t].hung, "thread %d: a sleep was never woken, or not ready after", t);
        for (int i = 0; i < RACE_ROUNDS; i++) {
            struct race_round *r = &threads[t].rounds[i];
            long a = counting_wakes(&r->first), b = counting_wakes(&r->second);
            cr_assert_eq(counting_outstanding(&r->first), 0, "thread %d round %d: %ld references",
                         t, i, counting_outstanding(&r->first));
            cr_assert_eq(counting_outstanding(&r->second), 0, "thread %d round %d: %ld references",
                         t, i, counting_outstanding(&r->second));
            cr_assert_leq(a + b, 1, "thread %d round %d: woken %ld + %ld times", t, i, a, b);
            if (r->ready_at_once)
                continue;
            raced++;
            switch (r->mode) {
            case RACE_DROP_AT_ONCE:
                break; /* fired first or cancelled first: either is fine */
            case RACE_REPOLL_NEAR_FIRE:
                *(r->repoll == RT_PENDING ? &repoll_pending : &repoll_ready) += 1;
                if (r->repoll == RT_PENDING)
                    cr_assert(a == 0 && b == 1,
                              "thread %d round %d: re-poll pending, yet wakes %ld / %ld", t, i, a,
                              b);
                else
                    cr_assert(a == 1 && atomic_load(&r->second.clones) == 0,
                              "thread %d round %d: re-poll ready, yet wakes %ld / %ld", t, i, a, b);
                break;
            case RACE_WAIT_FOR_WAKE:
                cr_assert_eq(a, 1, "thread %d round %d: woken %ld times", t, i, a);
                cr_assert(!r->woke_before_deadline, "thread %d round %d: early", t, i);
                break;
            }
        }
        free(threads[t].rounds);
    }
    cr_log_info("%ld rounds raced the reactor; re-polls: %ld pending, %ld ready", raced,
                repoll_pending, repoll_ready);
    cr_assert_gt(raced, RACE_THREADS * RACE_ROUNDS / 2, "only %ld rounds raced the reactor", raced);
}

/* Threads keep arming sleeps by hand while the runtime shuts down: a poll
 * that returned pending must have its waker woken by the shutdown (timer.h),
 * whichever step of the reactor's stop it raced (its arm command queued
 * just before the last look at the queue, or a waker stored while the
 * reactor released its wheel), and nothing may leak. */
/* In debug-yield builds the library has named race windows a test may
 * stretch (src/base/atomic.h, RT__DEBUG_WINDOW); elsewhere the hook is absent and
 * this weak reference is NULL. Stretching makes the two races certain: a
 * first poll that has passed the reactor's stopping check when shutdown
 * begins, and a second poll between its checks and its lock. */
extern void (*volatile rt__debug_window_hook)(const char *window) __attribute__((weak));

static atomic_int stop_race_stretch; /* 1: stretch the next "timer.submit", 2: "timer.repoll" */
static atomic_int stop_race_stretched;
/* Signalled each time rt_runtime_shutdown returns; stop_race_round counts
 * the shutdowns begun, so the hook knows which return it waits for. */
static struct event stop_race_shut_down = EVENT_INIT;
static atomic_int stop_race_round;

static void stop_race_hook(const char *window)
{
    int want = strcmp(window, "timer.submit") == 0   ? 1
               : strcmp(window, "timer.repoll") == 0 ? 2
                                                     : 0;
    int expected = want;
    if (want == 0 || !atomic_compare_exchange_strong(&stop_race_stretch, &expected, 0))
        return;
    /* Hold the poll until shutdown has returned, or for 50 ms when shutdown
     * waits for this very poll (as the submit gate makes it do). */
    event_wait_for_ms(&stop_race_shut_down, (unsigned long)atomic_load(&stop_race_round), 50);
    atomic_fetch_add(&stop_race_stretched, 1);
}

#define STOP_RACE_THREADS 2
#define STOP_RACE_SLEEPS 600
#define STOP_RACE_ROUNDS 16

struct stop_race_sleep {
    rt_sleep s;
    struct counting_waker first, second;
    /* The waker the last pending poll stored, NULL if the sleep is ready. */
    struct counting_waker *waiting;
};

struct stop_race_thread {
    rt_runtime *rt;
    struct stop_race_sleep *sleeps;
    int used;
    struct event *progress;
    bool bad_error; /* a ready poll without -ESHUTDOWN */
};

static void *stop_race_main(void *arg)
{
    struct stop_race_thread *th = arg;
    for (int i = 0; i < STOP_RACE_SLEEPS; i++) {
        struct stop_race_sleep *p = &th->sleeps[i];
        counting_waker_init(&p->first);
        counting_waker_init(&p->second);
        rt_context first = counting_context(&p->first);
        rt_context second = counting_context(&p->second);
        th->used = i + 1;
        rt_sleep_init(&p->s, th->rt, 10 * SEC);
        if (RT_POLL_OP(&p->s, &first) == RT_READY)
            p->waiting = NULL;
        else if (i % 2 == 0)
            p->waiting = &p->first;
        else /* replace the waker, racing the stop's release of the wheel */
            p->waiting = RT_POLL_OP(&p->s, &second) == RT_PENDING ? &p->second : NULL;
        /* Ready only because shutdown began: a 10 s sleep cannot be due. */
        if (p->waiting == NULL && p->s.result != -ESHUTDOWN)
            th->bad_error = true;
        if (i == 50)
            event_signal(th->progress);
        if (p->waiting == NULL)
            break; /* the runtime is shutting down: enough */
    }
    return NULL;
}

Test(timer, sleeps_armed_by_hand_while_the_runtime_shuts_down_are_woken_and_leak_nothing)
{
    bool can_stretch = &rt__debug_window_hook != NULL;
    if (can_stretch)
        rt__debug_window_hook = stop_race_hook;
    atomic_store(&stop_race_stretched, 0);
    for (int round = 0; round < STOP_RACE_ROUNDS; round++) {
        rt_runtime *rt = new_runtime(1);
        struct event progress = EVENT_INIT;
        struct stop_race_thread threads[STOP_RACE_THREADS];
        pthread_t tids[STOP_RACE_THREADS];
        for (int t = 0; t < STOP_RACE_THREADS; t++) {
            threads[t] = (struct stop_race_thread){
                rt, calloc(STOP_RACE_SLEEPS, sizeof(struct stop_race_sleep)), 0, &progress, false};
            cr_assert_not_null(threads[t].sleeps);
            cr_assert_eq(pthread_create(&tids[t], NULL, stop_race_main, &threads[t]), 0);
        }
        cr_assert(event_wait_for(&progress, STOP_RACE_THREADS), "the threads made no progress");
        atomic_store(&stop_race_round, round + 1);
        atomic_store(&stop_race_stretch, round % 2 + 1);
        cr_assert_geq(rt_runtime_shutdown(rt), 0);
        atomic_store(&stop_race_stretch, 0);
        event_signal(&stop_race_shut_down);
        for (int t = 0; t < STOP_RACE_THREADS; t++)
            pthread_join(tids[t], NULL);
        /* Shutdown has returned and the threads are done: every waker a
         * pending poll left stored has been woken by now, exactly once. */
        for (int t = 0; t < STOP_RACE_THREADS; t++) {
            struct stop_race_thread *th = &threads[t];
            cr_assert(!th->bad_error, "round %d thread %d: a ready poll without -ESHUTDOWN", round,
                      t);
            for (int i = 0; i < th->used; i++) {
                struct stop_race_sleep *p = &th->sleeps[i];
                long a = counting_wakes(&p->first), b = counting_wakes(&p->second);
                if (p->waiting == &p->first)
                    cr_assert(a == 1 && b == 0,
                              "round %d thread %d sleep %d: pending with the first waker, "
                              "woken %ld / %ld times",
                              round, t, i, a, b);
                else if (p->waiting == &p->second)
                    cr_assert(b == 1 && a == 0,
                              "round %d thread %d sleep %d: pending with the second waker, "
                              "woken %ld / %ld times",
                              round, t, i, a, b);
                RT_DROP(&p->s);
                cr_assert_eq(counting_outstanding(&p->first), 0);
                cr_assert_eq(counting_outstanding(&p->second), 0);
            }
            free(th->sleeps);
        }
        cr_assert_eq(rt_runtime_free(rt), 0);
    }
    if (can_stretch) {
        rt__debug_window_hook = NULL;
        cr_log_info("%d of %d shutdowns raced a stretched poll", atomic_load(&stop_race_stretched),
                    STOP_RACE_ROUNDS);
        cr_assert_gt(atomic_load(&stop_race_stretched), 0, "no shutdown met a stretched window");
    }
}

/* A reactor files at most 1024 commands per turn (src/reactor/reactor.c); at
 * shutdown it must still release every command queued, however many turns'
 * worth. The hook holds one reactor turn (debug-yield builds) while this
 * thread arms more than two turns' worth of sleeps by hand, and lets it go
 * on only once shutdown has begun, so the reactor's last turn takes one
 * budget and its stop must take the rest. */
#define BACKLOG_SLEEPS 3000

static atomic_int backlog_hold;                    /* 1: hold the next reactor turn */
static struct event backlog_held = EVENT_INIT;     /* the reactor is held */
static struct event backlog_stopping = EVENT_INIT; /* shutdown set `stopping` */

/* Holds the reactor in window `name` once, if `*hold` is 1: signals `held`,
 * then waits for `release` (30 s at most). */
static void hold_reactor_once(const char *window, const char *name, atomic_int *hold,
                              struct event *held, struct event *release)
{
    int expected = 1;
    if (strcmp(window, name) == 0 && atomic_compare_exchange_strong(hold, &expected, 0)) {
        event_signal(held);
        event_wait_for_s(release, 1, 30);
    }
}

static void backlog_hook(const char *window)
{
    if (strcmp(window, "reactor.stopping") == 0)
        event_signal(&backlog_stopping);
    else
        hold_reactor_once(window, "reactor.turn", &backlog_hold, &backlog_held, &backlog_stopping);
}

struct backlog_sleep {
    rt_sleep s;
    struct counting_waker w;
};

Test(timer, a_backlog_of_several_reactor_turns_is_released_whole_at_shutdown)
{
    if (&rt__debug_window_hook == NULL)
        cr_skip_test("holding the reactor needs a debug-yield build");
    rt__debug_window_hook = backlog_hook;
    rt_runtime *rt = new_runtime(1);
    struct backlog_sleep *sleeps = calloc(BACKLOG_SLEEPS, sizeof *sleeps);
    cr_assert_not_null(sleeps);
    atomic_store(&backlog_hold, 1);
    for (int i = 0; i < BACKLOG_SLEEPS; i++) {
        counting_waker_init(&sleeps[i].w);
        rt_context cx = counting_context(&sleeps[i].w);
        cr_assert_eq(rt_sleep_init(&sleeps[i].s, rt, 10 * SEC), 0);
        cr_assert_eq(RT_POLL_OP(&sleeps[i].s, &cx), RT_PENDING);
        /* The first command wakes the reactor into the turn the hook holds. */
        if (i == 0)
            cr_assert(event_wait_for_s(&backlog_held, 1, 10), "the reactor never began a turn");
    }
    cr_assert_geq(rt_runtime_shutdown(rt), 0);
    for (int i = 0; i < BACKLOG_SLEEPS; i++) {
        cr_assert_eq(counting_wakes(&sleeps[i].w), 1, "sleep %d: woken %ld times by shutdown", i,
                     counting_wakes(&sleeps[i].w));
        rt_context cx = counting_context(&sleeps[i].w);
        cr_assert_eq(RT_POLL_OP(&sleeps[i].s, &cx), RT_READY);
        cr_assert_eq(sleeps[i].s.result, -ESHUTDOWN);
        RT_DROP(&sleeps[i].s);
        cr_assert_eq(counting_outstanding(&sleeps[i].w), 0);
    }
    rt__debug_window_hook = NULL;
    free(sleeps);
    cr_assert_eq(rt_runtime_free(rt), 0);
}

/* A reactor that woke for a deadline but has not run for half a millisecond
 * is waiting for a CPU, and a busy worker gives it its own (reactor.h,
 * rt__reactor_overdue). The hook holds the reactor just after it woke for a
 * sleep's deadline, as a starved reactor would be, while a task keeps the
 * only worker busy until the worker's metrics count a yield. */
static atomic_int starve_hold;                   /* 1: hold the next deadline wake-up */
static struct event starve_held = EVENT_INIT;    /* the reactor is held */
static struct event starve_release = EVENT_INIT; /* let it go */

static void starve_hook(const char *window)
{
    hold_reactor_once(window, "reactor.woke_for_deadline", &starve_hold, &starve_held,
                      &starve_release);
}

struct busy {
    rt_runtime *rt;
    int64_t give_up_ns; /* rt_now_ns() after which the task stops waiting */
    bool yielded;       /* the worker's metrics counted a yield to the reactor */
};

/* Wakes itself and returns pending until the worker has yielded once. */
static rt_poll busy_poll(void *state, rt_context *cx, void **out)
{
    (void)out;
    struct busy *b = *(struct busy **)state;
    rt_worker_metrics wm;
    cr_assert_eq(rt_worker_metrics_read(b->rt, 0, &wm, sizeof wm), 0);
    if (wm.reactor_yields > 0 || rt_now_ns() > b->give_up_ns) {
        b->yielded = wm.reactor_yields > 0;
        return RT_READY;
    }
    rt_waker_wake_by_ref(rt_context_waker(cx));
    return RT_PENDING;
}

Test(timer, a_busy_worker_yields_to_a_reactor_overdue_for_a_deadline)
{
    if (&rt__debug_window_hook == NULL)
        cr_skip_test("holding the reactor needs a debug-yield build");
    rt__debug_window_hook = starve_hook;
    atomic_store(&starve_hold, 1);
    rt_runtime *rt = new_runtime(1);
    struct hand h;
    rt_sleep s;
    /* The hold needs the reactor to sleep until the deadline. On a loaded
     * machine the deadline may already have passed when the reactor files
     * the timer: it then fires in the same turn, with no wake-up to hold,
     * and the test arms another. */
    bool held = false;
    for (int attempt = 0; attempt < 5 && !held; attempt++) {
        hand_init(&h);
        cr_assert_eq(rt_sleep_init(&s, rt, 20 * MS), 0);
        cr_assert_eq(RT_POLL_OP(&s, &h.cx), RT_PENDING);
        held = event_wait_for_s(&starve_held, 1, 2);
        if (!held) {
            cr_assert_eq(counting_wakes(&h.w), 1, "the sleep neither fired nor was held in 2 s");
            cr_assert_eq(RT_POLL_OP(&s, &h.cx), RT_READY);
            RT_DROP(&s);
        }
    }
    cr_assert(held, "the reactor never woke for a deadline in five attempts");

    struct busy b = {rt, rt_now_ns() + 10 * SEC, false};
    struct busy *bp = &b;
    cr_assert_eq(block_on_status(rt, busy_poll, NULL, &bp, sizeof bp, NULL), 0);
    event_signal(&starve_release);
    cr_assert(b.yielded, "the worker never yielded to the held reactor in 10 s");

    /* Released, the reactor fires the sleep. */
    cr_assert(event_wait_for_s(&h.w.woken, 1, 10), "the sleep never fired");
    cr_assert_eq(RT_POLL_OP(&s, &h.cx), RT_READY);
    RT_DROP(&s);
    rt__debug_window_hook = NULL;
    finish_runtime(rt, 0);
}

/* ---- a reactor held after its nap ------------------------------------------ */

static atomic_int nap_hold;                   /* 1: hold the next nap's end */
static struct event nap_held = EVENT_INIT;    /* the reactor is held */
static struct event nap_release = EVENT_INIT; /* let it go */

static void nap_hook(const char *window)
{
    hold_reactor_once(window, "reactor.nap_over", &nap_hold, &nap_held, &nap_release);
}

/* While the reactor naps it publishes the nap's end as the time it sleeps
 * until (reactor.c, nap()), so that a reactor kept from running after its
 * nap looks overdue, as one kept from running after a deadline does. Beside
 * a task that keeps the only worker busy, bursts of bytes on 8 pipes make the
 * reactor nap; the first nap's end is held in a debug window, and the worker
 * must yield to it. When a napping reactor published the wheel's next
 * deadline instead (none here), the worker never yielded. */
Test(timer, a_busy_worker_yields_to_a_reactor_held_after_its_nap)
{
    if (&rt__debug_window_hook == NULL)
        cr_skip_test("holding the reactor needs a debug-yield build");
    rt__debug_window_hook = nap_hook;
    atomic_store(&nap_hold, 1);
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.reactor_nap_ns = 20 * MS;
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), 0);
    enum { PIPES = 8 };
    int fds[PIPES][2];
    rt_io *ends[PIPES];
    rt_task *readers[PIPES];
    for (int i = 0; i < PIPES; i++) {
        cr_assert_eq(pipe(fds[i]), 0);
        cr_assert_eq(rt_io_open(rt, fds[i][0], &ends[i]), 0);
        struct drain_reader r = {.io = ends[i]};
        cr_assert_eq(RT_SPAWN_STATE(rt, drain_reader_poll, NULL, &r, &readers[i]), 0);
    }
    struct busy b = {rt, rt_now_ns() + 20 * SEC, false};
    struct busy *bp = &b;
    rt_task *busy = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, busy_poll, NULL, &bp, &busy), 0);
    bool held = false;
    for (int burst = 0; burst < 200 && !held; burst++) {
        for (int i = 0; i < PIPES; i++)
            cr_assert_eq(write(fds[i][1], "x", 1), 1);
        held = event_wait_for_s(&nap_held, 1, 1);
    }
    cr_assert(held, "the reactor never napped in 200 bursts");
    cr_assert_eq(task_wait_status(busy, WAIT_DEADLINE_NS, NULL), 0);
    event_signal(&nap_release);
    cr_assert(b.yielded, "the worker never yielded to the reactor held after its nap");
    for (int i = 0; i < PIPES; i++) {
        cr_assert_eq(close(fds[i][1]), 0);
        cr_assert_eq(task_wait_status(readers[i], WAIT_DEADLINE_NS, NULL), 0);
        cr_assert_eq(rt_io_close(ends[i]), 0);
    }
    rt__debug_window_hook = NULL;
    finish_runtime(rt, 0);
}

/* ---- a kernel without epoll_pwait2 ------------------------------------------ */

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

/* Makes epoll_pwait2 fail with ENOSYS in this process from now on, as on a
 * kernel older than 5.11 (threads created later inherit the filter). */
static bool forbid_epoll_pwait2(void)
{
#ifdef __NR_epoll_pwait2
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_epoll_pwait2, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return false;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
#else
    return false;
#endif
}

Test(timer, without_epoll_pwait2_the_reactor_falls_back_and_neither_spins_nor_fires_early)
{
    if (!forbid_epoll_pwait2()) {
        cr_log_info("seccomp is not available here: nothing to check");
        return;
    }
    rt_runtime *rt = new_runtime(2);
    /* Sleeps still complete, never early, with millisecond timeouts. */
    for (int i = 0; i < 5; i++) {
        struct plain_sleep p = {.duration = 3 * 1000000 + i * 700000};
        int64_t t0 = rt_now_ns();
        void *out = (void *)(intptr_t)-1;
        cr_assert_eq(block_on_status(rt, plain_sleep_poll, plain_sleep_drop, &p, sizeof p, &out),
                     0);
        cr_assert_eq((intptr_t)out, 0);
        cr_assert_geq(rt_now_ns() - t0, p.duration, "a sleep ended early");
    }
    /* An idle runtime (a sleep of 200 ms pending) stays idle: a reactor
     * spinning on the error would burn a whole CPU meanwhile. */
    int64_t cpu0 = process_cpu_ns();
    struct plain_sleep p = {.duration = 200 * 1000000};
    void *out = NULL;
    cr_assert_eq(block_on_status(rt, plain_sleep_poll, plain_sleep_drop, &p, sizeof p, &out), 0);
    int64_t used = process_cpu_ns() - cpu0;
    cr_log_info("CPU used during a 200 ms sleep without epoll_pwait2: %lld us",
                (long long)(used / 1000));
    cr_assert_lt(used, 100 * 1000000, "the reactor spun: %lld ms of CPU in a 200 ms sleep",
                 (long long)(used / 1000000));
    finish_runtime(rt, 0);
}
