/* The blocking pool: threads for rt_spawn_blocking jobs, created on demand
 * up to rt_config.blocking_threads, exiting after blocking_idle_ns idle.
 *
 * Plain mutex and condition variables: a job is a blocking call that takes
 * far longer than the lock, so there is nothing to gain from lock-free
 * hand-offs here. Jobs are tasks (see rt__task_new_job) linked through
 * task->node in a FIFO queue.
 *
 * Lifetime: the pool is its own heap object, counted by the runtime and by
 * every pool thread, because shutdown may abandon a thread still running a
 * job: that thread finishes the job, completes its task (task memory is
 * counted separately and never touches the freed runtime), and frees the
 * pool if it is the last user. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

#include "fault.h"
#include "atomic.h"
#include "blocking.h"
#include "runtime_object.h"

struct rt__blocking_pool {
    pthread_mutex_t lock;
    pthread_cond_t work;    /* a job was queued, or shutdown */
    pthread_cond_t drained; /* a job or a thread finished (for shutdown) */
    rt_task *head, *tail;   /* jobs not started, FIFO */
    unsigned max_threads;   /* rt_config.blocking_threads */
    int64_t idle_ns;        /* rt_config.blocking_idle_ns */
    unsigned threads;       /* alive */
    unsigned idle;          /* waiting for work, not yet claimed by a notify */
    unsigned notified;      /* signalled by a spawn, not yet awake */
    unsigned running;       /* jobs running now */
    unsigned refs;          /* the runtime + every thread */
    bool shutdown;          /* no more jobs; idle threads exit */
    uint64_t jobs;          /* accepted so far (read relaxed by metrics) */
};

static void pool_unref_locked(rt__blocking_pool *p)
{
    bool last = --p->refs == 0;
    pthread_mutex_unlock(&p->lock);
    if (last) {
        pthread_cond_destroy(&p->work);
        pthread_cond_destroy(&p->drained);
        pthread_mutex_destroy(&p->lock);
        free(p);
    }
}

int rt__blocking_pool_new(const rt_config *cfg, rt__blocking_pool **out)
{
    rt__blocking_pool *p = rt__calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    /* Idle timeouts and the shutdown deadline are on the monotonic clock. */
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int err = rt__pthread_mutex_init(&p->lock, NULL);
    if (err == 0 && (err = rt__pthread_cond_init(&p->work, &attr)) != 0)
        pthread_mutex_destroy(&p->lock);
    if (err == 0 && (err = rt__pthread_cond_init(&p->drained, &attr)) != 0) {
        pthread_cond_destroy(&p->work);
        pthread_mutex_destroy(&p->lock);
    }
    pthread_condattr_destroy(&attr);
    if (err != 0) {
        free(p);
        return -err;
    }
    p->max_threads = cfg->blocking_threads;
    p->idle_ns = cfg->blocking_idle_ns;
    p->refs = 1;
    *out = p;
    return 0;
}

static struct timespec deadline_ts(int64_t deadline_ns)
{
    struct timespec ts = {deadline_ns / 1000000000, deadline_ns % 1000000000};
    return ts;
}

static rt_task *pop_job_locked(rt__blocking_pool *p)
{
    rt_task *t = p->head;
    if (t != NULL) {
        p->head = (rt_task *)t->node.next;
        if (p->head == NULL)
            p->tail = NULL;
    }
    return t;
}

static void *pool_thread_main(void *arg)
{
    rt__blocking_pool *p = arg;
    /* Set by the thread itself: it is detached, so its creator may not
     * name it once it could have exited. */
    pthread_setname_np(pthread_self(), "asyncrt-block");
    pthread_mutex_lock(&p->lock);
    for (;;) {
        rt_task *job = pop_job_locked(p);
        if (job != NULL) {
            p->running++;
            pthread_mutex_unlock(&p->lock);
            rt__task_run_job(job);
            pthread_mutex_lock(&p->lock);
            p->running--;
            pthread_cond_broadcast(&p->drained);
            continue;
        }
        if (p->shutdown)
            break;
        /* Wait for work, at most idle_ns. A spawn that finds us idle moves
         * us from `idle` to `notified` before it signals, so it counts on
         * us and does not start another thread. */
        p->idle++;
        int64_t deadline = rt__deadline_after(p->idle_ns);
        struct timespec until = deadline_ts(deadline);
        int rc = 0;
        while (p->head == NULL && !p->shutdown && rc != ETIMEDOUT && p->notified == 0) {
            /* No deadline (an idle time too large to add to the clock):
             * wait without one; a timed wait would fail at once and spin. */
            if (deadline < 0)
                rc = pthread_cond_wait(&p->work, &p->lock);
            else
                rc = pthread_cond_timedwait(&p->work, &p->lock, &until);
        }
        if (p->notified > 0)
            p->notified--;
        else
            p->idle--;
        if (rc == ETIMEDOUT && p->head == NULL && !p->shutdown)
            break; /* idle too long */
    }
    p->threads--;
    pthread_cond_broadcast(&p->drained);
    pool_unref_locked(p);
    return NULL;
}

/* Starts a pool thread. Under the lock. Returns 0 or a negative errno. */
static int start_thread_locked(rt__blocking_pool *p)
{
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t tid;
    p->refs++;
    p->threads++;
    /* Pool threads block SIGPIPE like the runtime's other threads (a job
     * writing to a pipe whose reader is gone gets EPIPE, the process is not
     * killed), whatever the mask of the thread that spawned the job. */
    sigset_t pipe_only, old_mask;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
    int err = rt__pthread_create(&tid, &attr, pool_thread_main, p);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        p->refs--;
        p->threads--;
        return -err;
    }
    return 0;
}

RT_EXPORT int rt_spawn_blocking(rt_runtime *rt, rt_blocking_fn fn, void *arg, rt_task **handle)
{
    return rt_spawn_blocking_ex(rt, fn, NULL, arg, handle);
}

RT_EXPORT int rt_spawn_blocking_ex(rt_runtime *rt, rt_blocking_fn fn, void (*release)(void *arg),
                                   void *arg, rt_task **handle)
{
    if (handle != NULL)
        *handle = NULL;
    if (rt == NULL)
        rt = rt_current_runtime();
    if (rt == NULL || fn == NULL)
        return -EINVAL;
    if (rt__load_acquire_u32(&rt->closing))
        return -ESHUTDOWN;
    rt_task *t = rt__task_new_job(rt, fn, release, arg, handle != NULL);
    if (t == NULL)
        return -ENOMEM;
    rt__blocking_pool *p = rt->blocking;
    pthread_mutex_lock(&p->lock);
    if (p->shutdown) {
        pthread_mutex_unlock(&p->lock);
        rt__task_discard_job(t);
        return -ESHUTDOWN;
    }
    rt__task_fifo_append(&p->head, &p->tail, t);
    int err = 0;
    if (p->idle > 0) {
        p->idle--;
        p->notified++;
        pthread_cond_signal(&p->work);
    } else if (p->threads < p->max_threads) {
        err = start_thread_locked(p);
        if (err < 0 && p->threads > 0)
            err = 0; /* a running thread will come to the job */
    }
    if (err < 0) {
        /* Nobody would ever run it: take it back. With no thread alive the
         * queue holds only this job, since every job queued before it found
         * a thread then, and threads exit only with the queue empty. */
        p->head = p->tail = NULL;
        pthread_mutex_unlock(&p->lock);
        rt__task_discard_job(t);
        return err == -EAGAIN || err == -ENOMEM ? -EAGAIN : err;
    }
    rt__store_relaxed_u64(&p->jobs, p->jobs + 1);
    pthread_mutex_unlock(&p->lock);
    if (handle != NULL)
        *handle = t;
    return 0;
}

unsigned rt__blocking_pool_shutdown(rt__blocking_pool *p, int64_t timeout_ns)
{
    pthread_mutex_lock(&p->lock);
    p->shutdown = true;
    pthread_cond_broadcast(&p->work);
    rt_task *queued = p->head;
    p->head = p->tail = NULL;
    pthread_mutex_unlock(&p->lock);
    /* Jobs that never started are cancelled: their joiners get -ECANCELED. */
    while (queued != NULL) {
        rt_task *next = (rt_task *)queued->node.next;
        rt__task_cancel_job(queued);
        queued = next;
    }
    pthread_mutex_lock(&p->lock);
    int64_t deadline = rt__deadline_after(timeout_ns);
    struct timespec until = deadline_ts(deadline);
    int rc = 0;
    while (p->running > 0 && rc != ETIMEDOUT) {
        if (deadline < 0)
            rc = pthread_cond_wait(&p->drained, &p->lock);
        else
            rc = pthread_cond_timedwait(&p->drained, &p->lock, &until);
    }
    unsigned abandoned = p->running;
    pthread_mutex_unlock(&p->lock);
    return abandoned;
}

void rt__blocking_pool_release(rt__blocking_pool *p)
{
    pthread_mutex_lock(&p->lock);
    pool_unref_locked(p); /* the runtime's reference */
}

void rt__blocking_pool_abort(rt__blocking_pool *p, rt_task *t)
{
    pthread_mutex_lock(&p->lock);
    rt_task *prev = NULL, *cur = p->head;
    while (cur != NULL && cur != t) {
        prev = cur;
        cur = (rt_task *)cur->node.next;
    }
    if (cur != NULL) {
        rt_task *next = (rt_task *)cur->node.next;
        if (prev != NULL)
            prev->node.next = (struct cds_wfcq_node *)next;
        else
            p->head = next;
        if (p->tail == cur)
            p->tail = prev;
    }
    pthread_mutex_unlock(&p->lock);
    /* Taken out of the queue: complete it now rather than when a thread
     * reaches it. Not found: a thread has claimed it already. */
    if (cur != NULL)
        rt__task_run_job(t); /* it sees CANCELLED and does not run */
}

void rt__blocking_pool_stats(rt__blocking_pool *p, uint64_t *threads, uint64_t *jobs)
{
    pthread_mutex_lock(&p->lock);
    *threads = p->threads;
    *jobs = p->jobs;
    pthread_mutex_unlock(&p->lock);
}
