/* Black-box tests of asyncrt/runtime.h and asyncrt/error.h: configuration,
 * creating and freeing runtimes, rt_current_runtime, rt_block_on, shutdown, the error
 * strings, and the promise that idle workers sleep without using CPU. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TestSuite(runtime, .timeout = 120, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

/* The number of threads of this process, from /proc/self/task. */
static int thread_count(void)
{
    DIR *dir = opendir("/proc/self/task");
    cr_assert_not_null(dir);
    int n = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL)
        if (entry->d_name[0] != '.')
            n++;
    closedir(dir);
    return n;
}

/* How many threads of this process are named `name` (/proc/self/task/N/comm). */
static int threads_named(const char *name)
{
    DIR *dir = opendir("/proc/self/task");
    cr_assert_not_null(dir);
    int n = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (entry->d_name[0] == '.')
            continue;
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", entry->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue; /* the thread exited meanwhile */
        if (fgets(comm, sizeof comm, f) != NULL) {
            comm[strcspn(comm, "\n")] = '\0';
            n += strcmp(comm, name) == 0;
        }
        fclose(f);
    }
    closedir(dir);
    return n;
}

/* The count of `count(name)` once joined threads have left /proc. Natively a
 * joined thread is gone from it. Under qemu-user (support.h) the join returns
 * when qemu clears the thread's id, a moment before qemu's own thread exits,
 * so there the count is read again, for up to two seconds, until it is
 * `want`. */
static int settled_count(int (*count)(const char *), const char *name, int want)
{
    int n = count(name);
#ifdef TEST_UNDER_EMULATOR
    for (int i = 0; i < 2000 && n != want; i++) {
        usleep(1000);
        n = count(name);
    }
#else
    (void)want;
#endif
    return n;
}

static int all_threads(const char *unused)
{
    (void)unused;
    return thread_count();
}

/* Finishes with the pointer-sized value stored in its state. */
static rt_poll value_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    atomic_fetch_add(&polls, 1);
    *out = *(void **)state;
    return RT_READY;
}

/* Finishes with the runtime it runs on. */
static rt_poll current_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = rt_current_runtime();
    return RT_READY;
}

static uint64_t total_unparks(rt_runtime *rt)
{
    uint64_t sum = 0;
    unsigned n = rt_runtime_workers(rt);
    for (unsigned i = 0; i < n; i++) {
        rt_worker_metrics wm;
        cr_assert_eq(rt_worker_metrics_read(rt, i, &wm, sizeof wm), 0);
        sum += wm.unparks;
    }
    return sum;
}

/* ---- configuration and creation ----------------------------------------- */

Test(runtime, config_init_fills_every_field_with_the_documented_defaults)
{
    rt_config cfg;
    memset(&cfg, 0xAB, sizeof cfg);
    rt_config_init(&cfg);
    cr_assert_eq(cfg.workers, 0u);
    cr_assert_eq(cfg.injector_interval, 61u);
    cr_assert_eq(cfg.spin_rounds, 2u);
}

Test(runtime, runtime_new_with_a_null_out_pointer_is_einval_and_starts_nothing)
{
    int threads = thread_count();
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cr_assert_eq(rt_runtime_new(&cfg, NULL), -EINVAL);
    cr_assert_eq(rt_runtime_new(NULL, NULL), -EINVAL);
    cr_assert_eq(settled_count(all_threads, NULL, threads), threads,
                 "a failed rt_runtime_new left threads running");
}

Test(runtime, runtime_new_with_more_than_rt_max_workers_is_einval_and_starts_nothing)
{
    int threads = thread_count();
    rt_config cfg;
    rt_config_init(&cfg);
    rt_runtime *rt = NULL;
    cfg.workers = RT_MAX_WORKERS + 1;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -EINVAL);
    cfg.workers = UINT_MAX;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -EINVAL);
    cr_assert_eq(settled_count(all_threads, NULL, threads), threads,
                 "a failed rt_runtime_new left threads running");
}

Test(runtime, runtime_new_with_injector_interval_zero_is_einval_and_starts_nothing)
{
    int threads = thread_count();
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.injector_interval = 0;
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -EINVAL);
    cr_assert_eq(settled_count(all_threads, NULL, threads), threads,
                 "a failed rt_runtime_new left threads running");
}

Test(runtime, runtime_new_with_a_negative_reactor_nap_is_einval_and_starts_nothing)
{
    int threads = thread_count();
    rt_config cfg;
    rt_config_init(&cfg);
    cr_assert_eq(cfg.reactor_nap_ns, 500000, "the documented default");
    cfg.workers = 2;
    cfg.reactor_nap_ns = -1;
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -EINVAL);
    cr_assert_null(rt);
    cr_assert_eq(settled_count(all_threads, NULL, threads), threads,
                 "a failed rt_runtime_new left threads running");
}

/* CPUs this process may run on, which bounds workers = 0 from above. */
static unsigned usable_cpus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
    return (unsigned)CPU_COUNT(&set);
}

Test(runtime, zero_workers_means_at_least_one_and_no_more_than_the_usable_cpus)
{
    rt_runtime *rt = new_runtime(0);
    unsigned n = rt_runtime_workers(rt);
    cr_assert_geq(n, 1u);
    cr_assert_leq(n, usable_cpus(), "%u workers for %u usable CPUs", n, usable_cpus());
    finish_runtime(rt, 0);

    /* A NULL configuration means the defaults, so the same rule holds. */
    rt = NULL;
    cr_assert_eq(rt_runtime_new(NULL, &rt), 0);
    cr_assert_eq(rt_runtime_workers(rt), n);
    finish_runtime(rt, 0);
}

Test(runtime, explicit_worker_counts_are_honoured_even_above_the_cpu_count)
{
    const unsigned counts[] = {1, 3, 16};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        rt_runtime *rt = new_runtime(counts[i]);
        cr_assert_eq(rt_runtime_workers(rt), counts[i]);
        void *payload = (void *)(uintptr_t)(i + 1);
        void *value = NULL;
        cr_assert_eq(block_on_status(rt, value_poll, NULL, &payload, sizeof payload, &value), 0);
        cr_assert_eq(value, payload);
        finish_runtime(rt, 0);
    }
}

Test(runtime, unusual_but_valid_configurations_run_tasks)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.injector_interval = 1;
    cfg.spin_rounds = 1; /* the least accepted; 0 is -EINVAL (see below) */
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), 0);
    for (int i = 0; i < 100; i++) {
        void *payload = (void *)(uintptr_t)(i + 1);
        void *value = NULL;
        cr_assert_eq(block_on_status(rt, value_poll, NULL, &payload, sizeof payload, &value), 0);
        cr_assert_eq(value, payload);
    }
    finish_runtime(rt, 0);
}

Test(runtime, runtime_free_leaves_no_worker_thread_behind)
{
    int before = thread_count();
    rt_runtime *rt = new_runtime(4);
    cr_assert_geq(thread_count(), before + 4, "the four workers are not running");
    cr_assert_eq(block_on_status(rt, trivial_poll, NULL, NULL, 0, NULL), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(settled_count(all_threads, NULL, before), before,
                 "threads outlived rt_runtime_free");
}

Test(runtime, worker_and_reactor_threads_carry_names_for_top_perf_and_gdb)
{
    rt_runtime *rt = new_runtime(3);
    cr_assert_eq(threads_named("asyncrt-w0"), 1);
    cr_assert_eq(threads_named("asyncrt-w1"), 1);
    cr_assert_eq(threads_named("asyncrt-w2"), 1);
    cr_assert_eq(threads_named("asyncrt-w3"), 0, "three workers, not four");
    cr_assert_eq(threads_named("asyncrt-reactor"), 1);
    finish_runtime(rt, 0);
    cr_assert_eq(settled_count(threads_named, "asyncrt-w0", 0), 0, "a worker outlived the runtime");
    cr_assert_eq(settled_count(threads_named, "asyncrt-reactor", 0), 0,
                 "the reactor outlived the runtime");
}

Test(runtime, runtime_free_without_shutdown_cancels_the_unfinished_tasks)
{
    rt_runtime *rt = new_runtime(2);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, NULL), 0);
    cr_assert(event_wait_for(&polled, 5));
    cr_assert_eq(rt_runtime_free(rt), 0);
    cr_assert_eq(atomic_load(&drops), 5, "free must cancel (drop) every unfinished task");
}

Test(runtime, runtime_free_of_null_is_a_no_op)
{
    cr_assert_eq(rt_runtime_free(NULL), 0);
}

/* ---- rt_current_runtime and rt_block_on ------------------------------------------ */

Test(runtime, current_is_null_outside_a_task_and_the_own_runtime_inside_one)
{
    cr_assert_null(rt_current_runtime());
    rt_runtime *a = new_runtime(2);
    rt_runtime *b = new_runtime(1);
    cr_assert_null(rt_current_runtime(), "the creating thread is not a worker");
    void *seen = NULL;
    cr_assert_eq(block_on_status(a, current_poll, NULL, NULL, 0, &seen), 0);
    cr_assert_eq(seen, (void *)a);
    cr_assert_eq(block_on_status(b, current_poll, NULL, NULL, 0, &seen), 0);
    cr_assert_eq(seen, (void *)b);
    cr_assert_null(rt_current_runtime());
    finish_runtime(a, 0);
    finish_runtime(b, 0);
}

Test(runtime, block_on_returns_the_result_and_accepts_a_null_value_pointer)
{
    rt_runtime *rt = new_runtime(2);
    void *payload = (void *)(uintptr_t)0xB10C;
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, value_poll, counting_drop, &payload, sizeof payload, &value),
                 0);
    cr_assert_eq(value, payload);
    cr_assert_eq(block_on_status(rt, value_poll, counting_drop, &payload, sizeof payload, NULL), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&polls), 2);
    cr_assert_eq(atomic_load(&drops), 2);
}

Test(runtime, block_on_rejects_invalid_arguments)
{
    rt_runtime *rt = new_runtime(1);
    int word = 0;
    cr_assert_eq(block_on_status(NULL, trivial_poll, NULL, NULL, 0, NULL), -EINVAL);
    cr_assert_eq(block_on_status(rt, NULL, NULL, &word, sizeof word, NULL), -EINVAL);
    cr_assert_eq(block_on_status(rt, trivial_poll, counting_drop, NULL, 4, NULL), -EINVAL);
    cr_assert_eq(atomic_load(&drops), 0);
    finish_runtime(rt, 0);
}

#define BLOCKING_THREADS 4
#define BLOCK_ONS_PER_THREAD 200

struct blocking_thread {
    rt_runtime *rt;
    int index;
    int failures;
};

static void *blocking_thread_main(void *arg)
{
    struct blocking_thread *t = arg;
    for (int i = 0; i < BLOCK_ONS_PER_THREAD; i++) {
        void *payload = (void *)(uintptr_t)(t->index * 100000 + i + 1);
        void *value = NULL;
        int rc =
            block_on_status(t->rt, value_poll, counting_drop, &payload, sizeof payload, &value);
        if (rc != 0 || value != payload)
            t->failures++;
    }
    return NULL;
}

Test(runtime, block_on_from_several_threads_at_once_gets_each_its_own_result)
{
    rt_runtime *rt = new_runtime(2);
    pthread_t threads[BLOCKING_THREADS];
    struct blocking_thread args[BLOCKING_THREADS];
    for (int i = 0; i < BLOCKING_THREADS; i++) {
        args[i] = (struct blocking_thread){rt, i, 0};
        cr_assert_eq(pthread_create(&threads[i], NULL, blocking_thread_main, &args[i]), 0);
    }
    for (int i = 0; i < BLOCKING_THREADS; i++) {
        pthread_join(threads[i], NULL);
        cr_assert_eq(args[i].failures, 0, "thread %d got %d wrong results", i, args[i].failures);
    }
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops), BLOCKING_THREADS * BLOCK_ONS_PER_THREAD);
}

struct blocked_caller {
    rt_runtime *rt;
    int rc;
    void *value;
};

static void *blocked_caller_main(void *arg)
{
    struct blocked_caller *c = arg;
    c->rc = block_on_status(c->rt, never_poll, counting_drop, NULL, 0, &c->value);
    return NULL;
}

Test(runtime, block_on_returns_ecanceled_when_the_runtime_shuts_down_under_it)
{
    rt_runtime *rt = new_runtime(2);
    struct blocked_caller caller = {rt, 12345, (void *)(uintptr_t)1};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, blocked_caller_main, &caller), 0);
    cr_assert(event_wait_for(&polled, 1));

    cr_assert_eq(rt_runtime_shutdown(rt), 1, "the blocked-on future is the one unfinished task");
    pthread_join(thread, NULL);
    cr_assert_eq(caller.rc, -ECANCELED);
    cr_assert_eq(atomic_load(&drops), 1, "its drop must have run when rt_block_on returns");
    finish_runtime(rt, 0);
}

/* ---- shutdown ----------------------------------------------------------- */

struct calls_from_worker {
    rt_runtime *target;
    int shutdown_rc;
    int free_rc;
};

/* Tries to shut down and free a runtime from inside a task. */
static rt_poll shuts_down_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct calls_from_worker *c = *(struct calls_from_worker **)state;
    c->shutdown_rc = rt_runtime_shutdown(c->target);
    *out = NULL;
    return RT_READY;
}

static rt_poll frees_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct calls_from_worker *c = *(struct calls_from_worker **)state;
    c->free_rc = rt_runtime_free(c->target);
    *out = NULL;
    return RT_READY;
}

Test(runtime, shutdown_or_free_from_inside_one_of_its_tasks_is_edeadlk)
{
    rt_runtime *rt = new_runtime(2);
    struct calls_from_worker calls = {rt, 12345, 12345};
    struct calls_from_worker *cp = &calls;
    cr_assert_eq(block_on_status(rt, shuts_down_poll, NULL, &cp, sizeof cp, NULL), 0);
    cr_assert_eq(calls.shutdown_rc, -EDEADLK, "%s", rt_strerror(calls.shutdown_rc));
    cr_assert_eq(block_on_status(rt, frees_poll, NULL, &cp, sizeof cp, NULL), 0);
    cr_assert_eq(calls.free_rc, -EDEADLK, "%s", rt_strerror(calls.free_rc));

    /* Neither call did anything: the runtime still runs tasks. */
    void *payload = (void *)(uintptr_t)9;
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, value_poll, NULL, &payload, sizeof payload, &value), 0);
    cr_assert_eq(value, payload);
    finish_runtime(rt, 0);
}

Test(runtime, shutdown_of_another_runtime_from_a_task_is_allowed)
{
    rt_runtime *rt = new_runtime(1);
    rt_runtime *other = new_runtime(1);
    cr_assert_eq(rt_spawn(other, never_poll, counting_drop, NULL, 0, NULL), 0);
    cr_assert(event_wait_for(&polled, 1));
    struct calls_from_worker calls = {other, 12345, 12345};
    struct calls_from_worker *cp = &calls;
    cr_assert_eq(block_on_status(rt, shuts_down_poll, NULL, &cp, sizeof cp, NULL), 0);
    cr_assert_eq(calls.shutdown_rc, 1, "shutting down another runtime: %d", calls.shutdown_rc);
    cr_assert_eq(atomic_load(&drops), 1);
    finish_runtime(other, 0);
    finish_runtime(rt, 0);
}

/* A gate-like slot: the task leaves a clone of its waker here, so it is idle
 * with a waker stored, unlike never_poll tasks. */
static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;
static rt_waker parked_wakers[8];
static int parked_count;

static rt_poll stores_waker_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)out;
    pthread_mutex_lock(&parked_mu);
    parked_wakers[parked_count++] = rt_waker_clone(rt_context_waker(cx));
    pthread_mutex_unlock(&parked_mu);
    event_signal(&polled);
    return RT_PENDING;
}

Test(runtime, shutdown_returns_the_number_of_unfinished_tasks_and_drops_each_once)
{
    rt_runtime *rt = new_runtime(3);
    rt_task *handles[6];
    for (int i = 0; i < 6; i++)
        cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, i < 3 ? &handles[i] : NULL),
                     0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(
            rt_spawn(rt, stores_waker_poll, counting_drop, NULL, 0, i < 3 ? &handles[3 + i] : NULL),
            0);
    for (int i = 0; i < 10; i++) {
        void *payload = (void *)(uintptr_t)(i + 1);
        cr_assert_eq(block_on_status(rt, value_poll, counting_drop, &payload, sizeof payload, NULL),
                     0);
    }
    cr_assert(event_wait_for(&polled, 10));

    cr_assert_eq(rt_runtime_shutdown(rt), 10, "6 + 4 tasks never finish");
    cr_assert_eq(atomic_load(&drops), 20, "10 completed and 10 cancelled drops");
    cr_assert_eq(rt_runtime_shutdown(rt), 0, "a second shutdown has nothing left to cancel");
    for (int i = 0; i < 6; i++)
        cr_assert_eq(task_wait_status(handles[i], -1, NULL), -ECANCELED);

    /* Waking the cancelled tasks through the wakers they stored is inert. */
    for (int i = 0; i < parked_count; i++)
        rt_waker_wake(&parked_wakers[i]);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops), 20);
}

Test(runtime, shutdown_of_a_null_runtime_is_einval)
{
    cr_assert_eq(rt_runtime_shutdown(NULL), -EINVAL);
}

/* ---- error strings ----------------------------------------------------- */

Test(runtime, strerror_names_success_and_every_asyncrt_error)
{
    const char *success = rt_strerror(0);
    cr_assert_not_null(success);
    cr_assert_not_null(strcasestr(success, "success"), "rt_strerror(0) is \"%s\"", success);

    const int errors[] = {EINVAL, ENOMEM, EAGAIN, ESHUTDOWN, ECANCELED, ETIMEDOUT, EDEADLK};
    const size_t n = sizeof errors / sizeof errors[0];
    for (size_t i = 0; i < n; i++) {
        const char *negative = rt_strerror(-errors[i]);
        const char *positive = rt_strerror(errors[i]);
        cr_assert_not_null(negative);
        cr_assert_not_null(positive);
        cr_assert_gt(strlen(negative), 0);
        cr_assert_str_eq(negative, positive, "the sign of errno %d changed its description",
                         errors[i]);
        cr_assert_str_neq(negative, success);
        for (size_t j = 0; j < i; j++)
            cr_assert_str_neq(negative, rt_strerror(-errors[j]),
                              "errno %d and %d share a description", errors[i], errors[j]);
    }
}

Test(runtime, strerror_of_unknown_numbers_is_a_non_empty_string)
{
    const int unknown[] = {-987654, 987654, INT_MAX, INT_MIN, INT_MIN + 1};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *s = rt_strerror(unknown[i]);
        cr_assert_not_null(s, "rt_strerror(%d)", unknown[i]);
        cr_assert_gt(strlen(s), 0, "rt_strerror(%d) is empty", unknown[i]);
    }
}

/* ---- parking ----------------------------------------------------------- */

Test(runtime, idle_workers_use_almost_no_cpu)
{
    rt_runtime *rt = new_runtime(4);
    /* Give them something to do first, so they park from a working state. */
    for (int i = 0; i < 50; i++)
        cr_assert_eq(block_on_status(rt, trivial_poll, NULL, NULL, 0, NULL), 0);
    cr_assert(wait_all_workers_parked(rt), "the workers never all parked");

    int64_t cpu_before = process_cpu_ns();
    const struct timespec window = {0, 200000000}; /* 200 ms of idleness */
    nanosleep(&window, NULL);
    int64_t cpu_used = process_cpu_ns() - cpu_before;
    cr_assert_lt(cpu_used, 10000000LL, "an idle runtime burnt %lld us of CPU in 200 ms",
                 (long long)(cpu_used / 1000));
    cr_assert(all_workers_parked(rt), "a worker woke up with nothing to do");
    finish_runtime(rt, 0);
}

Test(runtime, one_new_task_wakes_at_most_two_parked_workers)
{
    rt_runtime *rt = new_runtime(8);
    for (int round = 0; round < 5; round++) {
        cr_assert(wait_all_workers_parked(rt), "round %d: the workers never all parked", round);
        uint64_t unparks_before = total_unparks(rt);

        rt_task *task = NULL;
        cr_assert_eq(rt_spawn(rt, trivial_poll, NULL, NULL, 0, &task), 0);
        cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), 0);

        /* Let every woken worker record its wake-up and go back to sleep. */
        cr_assert(wait_all_workers_parked(rt), "round %d: the workers never parked again", round);
        uint64_t woken = total_unparks(rt) - unparks_before;
        cr_assert_geq(woken, 1, "round %d: a task ran with every worker asleep", round);
        cr_assert_leq(woken, 2, "round %d: one task woke %llu of 8 parked workers", round,
                      (unsigned long long)woken);
    }
    finish_runtime(rt, 0);
}

/* ---- calls back into the runtime from drops run by shutdown ------------- */

static rt_runtime *reentrant_rt;
static rt_task *reentrant_other;
static atomic_int reentrant_shutdown_rc;
static atomic_int reentrant_free_rc;
static atomic_int reentrant_wait_rc;
static atomic_int reentrant_drops;

static void reentrant_drop(void *state)
{
    (void)state;
    atomic_fetch_add(&reentrant_drops, 1);
    atomic_store(&reentrant_shutdown_rc, rt_runtime_shutdown(reentrant_rt));
    atomic_store(&reentrant_free_rc, rt_runtime_free(reentrant_rt));
    /* The other task may not have been cancelled yet: waiting for it here
     * would wait for this very shutdown. */
    atomic_store(&reentrant_wait_rc, task_wait_status(reentrant_other, 0, NULL));
}

Test(runtime, drops_run_by_shutdown_cannot_deadlock_it)
{
    rt_runtime *rt = new_runtime(2);
    reentrant_rt = rt;
    atomic_store(&reentrant_drops, 0);
    cr_assert_eq(rt_spawn(rt, never_poll, NULL, NULL, 0, &reentrant_other), 0);
    cr_assert_eq(rt_spawn(rt, never_poll, reentrant_drop, NULL, 0, NULL), 0);
    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_eq(cancelled, 2);
    cr_assert_eq(atomic_load(&reentrant_drops), 1);
    cr_assert_eq(atomic_load(&reentrant_shutdown_rc), -EDEADLK);
    cr_assert_eq(atomic_load(&reentrant_free_rc), -EDEADLK);
    cr_assert_eq(atomic_load(&reentrant_wait_rc), -EDEADLK);
    /* The runtime is intact: the handle can still be waited on and freed. */
    cr_assert_eq(task_wait_status(reentrant_other, -1, NULL), -ECANCELED);
    finish_runtime(rt, 0);
}

Test(runtime, spin_rounds_must_be_positive_and_huge_timeouts_mean_no_limit)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.spin_rounds = 0;
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), -EINVAL);
    cr_assert_null(rt);

    rt = new_runtime(1);
    rt_task *t;
    cr_assert_eq(rt_spawn(rt, trivial_poll, NULL, NULL, 0, &t), 0);
    /* INT64_MAX nanoseconds from now overflows the clock: it must be read as
     * "no limit", not as a deadline in the past. */
    cr_assert_eq(task_wait_status(t, INT64_MAX, NULL), 0);
    finish_runtime(rt, 0);
}

/* ---- fork ------------------------------------------------------------------- */

/* Task blocks come from one pool per process, guarded by one mutex
 * (src/base/block_pool.c). A fork while a worker holds that mutex must not leave
 * it locked in the child, or the child's first runtime would hang on its
 * first spawn. Here workers churn blocks while the main thread forks, and
 * every child runs a runtime of its own. */
/* Neither sanitizer's runtime survives this. ThreadSanitizer does not support
 * starting threads after a fork of a multi-threaded process, and GCC 12's
 * AddressSanitizer allocator takes no lock around fork: a child forked while
 * a parent thread refills its malloc cache inherits that size class's mutex
 * locked: a hung child's worker and reactor both wait on ASan's
 * SizeClassAllocator64 region mutex inside calloc, with no asyncrt lock
 * held. The plain build runs it (natively: support.h says why not under
 * qemu-user); glibc's malloc is fork-safe. */
#if !defined(TEST_HAVE_TSAN) && !defined(TEST_HAVE_LSAN) && !defined(TEST_UNDER_EMULATOR)
#define TEST_FORK_WITH_THREADS 1
#endif

#ifdef TEST_FORK_WITH_THREADS
static atomic_bool churn_stop;

static rt_poll churn_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)out;
    if (atomic_load(&churn_stop))
        return RT_READY;
    for (int i = 0; i < 300; i++)
        rt_spawn(NULL, trivial_poll, NULL, NULL, 0, NULL);
    rt_waker_wake_by_ref(rt_context_waker(cx));
    return RT_PENDING;
}

#define FORK_CHILDREN 60

static void child_runs_its_own_runtime(void)
{
    alarm(20); /* a hang ends the child with SIGALRM, which the parent sees */
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    rt_runtime *rt;
    if (rt_runtime_new(&cfg, &rt) < 0)
        _exit(2);
    for (int i = 0; i < 1000; i++)
        if (rt_spawn(rt, trivial_poll, NULL, NULL, 0, NULL) < 0)
            _exit(3);
    if (rt_runtime_shutdown(rt) < 0 || rt_runtime_free(rt) < 0)
        _exit(4);
    _exit(0);
}
#endif

Test(runtime, a_child_forked_while_workers_allocate_runs_its_own_runtime)
{
#ifndef TEST_FORK_WITH_THREADS
    cr_skip_test("a sanitizer's runtime or qemu-user cannot fork while threads run "
                 "(see above and support.h)");
#else
    rt_runtime *rt = new_runtime(2);
    atomic_store(&churn_stop, false);
    rt_task *churners[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(rt_spawn(rt, churn_poll, NULL, NULL, 0, &churners[i]), 0);
    for (int i = 0; i < FORK_CHILDREN; i++) {
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0)
            child_runs_its_own_runtime();
        int status = 0;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "child %d: %s %d (SIGALRM %d: it hung)", i,
                  WIFEXITED(status) ? "exit status" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), SIGALRM);
    }
    atomic_store(&churn_stop, true);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(task_wait_status(churners[i], -1, NULL), 0);
    /* Tasks the churners spawned last may not have run yet: shutdown
     * cancels them, so their count is not checked (the property here is
     * the children's). */
    finish_runtime(rt, -1);
#endif
}
