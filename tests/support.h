/* What every black-box suite shares: sanitizer detection, the leak check run
 * after each test, and events to wait on instead of sleeping. Included by the
 * test files only. */
#ifndef RT_TESTS_SUPPORT_H
#define RT_TESTS_SUPPORT_H

#include <criterion/criterion.h>

#include <asyncrt.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define TEST_HAVE_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_HAVE_LSAN 1
#endif
#endif
#ifdef TEST_HAVE_LSAN
#include <sanitizer/lsan_interface.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define TEST_HAVE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_HAVE_TSAN 1
#endif
#endif

/* Runs after every test (TestSuite .fini). LeakSanitizer's own check at exit
 * does not change a Criterion verdict, and an assertion in a .fini hook is
 * ignored, so a leak aborts the test process instead: Criterion then reports
 * the test as crashed in its teardown, right after LeakSanitizer's report. */
static inline void fail_on_leaks(void)
{
#ifdef TEST_HAVE_LSAN
    if (__lsan_do_recoverable_leak_check() != 0) {
        fputs("LeakSanitizer: this test leaked memory (report above)\n", stderr);
        abort();
    }
#endif
}

/* A counter that one thread bumps and another waits on, so that tests wait on
 * events instead of sleeping. */
struct event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned long count;
};

/* clang-format off */
#define EVENT_INIT {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}
/* clang-format on */

static inline void event_signal(struct event *e)
{
    pthread_mutex_lock(&e->mu);
    e->count++;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* Waits until the event has been signalled at least `target` times; false
 * when that did not happen within `ms` milliseconds. */
static inline bool event_wait_for_ms(struct event *e, unsigned long target, long ms)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&e->mu);
    while (e->count < target) {
        if (pthread_cond_timedwait(&e->cv, &e->mu, &deadline) == ETIMEDOUT)
            break;
    }
    bool reached = e->count >= target;
    pthread_mutex_unlock(&e->mu);
    return reached;
}

/* The same in whole seconds. */
static inline bool event_wait_for_s(struct event *e, unsigned long target, int seconds)
{
    return event_wait_for_ms(e, target, (long)seconds * 1000);
}

/* The same within the including file's EVENT_DEADLINE_S. */
#define event_wait_for(e, target) event_wait_for_s((e), (target), EVENT_DEADLINE_S)

/* How many times the event has been signalled so far. */
static inline unsigned long event_count(struct event *e)
{
    pthread_mutex_lock(&e->mu);
    unsigned long n = e->count;
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* Passes a poll result through, signalling *e (when not NULL) the first time
 * it is RT_PENDING: by then the operation has stored its waker (or is linked
 * into its wait queue), so a test waiting for the event knows it waits. */
static inline rt_poll announce(rt_poll p, bool *announced, struct event *e)
{
    if (p == RT_PENDING && !*announced) {
        *announced = true;
        if (e != NULL)
            event_signal(e);
    }
    return p;
}

#ifdef TEST_WANT_COUNTING_WAKER
#include <stdatomic.h>

/* A user waker that counts what is done to it and signals an event on every
 * wake. It keeps no real reference count; the counters let a test check that
 * every reference the library took was given back. */
struct counting_waker {
    atomic_long clones;
    atomic_long drops;
    atomic_long wakes_by_value;
    atomic_long wakes_by_ref;
    struct event woken;
};

static const rt_waker_vtable counting_waker_vtable;

static inline rt_waker counting_clone(const void *data)
{
    struct counting_waker *w = (struct counting_waker *)data;
    atomic_fetch_add(&w->clones, 1);
    rt_waker out = {&counting_waker_vtable, data};
    return out;
}

static inline void counting_wake(const void *data)
{
    struct counting_waker *w = (struct counting_waker *)data;
    atomic_fetch_add(&w->wakes_by_value, 1);
    event_signal(&w->woken);
}

static inline void counting_wake_by_ref(const void *data)
{
    struct counting_waker *w = (struct counting_waker *)data;
    atomic_fetch_add(&w->wakes_by_ref, 1);
    event_signal(&w->woken);
}

static inline void counting_drop(const void *data)
{
    struct counting_waker *w = (struct counting_waker *)data;
    atomic_fetch_add(&w->drops, 1);
}

static const rt_waker_vtable counting_waker_vtable = {
    counting_clone,
    counting_wake,
    counting_wake_by_ref,
    counting_drop,
};

static inline void counting_waker_init(struct counting_waker *w)
{
    atomic_init(&w->clones, 0);
    atomic_init(&w->drops, 0);
    atomic_init(&w->wakes_by_value, 0);
    atomic_init(&w->wakes_by_ref, 0);
    pthread_mutex_init(&w->woken.mu, NULL);
    pthread_cond_init(&w->woken.cv, NULL);
    w->woken.count = 0;
}

static inline rt_context counting_context(struct counting_waker *w)
{
    rt_waker waker = {&counting_waker_vtable, w};
    return rt_context_from_waker(waker);
}

/* References the library took (clones) and has not given back yet. */
static inline long counting_outstanding(struct counting_waker *w)
{
    return atomic_load(&w->clones) - atomic_load(&w->drops) - atomic_load(&w->wakes_by_value);
}

/* Wakes of either kind so far. */
static inline long counting_wakes(struct counting_waker *w)
{
    return atomic_load(&w->wakes_by_value) + atomic_load(&w->wakes_by_ref);
}

/* A hand-held poll context around a counting waker, for polling operations
 * on the test thread. */
struct hand {
    struct counting_waker w;
    rt_context cx;
};

static inline void hand_init(struct hand *h)
{
    counting_waker_init(&h->w);
    h->cx = counting_context(&h->w);
}
#endif

#ifdef TEST_WANT_DRAIN_READER
/* A task that reads its descriptor one byte at a time until the end of the
 * stream, signalling `each_byte` (if not NULL) after every byte. Returns the
 * last read's result: 0 at the end of the stream, or a negative errno. */
struct drain_reader {
    rt_coro co;
    rt_io *io;
    struct event *each_byte;
    ssize_t result;
    unsigned char byte;
};

static inline rt_poll drain_reader_poll(void *state, rt_context *cx, void **out)
{
    struct drain_reader *r = state;
    RT_CORO_BEGIN(&r->co);
    for (;;) {
        RT_AWAIT(&r->co, rt_io_read(r->io, cx, &r->byte, 1, &r->result));
        if (r->result <= 0)
            break;
        if (r->each_byte != NULL)
            event_signal(r->each_byte);
    }
    RT_RETURN(&r->co, out, (intptr_t)r->result);
    RT_CORO_END(&r->co, out);
}
#endif

#ifndef TEST_OWN_NEW_RUNTIME
/* A runtime with `workers` workers and default settings, or the test fails. */
static inline rt_runtime *new_runtime(unsigned workers)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = workers;
    rt_runtime *rt = NULL;
    int rc = rt_runtime_new(&cfg, &rt);
    cr_assert_eq(rc, 0, "rt_runtime_new failed: %s", rt_strerror(rc));
    cr_assert_not_null(rt);
    return rt;
}
#endif

/* A runtime with `workers` workers and the given cooperative budget (< 0:
 * the default), or the test fails. */
static inline rt_runtime *new_runtime_budget(unsigned workers, int budget)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = workers;
    if (budget >= 0)
        cfg.budget = (unsigned)budget;
    rt_runtime *rt = NULL;
    int rc = rt_runtime_new(&cfg, &rt);
    cr_assert_eq(rc, 0, "rt_runtime_new failed: %s", rt_strerror(rc));
    cr_assert_not_null(rt);
    return rt;
}

#ifndef TEST_OWN_FINISH_RUNTIME
/* Every test that makes a runtime ends here: shuts it down, checks how many
 * tasks shutdown cancelled (negative: unchecked) and that none is alive, and
 * frees it. */
static inline void finish_runtime(rt_runtime *rt, int expected_cancelled)
{
    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_geq(cancelled, 0, "rt_runtime_shutdown failed: %s", rt_strerror(cancelled));
    if (expected_cancelled >= 0)
        cr_assert_eq(cancelled, expected_cancelled, "shutdown cancelled %d tasks, expected %d",
                     cancelled, expected_cancelled);
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.alive, 0, "%llu tasks still alive after shutdown", (unsigned long long)m.alive);
    cr_assert_eq(rt_runtime_free(rt), 0);
}
#endif

/* True when every worker's metrics say it is asleep right now: it went to
 * sleep once more than it was woken. */
static inline bool all_workers_parked(rt_runtime *rt)
{
    unsigned n = rt_runtime_workers(rt);
    for (unsigned i = 0; i < n; i++) {
        rt_worker_metrics wm;
        cr_assert_eq(rt_worker_metrics_read(rt, i, &wm, sizeof wm), 0);
        if (wm.parks != wm.unparks + 1)
            return false;
    }
    return true;
}

/* The one sanctioned polling loop: being parked is a state with no event to
 * wait on, so this waits with short sleeps and a generous bound until every
 * worker is parked. */
static inline bool wait_all_workers_parked(rt_runtime *rt)
{
    const struct timespec step = {0, 1000000}; /* 1 ms */
    for (int i = 0; i < 10000; i++) {
        if (all_workers_parked(rt))
            return true;
        nanosleep(&step, NULL);
    }
    return false;
}

#endif
