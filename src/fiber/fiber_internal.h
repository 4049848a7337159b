/* The fiber's task state and control block, the switch out and the await
 * that every awaiting function of fibers shares (fiber.c, helpers.c): kept
 * inline, so that a helper's await switches without a frame of its own in
 * between (each such frame costs a mispredicted return on every resume).
 * Internal, not installed. */
#ifndef RT_SRC_FIBER_FIBER_INTERNAL_H
#define RT_SRC_FIBER_FIBER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <asyncrt/fiber.h>
#include <asyncrt/future.h>

#include "common.h"
#include "stack.h"
#include "switch.h"
#include "task_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#define RT__FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RT__FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define RT__FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RT__FIBER_TSAN 1
#endif
#endif
#ifdef RT__FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef RT__FIBER_TSAN
#include <sanitizer/tsan_interface.h>
/* The switching functions run uninstrumented: between the switch of
 * ThreadSanitizer's fiber and the switch of the stack, an instrumented
 * function's exit would pop the wrong shadow stack. */
#define RT__NO_TSAN __attribute__((no_sanitize("thread"), noinline))
#define RT__SWITCHING RT__NO_TSAN
#else
#define RT__NO_TSAN
/* Inlined into their callers: every return executed after a switch of
 * stacks until the next call mispredicts (the return stack buffer holds the
 * other stack's calls), so each frame between the switch and the code that
 * goes on costs a misprediction on both sides of every await. */
#define RT__SWITCHING __attribute__((always_inline)) inline
#endif

/* The task's state: what the fiber is, and its control block once it
 * runs. Small enough for the scheduler's cached task blocks; it never
 * moves, so the control block points back at it. */
typedef struct rt__fiber rt__fiber;

typedef struct fiber_task {
    rt_fiber_fn fn;
    void *arg;
    rt_runtime *rt;
    const char *site;           /* the spawn site, for the overflow report */
    uint64_t task_id;           /* for the overflow report */
    void (*release)(void *arg); /* rt_fiber_options.release */
    struct rt__fiber *f;        /* NULL until the first run, and again once released */
    uint32_t stack_pages;       /* the stack's usable size in pages; 0: the runtime's */
    bool finished;              /* the function returned and the stack went back */
    bool migrate;               /* rt_config.fiber_migrate: move at every await */
} fiber_task;
_Static_assert(sizeof(fiber_task) + sizeof(struct rt_task) <= RT__TASK_SMALL_BLOCK,
               "a fiber's task fits a cached task block");

/* The fiber's control block: at the top of its own stack, so that a fiber
 * costs no allocation beyond its task and a pooled stack. A field added
 * here is initialised in control_block_init (fiber.c). */
struct rt__fiber {
    const fiber_task *task; /* what it runs, on which runtime */
    void **out;             /* the result of the poll that runs it; NULL in the drop */
    rt__fiber *outer;       /* the thread's current fiber when it was switched in */
    rt__stack stack;        /* the stack this block sits at the top of */
    void *sp;               /* the fiber's stack pointer while it is switched out */
    void *poller_sp;        /* the stack pointer of the poll that switched it in */
    rt_context *cx;         /* that poll's context; NULL in the drop */
    int status;             /* rt_fiber_set_status */
    bool finished;          /* fn returned */
    bool cancelled;         /* resumed by the drop: awaits fail */
    bool shielded;          /* rt_fiber_shield until shield_deadline (-1: no end) */
    int64_t shield_deadline;
    /* The operation awaited now uses the fiber's stack until it ends (the
     * job of rt_fiber_run_blocking): after a cancel it is waited for, with
     * no deadline but shutdown's, and a fiber whose wait ends before it
     * does is abandoned, so that its stack stays mapped. */
    bool keep_stack;
    /* For a task dump (fiber_describe), which reads them while it holds the
     * task, the fiber switched out: where the fiber waits, written at each
     * await before it may switch out. */
    const char *await_file;
    const char *await_function;
    int await_line;
    rt_future *awaiting;     /* the operation awaited; NULL in a yield */
    const void *await_frame; /* the frame of the await call, where the walk up starts */
    const void *root_frame;  /* fiber_main's, where it ends */
    uintptr_t lowest_sp;     /* the deepest stack pointer of a switch out */
    void **locals;           /* fiber-local values by key index, or NULL */
    unsigned locals_len;     /* entries of `locals` */
#ifdef RT__FIBER_ASAN
    void *asan_fake;        /* the fiber's fake stack while switched out */
    const void *poller_low; /* the stack it came from */
    size_t poller_size;
#endif
#ifdef RT__FIBER_TSAN
    void *tsan_fiber;  /* ThreadSanitizer's fiber for this one */
    void *tsan_poller; /* the one that switched it in */
#endif
};

/* The fiber the calling thread runs, or NULL. Not inlined, and read only
 * at the entry of a public function, never after a switch in the same
 * function: the thread may have changed, and the compiler may have kept
 * the old thread's address of the thread-local variable. */
rt__fiber *rt__fiber_current(void);

/* Makes f the calling thread's current fiber. Not inlined, for the same
 * reason: the fiber calls it right before it switches out, on whichever
 * thread it runs then. */
void rt__fiber_set_current(rt__fiber *f);

/* An unguarded stack's canary was overwritten: ends the process with the
 * overflow report (fiber.h, "Stacks"). */
__attribute__((noreturn, cold)) void rt__fiber_overflowed(const rt__fiber *f);

/* Where the fiber is about to wait, for the dump. `frame`: the frame of
 * the public function called at the await site. */
static inline void rt__fiber_note_await(rt__fiber *f, const char *file, int line,
                                        const char *function, rt_future *op, const void *frame)
{
    f->await_file = file;
    f->await_line = line;
    f->await_function = function;
    f->awaiting = op;
    f->await_frame = frame;
}

/* The fiber's side: switches back to the poll, which returns RT_READY once
 * the fiber has returned and RT_PENDING otherwise; returns when polled
 * again (on any thread). `last`: it never will be (it returned, or
 * shutdown abandons it). What the poll would do after the switch is done
 * here, before it (switch_in in fiber.c says why). */
RT__SWITCHING static void rt__fiber_switch_out(rt__fiber *f, bool last)
{
    /* How deep the fiber is: about where the switch saves its registers. */
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    if (sp < f->lowest_sp)
        f->lowest_sp = sp;
    if (rt__unlikely(!rt__stack_intact(&f->stack)))
        rt__fiber_overflowed(f);
    rt__fiber_set_current(f->outer);
    void *verdict = (void *)(uintptr_t)(f->finished ? RT_READY : RT_PENDING);
#ifdef RT__FIBER_ASAN
    __sanitizer_start_switch_fiber(last ? NULL : &f->asan_fake, f->poller_low, f->poller_size);
#else
    (void)last;
#endif
#ifdef RT__FIBER_TSAN
    __tsan_switch_to_fiber(f->tsan_poller, 0);
#endif
    rt__fiber_switch(&f->sp, f->poller_sp, verdict);
#ifdef RT__FIBER_ASAN
    __sanitizer_finish_switch_fiber(f->asan_fake, &f->poller_low, &f->poller_size);
#endif
}

/* The await after a cancel, and every await of a fiber that migrates at
 * each one (rt_config.fiber_migrate): rt__fiber_await_op's slow path. */
int64_t rt__fiber_await_slow(rt__fiber *f, rt_future *op);

/* Awaits op in fiber f: polls it, switching out while it is pending, and
 * returns its result; the rest (a cancel, forced migration) is
 * rt__fiber_await_slow's. */
static inline int64_t rt__fiber_await_op(rt__fiber *f, rt_future *op)
{
    if (rt__unlikely(f->task->migrate || f->cancelled))
        return rt__fiber_await_slow(f, op);
    for (;;) {
        if (rt__future_poll_inline(op, f->cx) == RT_READY)
            return op->result;
        rt__fiber_switch_out(f, false);
        if (rt__unlikely(f->cancelled))
            return rt__fiber_await_slow(f, op);
    }
}

#endif
