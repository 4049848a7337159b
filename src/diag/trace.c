/* The public trace API (asyncrt/trace.h): which runtime is traced, which
 * track each of its threads records into, and the file the trace goes to.
 * The recording and the JSON are base's (trace_buf.h). */
#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "atomic.h"
#include "fault.h"
#include "current.h"
#include "runtime_services.h"
#include "trace_buf.h"

/* The trace that records, with what its classify function needs. */
typedef struct trace_run {
    rt_runtime *rt;
    pthread_t reactor; /* rt's reactor thread */
    unsigned nworkers; /* tracks 0 .. nworkers - 1 */
    int fd;
    rt__trace_recording *recording;
} trace_run;

/* Serializes starts and stops, and guards `active`. */
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static trace_run *active;

/* The track of the calling thread (trace_buf.h's rt__trace_classify_fn):
 * a worker of the traced runtime records into its own, its reactor into
 * the one after the workers', the workers and reactors of other runtimes
 * into none, and every other thread into the last, shared one. */
static int classify(void *ctx, int worker)
{
    const trace_run *run = ctx;
    rt__worker *w = rt__worker_current();
    if (w != NULL)
        return w->rt == run->rt ? (int)w->index : -1;
    if (pthread_equal(pthread_self(), run->reactor))
        return (int)run->nworkers;
    if (worker == RT__EV_REACTOR)
        return -1; /* another runtime's reactor */
    return (int)run->nworkers + 1;
}

static void run_free(trace_run *run)
{
    rt__trace_recording_free(run->recording);
    free(run);
}

RT_EXPORT int rt_trace_start(rt_runtime *rt, const char *path)
{
    if (rt == NULL || path == NULL)
        return -EINVAL;
    pthread_mutex_lock(&trace_lock);
    int err = 0;
    trace_run *run = NULL;
    if (active != NULL) {
        err = -EBUSY;
        goto out;
    }
    /* Shutdown sets `closing` before it stops a trace (rt__trace_shutdown,
     * under this lock): either this start sees it, or that stop sees this
     * trace. */
    if (rt__runtime_closing(rt)) {
        err = -ESHUTDOWN;
        goto out;
    }
    run = rt__calloc(1, sizeof(*run));
    if (run == NULL) {
        err = -ENOMEM;
        goto out;
    }
    run->rt = rt;
    run->reactor = rt__runtime_reactor(rt)->thread;
    run->nworkers = rt_runtime_workers(rt);
    run->fd = -1;
    unsigned ntracks = rt_runtime_workers(rt) + 2;
    err = rt__trace_recording_new(ntracks, rt__trace_records_per_track(), (int)ntracks - 1,
                                  &run->recording);
    if (err < 0)
        goto out;
    for (unsigned i = 0; i < rt_runtime_workers(rt); i++)
        snprintf(run->recording->tracks[i].name, sizeof run->recording->tracks[i].name, "worker %u",
                 i);
    snprintf(run->recording->tracks[ntracks - 2].name, sizeof run->recording->tracks[0].name,
             "reactor");
    snprintf(run->recording->tracks[ntracks - 1].name, sizeof run->recording->tracks[0].name,
             "other threads");
    run->recording->classify = classify;
    run->recording->ctx = run;
    /* Last, so that no failure after it leaves a file behind. */
    run->fd = rt__open_mode(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (run->fd < 0) {
        err = -errno;
        goto out;
    }
    rt__trace_begin(run->recording);
    active = run;
    run = NULL;
out:
    pthread_mutex_unlock(&trace_lock);
    if (run != NULL)
        run_free(run);
    return err;
}

/* Stops the trace of `rt` if it is the one recording, and writes it. */
static int stop(rt_runtime *rt)
{
    pthread_mutex_lock(&trace_lock);
    trace_run *run = active;
    if (run == NULL || run->rt != rt) {
        pthread_mutex_unlock(&trace_lock);
        return -ENOENT;
    }
    rt__trace_end(run->recording);
    active = NULL;
    /* The recording is ours alone now: the next start need not wait for the
     * file. */
    pthread_mutex_unlock(&trace_lock);
    int err = rt__trace_write_json(run->recording, run->fd, "asyncrt");
    if (close(run->fd) < 0 && err == 0 && errno != EINTR)
        err = -errno;
    run_free(run);
    return err;
}

RT_EXPORT int rt_trace_stop(rt_runtime *rt)
{
    if (rt == NULL)
        return -EINVAL;
    return stop(rt);
}

void rt__trace_shutdown(rt_runtime *rt)
{
    /* Nobody is told of a failed write here; the file is cut short. */
    (void)stop(rt);
}
