/* The diagnostics layer of a build without it (-Ddiagnostics=false): the
 * entry points of diagnostics.h, dump_signal.h and trace.h start nothing,
 * and the public functions of diag.h and trace.h refuse with -ENOSYS after
 * the argument checks their headers promise. The hook table is never
 * installed, so the scheduler's lost wake-up sweep reports nothing and the
 * trace flag stays down. */
#include <errno.h>
#include <stddef.h>

#include <asyncrt/diag.h>
#include <asyncrt/trace.h>

#include "common.h"
#include "diagnostics.h"
#include "dump_signal.h"
#include "trace.h"

void rt__diag_install(void) {}

void rt__diag_task_reader_set(rt_poll_fn poll, rt__task_reader_fn fn)
{
    (void)poll;
    (void)fn;
}

int rt__watchdog_start(rt_runtime *rt, int64_t stall_ns, struct rt__watchdog **out)
{
    (void)rt;
    (void)stall_ns;
    *out = NULL;
    return -ENOSYS;
}

void rt__watchdog_stop(struct rt__watchdog *wd)
{
    (void)wd;
}

int rt__dump_trigger_start(rt_runtime *rt, int signo, int fd, struct rt__dump_trigger **out)
{
    (void)rt;
    (void)signo;
    (void)fd;
    *out = NULL;
    return -ENOSYS;
}

void rt__dump_trigger_stop(struct rt__dump_trigger *tr)
{
    (void)tr;
}

void rt__dump_trigger_free(struct rt__dump_trigger *tr)
{
    (void)tr;
}

void rt__trace_shutdown(rt_runtime *rt)
{
    (void)rt;
}

RT_EXPORT int rt_runtime_tasks(rt_runtime *rt, rt_task_visit_fn fn, void *arg)
{
    (void)arg;
    return rt == NULL || fn == NULL ? -EINVAL : -ENOSYS;
}

RT_EXPORT int rt_runtime_dump(rt_runtime *rt, FILE *out)
{
    return rt == NULL || out == NULL ? -EINVAL : -ENOSYS;
}

RT_EXPORT int rt_runtime_dump_fd(rt_runtime *rt, int fd)
{
    return rt == NULL ? -EINVAL : fd < 0 ? -EBADF : -ENOSYS;
}

RT_EXPORT int rt_trace_start(rt_runtime *rt, const char *path)
{
    return rt == NULL || path == NULL ? -EINVAL : -ENOSYS;
}

RT_EXPORT int rt_trace_stop(rt_runtime *rt)
{
    return rt == NULL ? -EINVAL : -ENOSYS;
}
