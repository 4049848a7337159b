/* Fibers (include/asyncrt/fiber.h): a task whose poll switches into a
 * stack of its own and back.
 *
 * The fiber's control block is its task's state, so it never moves. A poll
 * stores the poll's context in the block and switches in; the fiber runs
 * until an await finds its operation pending (it switches out and the poll
 * returns RT_PENDING) or its function returns (the poll returns RT_READY
 * with the result). One poll runs at a time (the task state word sees to
 * it), and every write the fiber made on one worker is visible to the next
 * worker that polls it through the run queue's release/acquire hand-off,
 * as for any task's state.
 *
 * Cancellation needs no help from the scheduler: a cancelled task is never
 * polled again and its drop function runs instead (on a worker, or on
 * shutdown's caller). The drop function here resumes the fiber once more
 * with `cancelled` set and no context, so that every await returns
 * -ECANCELED at once, and the fiber runs to its return on the dropping
 * thread. */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <asyncrt/combine.h>
#include <asyncrt/fiber.h>
#include <asyncrt/net.h>
#include <asyncrt/timer.h>

#include "atomic.h"
#include "clock.h"
#include "current.h"
#include "task_internal.h"
#include "diagnostics.h"
#include "fiber_internal.h"
#include "group_spawn.h"
#include "park.h"
#include "runtime_services.h"
#include "spawning.h"
#include "stack.h"
#include "switch.h"

/* The fiber the calling thread runs, set by the poll around its switch in.
 * Read only through rt__fiber_current(), at the entry of each public function,
 * never after a switch in the same function: the thread may have changed
 * and the compiler may have kept the old thread's address of the
 * variable. */
static __thread rt__fiber *tls_fiber __attribute__((tls_model("initial-exec")));

__attribute__((noinline)) rt__fiber *rt__fiber_current(void)
{
    rt__fiber *f = tls_fiber;
    __asm__ volatile("" : "+r"(f));
    return f;
}

__attribute__((noinline)) void rt__fiber_set_current(rt__fiber *f)
{
    tls_fiber = f;
}

/* ---- Switching -------------------------------------------------------------*/

/* The poll's side: switches into f, which runs until it switches out, and
 * returns what it switched out with: RT_READY once it returned, else
 * RT_PENDING. The fiber itself does everything that follows a switch out
 * (it restores the thread's current fiber, checks its canary, hands over
 * its result), so that without sanitizers nothing follows the switch
 * here: the poll then ends in a tail call, and the switch out resumes the
 * worker loop directly, without a return that would mispredict. */
RT__SWITCHING static rt_poll switch_in(rt__fiber *f)
{
    f->outer = tls_fiber;
    tls_fiber = f;
#ifdef RT__FIBER_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(&fake, f->stack.low, f->stack.size);
#endif
#ifdef RT__FIBER_TSAN
    f->tsan_poller = __tsan_get_current_fiber();
    __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
#ifdef RT__FIBER_ASAN
    rt_poll r = (rt_poll)rt__fiber_resume(&f->poller_sp, f->sp, f);
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
    return r;
#else
    return (rt_poll)rt__fiber_resume(&f->poller_sp, f->sp, f);
#endif
}

/* ---- Fiber-local storage ----------------------------------------------------*/

/* The keys made so far, and each one's destructor. A key's destructor is
 * written before rt_fiber_key_init returns the key, and read by fibers
 * that were given the key afterwards, through whatever the program used to
 * hand it over; relaxed accesses suffice, and keep them visible as atomic
 * to ThreadSanitizer. */
static uint32_t keys_made;
static void *key_destructors[RT_FIBER_KEYS_MAX];

RT_EXPORT int rt_fiber_key_init(rt_fiber_key *key, void (*destructor)(void *value))
{
    if (key == NULL)
        return -EINVAL;
    uint32_t made = rt__load_relaxed_u32(&keys_made);
    do {
        if (made >= RT_FIBER_KEYS_MAX)
            return -EAGAIN;
    } while (!rt__cas_u32(&keys_made, &made, made + 1));
    rt__store_relaxed_ptr(&key_destructors[made], (void *)destructor);
    key->index = made + 1;
    return 0;
}

/* The slot of a key in the calling fiber, growing the table when `grow`;
 * NULL when there is none. */
static void **local_slot(rt__fiber *f, const rt_fiber_key *key, bool grow, int *err)
{
    unsigned i = key->index - 1;
    if (i < f->locals_len)
        return &f->locals[i];
    if (!grow)
        return NULL;
    unsigned len = f->locals_len != 0 ? f->locals_len : 4;
    while (len <= i)
        len *= 2;
    void **grown = rt__realloc(f->locals, len * sizeof(*grown));
    if (grown == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    memset(grown + f->locals_len, 0, (len - f->locals_len) * sizeof(*grown));
    f->locals = grown;
    f->locals_len = len;
    return &f->locals[i];
}

static bool key_valid(const rt_fiber_key *key)
{
    return key != NULL && key->index >= 1 && key->index <= RT_FIBER_KEYS_MAX;
}

RT_EXPORT int rt_fiber_local_set(const rt_fiber_key *key, void *value)
{
    rt__fiber *f = rt__fiber_current();
    if (f == NULL)
        return -EPERM;
    if (!key_valid(key))
        return -EINVAL;
    int err = 0;
    void **slot = local_slot(f, key, value != NULL, &err);
    if (slot != NULL)
        *slot = value;
    return err;
}

RT_EXPORT void *rt_fiber_local_get(const rt_fiber_key *key)
{
    rt__fiber *f = rt__fiber_current();
    if (f == NULL || !key_valid(key))
        return NULL;
    void **slot = local_slot(f, key, false, NULL);
    return slot != NULL ? *slot : NULL;
}

/* After the fiber's function returned, in the fiber: each value's
 * destructor, in rounds while destructors set values again (as pthread
 * keys do), then the table. */
static void locals_destroy(rt__fiber *f)
{
    for (int round = 0; round < 4; round++) {
        bool again = false;
        for (unsigned i = 0; i < f->locals_len; i++) {
            void *value = f->locals[i];
            if (value == NULL)
                continue;
            f->locals[i] = NULL;
            void (*destructor)(void *) =
                (void (*)(void *))rt__load_relaxed_ptr(&key_destructors[i]);
            if (destructor != NULL) {
                destructor(value);
                again = true;
            }
        }
        if (!again)
            break;
    }
    free(f->locals);
    f->locals = NULL;
    f->locals_len = 0;
}

_Noreturn RT__NO_TSAN __attribute__((noinline)) static void fiber_main(void *arg)
{
    rt__fiber *f = arg;
#ifdef RT__FIBER_ASAN
    __sanitizer_finish_switch_fiber(NULL, &f->poller_low, &f->poller_size);
#endif
    f->root_frame = __builtin_frame_address(0);
    void *result = f->task->fn(f->task->arg);
    if (f->locals != NULL)
        locals_destroy(f);
    /* What the poll would do after it: the result and the status go to the
     * poll that runs it now (none in a drop). The stack goes back in the
     * task's drop, which the worker runs next, off this stack. */
    if (f->out != NULL)
        *f->out = result;
    if (f->status != 0 && f->cx != NULL)
        rt_task_set_status(f->cx, f->status);
    f->finished = true;
    rt__fiber_switch_out(f, true);
    assert(!"a finished fiber was resumed");
    __builtin_unreachable();
}

/* ---- Stacks ----------------------------------------------------------------*/

/* The line an overflow prints (snprintf of integers and strings does not
 * allocate with glibc, so the signal handler may call it). */
static void format_overflow(char *line, size_t size, const rt__fiber *f)
{
    const char *site = f->task->site;
    snprintf(line, size,
             "asyncrt: fiber stack overflow: task %llu spawned at %s (stack %zu bytes)\n",
             (unsigned long long)f->task->task_id, site != NULL ? site : "?", f->stack.size);
}

/* An overflow into a guard page faults: the SIGSEGV handler below names the
 * fiber before the process dies, as Go's "stack overflow" does. It runs on
 * an alternate signal stack (the fiber's own is what overflowed), which
 * each thread that runs fibers gets before its first one; a fault that is
 * not on the running fiber's guard page goes to whatever handler was there
 * before. Sanitizer builds keep their own reports. */
#if !defined(RT__FIBER_ASAN) && !defined(RT__FIBER_TSAN)
#define RT__FIBER_OVERFLOW_HANDLER 1
#define RT__ALTSTACK_SIZE (64 * 1024)
static struct sigaction previous_segv;
static pthread_once_t segv_once = PTHREAD_ONCE_INIT;
static pthread_key_t altstack_key;
static __thread bool tls_altstack __attribute__((tls_model("initial-exec")));

static void on_segv(int sig, siginfo_t *info, void *uc)
{
    rt__fiber *f = tls_fiber;
    if (f != NULL && rt__stack_guard_holds(&f->stack, info->si_addr)) {
        char line[256];
        format_overflow(line, sizeof line, f);
        (void)!write(2, line, strlen(line));
        signal(SIGSEGV, SIG_DFL); /* the faulting write runs again and kills */
        return;
    }
    if (previous_segv.sa_flags & SA_SIGINFO) {
        if (previous_segv.sa_sigaction != NULL)
            previous_segv.sa_sigaction(sig, info, uc);
        return;
    }
    if (previous_segv.sa_handler == SIG_IGN)
        return;
    if (previous_segv.sa_handler == SIG_DFL || previous_segv.sa_handler == NULL) {
        signal(SIGSEGV, SIG_DFL);
        return;
    }
    previous_segv.sa_handler(sig);
}

static void altstack_free(void *p)
{
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
    munmap(p, RT__ALTSTACK_SIZE);
}

static void install_segv(void)
{
    (void)pthread_key_create(&altstack_key, altstack_free);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_segv);
}

/* Before the thread's first fiber: the handler, and this thread's
 * alternate stack unless it has one of its own. Best effort: without them
 * an overflow still kills the process, only without the message. */
static void overflow_report_ready(void)
{
    if (rt__likely(tls_altstack))
        return;
    tls_altstack = true;
    pthread_once(&segv_once, install_segv);
    stack_t cur;
    if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE))
        return;
    void *m = rt__mmap(NULL, RT__ALTSTACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
    if (m == MAP_FAILED)
        return;
    stack_t ss = {.ss_sp = m, .ss_size = RT__ALTSTACK_SIZE, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0 || pthread_setspecific(altstack_key, m) != 0) {
        munmap(m, RT__ALTSTACK_SIZE);
        return;
    }
}
#endif

/* An unguarded stack's canary was overwritten: memory below the stack is
 * corrupt, so the process cannot go on (fiber.h, "Stacks"). It ends as a
 * guard-page overflow does, with the same line. */
__attribute__((noreturn, cold)) void rt__fiber_overflowed(const rt__fiber *f)
{
    char line[256];
    format_overflow(line, sizeof line, f);
    (void)!write(2, line, strlen(line));
    abort();
}

/* Every field of a new control block. One store each: a memset of the
 * block compiles to `rep stos`, whose start-up cost was most of the cost
 * of starting a fiber. */
static inline void control_block_init(rt__fiber *f, const fiber_task *ft, const rt__stack *stack)
{
    f->task = ft;
    f->out = NULL;
    f->outer = NULL;
    f->stack = *stack;
    f->sp = NULL;
    f->poller_sp = NULL;
    f->cx = NULL;
    f->status = 0;
    f->finished = false;
    f->cancelled = false;
    f->shielded = false;
    f->shield_deadline = 0;
    f->keep_stack = false;
    f->await_file = NULL;
    f->await_function = NULL;
    f->await_line = 0;
    f->awaiting = NULL;
    f->await_frame = NULL;
    f->root_frame = NULL;
    f->lowest_sp = (uintptr_t)f;
    f->locals = NULL;
    f->locals_len = 0;
#ifdef RT__FIBER_ASAN
    f->asan_fake = NULL;
    f->poller_low = NULL;
    f->poller_size = 0;
#endif
#ifdef RT__FIBER_TSAN
    f->tsan_fiber = NULL;
    f->tsan_poller = NULL;
#endif
}

/* Maps (or takes from the pool) the fiber's stack, puts the control block
 * at its top and the first context below it. */
static int fiber_start(fiber_task *ft)
{
    rt__stack stack;
    size_t size = ft->stack_pages != 0 ? (size_t)ft->stack_pages * rt__page_size()
                                       : rt__runtime_fiber_stack_size(ft->rt);
    int err = rt__stack_get(size, &stack);
    if (err < 0)
        return err;
#ifdef RT__FIBER_ASAN
    /* A pooled stack keeps the poisoning of the frames that ran on it. */
    __asan_unpoison_memory_region(stack.low, stack.size);
#endif
    size_t block = (sizeof(rt__fiber) + 63) & ~(size_t)63;
    rt__fiber *f = (rt__fiber *)(void *)(stack.low + stack.size - block);
    control_block_init(f, ft, &stack);
#ifdef RT__FIBER_TSAN
    f->tsan_fiber = __tsan_create_fiber(0);
#endif
    f->sp = rt__fiber_make(f, fiber_main);
    ft->f = f;
    return 0;
}

static void fiber_release(fiber_task *ft)
{
    rt__fiber *f = ft->f;
    rt__runtime_note_fiber_depth(ft->rt, (uintptr_t)f->stack.low + f->stack.size - f->lowest_sp);
#ifdef RT__FIBER_TSAN
    __tsan_destroy_fiber(f->tsan_fiber);
#endif
    rt__stack stack = f->stack; /* the block goes with the stack */
    ft->f = NULL;
    ft->finished = true;
    rt__stack_put(&stack);
}

/* ---- The task --------------------------------------------------------------*/

/* No stack for it: the fiber never runs, and its argument goes to the
 * release function it was spawned with. */
static void never_runs(fiber_task *ft)
{
    ft->finished = true;
    if (ft->release != NULL)
        ft->release(ft->arg);
}

static rt_poll fiber_poll(void *state, rt_context *cx, void **out)
{
    fiber_task *ft = state;
#ifdef RT__FIBER_OVERFLOW_HANDLER
    overflow_report_ready();
#endif
    if (ft->f == NULL) {
        int err = fiber_start(ft);
        if (err < 0) {
            never_runs(ft);
            rt_task_set_status(cx, err);
            *out = NULL;
            return RT_READY;
        }
    }
    rt__fiber *f = ft->f;
    f->cx = cx;
    f->out = out;
    return switch_in(f);
}

static void fiber_drop(void *state)
{
    fiber_task *ft = state;
    if (ft->finished)
        return; /* it never ran, or its stack went back already */
    if (ft->f != NULL && ft->f->finished) {
        fiber_release(ft); /* it returned in its last poll */
        return;
    }
    if (ft->f == NULL && fiber_start(ft) < 0) {
        never_runs(ft);
        return;
    }
    rt__fiber *f = ft->f;
    f->cancelled = true;
    f->cx = NULL;
    f->out = NULL;
    (void)switch_in(f);
    if (f->finished)
        fiber_release(ft);
    else
        rt__runtime_count_fiber_abandoned(f->task->rt); /* its stack stays mapped */
}

/* ---- What a dump says of a fiber ---------------------------------------------*/

/* Follows the frame records (the saved frame pointer and the return address
 * above it, the same pair on x86-64 and AArch64) from the await call up to
 * fiber_main, staying inside the fiber's own stack and going only upwards,
 * so that code built without frame pointers gives a short or wrong list,
 * never a read outside the stack. */
static unsigned walk_frames(const rt__fiber *f, const void **out, unsigned max)
{
    uintptr_t low = (uintptr_t)f->stack.low, high = (uintptr_t)f;
    uintptr_t fp = (uintptr_t)f->await_frame;
    unsigned n = 0;
    while (n < max && fp >= low && fp <= high - 2 * sizeof(uintptr_t) &&
           fp % sizeof(uintptr_t) == 0) {
        const uintptr_t *record = (const uintptr_t *)fp;
        uintptr_t caller = record[0], pc = record[1];
        if (pc == 0 || caller == (uintptr_t)f->root_frame || caller <= fp)
            break;
        out[n++] = (const void *)pc;
        fp = caller;
    }
    return n;
}

/* How far down the stack's pages have ever been touched (mincore), from
 * the top; 0 when it cannot tell. An unguarded stack's lowest page holds
 * its canary, so its count starts one page up. */
static size_t touched_bytes(const rt__fiber *f)
{
    size_t page = rt__page_size();
    size_t first = f->stack.guarded ? 0 : 1, pages = f->stack.size / page;
    unsigned char vec[256];
    for (size_t at = first; at < pages; at += sizeof vec) {
        size_t n = pages - at < sizeof vec ? pages - at : sizeof vec;
        if (mincore(f->stack.low + at * page, n * page, vec) != 0)
            return 0;
        for (size_t i = 0; i < n; i++)
            if (vec[i] & 1)
                return (pages - at - i) * page;
    }
    return 0;
}

/* The dump's reader of a fiber task (rt__diag_task_reader_set), called with
 * the task held: the fiber is switched out in an await and stays so while
 * this reads its block and its stack. */
static void fiber_describe(const void *state, rt_task_info *info)
{
    const fiber_task *ft = state;
    const rt__fiber *f = ft->f;
    info->wait.kind = RT_WAIT_OTHER;
    if (f == NULL) {
        snprintf(info->wait.text, sizeof info->wait.text, "its first run (a fiber)");
        return;
    }
    info->stack_size = f->stack.size;
    info->stack_depth = (uintptr_t)f->stack.low + f->stack.size - f->lowest_sp;
    info->stack_touched = touched_bytes(f);
    if (f->await_file != NULL) {
        info->await_file = f->await_file;
        info->await_line = f->await_line;
        info->await_function = f->await_function;
    }
    if (f->awaiting != NULL)
        rt_future_describe(f->awaiting, &info->wait);
    else
        snprintf(info->wait.text, sizeof info->wait.text, "its turn after a yield (a fiber)");
    info->backtrace_len = walk_frames(f, info->backtrace, RT_TASK_BACKTRACE_MAX);
}

static pthread_once_t describe_once = PTHREAD_ONCE_INIT;
/* Set once the reader is registered, so that spawns after the first skip
 * pthread_once. The release store after the registration pairs with the
 * acquire load of a spawn that skips it: the registration happens before
 * that spawn, and so before any dump that finds the fiber it spawned (the
 * dump reaches the task through the registry's lock). */
static uint32_t describe_registered;

static void register_describe(void)
{
    rt__diag_task_reader_set(fiber_poll, fiber_describe);
    rt__store_release_u32(&describe_registered, 1);
}

RT_EXPORT void rt_fiber_options_init(rt_fiber_options *opts)
{
    if (opts == NULL)
        return;
    memset(opts, 0, sizeof(*opts));
    opts->worker = RT_WORKER_ANY;
}

RT_EXPORT int rt_fiber_spawn_with_site(const char *site, rt_runtime *rt,
                                       const rt_fiber_options *opts, rt_fiber_fn fn, void *arg,
                                       rt_task **handle)
{
    if (handle != NULL)
        *handle = NULL;
    rt_group *group = opts != NULL ? opts->group : NULL;
    if (group != NULL) {
        /* The group holds the child's handle and reports its result. */
        rt_runtime *group_rt = rt__group_runtime(group);
        if (handle != NULL || (rt != NULL && rt != group_rt))
            return -EINVAL;
        rt = group_rt;
    }
    if (rt == NULL) {
        /* In a fiber, its own runtime: also where its cleanup runs on
         * shutdown's thread, which is no worker (the spawn then fails with
         * -ESHUTDOWN, as the header says). */
        rt__fiber *self = rt__fiber_current();
        rt = self != NULL ? self->task->rt : rt_current_runtime();
    }
    if (rt == NULL || fn == NULL)
        return -EINVAL;
    fiber_task ft = {
        .fn = fn, .arg = arg, .rt = rt, .site = site, .migrate = rt__runtime_fiber_migrate(rt)};
    const rt_spawn_options *sopts = NULL;
    rt_spawn_options given;
    if (opts != NULL) {
        rt_spawn_options_init(&given);
        given.name = opts->name;
        given.worker = opts->worker;
        sopts = &given;
        if (opts->stack_size > ((size_t)1 << 40))
            return -EINVAL;
        /* 0: the runtime's size, looked up when the stack is taken. */
        size_t page = rt__page_size();
        ft.stack_pages = (uint32_t)((opts->stack_size + page - 1) / page);
        ft.release = opts->release;
    }
    if (rt__unlikely(!rt__load_acquire_u32(&describe_registered)))
        pthread_once(&describe_once, register_describe);
    uint64_t id = rt__task_new_id();
    ft.task_id = id;
    if (group != NULL)
        return rt__group_spawn_as(site, group, sopts, fiber_poll, fiber_drop, &ft, sizeof ft, id);
    return rt__spawn(rt, sopts, fiber_poll, fiber_drop, &ft, sizeof ft, handle, id, site, NULL,
                     NULL);
}

RT_EXPORT int rt_fiber_block_on_with_site(const char *site, rt_runtime *rt,
                                          const rt_fiber_options *opts, rt_fiber_fn fn, void *arg,
                                          void **value, int *status)
{
    if (rt == NULL || fn == NULL || (opts != NULL && opts->group != NULL))
        return -EINVAL;
    if (rt__worker_current() != NULL || rt__thread_in_shutdown())
        return -EDEADLK;
    /* The waker first: once the fiber is spawned it runs, so nothing after
     * the spawn may fail. */
    rt__thread_waker *tw = rt__thread_waker_new();
    if (tw == NULL)
        return -ENOMEM;
    rt_task *handle;
    int err = rt_fiber_spawn_with_site(site, rt, opts, fn, arg, &handle);
    if (err == 0)
        err = rt__task_wait_with(handle, tw, -1, value, status, NULL, 0);
    rt__thread_waker_release(tw);
    return err;
}

/* ---- Awaiting --------------------------------------------------------------*/

struct shielded_wait {
    rt_future *op;
};

static rt_poll shielded_poll(void *arg, rt_context *cx)
{
    struct shielded_wait *w = arg;
    return rt__future_poll_inline(w->op, cx);
}

/* After a cancel, inside a shield: the drop's thread waits for op, up to
 * the shield's deadline (and shutdown's). */
static int64_t await_shielded(rt__fiber *f, rt_future *op)
{
    int64_t deadline = f->keep_stack ? -1 : f->shield_deadline; /* -1: none */
    int64_t end = rt__runtime_fiber_deadline(f->task->rt);
    if (end >= 0 && (deadline < 0 || end < deadline))
        deadline = end;
    int64_t left = deadline < 0 ? -1 : deadline - rt__now_ns();
    rt__thread_waker *tw = left != 0 && left >= -1 ? rt__thread_waker_new() : NULL;
    int err = -ECANCELED;
    if (tw != NULL) {
        struct shielded_wait w = {op};
        err = rt__thread_waker_block(tw, shielded_poll, &w, left);
        rt__thread_waker_release(tw);
    }
    if (err < 0) {
        rt_future_drop(op);
        if (f->keep_stack) {
            /* What op started may still use the stack: never free it. */
            rt__fiber_switch_out(f, true);
            assert(!"an abandoned fiber was resumed");
            __builtin_unreachable();
        }
        return -ECANCELED;
    }
    return f->keep_stack ? -ECANCELED : op->result; /* its result is not wanted */
}

/* A cancelled fiber awaiting past shutdown's deadline never runs again. */
static void abandon_if_late(rt__fiber *f)
{
    int64_t end = rt__runtime_fiber_deadline(f->task->rt);
    if (end >= 0 && rt__now_ns() >= end) {
        rt__fiber_switch_out(f, true);
        assert(!"an abandoned fiber was resumed");
        __builtin_unreachable();
    }
}

static bool shield_holds(rt__fiber *f)
{
    if (f->keep_stack)
        return true;
    if (f->shielded && f->shield_deadline >= 0 && rt__now_ns() >= f->shield_deadline)
        f->shielded = false;
    return f->shielded;
}

int64_t rt__fiber_await_slow(rt__fiber *f, rt_future *op)
{
    if (rt__unlikely(f->task->migrate) && !f->cancelled) {
        /* To the next worker first: the poll below runs there
         * (rt_config.fiber_migrate). */
        rt__yield_elsewhere(f->cx);
        rt__fiber_switch_out(f, false);
    }
    for (;;) {
        if (f->cancelled) {
            abandon_if_late(f);
            if (shield_holds(f))
                return await_shielded(f, op);
            rt_future_drop(op);
            return -ECANCELED;
        }
        if (rt__future_poll_inline(op, f->cx) == RT_READY)
            return op->result;
        rt__fiber_switch_out(f, false);
    }
}

/* The start of each public await: the fiber, with the site noted (NULL
 * outside a fiber). */
#define AWAIT_BEGIN(f, op)                                                                         \
    rt__fiber *f = rt__fiber_current();                                                            \
    if (f != NULL)                                                                                 \
    rt__fiber_note_await(f, file, line, function, (op), __builtin_frame_address(0))

RT_EXPORT int64_t rt_fiber_await_with_site(const char *file, int line, const char *function,
                                           rt_future *op)
{
    AWAIT_BEGIN(f, op);
    if (f == NULL)
        return -EPERM;
    if (op == NULL)
        return -EINVAL;
    return rt__fiber_await_op(f, op);
}

/* rt_fiber_await_timeout and _until: op inside an rt_timeout made by
 * `init` (rt_timeout_init or rt_timeout_until_init) with `limit`. */
static int64_t await_limited(const char *file, int line, const char *function, rt_future *op,
                             int64_t limit,
                             int (*init)(rt_timeout *, rt_runtime *, rt_future *, int64_t),
                             const void *frame)
{
    rt_timeout t;
    rt__fiber *f = rt__fiber_current();
    if (f == NULL)
        return -EPERM;
    rt__fiber_note_await(f, file, line, function, &t.future, frame);
    if (op == NULL)
        return -EINVAL;
    int err = init(&t, f->task->rt, op, limit);
    return err < 0 ? err : rt__fiber_await_op(f, &t.future);
}

RT_EXPORT int64_t rt_fiber_await_until_with_site(const char *file, int line, const char *function,
                                                 rt_future *op, int64_t deadline_ns)
{
    return await_limited(file, line, function, op, deadline_ns, rt_timeout_until_init,
                         __builtin_frame_address(0));
}

RT_EXPORT int64_t rt_fiber_await_timeout_with_site(const char *file, int line, const char *function,
                                                   rt_future *op, int64_t timeout_ns)
{
    return await_limited(file, line, function, op, timeout_ns, rt_timeout_init,
                         __builtin_frame_address(0));
}

RT_EXPORT bool rt_in_fiber(void)
{
    return rt__fiber_current() != NULL;
}

RT_EXPORT bool rt_fiber_cancelled(void)
{
    rt__fiber *f = rt__fiber_current();
    return f != NULL && f->cancelled;
}

RT_EXPORT int rt_fiber_set_status(int status)
{
    rt__fiber *f = rt__fiber_current();
    if (f == NULL)
        return -EPERM;
    if (status > 0)
        return -EINVAL;
    f->status = status;
    return 0;
}

RT_EXPORT int rt_fiber_yield_with_site(const char *file, int line, const char *function)
{
    AWAIT_BEGIN(f, NULL);
    if (f == NULL)
        return -EPERM;
    if (f->cancelled)
        return -ECANCELED;
    rt_waker_wake_by_ref(rt_context_waker(f->cx));
    rt__fiber_switch_out(f, false);
    return f->cancelled ? -ECANCELED : 0;
}

RT_EXPORT int rt_fiber_shield(int64_t timeout_ns)
{
    rt__fiber *f = rt__fiber_current();
    if (f == NULL)
        return -EPERM;
    if (timeout_ns < 0)
        return -EINVAL;
    f->shielded = true;
    f->shield_deadline = rt__deadline_after(timeout_ns);
    return 0;
}

RT_EXPORT void rt_fiber_unshield(void)
{
    rt__fiber *f = rt__fiber_current();
    if (f != NULL)
        f->shielded = false;
}

RT_EXPORT int rt_fiber_run_blocking_with_site(const char *file, int line, const char *function,
                                              void *(*fn)(void *arg), void *arg, void **result)
{
    if (result != NULL)
        *result = NULL;
    rt_task_join join;
    AWAIT_BEGIN(f, &join.future);
    if (f == NULL)
        return -EPERM;
    rt_task *job;
    int err = rt_spawn_blocking(f->task->rt, fn, arg, &job);
    if (err < 0)
        return err;
    rt_task_join_init(&join, job);
    /* fn may use the fiber's locals through arg: a cancel waits for it. */
    f->keep_stack = true;
    int64_t r = rt__fiber_await_op(f, &join.future);
    f->keep_stack = false;
    if (r == 0 && result != NULL)
        *result = join.value;
    return (int)r;
}
