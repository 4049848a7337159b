/* A program that gets stuck on purpose, to show what a task dump says.
 *
 * Two fibers deadlock: each holds one async mutex and waits for the
 * other's. A third waits on a channel whose sender was forgotten. Once they
 * are stuck it prints "ready". On SIGQUIT the runtime's reactor writes a
 * task dump to standard error (rt_config.dump_signal), with each fiber's
 * await point and backtrace, and the program keeps running; on SIGTERM it
 * shuts down and exits 0.
 *
 *     ./stuck & sleep 0.5; kill -QUIT %1; kill -TERM %1
 *
 * docs/debugging.md reads the dump. Built with frame pointers and -rdynamic
 * (examples/meson.build), so that the backtraces name the functions. */
#define _GNU_SOURCE
#include <asyncrt.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>

static rt_chan *forgotten; /* nobody ever sends on it */

struct locker {
    rt_mutex *mine, *theirs;
    rt_notify *tell, *hear; /* each tells once it holds its own mutex */
};

/* Not static, as waiter below: -rdynamic puts them in the dynamic symbol
 * table, which names them in the dump's backtraces. */
void *locker(void *arg);
void *waiter(void *arg);

void *locker(void *arg)
{
    struct locker *l = arg;
    if (rt_mutex_lock_await(l->mine) < 0)
        return NULL;
    rt_notify_one(l->tell);
    rt_notified other_holds; /* until the other one holds its own mutex too */
    rt_notified_init(&other_holds, l->hear);
    if (rt_fiber_await(&other_holds.future) == 0 &&
        rt_mutex_lock_await(l->theirs) == 0) /* never returns: a deadlock */
        rt_mutex_unlock(l->theirs);
    rt_mutex_unlock(l->mine); /* shutdown's cancel gets here */
    return NULL;
}

void *waiter(void *arg)
{
    (void)arg;
    rt_chan_recv_await(forgotten, NULL); /* never returns: no one sends */
    return NULL;
}

/* The fibers are stuck once all three wait: then every worker sleeps. */
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
    rt_mutex *first, *second;
    rt_notify *a_holds, *b_holds;
    int err = rt_runtime_new(&cfg, &rt);
    if (err < 0 || (err = rt_mutex_new(&first)) < 0 || (err = rt_mutex_new(&second)) < 0 ||
        (err = rt_notify_new(&a_holds)) < 0 || (err = rt_notify_new(&b_holds)) < 0 ||
        (err = rt_chan_new(1, &forgotten)) < 0) {
        fprintf(stderr, "stuck: %s\n", rt_strerror(err));
        return 1;
    }
    struct locker lockers[2] = {{first, second, a_holds, b_holds},
                                {second, first, b_holds, a_holds}};
    rt_fiber_options named;
    rt_fiber_options_init(&named);
    named.name = "locker";
    for (int i = 0; i < 2 && err == 0; i++)
        err = rt_fiber_spawn_ex(rt, &named, locker, &lockers[i], NULL);
    named.name = "waiter";
    if (err == 0)
        err = rt_fiber_spawn_ex(rt, &named, waiter, NULL, NULL);
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
    /* Shutdown cancels the stuck fibers: their awaits fail, and they give
     * the locks back on their way out. */
    rt_runtime_free(rt);
    rt_chan_sender_drop(forgotten);
    rt_chan_receiver_drop(forgotten, NULL, NULL);
    rt_notify_drop(a_holds);
    rt_notify_drop(b_holds);
    rt_mutex_drop(first);
    rt_mutex_drop(second);
    return 0;
}
