/* Reports (diag.h, rt_report): where they go, the default printer, and the
 * misuse reports of counted references, which every build makes whatever
 * the diagnostics settings: a reference released once too often is a bug in
 * the caller, and silence would turn it into a lost end of stream or a
 * leak. */
#include <stdio.h>
#include <string.h>

#include <asyncrt/diag.h>
#include <asyncrt/task.h>

#include "misuse.h"
#include "runtime_object.h"

void rt__report(rt_runtime *rt, const rt_report *rep)
{
    if (rt->config.report != NULL)
        rt->config.report(rep, rt->config.report_arg);
    else
        rt_report_print(rep, NULL);
}

RT_EXPORT void rt_report_print(const rt_report *rep, void *arg)
{
    (void)arg;
    if (rep == NULL)
        return;
    char where[256] = "";
    if (rep->await_file != NULL)
        snprintf(where, sizeof where, " at %s:%d in %s", rep->await_file, rep->await_line,
                 rep->await_function != NULL ? rep->await_function : "?");
    char spawned[160] = "";
    if (rep->spawned_at != NULL)
        snprintf(spawned, sizeof spawned, " (spawned at %s)", rep->spawned_at);
    char name[96] = "";
    if (rep->task_name != NULL)
        snprintf(name, sizeof name, " \"%s\"", rep->task_name);
    /* One line, one write: reports from several threads do not mix. */
    char line[640];
    if (rep->kind == RT_REPORT_MISUSE) {
        char task[128] = "";
        if (rep->task_id != 0)
            snprintf(task, sizeof task, ", in task %llu%s", (unsigned long long)rep->task_id, name);
        snprintf(line, sizeof line, "asyncrt: misuse: %s(%p): %s (ignored)%s\n",
                 rep->function != NULL ? rep->function : "?", rep->object,
                 rep->what != NULL ? rep->what : "a reference misused", task);
    } else if (rep->kind == RT_REPORT_STALL)
        snprintf(
            line, sizeof line,
            "asyncrt: stall: task %llu%s on worker %d has been polled for %lld ms, since%s%s\n",
            (unsigned long long)rep->task_id, name, rep->worker,
            (long long)(rep->duration_ns / 1000000),
            where[0] != '\0' ? where : " its start (no coroutine record)", spawned);
    else
        snprintf(line, sizeof line,
                 "asyncrt: lost wake-up: task %llu%s waits%s and no waker for it exists%s\n",
                 (unsigned long long)rep->task_id, name,
                 where[0] != '\0' ? where : " (no coroutine record)", spawned);
    fputs(line, stderr);
}

void rt__report_misuse(const char *function, const void *object, const char *what)
{
    rt_report rep;
    memset(&rep, 0, sizeof rep);
    rep.size = sizeof rep;
    rep.kind = RT_REPORT_MISUSE;
    rep.task_id = rt_current_task_id();
    rep.task_name = rt_current_task_name();
    rep.worker = rt_current_worker();
    rep.function = function;
    rep.object = object;
    rep.what = what;
    rt_runtime *rt = rt_current_runtime();
    if (rt != NULL)
        rt__report(rt, &rep);
    else
        rt_report_print(&rep, NULL);
}
