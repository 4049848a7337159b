/* What every black-box suite shares: sanitizer detection, the leak check run
 * after each test, and events to wait on instead of sleeping. Included by the
 * test files only. */
#ifndef RT_TESTS_SUPPORT_H
#define RT_TESTS_SUPPORT_H

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
 * when that did not happen within `seconds`. */
static inline bool event_wait_for_s(struct event *e, unsigned long target, int seconds)
{
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += seconds;
    pthread_mutex_lock(&e->mu);
    while (e->count < target) {
        if (pthread_cond_timedwait(&e->cv, &e->mu, &deadline) == ETIMEDOUT)
            break;
    }
    bool reached = e->count >= target;
    pthread_mutex_unlock(&e->mu);
    return reached;
}

/* The same within the including file's EVENT_DEADLINE_S. */
#define event_wait_for(e, target) event_wait_for_s((e), (target), EVENT_DEADLINE_S)

#endif
