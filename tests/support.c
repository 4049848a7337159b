/* The functions behind support.h, shared by the black-box suites: waiting on
 * events, the counting and event wakers, the gate, the simplest futures,
 * runtimes made and finished with checks, and descriptor helpers. Linked into
 * every suite executable. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "support.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

/* ---- time --------------------------------------------------------------- */

int64_t process_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

/* ---- events ------------------------------------------------------------- */

bool event_wait_for_ms(struct event *e, unsigned long target, long ms)
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

/* ---- wakers ------------------------------------------------------------- */

rt_waker counting_waker_clone(const void *data)
{
    struct counting_waker *w = (struct counting_waker *)data;
    atomic_fetch_add(&w->clones, 1);
    rt_waker out = {&counting_waker_vtable, data};
    return out;
}

static void counting_waker_note_wake(struct counting_waker *w)
{
    rt_task *watched = atomic_load(&w->watched);
    if (watched != NULL && !rt_task_is_finished(watched))
        atomic_fetch_add(&w->wakes_before_finish, 1);
    event_signal(&w->woken);
}

void counting_waker_wake(const void *data)
{
    struct counting_waker *w = (struct counting_waker *)data;
    atomic_fetch_add(&w->wakes_by_value, 1);
    counting_waker_note_wake(w);
}

void counting_waker_wake_by_ref(const void *data)
{
    struct counting_waker *w = (struct counting_waker *)data;
    atomic_fetch_add(&w->wakes_by_ref, 1);
    counting_waker_note_wake(w);
}

void counting_waker_drop(const void *data)
{
    struct counting_waker *w = (struct counting_waker *)data;
    atomic_fetch_add(&w->drops, 1);
}

const rt_waker_vtable counting_waker_vtable = {
    counting_waker_clone,
    counting_waker_wake,
    counting_waker_wake_by_ref,
    counting_waker_drop,
};

void counting_waker_init(struct counting_waker *w)
{
    atomic_init(&w->clones, 0);
    atomic_init(&w->drops, 0);
    atomic_init(&w->wakes_by_value, 0);
    atomic_init(&w->wakes_by_ref, 0);
    pthread_mutex_init(&w->woken.mu, NULL);
    pthread_cond_init(&w->woken.cv, NULL);
    w->woken.count = 0;
    atomic_init(&w->watched, NULL);
    atomic_init(&w->wakes_before_finish, 0);
}

rt_waker make_counting_waker(struct counting_waker *w)
{
    rt_waker waker = {&counting_waker_vtable, w};
    return waker;
}

rt_context counting_context(struct counting_waker *w)
{
    return rt_context_from_waker(make_counting_waker(w));
}

long counting_outstanding(struct counting_waker *w)
{
    return atomic_load(&w->clones) - atomic_load(&w->drops) - atomic_load(&w->wakes_by_value);
}

long counting_wakes(struct counting_waker *w)
{
    return atomic_load(&w->wakes_by_value) + atomic_load(&w->wakes_by_ref);
}

void hand_init(struct hand *h)
{
    counting_waker_init(&h->w);
    h->cx = counting_context(&h->w);
}

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

const rt_waker_vtable event_waker_vtable = {
    event_waker_clone,
    event_waker_wake,
    event_waker_wake,
    event_waker_drop,
};

rt_context event_context(struct event *e)
{
    rt_waker w = {&event_waker_vtable, e};
    return rt_context_from_waker(w);
}

/* ---- a gate ------------------------------------------------------------- */

void gate_init(struct gate *g)
{
    pthread_mutex_init(&g->mu, NULL);
    g->open = false;
    g->has_waiter = false;
    g->waiter = rt_waker_noop();
}

bool gate_pass(struct gate *g, rt_context *cx)
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

void gate_open(struct gate *g)
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

void gate_clear(struct gate *g)
{
    rt_waker w = rt_waker_noop();
    pthread_mutex_lock(&g->mu);
    if (g->has_waiter) {
        w = g->waiter;
        g->has_waiter = false;
    }
    pthread_mutex_unlock(&g->mu);
    rt_waker_drop(&w);
}

/* ---- the simplest futures ----------------------------------------------- */

atomic_int polls;
atomic_int drops;
struct event polled = EVENT_INIT;
struct event dropped = EVENT_INIT;

rt_poll trivial_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    *out = NULL;
    return RT_READY;
}

rt_poll never_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    (void)out;
    atomic_fetch_add(&polls, 1);
    event_signal(&polled);
    return RT_PENDING;
}

void counting_drop(void *state)
{
    (void)state;
    atomic_fetch_add(&drops, 1);
    event_signal(&dropped);
}

atomic_bool budget_other_ran;

rt_poll budget_flag_poll(void *state, rt_context *cx, void **out)
{
    (void)state;
    (void)cx;
    atomic_store(&budget_other_ran, true);
    *out = NULL;
    return RT_READY;
}

/* ---- runtimes ----------------------------------------------------------- */

rt_runtime *new_runtime_config(const rt_config *cfg)
{
    rt_runtime *rt = NULL;
    int rc = rt_runtime_new(cfg, &rt);
    cr_assert_eq(rc, 0, "rt_runtime_new failed: %s", rt_strerror(rc));
    cr_assert_not_null(rt);
    return rt;
}

rt_runtime *new_runtime(unsigned workers)
{
    return new_runtime_budget(workers, -1);
}

rt_runtime *new_runtime_budget(unsigned workers, int budget)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = workers;
    if (budget >= 0)
        cfg.budget = (unsigned)budget;
    return new_runtime_config(&cfg);
}

rt_metrics shut_down(rt_runtime *rt, int expected_cancelled)
{
    int cancelled = rt_runtime_shutdown(rt);
    cr_assert_geq(cancelled, 0, "rt_runtime_shutdown failed: %s", rt_strerror(cancelled));
    if (expected_cancelled >= 0)
        cr_assert_eq(cancelled, expected_cancelled, "shutdown cancelled %d tasks, expected %d",
                     cancelled, expected_cancelled);
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.alive, 0, "%llu tasks still alive after shutdown", (unsigned long long)m.alive);
    return m;
}

void finish_runtime_metrics(rt_runtime *rt, int expected_cancelled, rt_metrics *final)
{
    rt_metrics m = shut_down(rt, expected_cancelled);
    if (final != NULL)
        *final = m;
    cr_assert_eq(rt_runtime_free(rt), 0);
}

void finish_runtime(rt_runtime *rt, int expected_cancelled)
{
    finish_runtime_metrics(rt, expected_cancelled, NULL);
}

bool all_workers_parked(rt_runtime *rt)
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

bool wait_all_workers_parked(rt_runtime *rt)
{
    const struct timespec step = {0, 1000000}; /* 1 ms */
    for (int i = 0; i < 10000; i++) {
        if (all_workers_parked(rt))
            return true;
        nanosleep(&step, NULL);
    }
    return false;
}

/* ---- waiting for tasks ---------------------------------------------------- */

int task_wait_status(rt_task *task, int64_t timeout_ns, void **value)
{
    int status = 1; /* rt_task_wait leaves it alone on its own errors */
    int rc = rt_task_wait(task, timeout_ns, value, &status);
    if (rc < 0)
        return rc;
    cr_assert_leq(status, 0, "rt_task_wait returned 0 without a status");
    return status;
}

struct waiting_look {
    uint64_t id;
    bool waiting;
};

static int look_for_waiting(const rt_task_info *info, void *arg)
{
    struct waiting_look *look = arg;
    if (info->id == look->id && info->state == RT_TASK_WAITING)
        look->waiting = true;
    return 0;
}

static int visit_none(const rt_task_info *info, void *arg)
{
    (void)info;
    (void)arg;
    return 0;
}

bool diagnostics_built_in(rt_runtime *rt)
{
    return rt_runtime_tasks(rt, visit_none, NULL) != -ENOSYS;
}

static int64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool wait_task_waiting(rt_runtime *rt, uint64_t id)
{
    int64_t deadline = monotonic_ns() + WAIT_DEADLINE_NS;
    for (;;) {
        struct waiting_look look = {id, false};
        int n = rt_runtime_tasks(rt, look_for_waiting, &look);
        if (n == -ENOSYS)
            return false;
        cr_assert_geq(n, 0, "rt_runtime_tasks: %s", rt_strerror(n));
        if (look.waiting)
            return true;
        cr_assert_lt(monotonic_ns(), deadline, "task %llu never waited", (unsigned long long)id);
        sched_yield();
    }
}

int block_on_status_at(const char *site, rt_runtime *rt, rt_poll_fn poll, rt_drop_fn drop,
                       void *state, size_t size, void **value)
{
    int status = 1;
    int rc = rt_block_on_with_site(site, rt, poll, drop, state, size, value, &status);
    if (rc < 0)
        return rc;
    cr_assert_leq(status, 0, "rt_block_on returned 0 without a status");
    return status;
}

/* ---- descriptors -------------------------------------------------------- */

int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    cr_assert_not_null(d, "opendir /proc/self/fd: %s", strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

void make_pipe(int fds[2])
{
    cr_assert_eq(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0, "pipe2: %s", strerror(errno));
}

rt_poll drain_reader_poll(void *state, rt_context *cx, void **out)
{
    struct drain_reader *r = state;
    RT_CORO_BEGIN(&r->co);
    for (;;) {
        rt_io_read_init(&r->rd, r->io, &r->byte, 1);
        RT_AWAIT(&r->co, cx, &r->rd);
        r->result = (ssize_t)r->rd.result;
        if (r->result <= 0)
            break;
        if (r->each_byte != NULL)
            event_signal(r->each_byte);
    }
    RT_RETURN(&r->co, out, (intptr_t)r->result);
    RT_CORO_END(&r->co, out);
}

/* ---- sorting ------------------------------------------------------------ */

int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a;
    uint64_t y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
