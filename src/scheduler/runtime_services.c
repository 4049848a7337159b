/* What the layers above the scheduler ask of a runtime; see
 * runtime_services.h. */
#include "runtime_services.h"

#include <errno.h>
#include <pthread.h>

#include "atomic.h"
#include "readiness.h"
#include "runtime_object.h"

rt__reactor *rt__runtime_reactor(rt_runtime *rt)
{
    return &rt->reactor;
}

bool rt__runtime_closing(rt_runtime *rt)
{
    /* Pairs with the release store of rt_runtime_shutdown. */
    return rt__load_acquire_u32(&rt->closing) != 0;
}

int rt__runtime_io_track(rt_runtime *rt, struct rt_io *io, int fd, uint32_t events)
{
    pthread_mutex_lock(&rt->io_lock);
    if (rt->io_closed) {
        pthread_mutex_unlock(&rt->io_lock);
        return -ESHUTDOWN;
    }
    /* Watched under the lock: a shutdown that takes the list after this
     * returns sees io on it and closes it, one before never lets it in. */
    int err = rt__reactor_watch(&rt->reactor, fd, events, io);
    if (err < 0) {
        pthread_mutex_unlock(&rt->io_lock);
        return err;
    }
    io->prev = NULL;
    io->next = rt->io_list;
    if (rt->io_list != NULL)
        rt->io_list->prev = io;
    rt->io_list = io;
    pthread_mutex_unlock(&rt->io_lock);
    return 0;
}

void rt__runtime_io_untrack(rt_runtime *rt, struct rt_io *io)
{
    pthread_mutex_lock(&rt->io_lock);
    if (io->prev != NULL)
        io->prev->next = io->next;
    else
        rt->io_list = io->next;
    if (io->next != NULL)
        io->next->prev = io->prev;
    pthread_mutex_unlock(&rt->io_lock);
}

struct rt_io *rt__runtime_io_take_all(rt_runtime *rt)
{
    pthread_mutex_lock(&rt->io_lock);
    rt->io_closed = true;
    struct rt_io *io = rt->io_list;
    rt->io_list = NULL;
    pthread_mutex_unlock(&rt->io_lock);
    return io;
}

bool rt__runtime_io_accepted(rt_runtime *rt)
{
    pthread_mutex_lock(&rt->io_lock);
    bool open = !rt->io_closed;
    pthread_mutex_unlock(&rt->io_lock);
    return open;
}

rt__worker *rt__runtime_worker(rt_runtime *rt, unsigned index)
{
    return &rt->workers[index];
}

unsigned rt__runtime_foreign_shards(rt_runtime *rt)
{
    return rt->nforeign;
}

rt__foreign_shard *rt__runtime_foreign_shard(rt_runtime *rt, unsigned index)
{
    return &rt->foreign[index];
}

pthread_mutex_t *rt__runtime_lifecycle_lock(rt_runtime *rt)
{
    return &rt->lifecycle_lock;
}

bool rt__runtime_shut_down(rt_runtime *rt)
{
    return rt->shut_down;
}

size_t rt__runtime_fiber_stack_size(rt_runtime *rt)
{
    return rt->config.fiber_stack_size;
}

bool rt__runtime_fiber_migrate(rt_runtime *rt)
{
    return rt->config.fiber_migrate != 0;
}

int64_t rt__runtime_fiber_deadline(rt_runtime *rt)
{
    /* Written by shutdown before it drops any task, on the thread that
     * drops them; a worker's cancel reads -1 (relaxed: nothing is
     * published through it). */
    return (int64_t)rt__load_relaxed_u64((uint64_t *)&rt->fiber_deadline);
}

void rt__runtime_count_fiber_abandoned(rt_runtime *rt)
{
    rt__faa_u64(&rt->fibers_abandoned, 1);
}

void rt__runtime_note_fiber_depth(rt_runtime *rt, uint64_t depth)
{
    /* A maximum, relaxed: nothing is published through it, and the common
     * case (not deeper than before) is one load. */
    uint64_t seen = rt__load_relaxed_u64(&rt->fiber_stack_deepest);
    while (depth > seen && !rt__cas_u64(&rt->fiber_stack_deepest, &seen, depth)) {
    }
}

void rt__runtime_count_stall(rt_runtime *rt)
{
    /* A relaxed add of the one writer; rt_metrics_read reads it relaxed. */
    rt__stat_add(&rt->stalls, 1);
}
