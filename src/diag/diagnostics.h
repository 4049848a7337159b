/* The diagnostics layer (src/diag/) as the rest of the library sees it:
 * what rt_runtime_new and rt_runtime_shutdown start and stop, and what its
 * files share. The scheduler and the reactor never call these; they reach
 * the layer only through the hook table of diag_hooks.h. A build without
 * diagnostics (-Ddiagnostics=false) compiles disabled.c instead of the
 * layer: the same entry points, which start nothing and refuse what asks
 * for a diagnostic (-ENOSYS). Internal, not installed. */
#ifndef RT_SRC_DIAGNOSTICS_H
#define RT_SRC_DIAGNOSTICS_H

#include <stdbool.h>
#include <stdint.h>

#include <asyncrt/diag.h>
#include <asyncrt/runtime.h>

struct rt__worker;
struct rt__registry_entry;
struct rt_task;

/* Installs the hook table (diag_hooks.h); every rt_runtime_new calls it
 * first. hooks.c. */
void rt__diag_install(void);

/* The stall watchdog (watchdog.c): started by rt_runtime_new when
 * rt_config.stall_ns (or ASYNCRT_STALL_MS) asks for it; stopped and freed
 * by shutdown. NULL when off. */
struct rt__watchdog;
int rt__watchdog_start(rt_runtime *rt, int64_t stall_ns, struct rt__watchdog **out);
void rt__watchdog_stop(struct rt__watchdog *wd);

/* rt_runtime_tasks; with wait false it gives up with -ESHUTDOWN rather
 * than wait for a shutdown in progress (the reactor's dump). dump.c. */
int rt__runtime_tasks(rt_runtime *rt, rt_task_visit_fn fn, void *arg, bool wait);

/* What a dump says of `t` (spawned at `site`), into *info; false when there
 * is nothing to say (finished and never to be joined). A waiting task is
 * held for the look, and queued if a wake came meanwhile. dump.c. */
bool rt__describe_task(rt_runtime *rt, struct rt_task *t, const char *site, rt_task_info *info,
                       int64_t now);

/* Whether task `t` (a pointer that may be stale: it is only compared) is
 * in a registry of rt; if so takes a reference on it and sets *site to
 * where it was spawned. dump.c, for the watchdog. */
bool rt__find_task_ref(rt_runtime *rt, struct rt_task *t, const char **site);

/* How a kind of task that is no coroutine tells a dump what it waits for
 * (fibers, src/fiber/fiber.c): a dump of a waiting task whose poll function
 * is `poll` calls fn with the task's state while it holds the task, so
 * that it is not polled meanwhile, to fill what *info says of where it
 * waits. Only one kind registers; calls after the first change nothing.
 * Any thread. dump.c (a no-op without diagnostics). */
typedef void (*rt__task_reader_fn)(const void *state, rt_task_info *info);
void rt__diag_task_reader_set(rt_poll_fn poll, rt__task_reader_fn fn);

/* The report_lost hook (diag_hooks.h). dump.c. */
void rt__report_lost(struct rt__worker *w, struct rt__registry_entry *lost, unsigned n);

#endif
