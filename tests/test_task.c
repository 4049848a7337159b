/* Black-box tests of asyncrt/task.h: spawning, the task's copy of its state,
 * drop functions, join/wait/detach/abort, rt_task_is_finished, and the
 * scheduling promises around rt_yield and wake-ups. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#define TEST_OWN_NEW_RUNTIME    /* this suite has its own, below */
#define TEST_OWN_FINISH_RUNTIME /* this suite has its own, below */
#include "support.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

/* Seconds any wait for an event may take before the test reports a hang. */
#define EVENT_DEADLINE_S 30
/* The same bound, for rt_task_wait calls that must not hang the suite. */
#define WAIT_DEADLINE_NS (30LL * 1000000000LL)

TestSuite(task, .timeout = 120, .fini = fail_on_leaks);

/* ---- helpers ----------------------------------------------------------- */

static rt_runtime *new_runtime_with(unsigned workers, unsigned injector_interval)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = workers;
    if (injector_interval != 0)
        cfg.injector_interval = injector_interval;
    rt_runtime *rt = NULL;
    int rc = rt_runtime_new(&cfg, &rt);
    cr_assert_eq(rc, 0, "rt_runtime_new failed: %s", rt_strerror(rc));
    cr_assert_not_null(rt);
    return rt;
}

static rt_runtime *new_runtime(unsigned workers)
{
    return new_runtime_with(workers, 0);
}

/* Every test ends here: shuts the runtime down, checks how many tasks
 * shutdown cancelled (negative: unchecked) and that none is alive, hands the
 * final (exact) metrics to the caller when asked, and frees the runtime. */
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

static void gate_open(struct gate *g)
{
    rt_waker w = rt_waker_noop();
    pthread_mutex_lock(&g->mu);
    g->open = true;
    if (g->has_waiter) {
        w = g->waiter;
        g->has_waiter = false;
    }
    pthread_mutex_unlock(&g->mu);
    rt_waker_wake(&w);
}

/* Releases a waker the gate may still hold (an aborted task leaves one). */
static void gate_clear(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    if (g->has_waiter) {
        rt_waker_drop(&g->waiter);
        g->has_waiter = false;
    }
    pthread_mutex_unlock(&g->mu);
}

/* A user waker whose data is a struct event: every wake signals it. It keeps
 * no reference count, so clone and drop are free. */
static const rt_waker_vtable event_waker_vtable;

static rt_waker event_waker_clone(const void *data)
{
    rt_waker w = {&event_waker_vtable, data};
    return w;
}

static void event_waker_wake(const void *data)
{
    event_signal((struct event *)data);
}

static void event_waker_drop(const void *data)
{
    (void)data;
}

static const rt_waker_vtable event_waker_vtable = {
    event_waker_clone,
    event_waker_wake,
    event_waker_wake,
    event_waker_drop,
};

static rt_context event_context(struct event *e)
{
    rt_waker w = {&event_waker_vtable, e};
    return rt_context_from_waker(w);
}

/* Counters shared by the simple futures below; each test runs in its own
 * process, so they start at zero in every test. */
static atomic_int polls;
static atomic_int drops;
static struct event polled = EVENT_INIT;
static struct event dropped = EVENT_INIT;

static void counting_drop(void *state)
{
    (void)state;
    atomic_fetch_add(&drops, 1);
    event_signal(&dropped);
}

/* Finishes at once with the pointer-sized value stored in its state. */
static rt_poll value_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    atomic_fetch_add(&polls, 1);
    event_signal(&polled);
    *out = *(void **)state;
    return RT_READY;
}

/* Finishes at once with a NULL result; never reads its (empty) state. */
static rt_poll empty_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    atomic_fetch_add(&polls, 1);
    event_signal(&polled);
    *out = NULL;
    return RT_READY;
}

static rt_poll trivial_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = NULL;
    return RT_READY;
}

/* Never finishes and stores no waker: only an abort or shutdown ends it. */
static rt_poll never_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    (void)out;
    atomic_fetch_add(&polls, 1);
    event_signal(&polled);
    return RT_PENDING;
}

struct gated_value {
    struct gate *gate;
    void *value;
};

/* Finishes with s->value once the gate opens. The poll is announced only
 * after the gate has the waker, so a test that opens the gate once it sees
 * the poll always wakes a waiting task. */
static rt_poll gated_value_poll(void *state, rt_context *cx, void **out)
{
    struct gated_value *s = state;
    bool open = gate_pass(s->gate, cx);
    atomic_fetch_add(&polls, 1);
    event_signal(&polled);
    if (!open)
        return RT_PENDING;
    *out = s->value;
    return RT_READY;
}

/* A task that occupies its worker until the test releases it, so the test
 * can hold a one-worker runtime still while it sets something up. */
struct blocker {
    struct event entered;
    struct event release;
};

static rt_poll blocker_poll(void *state, rt_context *cx, void **out)
{
    struct blocker *b = *(struct blocker **)state;
    (void)cx;
    event_signal(&b->entered);
    event_wait_for(&b->release, 1);
    *out = NULL;
    return RT_READY;
}

/* Spawns and waits for a trivial task; with more than one worker this gives
 * a wrongly scheduled task on another worker the time to show itself. */
static void run_probe(rt_runtime *rt)
{
    rt_task *probe = NULL;
    cr_assert_eq(rt_spawn(rt, trivial_poll, NULL, NULL, 0, &probe), 0);
    cr_assert_eq(rt_task_wait(probe, WAIT_DEADLINE_NS, NULL), 0);
}

/* ---- rt_spawn ----------------------------------------------------------- */

Test(task, spawn_from_the_main_thread_runs_the_task_and_wait_returns_its_value)
{
    rt_runtime *rt = new_runtime(2);
    void *payload = (void *)(uintptr_t)0xBEEF;
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, value_poll, counting_drop, &payload, sizeof payload, &task), 0);
    cr_assert_not_null(task);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(task, -1, &value), 0);
    cr_assert_eq(value, payload);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&polls), 1);
    cr_assert_eq(atomic_load(&drops), 1);
}

struct foreign_spawn {
    rt_runtime *rt;
    int spawn_rc;
    int wait_rc;
    void *value;
};

static void *foreign_spawn_thread(void *arg)
{
    struct foreign_spawn *f = arg;
    void *payload = (void *)(uintptr_t)0xF00D;
    rt_task *task = NULL;
    f->spawn_rc = RT_SPAWN(f->rt, value_poll, counting_drop, &payload, &task);
    if (f->spawn_rc == 0)
        f->wait_rc = rt_task_wait(task, WAIT_DEADLINE_NS, &f->value);
    return NULL;
}

Test(task, spawn_and_wait_from_another_foreign_thread_work)
{
    rt_runtime *rt = new_runtime(2);
    struct foreign_spawn f = {rt, -1, -1, NULL};
    pthread_t thread;
    cr_assert_eq(pthread_create(&thread, NULL, foreign_spawn_thread, &f), 0);
    pthread_join(thread, NULL);
    cr_assert_eq(f.spawn_rc, 0);
    cr_assert_eq(f.wait_rc, 0);
    cr_assert_eq(f.value, (void *)(uintptr_t)0xF00D);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops), 1);
}

/* What a task records for the test thread; rt_block_on returning orders
 * these plain writes before the test reads them. */
struct report {
    int rc[6];
    void *values[4];
    int status[4];
    rt_runtime *current[2];
};

/* Finishes with the runtime it runs on as its result. */
static rt_poll report_current_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = rt_current();
    return RT_READY;
}

struct spawns_children {
    rt_coro co;
    struct report *r;
    rt_task *explicit_child;
    rt_task *implicit_child;
};

/* Spawns one child with rt_current() and one with a NULL runtime, and joins
 * both; each child reports the runtime it runs on. */
static rt_poll spawns_children_poll(void *state, rt_context *cx, void **out)
{
    struct spawns_children *s = state;
    RT_CORO_BEGIN(&s->co);
    s->r->current[0] = rt_current();
    s->r->rc[0] = rt_spawn(rt_current(), report_current_poll, NULL, NULL, 0, &s->explicit_child);
    s->r->rc[1] = rt_spawn(NULL, report_current_poll, NULL, NULL, 0, &s->implicit_child);
    if (s->r->rc[0] != 0 || s->r->rc[1] != 0)
        RT_RETURN(&s->co, out, NULL);
    RT_AWAIT(&s->co, rt_task_join(s->explicit_child, cx, &s->r->values[0], &s->r->status[0]));
    RT_AWAIT(&s->co, rt_task_join(s->implicit_child, cx, &s->r->values[1], &s->r->status[1]));
    RT_RETURN(&s->co, out, (uintptr_t)1);
    RT_CORO_END(&s->co, out);
}

Test(task, spawn_inside_a_task_with_the_current_or_a_null_runtime_runs_the_child)
{
    rt_runtime *rt = new_runtime(2);
    struct report r;
    memset(&r, 0, sizeof r);
    r.status[0] = r.status[1] = 12345;
    struct spawns_children state = {{0}, &r, NULL, NULL};
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, spawns_children_poll, NULL, &state, sizeof state, &value), 0);
    cr_assert_eq(r.rc[0], 0, "spawn with rt_current(): %s", rt_strerror(r.rc[0]));
    cr_assert_eq(r.rc[1], 0, "spawn with NULL: %s", rt_strerror(r.rc[1]));
    cr_assert_eq(value, (void *)(uintptr_t)1);
    cr_assert_eq(r.current[0], rt);
    cr_assert_eq(r.values[0], (void *)rt, "the explicit child ran on another runtime");
    cr_assert_eq(r.values[1], (void *)rt, "the NULL-runtime child ran on another runtime");
    cr_assert_eq(r.status[0], 0);
    cr_assert_eq(r.status[1], 0);
    finish_runtime(rt, 0);
}

Test(task, spawn_with_a_null_runtime_outside_a_task_is_einval)
{
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(NULL, trivial_poll, counting_drop, NULL, 0, &task), -EINVAL);
    cr_assert_eq(rt_spawn(NULL, trivial_poll, counting_drop, NULL, 0, NULL), -EINVAL);
    cr_assert_eq(atomic_load(&drops), 0, "a future that was never spawned must not be dropped");
}

Test(task, spawn_rejects_invalid_arguments_without_spawning_or_dropping)
{
    rt_runtime *rt = new_runtime(1);
    int word = 7;
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, NULL, counting_drop, &word, sizeof word, &task), -EINVAL,
                 "poll NULL");
    cr_assert_eq(rt_spawn(rt, trivial_poll, counting_drop, NULL, 16, &task), -EINVAL,
                 "state NULL with size > 0");
    cr_assert_eq(rt_spawn(rt, trivial_poll, counting_drop, &word, SIZE_MAX, &task), -EINVAL,
                 "size SIZE_MAX");
    cr_assert_eq(rt_spawn(rt, trivial_poll, counting_drop, &word, SIZE_MAX / 2 + 1, &task), -EINVAL,
                 "size above half the address space");
    cr_assert_eq(rt_block_on(rt, NULL, counting_drop, &word, sizeof word, NULL), -EINVAL);
    cr_assert_eq(rt_block_on(NULL, trivial_poll, counting_drop, NULL, 0, NULL), -EINVAL);
    cr_assert_eq(rt_block_on(rt, trivial_poll, counting_drop, NULL, 8, NULL), -EINVAL);
    cr_assert_eq(atomic_load(&drops), 0);

    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.spawned, 0, "a rejected spawn was counted as spawned");
}

Test(task, spawn_after_shutdown_is_eshutdown_and_neither_spawns_nor_drops)
{
    rt_runtime *rt = new_runtime(2);
    cr_assert_eq(rt_runtime_shutdown(rt), 0);

    int word = 7;
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, trivial_poll, counting_drop, &word, sizeof word, &task), -ESHUTDOWN);
    cr_assert_eq(rt_spawn(rt, trivial_poll, counting_drop, NULL, 0, NULL), -ESHUTDOWN);
    void *value = (void *)(uintptr_t)1;
    cr_assert_eq(rt_block_on(rt, trivial_poll, counting_drop, &word, sizeof word, &value),
                 -ESHUTDOWN);
    cr_assert_eq(atomic_load(&drops), 0, "drop must not run for a refused spawn");

    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.spawned, 0);
    cr_assert_eq(m.cancelled, 0);
    /* Anything allocated for the refused spawns would be reported as a leak
     * by LeakSanitizer in the sanitizer build. */
}

/* ---- the task's copy of its state ----------------------------------------- */

struct copied_state {
    struct gate *gate;
    int yields_left;
    int magic[16];
};

static atomic_int copy_mismatches;
static atomic_int address_changes;
static _Atomic(uintptr_t) first_address;
static _Atomic(uintptr_t) drop_address;

static rt_poll copied_state_poll(void *state, rt_context *cx, void **out)
{
    struct copied_state *s = state;
    uintptr_t expected = 0;
    if (!atomic_compare_exchange_strong(&first_address, &expected, (uintptr_t)state) &&
        expected != (uintptr_t)state)
        atomic_fetch_add(&address_changes, 1);
    for (int i = 0; i < 16; i++)
        if (s->magic[i] != i * 7 + 1)
            atomic_fetch_add(&copy_mismatches, 1);
    bool open = gate_pass(s->gate, cx);
    atomic_fetch_add(&polls, 1);
    event_signal(&polled);
    if (!open)
        return RT_PENDING;
    if (s->yields_left-- > 0)
        return rt_yield(cx);
    *out = NULL;
    return RT_READY;
}

static void copied_state_drop(void *state)
{
    atomic_store(&drop_address, (uintptr_t)state);
    counting_drop(state);
}

Test(task, state_is_copied_at_spawn_and_kept_at_one_address_until_the_drop)
{
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct copied_state original = {&gate, 3, {0}};
    for (int i = 0; i < 16; i++)
        original.magic[i] = i * 7 + 1;
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, copied_state_poll, copied_state_drop, &original, &task), 0);
    /* The caller owns the original bytes again as soon as rt_spawn returns. */
    memset(original.magic, 0xFF, sizeof original.magic);

    cr_assert(event_wait_for(&polled, 1));
    gate_open(&gate);
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);

    cr_assert_eq(atomic_load(&copy_mismatches), 0, "the task saw the caller's later writes");
    cr_assert_neq(atomic_load(&first_address), (uintptr_t)&original,
                  "the task polls the caller's bytes instead of a copy");
    cr_assert_eq(atomic_load(&address_changes), 0, "the state moved between polls");
    cr_assert_eq(atomic_load(&drop_address), atomic_load(&first_address),
                 "drop got another address than poll");
    /* Gate-closed poll, then three yields and the finishing poll. */
    cr_assert_eq(atomic_load(&polls), 5);
    cr_assert_eq(atomic_load(&drops), 1);
    gate_clear(&gate);
}

/* Sizes whose states are checked for alignment and content; the first byte of
 * a tiny state (under 8 bytes) is its size, larger ones carry a header. */
static const size_t state_sizes[] = {1,  2,  3,   7,   8,    9,    15,    16,     17,
                                     31, 33, 100, 255, 1000, 4096, 65537, 1 << 20};
#define STATE_SIZE_COUNT (sizeof state_sizes / sizeof state_sizes[0])

struct sized_header {
    uint32_t index;
    uint32_t size;
};

static atomic_int misaligned;
static atomic_int content_ok[STATE_SIZE_COUNT];

static unsigned char pattern_byte(size_t i, size_t size)
{
    return (unsigned char)((i * 31u + size) & 0xFFu);
}

/* Checks the alignment and the pattern of a state whose size and index are
 * known: from the header for 8 bytes or more, from the first byte (the size
 * itself) for tiny ones. */
static void check_sized_state(const unsigned char *bytes, size_t index, size_t size,
                              size_t first_patterned)
{
    if ((uintptr_t)bytes % _Alignof(max_align_t) != 0)
        atomic_fetch_add(&misaligned, 1);
    bool ok = index < STATE_SIZE_COUNT && state_sizes[index] == size;
    for (size_t i = first_patterned; ok && i < size; i++)
        if (bytes[i] != pattern_byte(i, size))
            ok = false;
    if (ok)
        atomic_fetch_add(&content_ok[index], 1);
}

static rt_poll sized_state_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    struct sized_header h;
    memcpy(&h, state, sizeof h);
    check_sized_state(state, h.index, h.size, sizeof h);
    *out = NULL;
    return RT_READY;
}

static rt_poll tiny_state_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    size_t size = *(const unsigned char *)state;
    size_t index = 0;
    while (index < STATE_SIZE_COUNT && state_sizes[index] != size)
        index++;
    check_sized_state(state, index, size, 1);
    *out = NULL;
    return RT_READY;
}

Test(task, state_of_every_size_is_copied_whole_and_aligned_for_max_align_t)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *tasks[STATE_SIZE_COUNT];
    for (size_t k = 0; k < STATE_SIZE_COUNT; k++) {
        size_t size = state_sizes[k];
        /* One spare byte so the source itself is deliberately misaligned. */
        unsigned char *buffer = malloc(size + 1);
        cr_assert_not_null(buffer);
        unsigned char *source = buffer + 1;
        for (size_t i = 0; i < size; i++)
            source[i] = pattern_byte(i, size);
        if (size >= 8) {
            struct sized_header h = {(uint32_t)k, (uint32_t)size};
            memcpy(source, &h, sizeof h);
        } else {
            source[0] = (unsigned char)size;
        }
        rt_poll_fn poll = size >= 8 ? sized_state_poll : tiny_state_poll;
        cr_assert_eq(rt_spawn(rt, poll, NULL, source, size, &tasks[k]), 0, "size %zu", size);
        free(buffer);
    }
    for (size_t k = 0; k < STATE_SIZE_COUNT; k++)
        cr_assert_eq(rt_task_wait(tasks[k], WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&misaligned), 0, "%d states not aligned for max_align_t",
                 atomic_load(&misaligned));
    for (size_t k = 0; k < STATE_SIZE_COUNT; k++)
        cr_assert_eq(atomic_load(&content_ok[k]), 1, "state of %zu bytes arrived corrupted",
                     state_sizes[k]);
}

Test(task, empty_state_is_accepted_with_or_without_a_pointer)
{
    rt_runtime *rt = new_runtime(1);
    int unused = 0;
    rt_task *a = NULL;
    rt_task *b = NULL;
    cr_assert_eq(rt_spawn(rt, empty_poll, counting_drop, NULL, 0, &a), 0);
    cr_assert_eq(rt_spawn(rt, empty_poll, counting_drop, &unused, 0, &b), 0);
    void *value = (void *)(uintptr_t)1;
    cr_assert_eq(rt_task_wait(a, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_null(value);
    cr_assert_eq(rt_task_wait(b, WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops), 2);
}

/* ---- drop functions ------------------------------------------------------ */

static atomic_int returned_ready;
static atomic_int drops_before_ready;

static rt_poll yields_three_times_poll(void *state, rt_context *cx, void **out)
{
    int *yields_left = state;
    atomic_fetch_add(&polls, 1);
    if ((*yields_left)-- > 0)
        return rt_yield(cx);
    atomic_store(&returned_ready, 1);
    *out = NULL;
    return RT_READY;
}

static void checks_ready_drop(void *state)
{
    if (atomic_load(&returned_ready) == 0)
        atomic_fetch_add(&drops_before_ready, 1);
    counting_drop(state);
}

Test(task, drop_runs_exactly_once_after_the_poll_that_returned_ready)
{
    rt_runtime *rt = new_runtime(2);
    int yields = 3;
    /* Detached from the start: only the drop tells us the task is done. */
    cr_assert_eq(RT_SPAWN(rt, yields_three_times_poll, checks_ready_drop, &yields, NULL), 0);
    cr_assert(event_wait_for(&dropped, 1), "the drop never ran");
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(atomic_load(&drops_before_ready), 0, "drop ran before the READY poll");
    cr_assert_eq(atomic_load(&polls), 4);
}

/* ---- join and wait ------------------------------------------------------- */

struct joins_two {
    rt_coro co;
    struct report *r;
    rt_task *first;
    rt_task *second;
};

/* Joins one child reading value and status, and another with NULL for both. */
static rt_poll joins_two_poll(void *state, rt_context *cx, void **out)
{
    struct joins_two *s = state;
    RT_CORO_BEGIN(&s->co);
    {
        void *payload = (void *)(uintptr_t)0xABC;
        s->r->rc[0] =
            rt_spawn(NULL, value_poll, counting_drop, &payload, sizeof payload, &s->first);
        s->r->rc[1] =
            rt_spawn(NULL, value_poll, counting_drop, &payload, sizeof payload, &s->second);
    }
    if (s->r->rc[0] != 0 || s->r->rc[1] != 0)
        RT_RETURN(&s->co, out, NULL);
    RT_AWAIT(&s->co, rt_task_join(s->first, cx, &s->r->values[0], &s->r->status[0]));
    RT_AWAIT(&s->co, rt_task_join(s->second, cx, NULL, NULL));
    RT_RETURN(&s->co, out, (uintptr_t)2);
    RT_CORO_END(&s->co, out);
}

Test(task, join_inside_a_task_reports_the_value_and_a_zero_status)
{
    rt_runtime *rt = new_runtime(2);
    struct report r;
    memset(&r, 0, sizeof r);
    r.status[0] = 12345;
    struct joins_two state = {{0}, &r, NULL, NULL};
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, joins_two_poll, NULL, &state, sizeof state, &value), 0);
    cr_assert_eq(r.rc[0], 0);
    cr_assert_eq(r.rc[1], 0);
    cr_assert_eq(value, (void *)(uintptr_t)2);
    cr_assert_eq(r.values[0], (void *)(uintptr_t)0xABC);
    cr_assert_eq(r.status[0], 0);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops), 2);
}

Test(task, wait_returns_the_value_and_accepts_a_null_value_pointer)
{
    rt_runtime *rt = new_runtime(2);
    void *payload = (void *)(uintptr_t)0x5150;
    rt_task *with_value = NULL;
    rt_task *without_value = NULL;
    cr_assert_eq(RT_SPAWN(rt, value_poll, counting_drop, &payload, &with_value), 0);
    cr_assert_eq(RT_SPAWN(rt, value_poll, counting_drop, &payload, &without_value), 0);
    void *value = NULL;
    cr_assert_eq(rt_task_wait(with_value, -1, &value), 0);
    cr_assert_eq(value, payload);
    cr_assert_eq(rt_task_wait(without_value, -1, NULL), 0);
    finish_runtime(rt, 0);
}

Test(task, wait_on_a_null_task_is_einval)
{
    cr_assert_eq(rt_task_wait(NULL, -1, NULL), -EINVAL);
    cr_assert_eq(rt_task_wait(NULL, 0, NULL), -EINVAL);
}

static int64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

Test(task, wait_times_out_after_the_deadline_and_leaves_the_handle_valid)
{
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)0x77};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, gated_value_poll, counting_drop, &state, &task), 0);

    void *value = (void *)(uintptr_t)1;
    cr_assert_eq(rt_task_wait(task, 0, &value), -ETIMEDOUT, "a zero timeout must not block");
    const int64_t timeout_ns = 30 * 1000000LL;
    int64_t start = monotonic_ns();
    cr_assert_eq(rt_task_wait(task, timeout_ns, &value), -ETIMEDOUT);
    int64_t elapsed = monotonic_ns() - start;
    cr_assert_geq(elapsed, timeout_ns - 1000000LL, "timed out after %lld ns only",
                  (long long)elapsed);
    cr_assert_not(rt_task_is_finished(task));

    /* The handle is still ours: the task can finish and be waited on. */
    gate_open(&gate);
    cr_assert_eq(rt_task_wait(task, -1, &value), 0);
    cr_assert_eq(value, (void *)(uintptr_t)0x77);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops), 1);
    gate_clear(&gate);
}

Test(task, wait_with_zero_timeout_on_a_finished_task_returns_its_value)
{
    static struct event joined = EVENT_INIT;
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(1);
    struct gated_value state = {&gate, (void *)(uintptr_t)0x99};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, gated_value_poll, NULL, &state, &task), 0);

    /* A join polled by hand tells us, by its wake-up, when the task has
     * finished while we still hold the handle. */
    rt_context cx = event_context(&joined);
    cr_assert_eq(rt_task_join(task, &cx, NULL, NULL), RT_PENDING);
    gate_open(&gate);
    cr_assert(event_wait_for(&joined, 1));

    void *value = NULL;
    cr_assert_eq(rt_task_wait(task, 0, &value), 0);
    cr_assert_eq(value, (void *)(uintptr_t)0x99);
    finish_runtime(rt, 0);
    gate_clear(&gate);
}

/* ---- blocking calls from a worker ------------------------------------------ */

static atomic_int block_on_drops;

static void block_on_drop(void *state)
{
    (void)state;
    atomic_fetch_add(&block_on_drops, 1);
}

struct blocks_on_worker {
    rt_coro co;
    struct report *r;
    struct gate *gate;
    rt_runtime *other_rt;
    rt_task *other_task;
    rt_task *child;
};

/* From inside a task, tries every blocking call the contract forbids on a
 * worker, then joins its child to show the handle stayed valid. */
static rt_poll blocks_on_worker_poll(void *state, rt_context *cx, void **out)
{
    struct blocks_on_worker *s = state;
    RT_CORO_BEGIN(&s->co);
    {
        struct gated_value child = {s->gate, (void *)(uintptr_t)0xD1};
        s->r->rc[0] = RT_SPAWN(NULL, gated_value_poll, NULL, &child, &s->child);
    }
    if (s->r->rc[0] != 0)
        RT_RETURN(&s->co, out, NULL);
    {
        void *value = NULL;
        s->r->rc[1] = rt_task_wait(s->child, -1, &value);
        s->r->rc[2] = rt_task_wait(s->child, 0, &value);
        s->r->rc[3] = rt_block_on(rt_current(), trivial_poll, block_on_drop, NULL, 0, &value);
        s->r->rc[4] = rt_block_on(s->other_rt, trivial_poll, block_on_drop, NULL, 0, &value);
        s->r->rc[5] = rt_task_wait(s->other_task, -1, &value);
    }
    /* The child was gated so that it could not finish during those calls. */
    gate_open(s->gate);
    RT_AWAIT(&s->co, rt_task_join(s->child, cx, &s->r->values[0], &s->r->status[0]));
    RT_RETURN(&s->co, out, (uintptr_t)3);
    RT_CORO_END(&s->co, out);
}

Test(task, wait_and_block_on_inside_a_task_return_edeadlk_and_keep_the_handle)
{
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    rt_runtime *other = new_runtime(1);
    rt_task *other_task = NULL;
    cr_assert_eq(rt_spawn(other, never_poll, NULL, NULL, 0, &other_task), 0);

    struct report r;
    memset(&r, 0, sizeof r);
    r.status[0] = 12345;
    struct blocks_on_worker state = {{0}, &r, &gate, other, other_task, NULL};
    void *value = NULL;
    cr_assert_eq(rt_block_on(rt, blocks_on_worker_poll, NULL, &state, sizeof state, &value), 0);
    cr_assert_eq(value, (void *)(uintptr_t)3);
    cr_assert_eq(r.rc[0], 0);
    cr_assert_eq(r.rc[1], -EDEADLK, "rt_task_wait(-1) on a worker: %s", rt_strerror(r.rc[1]));
    cr_assert_eq(r.rc[2], -EDEADLK, "rt_task_wait(0) on a worker: %s", rt_strerror(r.rc[2]));
    cr_assert_eq(r.rc[3], -EDEADLK, "rt_block_on of its own runtime: %s", rt_strerror(r.rc[3]));
    cr_assert_eq(r.rc[4], -EDEADLK, "rt_block_on of another runtime from a worker: %s",
                 rt_strerror(r.rc[4]));
    cr_assert_eq(r.rc[5], -EDEADLK, "rt_task_wait on another runtime's task from a worker: %s",
                 rt_strerror(r.rc[5]));
    cr_assert_eq(r.values[0], (void *)(uintptr_t)0xD1, "the handle was consumed by a failed wait");
    cr_assert_eq(r.status[0], 0);
    cr_assert_eq(atomic_load(&block_on_drops), 0,
                 "a future refused with -EDEADLK must not be dropped");

    finish_runtime(rt, 0);
    /* The other runtime's task never finishes; shutdown cancels it, and its
     * handle still works after the runtime is freed. */
    finish_runtime(other, 1);
    cr_assert_eq(rt_task_wait(other_task, -1, NULL), -ECANCELED);
    gate_clear(&gate);
}

/* ---- detach -------------------------------------------------------------- */

Test(task, detached_task_keeps_running_to_completion)
{
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, NULL};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, gated_value_poll, counting_drop, &state, &task), 0);
    cr_assert(event_wait_for(&polled, 1));
    rt_task_detach(task);
    rt_task_detach(NULL);

    gate_open(&gate);
    cr_assert(event_wait_for(&dropped, 1), "a detached task did not run to completion");
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(m.completed, 1);
    cr_assert_eq(m.cancelled, 0);
    cr_assert_eq(atomic_load(&polls), 2, "polled %d times", atomic_load(&polls));
    cr_assert_eq(atomic_load(&drops), 1);
    gate_clear(&gate);
}

Test(task, spawn_without_a_handle_and_detach_of_a_finished_task_release_everything)
{
    rt_runtime *rt = new_runtime(2);
    cr_assert_eq(rt_spawn(rt, empty_poll, counting_drop, NULL, 0, NULL), 0);
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, empty_poll, counting_drop, NULL, 0, &task), 0);
    cr_assert(event_wait_for(&dropped, 2));
    /* Both have run; detaching the finished one releases its memory (the
     * sanitizer build reports a leak otherwise). */
    rt_task_detach(task);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&polls), 2);
    cr_assert_eq(atomic_load(&drops), 2);
}

/* ---- abort --------------------------------------------------------------- */

Test(task, abort_of_an_idle_task_drops_it_once_and_the_waiter_gets_ecanceled)
{
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)1};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, gated_value_poll, counting_drop, &state, &task), 0);
    cr_assert(event_wait_for(&polled, 1));

    /* Any number of aborts, from any thread, is allowed. */
    rt_task_abort(task);
    rt_task_abort(task);
    cr_assert(event_wait_for(&dropped, 1), "an aborted idle task was never dropped");
    void *value = (void *)(uintptr_t)1;
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, &value), -ECANCELED);

    /* Waking the aborted task through the waker it left behind must not poll
     * it again. */
    gate_open(&gate);
    run_probe(rt);

    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&polls), 1, "an aborted task was polled again");
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.cancelled, 1);
    cr_assert_eq(m.completed, 1, "only the probe completes");
    gate_clear(&gate);
}

Test(task, abort_of_a_task_that_stored_no_waker_still_cancels_it)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, &task), 0);
    cr_assert(event_wait_for(&polled, 1));
    rt_task_abort(task);
    /* Nobody will ever wake it, so the abort itself must get it cancelled. */
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(event_wait_for(&dropped, 1));
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&polls), 1);
    cr_assert_eq(atomic_load(&drops), 1);
}

Test(task, abort_of_a_queued_task_drops_it_without_ever_polling_it)
{
    static struct blocker blocker = {EVENT_INIT, EVENT_INIT};
    rt_runtime *rt = new_runtime(1);
    struct blocker *bp = &blocker;
    rt_task *blocking = NULL;
    cr_assert_eq(RT_SPAWN(rt, blocker_poll, NULL, &bp, &blocking), 0);
    cr_assert(event_wait_for(&blocker.entered, 1));

    /* The only worker is busy, so the new task is still queued when aborted. */
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, &task), 0);
    rt_task_abort(task);
    event_signal(&blocker.release);

    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(event_wait_for(&dropped, 1));
    cr_assert_eq(rt_task_wait(blocking, WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&polls), 0, "an aborted task was polled");
    cr_assert_eq(atomic_load(&drops), 1);
}

/* A poll that holds still until the test has aborted the task, to show that
 * the drop waits for the poll in progress. */
struct abort_in_poll {
    bool finish;
    bool self_wake;
};

static atomic_int in_poll;
static atomic_int overlapping_polls;
static atomic_int drops_during_poll;
static struct event entered_poll = EVENT_INIT;
static struct event resume_poll = EVENT_INIT;

static rt_poll abort_in_poll_poll(void *state, rt_context *cx, void **out)
{
    const struct abort_in_poll *s = state;
    if (atomic_exchange(&in_poll, 1) != 0)
        atomic_fetch_add(&overlapping_polls, 1);
    if (atomic_fetch_add(&polls, 1) == 0) {
        event_signal(&entered_poll);
        event_wait_for(&resume_poll, 1);
    }
    if (s->self_wake)
        rt_waker_wake_by_ref(rt_context_waker(cx));
    atomic_store(&in_poll, 0);
    if (s->finish) {
        *out = (void *)(uintptr_t)0x600D;
        return RT_READY;
    }
    return RT_PENDING;
}

static void abort_in_poll_drop(void *state)
{
    if (atomic_load(&in_poll) != 0)
        atomic_fetch_add(&drops_during_poll, 1);
    counting_drop(state);
}

/* Aborts the task while its first poll is held inside, checks the drop has
 * not run, lets the poll return, and hands back rt_task_wait's result. */
static int abort_during_poll(rt_runtime *rt, struct abort_in_poll how, void **value)
{
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, abort_in_poll_poll, abort_in_poll_drop, &how, &task), 0);
    cr_assert(event_wait_for(&entered_poll, 1));
    rt_task_abort(task);
    /* Let the other worker run something, in case the abort wrongly handed
     * the task to it. */
    run_probe(rt);
    cr_assert_eq(atomic_load(&drops), 0, "the drop ran while the poll was still in progress");
    event_signal(&resume_poll);
    int rc = rt_task_wait(task, WAIT_DEADLINE_NS, value);
    cr_assert(event_wait_for(&dropped, 1), "the task was never dropped");
    return rc;
}

Test(task, abort_during_a_poll_drops_the_future_only_after_the_poll_returns)
{
    rt_runtime *rt = new_runtime(2);
    struct abort_in_poll how = {false, false};
    cr_assert_eq(abort_during_poll(rt, how, NULL), -ECANCELED);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&drops_during_poll), 0);
    cr_assert_eq(atomic_load(&overlapping_polls), 0);
    cr_assert_eq(atomic_load(&polls), 1, "an aborted task was polled again");
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.cancelled, 1);
}

Test(task, abort_during_a_poll_that_wakes_itself_is_not_polled_again)
{
    rt_runtime *rt = new_runtime(2);
    struct abort_in_poll how = {false, true};
    cr_assert_eq(abort_during_poll(rt, how, NULL), -ECANCELED);
    run_probe(rt);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops_during_poll), 0);
    cr_assert_eq(atomic_load(&polls), 1, "an aborted task was polled again after a self wake");
    cr_assert_eq(atomic_load(&drops), 1);
}

Test(task, abort_during_the_final_poll_keeps_the_result)
{
    rt_runtime *rt = new_runtime(2);
    struct abort_in_poll how = {true, false};
    void *value = NULL;
    cr_assert_eq(abort_during_poll(rt, how, &value), 0,
                 "a task that finished in the poll in progress must keep its result");
    cr_assert_eq(value, (void *)(uintptr_t)0x600D);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&drops_during_poll), 0);
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.cancelled, 0);
    cr_assert_eq(m.completed, 2, "the task and the probe complete");
}

Test(task, is_finished_turns_true_when_the_task_finishes)
{
    static struct event joined = EVENT_INIT;
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)0x42};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, gated_value_poll, NULL, &state, &task), 0);
    cr_assert(event_wait_for(&polled, 1));
    cr_assert_not(rt_task_is_finished(task), "a task behind a shut gate cannot be finished");

    rt_context cx = event_context(&joined);
    cr_assert_eq(rt_task_join(task, &cx, NULL, NULL), RT_PENDING);
    gate_open(&gate);
    cr_assert(event_wait_for(&joined, 1));
    cr_assert(rt_task_is_finished(task), "the joiner was woken but the task is not finished");
    void *value = NULL;
    int status = 12345;
    cr_assert_eq(rt_task_join(task, &cx, &value, &status), RT_READY);
    cr_assert_eq(value, (void *)(uintptr_t)0x42);
    cr_assert_eq(status, 0);
    finish_runtime(rt, 0);
    gate_clear(&gate);
}

Test(task, abort_of_a_finished_task_keeps_its_result)
{
    static struct event joined = EVENT_INIT;
    static struct gate gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct gated_value state = {&gate, (void *)(uintptr_t)0x1EF7};
    rt_task *task = NULL;
    cr_assert_eq(RT_SPAWN(rt, gated_value_poll, counting_drop, &state, &task), 0);
    rt_context cx = event_context(&joined);
    cr_assert_eq(rt_task_join(task, &cx, NULL, NULL), RT_PENDING);
    gate_open(&gate);
    cr_assert(event_wait_for(&joined, 1));
    cr_assert(rt_task_is_finished(task));

    rt_task_abort(task);
    rt_task_abort(task);
    cr_assert(rt_task_is_finished(task));
    void *value = NULL;
    int status = 12345;
    cr_assert_eq(rt_task_join(task, &cx, &value, &status), RT_READY);
    cr_assert_eq(status, 0, "aborting a finished task changed its status to %d", status);
    cr_assert_eq(value, (void *)(uintptr_t)0x1EF7);
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.completed, 1);
    cr_assert_eq(m.cancelled, 0);
    gate_clear(&gate);
}

static atomic_int joiner_drops;
static struct event joiner_dropped = EVENT_INIT;
static struct event joiner_joining = EVENT_INIT;

struct joiner {
    rt_coro co;
    struct gate *child_gate;
    rt_task *child;
    int spawn_rc;
};

static rt_poll joiner_poll(void *state, rt_context *cx, void **out)
{
    struct joiner *s = state;
    RT_CORO_BEGIN(&s->co);
    {
        struct gated_value child = {s->child_gate, (void *)(uintptr_t)0xC4};
        s->spawn_rc = RT_SPAWN(NULL, gated_value_poll, counting_drop, &child, &s->child);
    }
    if (s->spawn_rc != 0)
        RT_RETURN(&s->co, out, NULL);
    event_signal(&joiner_joining);
    RT_AWAIT(&s->co, rt_task_join(s->child, cx, NULL, NULL));
    /* The join released the handle. */
    s->child = NULL;
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

/* Follows the abort-safety rule of rt_task_join: a joiner dropped while
 * waiting detaches the handle it was joining. */
static void joiner_drop(void *state)
{
    struct joiner *s = state;
    rt_task_detach(s->child);
    atomic_fetch_add(&joiner_drops, 1);
    event_signal(&joiner_dropped);
}

Test(task, aborted_joiner_that_detaches_in_its_drop_leaves_the_child_running)
{
    static struct gate child_gate = GATE_INIT;
    rt_runtime *rt = new_runtime(2);
    struct joiner state = {{0}, &child_gate, NULL, -1};
    rt_task *joiner = NULL;
    cr_assert_eq(RT_SPAWN(rt, joiner_poll, joiner_drop, &state, &joiner), 0);
    cr_assert(event_wait_for(&joiner_joining, 1));
    rt_task_abort(joiner);
    cr_assert_eq(rt_task_wait(joiner, WAIT_DEADLINE_NS, NULL), -ECANCELED);
    cr_assert(event_wait_for(&joiner_dropped, 1));
    cr_assert_eq(atomic_load(&drops), 0, "the child was dropped with its joiner");

    /* The child is still alive and finishes normally once its gate opens. */
    gate_open(&child_gate);
    cr_assert(event_wait_for(&dropped, 1), "the detached child never finished");
    rt_metrics m;
    finish_runtime_metrics(rt, 0, &m);
    cr_assert_eq(atomic_load(&joiner_drops), 1);
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.completed, 1, "the child completes");
    cr_assert_eq(m.cancelled, 1, "the joiner is cancelled");
    gate_clear(&child_gate);
}

Test(task, handles_stay_usable_after_the_runtime_is_freed)
{
    rt_runtime *rt = new_runtime(2);
    void *payload = (void *)(uintptr_t)0x55;
    rt_task *completed = NULL;
    rt_task *pending = NULL;
    cr_assert_eq(RT_SPAWN(rt, value_poll, counting_drop, &payload, &completed), 0);
    cr_assert_eq(rt_spawn(rt, never_poll, counting_drop, NULL, 0, &pending), 0);
    /* Both polled; the first one's drop shows it returned READY. */
    cr_assert(event_wait_for(&polled, 2));
    cr_assert(event_wait_for(&dropped, 1));
    finish_runtime(rt, 1);

    cr_assert(rt_task_is_finished(completed));
    cr_assert(rt_task_is_finished(pending), "a task cancelled by shutdown counts as finished");
    void *value = NULL;
    cr_assert_eq(rt_task_wait(completed, 0, &value), 0);
    cr_assert_eq(value, payload);
    cr_assert_eq(rt_task_wait(pending, 0, NULL), -ECANCELED);
    cr_assert_eq(atomic_load(&drops), 2);
}

/* ---- rt_yield fairness ---------------------------------------------------- */

#define FAIR_ROUNDS 40
#define FAIR_CHILDREN 8
#define FAIR_TOTAL (FAIR_ROUNDS * FAIR_CHILDREN)
/* A cap so that a broken runtime ends the yielder instead of hanging. */
#define YIELDER_MAX_POLLS 200000u

static atomic_uint yielder_polls;
static atomic_int children_run;
static atomic_int spawn_failures;
/* Per child: the yielder poll during which it was made runnable, and the
 * yielder poll count it saw when it ran. */
static atomic_uint runnable_at[FAIR_TOTAL];
static atomic_uint ran_at[FAIR_TOTAL];

static rt_poll fair_child_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    int index = *(int *)state;
    atomic_store(&ran_at[index], atomic_load(&yielder_polls));
    atomic_fetch_add(&children_run, 1);
    *out = NULL;
    return RT_READY;
}

/* Spawns a batch of children onto its own worker during each of its first
 * FAIR_ROUNDS polls, then yields; stops once every child has run. */
static rt_poll spawning_yielder_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    unsigned poll = atomic_fetch_add(&yielder_polls, 1) + 1;
    if (poll <= FAIR_ROUNDS) {
        for (int c = 0; c < FAIR_CHILDREN; c++) {
            int index = (int)(poll - 1) * FAIR_CHILDREN + c;
            atomic_store(&runnable_at[index], poll);
            if (rt_spawn(NULL, fair_child_poll, NULL, &index, sizeof index, NULL) != 0)
                atomic_fetch_add(&spawn_failures, 1);
        }
    }
    if (atomic_load(&children_run) == FAIR_TOTAL || poll >= YIELDER_MAX_POLLS) {
        *out = (void *)(uintptr_t)poll;
        return RT_READY;
    }
    return rt_yield(cx);
}

Test(task, yield_lets_every_task_spawned_on_the_worker_run_before_the_next_poll)
{
    rt_runtime *rt = new_runtime(1);
    rt_task *yielder = NULL;
    cr_assert_eq(rt_spawn(rt, spawning_yielder_poll, NULL, NULL, 0, &yielder), 0);
    cr_assert_eq(rt_task_wait(yielder, -1, NULL), 0);
    /* Children that never ran are cancelled here; the checks below say why. */
    finish_runtime(rt, -1);
    cr_assert_eq(atomic_load(&spawn_failures), 0);
    cr_assert_eq(atomic_load(&children_run), FAIR_TOTAL, "only %d children ran",
                 atomic_load(&children_run));
    for (int i = 0; i < FAIR_TOTAL; i++)
        cr_assert_eq(atomic_load(&ran_at[i]), atomic_load(&runnable_at[i]),
                     "child %d was runnable during yielder poll %u but ran only after poll %u: "
                     "the yielder was polled again ahead of an already runnable task",
                     i, atomic_load(&runnable_at[i]), atomic_load(&ran_at[i]));
}

#define SLEEPERS 16

static rt_waker sleeper_wakers[SLEEPERS];
static struct event sleepers_parked = EVENT_INIT;

/* Parks in its first poll (leaving its waker for the yielder), then records
 * the yielder's poll count when it runs again. */
static rt_poll sleeper_poll(void *state, rt_context *cx, void **out)
{
    int *s = state; /* [0]: index, [1]: polls so far */
    if (s[1]++ == 0) {
        sleeper_wakers[s[0]] = rt_waker_clone(rt_context_waker(cx));
        event_signal(&sleepers_parked);
        return RT_PENDING;
    }
    atomic_store(&ran_at[s[0]], atomic_load(&yielder_polls));
    atomic_fetch_add(&children_run, 1);
    *out = NULL;
    return RT_READY;
}

#define WAKE_AT_POLL 3u

/* Wakes every sleeper during its WAKE_AT_POLL-th poll, then keeps yielding
 * until they have all run. */
static rt_poll waking_yielder_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    unsigned poll = atomic_fetch_add(&yielder_polls, 1) + 1;
    if (poll == WAKE_AT_POLL) {
        for (int i = 0; i < SLEEPERS; i++) {
            atomic_store(&runnable_at[i], poll);
            rt_waker_wake(&sleeper_wakers[i]);
        }
    }
    if (atomic_load(&children_run) == SLEEPERS || poll >= YIELDER_MAX_POLLS) {
        *out = NULL;
        return RT_READY;
    }
    return rt_yield(cx);
}

Test(task, yield_lets_every_task_woken_on_the_worker_run_before_the_next_poll)
{
    rt_runtime *rt = new_runtime(1);
    for (int i = 0; i < SLEEPERS; i++) {
        int s[2] = {i, 0};
        cr_assert_eq(rt_spawn(rt, sleeper_poll, NULL, s, sizeof s, NULL), 0);
    }
    cr_assert(event_wait_for(&sleepers_parked, SLEEPERS));
    rt_task *yielder = NULL;
    cr_assert_eq(rt_spawn(rt, waking_yielder_poll, NULL, NULL, 0, &yielder), 0);
    cr_assert_eq(rt_task_wait(yielder, -1, NULL), 0);
    finish_runtime(rt, -1);
    cr_assert_eq(atomic_load(&children_run), SLEEPERS, "only %d of %d woken tasks ran",
                 atomic_load(&children_run), SLEEPERS);
    for (int i = 0; i < SLEEPERS; i++)
        cr_assert_eq(atomic_load(&ran_at[i]), WAKE_AT_POLL,
                     "sleeper %d woken during yielder poll %u ran only after poll %u", i,
                     WAKE_AT_POLL, atomic_load(&ran_at[i]));
}

#define INJECTED 16

static struct event yielder_started = EVENT_INIT;

static atomic_bool injection_done;
static atomic_uint polls_after_injection;

/* Yields until all INJECTED children (spawned from the test thread) ran, or
 * until it has yielded YIELDER_MAX_POLLS times after the last injection (so a
 * descheduled test thread cannot make it give up early). */
static rt_poll lone_yielder_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    unsigned poll = atomic_fetch_add(&yielder_polls, 1) + 1;
    if (poll == 1)
        event_signal(&yielder_started);
    if (atomic_load(&children_run) == INJECTED ||
        (atomic_load(&injection_done) &&
         atomic_fetch_add(&polls_after_injection, 1) >= YIELDER_MAX_POLLS)) {
        *out = NULL;
        return RT_READY;
    }
    return rt_yield(cx);
}

Test(task, tasks_injected_from_outside_are_not_starved_by_a_yielding_task)
{
    /* With injector_interval 1 the worker looks at the injector after every
     * poll and takes at least one task each time, and yield fairness runs a
     * taken task before the yielder's next poll but one; so a task injected
     * while the yielder had made p polls runs before poll p + INJECTED + 1. */
    rt_runtime *rt = new_runtime_with(1, 1);
    rt_task *yielder = NULL;
    cr_assert_eq(rt_spawn(rt, lone_yielder_poll, NULL, NULL, 0, &yielder), 0);
    cr_assert(event_wait_for(&yielder_started, 1));
    for (int i = 0; i < INJECTED; i++) {
        cr_assert_eq(rt_spawn(rt, fair_child_poll, NULL, &i, sizeof i, NULL), 0);
        /* Read after the push, so a test thread descheduled between the two
         * cannot inflate the measured wait; the wait may read as negative. */
        atomic_store(&runnable_at[i], atomic_load(&yielder_polls));
    }
    atomic_store(&injection_done, true);
    cr_assert_eq(rt_task_wait(yielder, -1, NULL), 0);
    finish_runtime(rt, -1);
    cr_assert_eq(atomic_load(&children_run), INJECTED, "injected tasks starved: %d of %d ran",
                 atomic_load(&children_run), INJECTED);
    for (int i = 0; i < INJECTED; i++) {
        long waited = (long)atomic_load(&ran_at[i]) - (long)atomic_load(&runnable_at[i]);
        cr_assert_leq(waited, INJECTED + 1L,
                      "injected task %d waited %ld yielder polls with injector_interval 1", i,
                      waited);
    }
}

/* ---- local tasks are not buried by injected ones ------------------------ */

/* The children must fit in the deque (capacity 256 by default, as low as
 * 16 with -Ddeque_capacity): a full deque spills its oldest tasks to the
 * injector's tail, behind every filler. */
#ifndef RT_DEQUE_CAPACITY
#define RT_DEQUE_CAPACITY 256
#endif
#define BURIED_CHILDREN (RT_DEQUE_CAPACITY / 4 < 100 ? RT_DEQUE_CAPACITY / 4 : 100)
#define INJECTED_FILLERS 20000
#define FILLER_SPIN_NS 4000 /* 20,000 fillers: an 80 ms backlog */

/* One tick per poll of a filler or a buried child: the single worker's
 * own order of polls. */
static atomic_uint poll_ticks;
static atomic_uint child_ticks[BURIED_CHILDREN];
static atomic_uint children_spawned_at;
static struct event burial_polls = EVENT_INIT; /* one per filler or child poll */

static rt_poll filler_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    int64_t until = rt_now_ns() + FILLER_SPIN_NS;
    while (rt_now_ns() < until)
        ;
    atomic_fetch_add(&poll_ticks, 1);
    event_signal(&burial_polls);
    *out = NULL;
    return RT_READY;
}

static rt_poll buried_child_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    int index = *(int *)state;
    atomic_store(&child_ticks[index], atomic_fetch_add(&poll_ticks, 1));
    event_signal(&burial_polls);
    *out = NULL;
    return RT_READY;
}

/* Holds the only worker until the fillers are queued in the injector, then
 * spawns its children onto that worker (its LIFO slot and deque). */
static rt_poll burying_parent_poll(void *state, rt_context *cx, void **out)
{
    struct blocker *b = *(struct blocker **)state;
    (void)cx;
    event_signal(&b->entered);
    event_wait_for(&b->release, 1);
    atomic_store(&children_spawned_at, atomic_load(&poll_ticks));
    for (int i = 0; i < BURIED_CHILDREN; i++)
        if (rt_spawn(NULL, buried_child_poll, NULL, &i, sizeof i, NULL) != 0)
            atomic_fetch_add(&spawn_failures, 1);
    *out = NULL;
    return RT_READY;
}

Test(task, tasks_on_a_deque_buried_by_injected_batches_run_once_they_starve)
{
    /* Each look at the injector pushes a batch onto the deque's bottom,
     * which the worker pops first: the children left at the top stay
     * there while the backlog lasts. Once they have waited
     * RT__STARVATION_NS (10 ms, read from a clock of 4 ms steps), they are
     * taken from the top, one per look: the last child ran within
     * 1,021-1,647 polls (measured; a filler's poll takes somewhat more
     * than its 4 us spin). Without that, one child every 10 ms left the
     * top, and only at looks that found the injector empty: the last child
     * waited for the whole backlog (20,099 polls, measured). A slower
     * build polls fewer fillers in those 10 ms, so the bound, half the
     * backlog, only gets looser there. */
    static struct blocker parent = {EVENT_INIT, EVENT_INIT};
    rt_runtime *rt = new_runtime(1);
    struct blocker *bp = &parent;
    cr_assert_eq(RT_SPAWN(rt, burying_parent_poll, NULL, &bp, NULL), 0);
    cr_assert(event_wait_for(&parent.entered, 1));
    for (int i = 0; i < INJECTED_FILLERS; i++)
        cr_assert_eq(rt_spawn(rt, filler_poll, NULL, NULL, 0, NULL), 0);
    event_signal(&parent.release);
    cr_assert(event_wait_for(&burial_polls, INJECTED_FILLERS + BURIED_CHILDREN));
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&spawn_failures), 0);
    unsigned spawned_at = atomic_load(&children_spawned_at);
    unsigned latest = 0;
    for (int i = 0; i < BURIED_CHILDREN; i++) {
        unsigned waited = atomic_load(&child_ticks[i]) - spawned_at;
        if (waited > latest)
            latest = waited;
    }
    cr_assert_leq(latest, INJECTED_FILLERS / 2u,
                  "a child spawned on the worker waited %u polls behind %d injected tasks", latest,
                  INJECTED_FILLERS);
}

/* ---- wake-ups and polls ---------------------------------------------------- */

static rt_waker stashed_waker;

/* The first poll leaves a clone of its waker for the test, which wakes it
 * while the poll is still held inside; the second poll finishes. */
static rt_poll woken_in_poll_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    if (atomic_exchange(&in_poll, 1) != 0)
        atomic_fetch_add(&overlapping_polls, 1);
    int n = atomic_fetch_add(&polls, 1) + 1;
    if (n == 1) {
        stashed_waker = rt_waker_clone(rt_context_waker(cx));
        event_signal(&entered_poll);
        event_wait_for(&resume_poll, 1);
        atomic_store(&in_poll, 0);
        return RT_PENDING;
    }
    atomic_store(&in_poll, 0);
    *out = (void *)(uintptr_t)n;
    return RT_READY;
}

Test(task, task_woken_during_its_poll_is_polled_again_afterwards_never_concurrently)
{
    rt_runtime *rt = new_runtime(2);
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, woken_in_poll_poll, counting_drop, NULL, 0, &task), 0);
    cr_assert(event_wait_for(&entered_poll, 1));
    rt_waker_wake(&stashed_waker);
    /* The free worker runs a probe; a task wrongly scheduled by the wake
     * would reach it first and be polled concurrently. */
    run_probe(rt);
    cr_assert_eq(atomic_load(&polls), 1, "polled again while the first poll still runs");
    event_signal(&resume_poll);

    void *value = NULL;
    cr_assert_eq(rt_task_wait(task, WAIT_DEADLINE_NS, &value), 0,
                 "a wake that arrived during the poll was lost");
    cr_assert_eq(value, (void *)(uintptr_t)2);
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&overlapping_polls), 0);
    cr_assert_eq(atomic_load(&polls), 2);
    cr_assert_eq(atomic_load(&drops), 1);
}

#define WAKER_THREADS 8
#define WAKES_PER_THREAD 2000

static rt_waker storm_wakers[WAKER_THREADS];
static pthread_barrier_t storm_start;

/* The first poll clones one waker per storm thread; later polls just count.
 * It never finishes. */
static rt_poll storm_target_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)out;
    if (atomic_fetch_add(&polls, 1) == 0)
        for (int i = 0; i < WAKER_THREADS; i++)
            storm_wakers[i] = rt_waker_clone(rt_context_waker(cx));
    event_signal(&polled);
    return RT_PENDING;
}

static void *storm_thread(void *arg)
{
    rt_waker *w = arg;
    pthread_barrier_wait(&storm_start);
    for (int i = 0; i < WAKES_PER_THREAD; i++) {
        if (i % 8 == 0) {
            rt_waker copy = rt_waker_clone(w);
            rt_waker_wake(&copy);
        } else {
            rt_waker_wake_by_ref(w);
        }
    }
    rt_waker_wake(w);
    return NULL;
}

Test(task, many_concurrent_wakes_of_an_idle_task_schedule_it_once)
{
    static struct blocker blocker = {EVENT_INIT, EVENT_INIT};
    rt_runtime *rt = new_runtime(1);
    cr_assert_eq(rt_spawn(rt, storm_target_poll, counting_drop, NULL, 0, NULL), 0);
    cr_assert(event_wait_for(&polled, 1));

    /* Hold the only worker, so that no poll can consume a wake while the
     * storm runs: every wake lands on the same idle (then scheduled) task. */
    struct blocker *bp = &blocker;
    rt_task *blocking = NULL;
    cr_assert_eq(RT_SPAWN(rt, blocker_poll, NULL, &bp, &blocking), 0);
    cr_assert(event_wait_for(&blocker.entered, 1));

    pthread_t threads[WAKER_THREADS];
    cr_assert_eq(pthread_barrier_init(&storm_start, NULL, WAKER_THREADS), 0);
    for (int i = 0; i < WAKER_THREADS; i++)
        cr_assert_eq(pthread_create(&threads[i], NULL, storm_thread, &storm_wakers[i]), 0);
    for (int i = 0; i < WAKER_THREADS; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&storm_start);

    event_signal(&blocker.release);
    cr_assert_eq(rt_task_wait(blocking, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert(event_wait_for(&polled, 2), "the woken task was never polled");
    /* A worker parks only when it finds no runnable task, so once the only
     * worker is parked every copy of the task that was queued has run. */
    cr_assert(wait_all_workers_parked(rt), "the worker never went idle");

    rt_metrics m;
    finish_runtime_metrics(rt, 1, &m);
    cr_assert_eq(atomic_load(&polls), 2, "%d wakes scheduled the task %d times",
                 WAKER_THREADS * (WAKES_PER_THREAD + 1), atomic_load(&polls) - 1);
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(m.completed, 1, "only the blocker completes");
    cr_assert_eq(m.cancelled, 1);
}

/* ---- a yield is not starved by two tasks waking each other ------------- */

/* Two tasks that wake each other hand the single worker back and forth
 * through its LIFO slot, so the deque stays empty and a yielded task waits on
 * the deferred list. The yielded task must still get its turn (within a few
 * maintenance intervals), not only once the pair has finished: the pair stops
 * by itself only after PAIR_LIMIT rounds, which the check below shows were
 * never needed. */

#define PAIR_LIMIT 2000000ul

struct pair_game {
    rt_waker waker[2];    /* each partner's waker, stored while it waits */
    unsigned long rounds; /* polls of the partners so far */
    atomic_bool stop;     /* set by the yielder once it ran again */
    unsigned long rounds_when_yielder_returned;
};

static struct pair_game pair_game;

struct partner {
    unsigned me;       /* 0 or 1 */
    bool spawned_peer; /* partner 0 spawns partner 1 on its first poll */
};

static rt_poll partner_poll(void *state, rt_context *cx, void **out);

static rt_poll partner_poll(void *state, rt_context *cx, void **out)
{
    struct partner *p = state;
    *out = NULL;
    if (atomic_load(&pair_game.stop) || pair_game.rounds >= PAIR_LIMIT) {
        /* Release the other side so that it sees the stop too. */
        rt_waker_wake_by_ref(&pair_game.waker[1 - p->me]);
        return RT_READY;
    }
    pair_game.rounds++;
    rt_waker_drop(&pair_game.waker[p->me]);
    pair_game.waker[p->me] = rt_waker_clone(rt_context_waker(cx));
    if (p->me == 0 && !p->spawned_peer) {
        p->spawned_peer = true;
        struct partner peer = {1, false};
        cr_assert_eq(RT_SPAWN(NULL, partner_poll, NULL, &peer, NULL), 0);
    } else {
        rt_waker_wake_by_ref(&pair_game.waker[1 - p->me]);
    }
    return RT_PENDING;
}

struct starved_yielder {
    bool yielded;
};

static rt_poll starved_yielder_poll(void *state, rt_context *cx, void **out)
{
    struct starved_yielder *y = state;
    *out = NULL;
    if (!y->yielded) {
        y->yielded = true;
        struct partner first = {0, false};
        cr_assert_eq(RT_SPAWN(NULL, partner_poll, NULL, &first, NULL), 0);
        return rt_yield(cx);
    }
    pair_game.rounds_when_yielder_returned = pair_game.rounds;
    atomic_store(&pair_game.stop, true);
    return RT_READY;
}

Test(task, a_yield_is_not_starved_by_two_tasks_waking_each_other)
{
    rt_runtime *rt = new_runtime(1);
    pair_game.waker[0] = pair_game.waker[1] = rt_waker_noop();
    pair_game.rounds = 0;
    atomic_store(&pair_game.stop, false);

    struct starved_yielder y = {false};
    cr_assert_eq(rt_block_on(rt, starved_yielder_poll, NULL, &y, sizeof y, NULL), 0);
    unsigned long waited = pair_game.rounds_when_yielder_returned;
    cr_assert_lt(waited, 1000, "the yielded task waited %lu polls of the pair (limit %lu)", waited,
                 PAIR_LIMIT);
    finish_runtime(rt, -1);
    rt_waker_drop(&pair_game.waker[0]);
    rt_waker_drop(&pair_game.waker[1]);
}
