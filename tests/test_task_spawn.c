/* Black-box tests of spawning (asyncrt/task.h): rt_spawn from the main
 * thread, from foreign threads and inside a task (with the current or a NULL
 * runtime), its refusals (a NULL runtime outside a task, invalid arguments, a
 * runtime shut down), the task's copy of its state (copied at spawn, kept at
 * one address until the drop, every size aligned for max_align_t, empty
 * state), and the drop function run exactly once after the final poll. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_task.h"

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

TestSuite(task, .timeout = 120, .fini = fail_on_leaks);

/* ---- rt_spawn ----------------------------------------------------------- */

Test(task, spawn_from_the_main_thread_runs_the_task_and_wait_returns_its_value)
{
    rt_runtime *rt = new_runtime(2);
    void *payload = (void *)(uintptr_t)0xBEEF;
    rt_task *task = NULL;
    cr_assert_eq(rt_spawn(rt, value_poll, counting_drop, &payload, sizeof payload, &task), 0);
    cr_assert_not_null(task);
    void *value = NULL;
    cr_assert_eq(task_wait_status(task, -1, &value), 0);
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
    f->spawn_rc = RT_SPAWN_STATE(f->rt, value_poll, counting_drop, &payload, &task);
    if (f->spawn_rc == 0)
        f->wait_rc = task_wait_status(task, WAIT_DEADLINE_NS, &f->value);
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

/* Finishes with the runtime it runs on as its result. */
static rt_poll report_current_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = rt_current_runtime();
    return RT_READY;
}

struct spawns_children {
    rt_coro co;
    struct report *r;
    rt_task *explicit_child;
    rt_task *implicit_child;
    rt_task_join joins[2];
};

/* Spawns one child with rt_current_runtime() and one with a NULL runtime, and joins
 * both; each child reports the runtime it runs on. */
static rt_poll spawns_children_poll(void *state, rt_context *cx, void **out)
{
    struct spawns_children *s = state;
    RT_CORO_BEGIN(&s->co);
    s->r->current[0] = rt_current_runtime();
    s->r->rc[0] =
        rt_spawn(rt_current_runtime(), report_current_poll, NULL, NULL, 0, &s->explicit_child);
    s->r->rc[1] = rt_spawn(NULL, report_current_poll, NULL, NULL, 0, &s->implicit_child);
    if (s->r->rc[0] != 0 || s->r->rc[1] != 0)
        RT_RETURN(&s->co, out, NULL);
    rt_task_join_init(&s->joins[0], s->explicit_child);
    rt_task_join_init(&s->joins[1], s->implicit_child);
    RT_AWAIT(&s->co, cx, &s->joins[0]);
    RT_AWAIT(&s->co, cx, &s->joins[1]);
    for (int i = 0; i < 2; i++) {
        s->r->values[i] = s->joins[i].value;
        s->r->status[i] = (int)s->joins[i].result;
    }
    RT_RETURN(&s->co, out, (uintptr_t)1);
    RT_CORO_END(&s->co, out);
}

Test(task, spawn_inside_a_task_with_the_current_or_a_null_runtime_runs_the_child)
{
    rt_runtime *rt = new_runtime(2);
    struct report r;
    memset(&r, 0, sizeof r);
    r.status[0] = r.status[1] = 12345;
    struct spawns_children state;
    memset(&state, 0, sizeof state);
    state.r = &r;
    void *value = NULL;
    cr_assert_eq(block_on_status(rt, spawns_children_poll, NULL, &state, sizeof state, &value), 0);
    cr_assert_eq(r.rc[0], 0, "spawn with rt_current_runtime(): %s", rt_strerror(r.rc[0]));
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
    cr_assert_eq(block_on_status(rt, NULL, counting_drop, &word, sizeof word, NULL), -EINVAL);
    cr_assert_eq(block_on_status(NULL, trivial_poll, counting_drop, NULL, 0, NULL), -EINVAL);
    cr_assert_eq(block_on_status(rt, trivial_poll, counting_drop, NULL, 8, NULL), -EINVAL);
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
    cr_assert_eq(block_on_status(rt, trivial_poll, counting_drop, &word, sizeof word, &value),
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
    cr_assert_eq(RT_SPAWN_STATE(rt, copied_state_poll, copied_state_drop, &original, &task), 0);
    /* The caller owns the original bytes again as soon as rt_spawn returns. */
    memset(original.magic, 0xFF, sizeof original.magic);

    cr_assert(event_wait_for(&polled, 1));
    gate_open(&gate);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), 0);
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
        cr_assert_eq(task_wait_status(tasks[k], WAIT_DEADLINE_NS, NULL), 0);
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
    cr_assert_eq(task_wait_status(a, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_null(value);
    cr_assert_eq(task_wait_status(b, WAIT_DEADLINE_NS, NULL), 0);
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
    cr_assert_eq(RT_SPAWN_STATE(rt, yields_three_times_poll, checks_ready_drop, &yields, NULL), 0);
    cr_assert(event_wait_for(&dropped, 1), "the drop never ran");
    finish_runtime(rt, 0);
    cr_assert_eq(atomic_load(&drops), 1);
    cr_assert_eq(atomic_load(&drops_before_ready), 0, "drop ran before the READY poll");
    cr_assert_eq(atomic_load(&polls), 4);
}
