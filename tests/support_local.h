/* What the suites of local tasks and task identity (test_local.c,
 * test_local_ids.c) share: spawn options for a worker index and a name. */
#ifndef RT_TESTS_SUPPORT_LOCAL_H
#define RT_TESTS_SUPPORT_LOCAL_H

#include "support.h"

/* Spawn options with the given worker (an index, RT_WORKER_ANY or
 * RT_WORKER_CURRENT) and name. */
static inline rt_spawn_options options_for(int worker, const char *name)
{
    rt_spawn_options opts;
    rt_spawn_options_init(&opts);
    opts.worker = worker;
    opts.name = name;
    return opts;
}

#endif
