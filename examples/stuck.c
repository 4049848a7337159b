/* A program that gets stuck on purpose, to show what a task dump says.
 *
 * Two tasks deadlock: each holds one async mutex and waits for the other's.
 * A third waits on a channel whose sender was forgotten. Once they are
 * stuck it prints "ready". On SIGQUIT the runtime's reactor writes a task
 * dump to standard error (rt_config.dump_signal) and the program keeps
 * running; on SIGTERM it shuts down and exits 0.
 *
 *     ./stuck & sleep 0.5; kill -QUIT %1; kill -TERM %1
 *
 * docs/debugging.md reads the dump. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>

#include <asyncrt.h>

/* Both lockers share these. */
static rt_mutex *first, *second;
static rt_notify *a_holds, *b_holds; /* each locker tells once it holds its mutex */
static rt_chan *forgotten;           /* nobody ever sends on it */

struct locker {
    rt_coro co;
    rt_mutex *mine, *theirs;
    rt_notify *tell, *hear;
    rt_mutex_lock take_mine, take_theirs;
    rt_notified other_holds;
};

static rt_poll locker_poll(void *p, rt_context *cx, void **out)
{
    struct locker *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_mutex_lock_init(&s->take_mine, s->mine);
    RT_AWAIT_HOLD(&s->co, cx, &s->take_mine);
    /* Wait until the other locker holds its own mutex too. */
    rt_notify_one(s->tell);
    rt_notified_init(&s->other_holds, s->hear);
    RT_AWAIT(&s->co, cx, &s->other_holds);
    rt_mutex_lock_init(&s->take_theirs, s->theirs);
    RT_AWAIT_HOLD(&s->co, cx, &s->take_theirs); /* never returns: a deadlock */
    RT_CORO_END(&s->co, out);
}

struct waiter {
    rt_coro co;
    rt_chan_recv recv;
};

static rt_poll waiter_poll(void *p, rt_context *cx, void **out)
{
    struct waiter *s = p;
    RT_CORO_BEGIN(&s->co);
    rt_chan_recv_init(&s->recv, forgotten);
    RT_AWAIT(&s->co, cx, &s->recv); /* never returns: no one sends */
    RT_CORO_END(&s->co, out);
}

/* The tasks are stuck once all three wait: then every worker sleeps. */
static int count_waiting(const rt_task_info *t, void *arg)
{
    if (t->state == RT_TASK_WAITING && t->await_line > 0)
        ++*(int *)arg;
    return 0;
}

int main(void)
{
    /* Blocked here, and so in every thread the runtime starts: SIGQUIT is
     * taken by the runtime's listener, the others by sigwait below. */
    sigset_t stop, blocked;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    blocked = stop;
    sigaddset(&blocked, SIGQUIT);
    pthread_sigmask(SIG_BLOCK, &blocked, NULL);

    rt_config cfg;
    rt_config_init(&cfg);
    cfg.dump_signal = SIGQUIT; /* the dump goes to dump_fd, standard error */
    rt_runtime *rt;
    int err = rt_runtime_new(&cfg, &rt);
    if (err < 0) {
        fprintf(stderr, "stuck: %s\n", rt_strerror(err));
        return 1;
    }
    if ((err = rt_mutex_new(&first)) < 0 || (err = rt_mutex_new(&second)) < 0 ||
        (err = rt_notify_new(&a_holds)) < 0 || (err = rt_notify_new(&b_holds)) < 0 ||
        (err = rt_chan_new(1, &forgotten)) < 0) {
        fprintf(stderr, "stuck: %s\n", rt_strerror(err));
        return 1;
    }
    rt_spawn_options named;
    rt_spawn_options_init(&named);
    struct locker a = {.mine = first, .theirs = second, .tell = a_holds, .hear = b_holds};
    struct locker b = {.mine = second, .theirs = first, .tell = b_holds, .hear = a_holds};
    struct waiter w = {0};
    named.name = "locker-a";
    err = rt_spawn_ex(rt, &named, locker_poll, rt_coro_drop, &a, sizeof a, NULL);
    named.name = "locker-b";
    if (err == 0)
        err = rt_spawn_ex(rt, &named, locker_poll, rt_coro_drop, &b, sizeof b, NULL);
    named.name = "waiter";
    if (err == 0)
        err = rt_spawn_ex(rt, &named, waiter_poll, rt_coro_drop, &w, sizeof w, NULL);
    if (err < 0) {
        fprintf(stderr, "stuck: %s\n", rt_strerror(err));
        return 1;
    }

    /* Stuck once all three wait at an await point. */
    for (;;) {
        int waiting = 0;
        rt_runtime_tasks(rt, count_waiting, &waiting);
        if (waiting == 3)
            break;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    printf("ready\n");
    fflush(stdout);

    int sig;
    while (sigwait(&stop, &sig) != 0)
        ;
    /* Shutdown cancels the stuck tasks; their drops give the locks back. */
    rt_runtime_free(rt);
    rt_chan_sender_drop(forgotten);
    rt_chan_receiver_drop(forgotten, NULL, NULL);
    rt_notify_drop(a_holds);
    rt_notify_drop(b_holds);
    rt_mutex_drop(first);
    rt_mutex_drop(second);
    return 0;
}
