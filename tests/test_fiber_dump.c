/* Black-box tests of what a task dump (asyncrt/diag.h) says of fibers: the
 * file, line and function of the await a fiber waits in, what it waits for,
 * its stack (size, depth, pages touched), a backtrace through its frames,
 * fibers grouped by identical stacks as Go's goroutine dump groups them,
 * and the deepest stack a finished fiber used in the metrics.
 *
 * Built with frame pointers and -rdynamic (tests/meson.build), as fiber.h
 * asks of code whose backtraces are to be read: the walk follows the frame
 * pointers, and the dump names functions from the dynamic symbol table. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

TestSuite(fiber_dump, .timeout = 120, .fini = fail_on_leaks);

/* The line of the receive every waiting fiber below waits in. */
static _Atomic int recv_line;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The leaf of each call chain: waits for the channel to close. */
__attribute__((noinline)) void fiber_dump_leaf(rt_chan *ch)
{
    void *v;
    atomic_store(&recv_line, __LINE__ + 1); /* the await's line */
    int e = rt_chan_recv_await(ch, &v);
    cr_assert_eq(e, -EPIPE);
    __asm__ volatile("" ::: "memory"); /* not a tail call: the frame stays */
}

__attribute__((noinline)) void fiber_dump_middle(rt_chan *ch)
{
    fiber_dump_leaf(ch);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void fiber_dump_other_middle(rt_chan *ch)
{
    fiber_dump_leaf(ch);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void *fiber_dump_root(void *arg)
{
    fiber_dump_middle(arg);
    __asm__ volatile("" ::: "memory");
    return NULL;
}

__attribute__((noinline)) void *fiber_dump_other_root(void *arg)
{
    fiber_dump_other_middle(arg);
    __asm__ volatile("" ::: "memory");
    return NULL;
}

/* What the visit found: the infos of every waiting fiber. */
#define MAX_SEEN 8
struct seen {
    size_t n;
    size_t waiting_in_recv;
    rt_task_info info[MAX_SEEN];
};

static int collect(const rt_task_info *info, void *arg)
{
    struct seen *s = arg;
    if (info->state == RT_TASK_WAITING && info->wait.kind == RT_WAIT_RECV)
        s->waiting_in_recv++;
    if (s->n < MAX_SEEN)
        s->info[s->n++] = *info;
    return 0;
}

/* Waits (on the tasks' own state, not a sleep) until `want` fibers wait in
 * the receive, and returns what the last look saw. */
static void wait_for_waiting(rt_runtime *rt, size_t want, struct seen *s)
{
    int64_t deadline = now_ns() + WAIT_DEADLINE_NS;
    for (;;) {
        memset(s, 0, sizeof(*s));
        cr_assert_geq(rt_runtime_tasks(rt, collect, s), 0);
        if (s->waiting_in_recv == want)
            return;
        cr_assert_lt(now_ns(), deadline, "%zu of %zu fibers waiting", s->waiting_in_recv, want);
        sched_yield();
    }
}

/* The name dladdr gives the function a return address points into. */
static const char *frame_name(const void *pc)
{
    Dl_info dl;
    if (dladdr((const char *)pc - 1, &dl) == 0 || dl.dli_sname == NULL)
        return "?";
    return dl.dli_sname;
}

static const char *basename_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

Test(fiber_dump, a_waiting_fiber_shows_its_await_its_stack_and_its_frames)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, fiber_dump_root, ch, &t), 0);
    struct seen s;
    wait_for_waiting(rt, 1, &s);
    const rt_task_info *info = NULL;
    for (size_t i = 0; i < s.n; i++)
        if (s.info[i].id == rt_task_id(t))
            info = &s.info[i];
    cr_assert_not_null(info);
    cr_assert_eq(info->size, sizeof(rt_task_info));

    cr_assert_not_null(info->await_file);
    cr_assert_str_eq(basename_of(info->await_file), "test_fiber_dump.c");
    cr_assert_eq(info->await_line, atomic_load(&recv_line));
    cr_assert_str_eq(info->await_function, "fiber_dump_leaf");
    cr_assert_eq(info->wait.object, (const void *)ch, "the channel it receives on");

    size_t stack = 256 * 1024;
#if defined(__SANITIZE_ADDRESS__)
    stack = 512 * 1024;
#endif
    cr_assert_eq(info->stack_size, stack);
    cr_assert_gt(info->stack_depth, 0);
    cr_assert_lt(info->stack_depth, 64 * 1024, "depth %zu", info->stack_depth);
    cr_assert_geq(info->stack_touched, info->stack_depth, "touched %zu, depth %zu",
                  info->stack_touched, info->stack_depth);
    cr_assert_leq(info->stack_touched, info->stack_size);

    cr_assert_geq(info->backtrace_len, 3, "%u frames", info->backtrace_len);
    cr_assert_str_eq(frame_name(info->backtrace[0]), "fiber_dump_leaf");
    cr_assert_str_eq(frame_name(info->backtrace[1]), "fiber_dump_middle");
    cr_assert_str_eq(frame_name(info->backtrace[2]), "fiber_dump_root");
    cr_assert_eq(info->backtrace_len, 3, "the walk ends at the fiber's own function");

    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    cr_assert_not_null(out);
    cr_assert_eq(rt_runtime_dump(rt, out), 0);
    fclose(out);
    char at[128];
    snprintf(at, sizeof at, "test_fiber_dump.c:%d in fiber_dump_leaf", atomic_load(&recv_line));
    cr_assert_not_null(strstr(text, at), "%s", text);
    cr_assert_not_null(strstr(text, "fiber stack "), "%s", text);
    cr_assert_not_null(strstr(text, "backtrace from the await up:"), "%s", text);
    cr_assert_not_null(strstr(text, "#0 fiber_dump_leaf+0x"), "%s", text);
    cr_assert_not_null(strstr(text, "#2 fiber_dump_root+0x"), "%s", text);
    free(text);

    rt_chan_sender_drop(ch);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* How many blocks of the dump begin with `head` ("3 tasks waiting"). */
static unsigned count_blocks(const char *text, const char *head)
{
    unsigned n = 0;
    size_t len = strlen(head);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, head, len) == 0)
            n++;
        line = strchr(line, '\n');
        if (line != NULL)
            line++;
    }
    return n;
}

Test(fiber_dump, fibers_with_the_same_stack_make_one_block_and_other_stacks_their_own)
{
    rt_runtime *rt = new_runtime(2);
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(1, &ch), 0);
    rt_task *t[4];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(rt_fiber_spawn(rt, fiber_dump_root, ch, &t[i]), 0);
    /* The same await, reached through another function: another stack. */
    cr_assert_eq(rt_fiber_spawn(rt, fiber_dump_other_root, ch, &t[3]), 0);
    struct seen s;
    wait_for_waiting(rt, 4, &s);

    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    cr_assert_not_null(out);
    cr_assert_eq(rt_runtime_dump(rt, out), 0);
    fclose(out);
    cr_assert_eq(count_blocks(text, "3 tasks waiting at "), 1, "%s", text);
    cr_assert_eq(count_blocks(text, "1 task waiting at "), 1, "%s", text);
    cr_assert_not_null(strstr(text, "fiber_dump_other_middle+0x"), "%s", text);
    free(text);

    rt_chan_sender_drop(ch);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(task_wait_status(t[i], WAIT_DEADLINE_NS, NULL), 0);
    rt_chan_receiver_drop(ch, NULL, NULL);
    finish_runtime(rt, 0);
}

/* Goes `depth` frames of 1 KiB deep, then yields at the bottom. */
__attribute__((noinline)) int fiber_dump_dive(int depth)
{
    /* Its address escapes, so that the whole frame is kept in one piece
     * (clang keeps only the parts of a local array that are used). */
    volatile char frame[1024];
    __asm__ volatile("" : : "r"(frame) : "memory");
    frame[0] = (char)depth;
    if (depth > 0)
        return fiber_dump_dive(depth - 1) + frame[0];
    cr_assert_eq(rt_fiber_yield(), 0);
    return frame[0];
}

static void *dive(void *arg)
{
    (void)fiber_dump_dive((int)(intptr_t)arg);
    return NULL;
}

Test(fiber_dump, the_metrics_keep_the_deepest_stack_a_finished_fiber_used)
{
    rt_runtime *rt = new_runtime(1);
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.fiber_stack_deepest, 0);
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, dive, (void *)(intptr_t)4, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    uint64_t shallow = m.fiber_stack_deepest;
    cr_assert_geq(shallow, 5 * 1024, "%llu", (unsigned long long)shallow);
    cr_assert_eq(rt_fiber_spawn(rt, dive, (void *)(intptr_t)40, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_geq(m.fiber_stack_deepest, 41 * 1024, "%llu",
                  (unsigned long long)m.fiber_stack_deepest);
    /* A shallower one later leaves the maximum as it is. */
    uint64_t deep = m.fiber_stack_deepest;
    cr_assert_eq(rt_fiber_spawn(rt, dive, (void *)(intptr_t)1, &t), 0);
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.fiber_stack_deepest, deep);
    finish_runtime(rt, 0);
}

/* ---- the stall watchdog ------------------------------------------------------ */

struct stall_watch {
    struct event stalled;
    atomic_uint_fast64_t fiber_id; /* the fiber expected in the report */
    atomic_int reports;            /* stall reports naming it */
    atomic_bool spawn_site_named;
    int wake_fd; /* a report writes here, which ends the stall */
};

static void on_stall(const rt_report *rep, void *arg)
{
    struct stall_watch *w = arg;
    if (rep->kind != RT_REPORT_STALL || rep->task_id != atomic_load(&w->fiber_id))
        return;
    if (atomic_fetch_add(&w->reports, 1) == 0) {
        atomic_store(&w->spawn_site_named,
                     rep->spawned_at != NULL &&
                         strstr(rep->spawned_at, "test_fiber_dump.c") != NULL);
        char c = 1;
        cr_assert_eq(write(w->wake_fd, &c, 1), 1);
        event_signal(&w->stalled);
    }
}

/* Awaits once, then holds its worker in a blocking read, never awaiting
 * again until the watchdog's report writes the byte it waits for. */
static void *never_awaits_again(void *arg)
{
    int fd = (int)(intptr_t)arg;
    cr_assert_eq(rt_fiber_yield(), 0);
    char c;
    cr_assert_eq(read(fd, &c, 1), 1);
    return NULL;
}

Test(fiber_dump, a_fiber_that_never_awaits_again_is_reported_as_a_stall)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    struct stall_watch w = {.stalled = EVENT_INIT, .wake_fd = fds[1]};
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.stall_ns = 20 * 1000000;
    cfg.report = on_stall;
    cfg.report_arg = &w;
    rt_runtime *rt = new_runtime_config(&cfg);
    /* A report that comes before the id is stored is not counted, and the
     * fiber goes on stalling: the watchdog reports it again. */
    rt_task *t;
    cr_assert_eq(rt_fiber_spawn(rt, never_awaits_again, (void *)(intptr_t)fds[0], &t), 0);
    atomic_store(&w.fiber_id, rt_task_id(t));
    cr_assert(event_wait_for_s(&w.stalled, 1, EVENT_DEADLINE_S));
    cr_assert_eq(task_wait_status(t, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert(atomic_load(&w.spawn_site_named));
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_geq(m.stalls, 1);
    finish_runtime(rt, 0);
    close(fds[0]);
    close(fds[1]);
}
