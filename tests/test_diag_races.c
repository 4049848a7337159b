/* Looks at tasks racing with what else happens to them: an abort during a
 * lost wake-up report, a shutdown while a task looks, a close of the
 * descriptor a described operation waits on (diag.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "support.h"

static void quiet_report(const rt_report *rep, void *arg)
{
    (void)rep;
    (void)arg;
}

/* ---- An abort while a report holds the task ------------------------------ */

/* An operation that stores no waker (so its task is a lost wake-up) and
 * whose description waits for the test: the report holds the task that
 * long. */
struct stalling_op {
    RT_FUTURE_HEADER;
};

static struct event describing = EVENT_INIT;
static struct event may_go_on = EVENT_INIT;

static rt_poll stalling_poll(rt_future *f, rt_context *cx)
{
    (void)f;
    (void)cx;
    return RT_PENDING;
}

static void stalling_describe(const rt_future *f, rt_wait_info *info)
{
    (void)f;
    info->kind = RT_WAIT_OTHER;
    event_signal(&describing);
    cr_assert(event_wait_for(&may_go_on, 1));
}

static const rt_future_vtable stalling_vtable = {stalling_poll, NULL, stalling_describe};

struct stalled {
    rt_coro co;
    struct stalling_op op;
};

static rt_poll stalled_poll(void *p, rt_context *cx, void **out)
{
    struct stalled *s = p;
    RT_CORO_BEGIN(&s->co);
    s->op.future.vtable = &stalling_vtable;
    RT_AWAIT(&s->co, cx, &s->op);
    RT_CORO_END(&s->co, out);
}

Test(diag_races, a_task_aborted_while_a_report_holds_it_is_dropped_before_the_worker_sleeps)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.report = quiet_report;
    rt_runtime *rt = new_runtime_config(&cfg);
    struct stalled s = {0};
    rt_task *task;
    cr_assert_eq(rt_spawn(rt, stalled_poll, rt_coro_drop, &s, sizeof s, &task), 0);
    /* The only worker finds the lost task in its sweep before it sleeps,
     * and holds it for the report. */
    cr_assert(event_wait_for(&describing, 1));
    rt_task_cancel(task); /* the task looks running: only CANCELLED is set */
    event_signal(&may_go_on);
    /* The end of the look queues it on that worker, which must not sleep
     * before it has dropped it. */
    cr_assert_eq(task_wait_status(task, 5 * SEC, NULL), -ECANCELED);
    finish_runtime(rt, 0);
}

/* ---- A task that looks, and a shutdown ------------------------------------- */

struct looking {
    struct event *looked;
    atomic_int *result;
};

static int count_visit(const rt_task_info *t, void *arg)
{
    (void)t;
    (void)arg;
    return 0;
}

/* Waits in its poll for the shutdown to begin (spawns fail), then looks:
 * by then the shutdown holds the lifecycle lock and waits for this
 * worker to finish the poll. */
static rt_poll looking_poll(void *p, rt_context *cx, void **out)
{
    (void)cx;
    struct looking *s = p;
    rt_runtime *rt = rt_current_runtime();
    event_signal(s->looked);
    while (rt_spawn(rt, trivial_poll, NULL, NULL, 0, NULL) != -ESHUTDOWN)
        sched_yield();
    atomic_store(s->result, rt_runtime_tasks(rt, count_visit, NULL));
    *out = NULL;
    return RT_READY;
}

Test(diag_races, a_task_that_looks_at_tasks_does_not_hold_up_shutdown)
{
    rt_runtime *rt = new_runtime(2);
    struct event looked = EVENT_INIT;
    atomic_int result = 0;
    struct looking l = {&looked, &result};
    cr_assert_eq(rt_spawn(rt, looking_poll, NULL, &l, sizeof l, NULL), 0);
    cr_assert(event_wait_for(&looked, 1));
    /* Shutdown holds the lifecycle lock while it waits for the workers:
     * the looking task must give up rather than wait for it. */
    rt_metrics m = shut_down(rt, -1);
    (void)m;
    cr_assert_eq(atomic_load(&result), -ESHUTDOWN);
    cr_assert_eq(rt_runtime_free(rt), 0);
}

/* ---- A close of the descriptor a described read waits on ------------------- */

/* The task waits in a select of an operation whose description stalls
 * the look (once) and a read: the look holds the task, describes the
 * first arm, and only then the read, whose rt_io the test closes in
 * between and lets the reactor turn. Had the reactor freed the rt_io, the
 * read's description would read freed memory (ASan). */
static atomic_bool stall_once;
static struct event arm_described = EVENT_INIT;
static struct event arm_may_go_on = EVENT_INIT;

static void stall_once_describe(const rt_future *f, rt_wait_info *info)
{
    (void)f;
    info->kind = RT_WAIT_OTHER;
    if (atomic_exchange(&stall_once, false)) {
        event_signal(&arm_described);
        cr_assert(event_wait_for(&arm_may_go_on, 1));
    }
}

static const rt_future_vtable stall_once_vtable = {stalling_poll, NULL, stall_once_describe};

struct selector {
    rt_coro co;
    struct stalling_op stall;
    rt_io_read rd;
    rt_select sel;
    char buf[8];
    atomic_bool *stop;
};

static rt_poll selector_poll(void *p, rt_context *cx, void **out)
{
    struct selector *s = p;
    /* After the close its next poll must not touch the read (io.h). */
    if (atomic_load(s->stop)) {
        *out = NULL;
        return RT_READY;
    }
    RT_CORO_BEGIN(&s->co);
    s->stall.future.vtable = &stall_once_vtable;
    rt_select_init(&s->sel, RT_FUTURES(&s->stall.future, &s->rd.future));
    RT_AWAIT(&s->co, cx, &s->sel);
    RT_CORO_END(&s->co, out);
}

struct seen_text {
    char text[sizeof(((rt_wait_info *)0)->text)];
    int found;
};

static int note_select(const rt_task_info *t, void *arg)
{
    struct seen_text *st = arg;
    if (t->wait.kind == RT_WAIT_SELECT) {
        memcpy(st->text, t->wait.text, sizeof st->text);
        st->found++;
    }
    return 0;
}

static void *look_once(void *arg)
{
    void **a = arg;
    cr_assert_geq(rt_runtime_tasks(a[0], note_select, a[1]), 0);
    return NULL;
}

/* Sleeps a millisecond: the reactor turns to fire its timer. */
struct napper {
    rt_coro co;
    rt_sleep nap;
};

static rt_poll napper_poll(void *p, rt_context *cx, void **out)
{
    struct napper *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_sleep_init(&s->nap, NULL, 1000000);
    RT_AWAIT(&s->co, cx, &s->nap);
    RT_CORO_END(&s->co, out);
}

static uint64_t reactor_turns(rt_runtime *rt)
{
    rt_metrics m;
    rt_metrics_read(rt, &m, sizeof m);
    return m.reactor_turns;
}

/* Whether the task with this id waits in its select. */
struct find_waiting {
    uint64_t id;
    bool waiting;
};

static int note_waiting(const rt_task_info *t, void *arg)
{
    struct find_waiting *f = arg;
    if (t->id == f->id && t->state == RT_TASK_WAITING && t->wait.kind == RT_WAIT_SELECT)
        f->waiting = true;
    return 0;
}

Test(diag_races, a_look_that_describes_a_read_whose_descriptor_was_closed_meanwhile)
{
    rt_runtime *rt = new_runtime(2);
    int fds[2];
    make_pipe(fds);
    rt_io *io;
    cr_assert_eq(rt_io_open(rt, fds[0], &io), 0);
    atomic_bool stop = false;
    struct selector sel = {.stop = &stop};
    rt_io_read_init(&sel.rd, io, sel.buf, sizeof sel.buf);
    rt_task *task;
    cr_assert_eq(rt_spawn(rt, selector_poll, NULL, &sel, sizeof sel, &task), 0);
    /* Once it waits (a state, looked at until it holds), a look that
     * stalls in the middle of its description. */
    struct seen_text st = {.found = 0};
    struct find_waiting f = {rt_task_id(task), false};
    while (!f.waiting) {
        cr_assert_geq(rt_runtime_tasks(rt, note_waiting, &f), 0);
        sched_yield();
    }
    atomic_store(&stall_once, true);
    pthread_t thread;
    void *args[2] = {rt, &st};
    cr_assert_eq(pthread_create(&thread, NULL, look_once, args), 0);
    cr_assert(event_wait_for(&arm_described, 1));
    /* The close wakes the held task, and the reactor takes the rt_io. */
    atomic_store(&stop, true);
    uint64_t turns = reactor_turns(rt);
    rt_io_close(io);
    close(fds[1]);
    while (reactor_turns(rt) < turns + 2) {
        /* Something to turn for: a timer. */
        struct napper n = {0};
        rt_task *napping;
        cr_assert_eq(rt_spawn(rt, napper_poll, rt_coro_drop, &n, sizeof n, &napping), 0);
        cr_assert_eq(task_wait_status(napping, WAIT_DEADLINE_NS, NULL), 0);
    }
    event_signal(&arm_may_go_on);
    pthread_join(thread, NULL);
    cr_assert_eq(st.found, 1);
    cr_assert(strstr(st.text, "fd -1") != NULL, "%s", st.text);
    cr_assert_eq(task_wait_status(task, WAIT_DEADLINE_NS, NULL), 0);
    finish_runtime(rt, 0);
}
