/* What the black-box suites share: sanitizer detection, the leak check run
 * after each test, time units and deadlines, events to wait on instead of
 * sleeping, runtimes made and finished with checks, user wakers that count or
 * signal, a gate a task waits behind, the simplest futures, and descriptor
 * helpers. Included by the test files only; support.c, linked into every
 * suite executable, has the functions. */
#ifndef RT_TESTS_SUPPORT_H
#define RT_TESTS_SUPPORT_H

#include <criterion/criterion.h>

#include <asyncrt.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
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

/* TEST_UNDER_EMULATOR (set by tests/meson.build in a cross build): the tests
 * run under qemu-user, which cannot do three things some tests check. A fork
 * of a process whose other threads run trips an assertion inside qemu. It
 * keeps address-space limits (RLIMIT_AS) for itself rather than applying them
 * to the program, so a limit cannot make thread creation fail. And it runs
 * posix_spawn's vfork-style clone as a plain fork, so an exec failure happens
 * in a child the parent does not share memory with: the spawn succeeds and
 * the child exits 127. Those checks are skipped there and run natively. */

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

/* ---- time --------------------------------------------------------------- */

#define MS (1000000LL)
#define SEC (1000000000LL)

/* Seconds any wait for an event may take before the test reports a hang. */
#define EVENT_DEADLINE_S 30
/* The same bound, for rt_task_wait calls that must not hang the suite. */
#define WAIT_DEADLINE_NS (30LL * SEC)

/* CPU time this process has used so far, in nanoseconds. */
int64_t process_cpu_ns(void);

/* ---- events ------------------------------------------------------------- */

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
bool event_wait_for_ms(struct event *e, unsigned long target, long ms);

/* The same in whole seconds. */
static inline bool event_wait_for_s(struct event *e, unsigned long target, int seconds)
{
    return event_wait_for_ms(e, target, (long)seconds * 1000);
}

/* The same within EVENT_DEADLINE_S. */
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

/* Passes a poll result through, signalling `e` every time it is RT_PENDING:
 * the waker has been stored by then, so a test that acts on the signal always
 * wakes the task. */
static inline rt_poll note_pending(rt_poll p, struct event *e)
{
    if (p == RT_PENDING)
        event_signal(e);
    return p;
}

/* ---- wakers ------------------------------------------------------------- */

/* A context around the no-op waker, for polling by hand. */
static inline rt_context noop_context(void)
{
    return rt_context_from_waker(rt_waker_noop());
}

/* A user waker that counts what is done to it and signals an event on every
 * wake. It keeps no real reference count; the counters let a test check that
 * every reference the library took was given back. When `watched` is set,
 * each wake also counts whether that task was still unfinished. */
struct counting_waker {
    atomic_long clones;
    atomic_long drops;
    atomic_long wakes_by_value;
    atomic_long wakes_by_ref;
    struct event woken;
    _Atomic(rt_task *) watched;
    atomic_long wakes_before_finish;
};

/* clang-format off */
#define COUNTING_WAKER_INIT {0, 0, 0, 0, EVENT_INIT, NULL, 0}
/* clang-format on */

/* The vtable of every counting waker, and its four functions. */
extern const rt_waker_vtable counting_waker_vtable;
rt_waker counting_waker_clone(const void *data);
void counting_waker_wake(const void *data);
void counting_waker_wake_by_ref(const void *data);
void counting_waker_drop(const void *data);

void counting_waker_init(struct counting_waker *w);

/* The waker whose data is w (the caller's value: not counted as a clone). */
rt_waker make_counting_waker(struct counting_waker *w);

/* A context around that waker. */
rt_context counting_context(struct counting_waker *w);

/* References the library took (clones) and has not given back yet. */
long counting_outstanding(struct counting_waker *w);

/* Wakes of either kind so far. */
long counting_wakes(struct counting_waker *w);

/* A hand-held poll context around a counting waker, for polling operations
 * on the test thread. */
struct hand {
    struct counting_waker w;
    rt_context cx;
};

void hand_init(struct hand *h);

/* A user waker whose data is a struct event: every wake signals it. It keeps
 * no reference count, so clone and drop are free. */
extern const rt_waker_vtable event_waker_vtable;

/* A context around the event waker of e. */
rt_context event_context(struct event *e);

/* ---- a gate ------------------------------------------------------------- */

/* A door a task waits behind. While it is shut the task's poll stores a clone
 * of its waker here and returns RT_PENDING; opening it wakes that waker. */
struct gate {
    pthread_mutex_t mu;
    bool open;
    bool has_waiter;
    rt_waker waiter;
};

/* clang-format off */
#define GATE_INIT {PTHREAD_MUTEX_INITIALIZER, false, false, {NULL, NULL}}
/* clang-format on */

void gate_init(struct gate *g);

/* Returns true when the gate is open; otherwise registers cx's waker. */
bool gate_pass(struct gate *g, rt_context *cx);

void gate_open(struct gate *g);

/* Releases a waker the gate may still hold (a task aborted or cancelled while
 * waiting leaves one behind). */
void gate_clear(struct gate *g);

/* ---- the simplest futures ----------------------------------------------- */

/* Counters of the futures below; each test runs in its own process, so they
 * start at zero in every test. */
extern atomic_int polls;
extern atomic_int drops;
extern struct event polled;
extern struct event dropped;

/* Finishes at once with a NULL result. */
rt_poll trivial_poll(void *state, rt_context *cx, void **out);

/* Never finishes and stores no waker: only an abort or shutdown ends it.
 * Counts its polls in `polls` and signals `polled`. */
rt_poll never_poll(void *state, rt_context *cx, void **out);

/* A drop function that counts in `drops` and signals `dropped`. */
void counting_drop(void *state);

/* The other task of the cooperative-budget tests: it records in
 * budget_other_ran that it has run. */
extern atomic_bool budget_other_ran;
rt_poll budget_flag_poll(void *state, rt_context *cx, void **out);

/* ---- runtimes ----------------------------------------------------------- */

/* A runtime with the settings of *cfg, or the test fails. */
rt_runtime *new_runtime_config(const rt_config *cfg);

/* A runtime with `workers` workers and default settings, or the test fails. */
rt_runtime *new_runtime(unsigned workers);

/* A runtime with `workers` workers and the given cooperative budget (< 0:
 * the default), or the test fails. */
rt_runtime *new_runtime_budget(unsigned workers, int budget);

/* Shuts the runtime down, checks how many tasks shutdown cancelled (negative:
 * unchecked) and that none is alive, and returns the final, exact totals. The
 * caller may read per-worker figures before freeing the runtime. */
rt_metrics shut_down(rt_runtime *rt, int expected_cancelled);

/* shut_down, then hands the totals to the caller when `final` is not NULL,
 * and frees the runtime. */
void finish_runtime_metrics(rt_runtime *rt, int expected_cancelled, rt_metrics *final);

/* Every test that makes a runtime ends here (or in finish_runtime_metrics). */
void finish_runtime(rt_runtime *rt, int expected_cancelled);

/* True when every worker's metrics say it is asleep right now: it went to
 * sleep once more than it was woken. */
bool all_workers_parked(rt_runtime *rt);

/* The one sanctioned polling loop: being parked is a state with no event to
 * wait on, so this waits with short sleeps and a generous bound until every
 * worker is parked. */
bool wait_all_workers_parked(rt_runtime *rt);

/* ---- waiting for tasks ---------------------------------------------------- */

/* rt_task_wait's outcome as one number, for tests that only compare it: the
 * task's status once it finished (0, its own error, or -ECANCELED; the
 * handle is then released), else the wait's own error (the handle kept). */
int task_wait_status(rt_task *task, int64_t timeout_ns, void **value);

/* Waits (on the task's own state, looked at through rt_runtime_tasks) until
 * the task with this id is WAITING: its poll returned and it waits to be
 * woken. Fails the test after WAIT_DEADLINE_NS. Returns false, at once,
 * in a build without diagnostics (rt_runtime_tasks is -ENOSYS there). */
bool wait_task_waiting(rt_runtime *rt, uint64_t id);

/* Whether the library was built with its diagnostics (-Ddiagnostics). */
bool diagnostics_built_in(rt_runtime *rt);

/* rt_block_on's outcome as one number in the same way: the future's status
 * once it ran, else rt_block_on's own error. A macro, so that the spawn
 * site recorded is the caller's. */
int block_on_status_at(const char *site, rt_runtime *rt, rt_poll_fn poll, rt_drop_fn drop,
                       void *state, size_t size, void **value);
#define block_on_status(rt, poll, drop, state, size, value)                                        \
    block_on_status_at(RT__HERE, (rt), (poll), (drop), (state), (size), (value))

/* ---- descriptors -------------------------------------------------------- */

/* Open descriptors of this process (the directory's own one included, the
 * same in every count). */
int count_fds(void);

/* A non-blocking pipe: fds[0] read end, fds[1] write end. */
void make_pipe(int fds[2]);

/* A task that reads its descriptor one byte at a time until the end of the
 * stream, signalling `each_byte` (if not NULL) after every byte. Returns the
 * last read's result: 0 at the end of the stream, or a negative errno. Its
 * state begins with its rt_coro, so rt_coro_drop may be its drop function. */
struct drain_reader {
    rt_coro co;
    rt_io *io;
    struct event *each_byte;
    ssize_t result;
    unsigned char byte;
    rt_io_read rd; /* the read in flight */
};

rt_poll drain_reader_poll(void *state, rt_context *cx, void **out);

/* ---- sorting ------------------------------------------------------------ */

/* qsort's comparison of two uint64_t. */
int compare_u64(const void *a, const void *b);

#endif
