/* The scheduler's entry points for the layers above it: spawning with a
 * chosen id, and the task waker, which the toolkit compares against to
 * prefetch a task it is about to wake. Internal, not installed. */
#ifndef RT_SRC_SPAWN_H
#define RT_SRC_SPAWN_H

#include <stddef.h>
#include <stdint.h>

#include <asyncrt/future.h>
#include <asyncrt/runtime.h>
#include <asyncrt/task.h>

#include "task_internal.h"

/* The waker of a runtime task: data is the task (spawn.c). */
extern const rt_waker_vtable rt__task_waker_vtable;

/* rt_spawn_ex with the task's id chosen by the caller (from
 * rt__task_new_id; 0: a new one), so that the caller knows it without
 * touching the task, which may be finished and freed by the time the spawn
 * returns; `site` is where the spawn was called ("file:line", a string
 * with static storage, or NULL), for task dumps; on_finish (NULL: none) is
 * told how the task ended, with finish_arg (task_internal.h,
 * rt__task_finish_fn). *handle is written before the task can run. */
/* A yield (the caller returns RT_PENDING next) that requeues the task on
 * the next worker (in index order) instead of this one, unless it is
 * pinned or the only worker: rt_config.fiber_migrate's forced migration.
 * From the task's own poll, with its context. */
void rt__yield_elsewhere(rt_context *cx);

int rt__spawn(rt_runtime *rt, const rt_spawn_options *opts, rt_poll_fn poll, rt_drop_fn drop,
              const void *state, size_t size, rt_task **handle, uint64_t id, const char *site,
              rt__task_finish_fn on_finish, void *finish_arg);

#endif
