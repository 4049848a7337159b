/* Spawning into a group with an id the caller chose: for spawners that
 * must know the child's id before it can run (a fiber keeps it for its
 * overflow report). Internal, not installed. */
#ifndef RT_SRC_TOOLKIT_GROUP_SPAWN_H
#define RT_SRC_TOOLKIT_GROUP_SPAWN_H

#include <stddef.h>
#include <stdint.h>

#include <asyncrt/group.h>

/* rt_group_spawn_with_site with the child's task id given (from
 * rt__task_new_id). Same errors and threads. */
int rt__group_spawn_as(const char *site, rt_group *g, const rt_spawn_options *opts, rt_poll_fn poll,
                       rt_drop_fn drop, const void *state, size_t size, uint64_t id);

/* The runtime the group's children run on. */
rt_runtime *rt__group_runtime(const rt_group *g);

#endif
