/* Counted references released beyond their count, or used after their
 * release: a channel's senders and receivers, a oneshot's two sides, a
 * group, a join handle. While the object is still allocated the call is
 * reported (rt_config.report, or one line on standard error off the
 * runtime's workers) and changes nothing, so the end of a stream still
 * arrives and nothing leaks. Where the object is already freed (the heap
 * mutex, semaphore and notify, whose last release frees them, and any kind
 * once every reference is gone) AddressSanitizer reports the use after
 * free: those tests run in a child process and read its report. */
#define _GNU_SOURCE
#include "support.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(misuse, .fini = fail_on_leaks);

/* ---- Reports ------------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    int count;
    char function[64];
    const void *object;
    uint64_t task_id;
} seen = {PTHREAD_MUTEX_INITIALIZER, 0, "", NULL, 0};

static void on_report(const rt_report *rep, void *arg)
{
    (void)arg;
    if (rep->kind != RT_REPORT_MISUSE)
        return;
    pthread_mutex_lock(&seen.mu);
    seen.count++;
    snprintf(seen.function, sizeof seen.function, "%s", rep->function);
    seen.object = rep->object;
    seen.task_id = rep->task_id;
    pthread_mutex_unlock(&seen.mu);
}

static rt_runtime *reporting_runtime(void)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 2;
    cfg.report = on_report;
    return new_runtime_config(&cfg);
}

static void expect_report(int count, const char *function, const void *object)
{
    pthread_mutex_lock(&seen.mu);
    cr_assert_eq(seen.count, count, "%d misuse reports, expected %d", seen.count, count);
    cr_assert_str_eq(seen.function, function);
    cr_assert_eq(seen.object, object);
    pthread_mutex_unlock(&seen.mu);
}

/* Runs fn(arg) as a task of rt and waits for it: misuse made from a task
 * goes to the runtime's report callback. */
struct in_task {
    void (*fn)(void *);
    void *arg;
};

static rt_poll in_task_poll(void *p, rt_context *cx, void **out)
{
    (void)cx;
    struct in_task *t = p;
    t->fn(t->arg);
    *out = NULL;
    return RT_READY;
}

static void run_in_task(rt_runtime *rt, void (*fn)(void *), void *arg)
{
    struct in_task t = {fn, arg};
    cr_assert_eq(rt_block_on(rt, in_task_poll, NULL, &t, sizeof t, NULL, NULL), 0);
}

/* Runs fn(arg) with standard error sent to a pipe; returns what was
 * written there (static, NUL-terminated). */
static const char *stderr_of(void (*fn)(void *), void *arg)
{
    static char text[4096];
    int p[2];
    cr_assert_eq(pipe2(p, O_CLOEXEC), 0);
    fflush(stderr);
    int saved = dup(2);
    cr_assert_geq(saved, 0);
    cr_assert_eq(dup2(p[1], 2), 2);
    fn(arg);
    fflush(stderr);
    cr_assert_eq(dup2(saved, 2), 2);
    close(saved);
    close(p[1]);
    ssize_t n = read(p[0], text, sizeof text - 1);
    close(p[0]);
    text[n > 0 ? n : 0] = '\0';
    return text;
}

/* ---- Channels ------------------------------------------------------------ */

static void drop_sender(void *ch)
{
    rt_chan_sender_drop(ch);
}

Test(misuse, a_channel_sender_released_twice_is_reported_and_the_end_still_arrives)
{
    rt_runtime *rt = reporting_runtime();
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    cr_assert_eq(rt_chan_try_send(ch, (void *)1), 0);
    rt_chan_sender_drop(ch); /* the one sender */
    run_in_task(rt, drop_sender, ch);
    expect_report(1, "rt_chan_sender_drop", ch);
    cr_assert_neq(seen.task_id, 0, "the report names the task that made the call");
    /* The receiver still gets the value, then the end of the stream. */
    void *v = NULL;
    cr_assert_eq(rt_chan_recv_wait(ch, 200 * MS, &v), 0);
    cr_assert_eq(v, (void *)1);
    cr_assert_eq(rt_chan_recv_wait(ch, 200 * MS, &v), -EPIPE);
    /* Off the workers the report is one line on standard error. */
    const char *text = stderr_of(drop_sender, ch);
    cr_assert(strstr(text, "asyncrt: misuse: rt_chan_sender_drop(") != NULL, "%s", text);
    cr_assert(strstr(text, "(ignored)") != NULL, "%s", text);
    cr_assert_eq(rt_chan_sender_clone(ch), -EINVAL, "a sender cloned from none");
    expect_report(1, "rt_chan_sender_drop", ch); /* the clone was on this thread */
    rt_chan_receiver_drop(ch, NULL, NULL);       /* the last reference: freed, nothing leaks */
    finish_runtime(rt, 0);
}

static void drop_receiver(void *ch)
{
    rt_chan_receiver_drop(ch, NULL, NULL);
}

Test(misuse, a_channel_receiver_released_twice_is_reported_and_senders_see_the_close)
{
    rt_runtime *rt = reporting_runtime();
    rt_chan *ch;
    cr_assert_eq(rt_chan_new(4, &ch), 0);
    cr_assert_eq(rt_chan_receiver_clone(ch), 0);
    rt_chan_receiver_drop(ch, NULL, NULL);
    rt_chan_receiver_drop(ch, NULL, NULL); /* the last one: the channel closes */
    run_in_task(rt, drop_receiver, ch);
    expect_report(1, "rt_chan_receiver_drop", ch);
    cr_assert_eq(rt_chan_try_send(ch, (void *)1), -EPIPE, "the close did not stand");
    cr_assert_eq(rt_chan_receiver_clone(ch), -EINVAL);
    rt_chan_sender_drop(ch);
    finish_runtime(rt, 0);
}

/* ---- Oneshots ------------------------------------------------------------ */

static void oneshot_sender_again(void *o)
{
    rt_oneshot_sender_drop(o);
}

static void oneshot_send_again(void *o)
{
    cr_assert_eq(rt_oneshot_send(o, (void *)2), -EINVAL);
}

static void oneshot_receiver_again(void *o)
{
    void *v = (void *)1;
    cr_assert_eq(rt_oneshot_receiver_drop(o, &v), 0);
    cr_assert_null(v);
}

Test(misuse, a_oneshot_side_released_twice_is_reported)
{
    rt_runtime *rt = reporting_runtime();
    rt_oneshot *o;
    cr_assert_eq(rt_oneshot_new(&o), 0);
    cr_assert_eq(rt_oneshot_send(o, (void *)7), 0); /* releases the sender */
    run_in_task(rt, oneshot_sender_again, o);
    expect_report(1, "rt_oneshot_sender_drop", o);
    run_in_task(rt, oneshot_send_again, o);
    expect_report(2, "rt_oneshot_send", o);
    void *v = NULL;
    cr_assert_eq(rt_oneshot_try_recv(o, &v), 0, "the value sent first was lost");
    cr_assert_eq(v, (void *)7);

    rt_oneshot *o2;
    cr_assert_eq(rt_oneshot_new(&o2), 0);
    cr_assert_eq(rt_oneshot_receiver_drop(o2, NULL), 0);
    run_in_task(rt, oneshot_receiver_again, o2);
    expect_report(3, "rt_oneshot_receiver_drop", o2);
    cr_assert_eq(rt_oneshot_send(o2, (void *)1), -EPIPE);

    cr_assert_eq(rt_oneshot_receiver_drop(o, NULL), 0);
    finish_runtime(rt, 0);
}

/* ---- Groups -------------------------------------------------------------- */

static void free_group(void *g)
{
    rt_group_free(g);
}

/* A group whose child cannot finish: the second free always finds it
 * allocated. */
struct blocker_state {
    atomic_bool *go;
    struct event *started;
};

static rt_poll blocked_poll(void *p, rt_context *cx, void **out)
{
    struct blocker_state *b = p;
    (void)cx;
    /* Holds its worker until the test lets it go: the abort of the first
     * free cannot drop it meanwhile. */
    event_signal(b->started);
    while (!atomic_load(b->go))
        sched_yield();
    *out = NULL;
    return RT_READY;
}

Test(misuse, a_group_freed_twice_is_reported_while_its_child_holds_it)
{
    rt_runtime *rt = reporting_runtime();
    rt_group *g;
    cr_assert_eq(rt_group_new(rt, NULL, NULL, &g), 0);
    atomic_bool go = false;
    struct event started = EVENT_INIT;
    struct blocker_state b = {&go, &started};
    cr_assert_eq(rt_group_spawn(g, NULL, blocked_poll, NULL, &b, sizeof b, NULL), 0);
    cr_assert(event_wait_for(&started, 1));
    rt_group_free(g);
    const char *text = stderr_of(free_group, g); /* from this thread: stderr */
    cr_assert(strstr(text, "asyncrt: misuse: rt_group_free(") != NULL, "%s", text);
    run_in_task(rt, free_group, g);
    expect_report(1, "rt_group_free", g);
    atomic_store(&go, true);
    cr_assert(wait_all_workers_parked(rt));
    finish_runtime(rt, 0);
}

/* ---- Join handles -------------------------------------------------------- */

Test(misuse, a_join_handle_released_twice_is_reported_while_its_task_lives)
{
    rt_runtime *rt = reporting_runtime();
    rt_task *t;
    cr_assert_eq(rt_spawn(rt, never_poll, NULL, NULL, 0, &t), 0);
    cr_assert(event_wait_for(&polled, 1));
    /* The registry keeps the unfinished task allocated. */
    rt_task_drop(t);
    const char *text = stderr_of((void (*)(void *))rt_task_drop, t);
    cr_assert(strstr(text, "asyncrt: misuse: rt_task_drop(") != NULL, "%s", text);
    cr_assert(strstr(text, "join handle was released already") != NULL, "%s", text);
    void *v = (void *)1;
    int status = 1;
    cr_assert_eq(rt_task_wait(t, 0, &v, &status), -EINVAL, "a wait on a released handle");
    cr_assert_eq(v, (void *)1);
    cr_assert_eq(status, 1);
    rt_task_join j;
    cr_assert_eq(rt_task_join_init(&j, t), -EINVAL);
    cr_assert_eq(j.result, -EINVAL);
    RT_DROP(&j);           /* finished: releases nothing */
    finish_runtime(rt, 1); /* the never-ending task, cancelled once */
}

/* ---- Freed objects: what AddressSanitizer sees ------------------------- */

#ifdef TEST_HAVE_LSAN
/* Runs fn in a child process with its standard error in a pipe and
 * returns that text; the child must be stopped by ASan's report. */
static const char *asan_report_of(void (*fn)(void))
{
    static char text[16384];
    int p[2];
    cr_assert_eq(pipe2(p, 0), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        dup2(p[1], 2);
        close(p[0]);
        fn();
        _exit(0); /* not reached under ASan */
    }
    close(p[1]);
    size_t got = 0;
    ssize_t n;
    while (got < sizeof text - 1 && (n = read(p[0], text + got, sizeof text - 1 - got)) > 0)
        got += (size_t)n;
    text[got] = '\0';
    close(p[0]);
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(!(WIFEXITED(ws) && WEXITSTATUS(ws) == 0), "the child went on: %s", text);
    return text;
}
#endif

static void mutex_unref_twice(void)
{
    rt_mutex *m;
    if (rt_mutex_new(&m) == 0) {
        rt_mutex_drop(m);
        rt_mutex_drop(m);
    }
}

static void semaphore_unref_twice(void)
{
    rt_semaphore *s;
    if (rt_semaphore_new(1, &s) == 0) {
        rt_semaphore_drop(s);
        rt_semaphore_drop(s);
    }
}

static void notify_unref_twice(void)
{
    rt_notify *n;
    if (rt_notify_new(&n) == 0) {
        rt_notify_drop(n);
        rt_notify_drop(n);
    }
}

static void channel_released_past_its_end(void)
{
    rt_chan *ch;
    if (rt_chan_new(1, &ch) == 0) {
        rt_chan_receiver_drop(ch, NULL, NULL);
        rt_chan_sender_drop(ch); /* the last reference: freed */
        rt_chan_sender_drop(ch);
    }
}

static void handle_released_past_its_task(void)
{
    rt_runtime *rt;
    if (rt_runtime_new(NULL, &rt) != 0)
        return;
    rt_task *t;
    if (rt_spawn(rt, trivial_poll, NULL, NULL, 0, &t) == 0) {
        rt_task_wait(t, -1, NULL, NULL); /* releases the handle */
        rt_runtime_free(rt);             /* and the registry its reference */
        rt_task_drop(t);
    }
}

static void expect_use_after_free(void (*fn)(void), const char *function)
{
#ifndef TEST_HAVE_LSAN
    (void)fn;
    (void)function;
    cr_skip_test("AddressSanitizer reports these; this build has none");
#else
    const char *text = asan_report_of(fn);
    cr_assert(strstr(text, "heap-use-after-free") != NULL, "%s", text);
    cr_assert(strstr(text, function) != NULL, "the report does not name %s: %s", function, text);
#endif
}

Test(misuse, a_heap_mutex_released_twice_is_a_use_after_free_asan_sees)
{
    expect_use_after_free(mutex_unref_twice, "rt_mutex_drop");
}

Test(misuse, a_heap_semaphore_released_twice_is_a_use_after_free_asan_sees)
{
    expect_use_after_free(semaphore_unref_twice, "rt_semaphore_drop");
}

Test(misuse, a_heap_notify_released_twice_is_a_use_after_free_asan_sees)
{
    expect_use_after_free(notify_unref_twice, "rt_notify_drop");
}

Test(misuse, a_channel_released_past_its_last_reference_is_a_use_after_free_asan_sees)
{
    expect_use_after_free(channel_released_past_its_end, "rt_chan_sender_drop");
}

Test(misuse, a_join_handle_released_past_its_task_is_a_use_after_free_asan_sees)
{
    expect_use_after_free(handle_released_past_its_task, "rt_task_drop");
}
