/* Runtime lifecycle: configuration, start-up, shutdown and freeing. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "atomic.h"
#include "blocking.h"
#include "cpus.h"
#include "diagnostics.h"
#include "dump_signal.h"
#include "io_internal.h"
#include "runtime_object.h"
#include "spawning.h"
#include "trace.h"

RT_EXPORT void rt_config_init(rt_config *cfg)
{
    if (cfg == NULL)
        return;
    memset(cfg, 0, sizeof(*cfg));
    cfg->workers = 0;
    cfg->injector_interval = 61;
    cfg->spin_rounds = 2;
    cfg->budget = 128;
    cfg->blocking_threads = 512;
    cfg->blocking_idle_ns = 10 * 1000000000LL;
    cfg->blocking_shutdown_ns = 10 * 1000000000LL;
    cfg->reactor_nap_ns = 500000;
    cfg->dump_fd = 2;
#if defined(__SANITIZE_ADDRESS__)
    cfg->fiber_stack_size = 512 * 1024;
#else
    cfg->fiber_stack_size = 256 * 1024;
#endif
    cfg->fiber_shutdown_ns = 1000000000LL;
}

static bool on_own_worker(const rt_runtime *rt)
{
    rt__worker *w = rt__worker_current();
    return w != NULL && w->rt == rt;
}

static void destroy_shards(rt_runtime *rt, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        pthread_mutex_destroy(&rt->foreign[i].lock);
        free(rt->foreign[i].registry.entries);
        rt__block_cache_clear(&rt->foreign[i].cache);
    }
    free(rt->foreign);
}

/* Frees what rt_runtime_new allocated; the threads are already joined. */
static void destroy(rt_runtime *rt)
{
    destroy_shards(rt, rt->nforeign);
    for (unsigned i = 0; i < rt->nworkers; i++) {
        if (rt->workers[i].inbox_ready)
            rt__injector_destroy(&rt->workers[i].inbox);
        free(rt->workers[i].registry.entries);
        rt__block_cache_clear(&rt->workers[i].own.cache);
    }
    rt__block_pool_detach();
    if (rt->blocking != NULL)
        rt__blocking_pool_release(rt->blocking);
    pthread_mutex_destroy(&rt->io_lock);
    pthread_mutex_destroy(&rt->sleepers_lock);
    pthread_mutex_destroy(&rt->lifecycle_lock);
    rt__injector_destroy(&rt->injector);
    rt__injector_destroy(&rt->wakes);
    free(rt->sleepers);
    free(rt->workers);
    free(rt);
}

static void stop_and_join_workers(rt_runtime *rt)
{
    /* Release pairs with the workers' acquire loads of `closing`. */
    rt__store_release_u32(&rt->closing, 1);
    for (unsigned i = 0; i < rt->threads_started; i++)
        rt__parker_unpark(&rt->workers[i].parker);
    for (unsigned i = 0; i < rt->threads_started; i++)
        pthread_join(rt->workers[i].thread, NULL);
    rt->threads_started = 0;
}

static int init_shards(rt_runtime *rt)
{
    /* Enough foreign shards that a few spawning threads rarely share one. */
    rt->nforeign = rt->nworkers < 4 ? 4 : rt->nworkers;
    rt->foreign = rt__aligned_alloc(RT_CACHELINE, rt->nforeign * sizeof(rt__foreign_shard));
    if (rt->foreign == NULL)
        return -ENOMEM;
    memset(rt->foreign, 0, rt->nforeign * sizeof(rt__foreign_shard));
    for (unsigned i = 0; i < rt->nforeign; i++) {
        rt__block_cache_init(&rt->foreign[i].cache);
        int err = rt__pthread_mutex_init(&rt->foreign[i].lock, NULL);
        if (err != 0) {
            destroy_shards(rt, i);
            return -err;
        }
    }
    return 0;
}

/* ASYNCRT_STALL_MS as nanoseconds, when it holds a positive number of
 * milliseconds; else 0. */
static int64_t stall_ns_from_env(void)
{
#ifdef RT_HAVE_DIAGNOSTICS
    const char *v = getenv("ASYNCRT_STALL_MS");
    if (v == NULL || *v == '\0')
        return 0;
    char *end;
    long long ms = strtoll(v, &end, 10);
    if (*end != '\0' || ms <= 0 || ms > INT64_MAX / 1000000)
        return 0;
    return (int64_t)ms * 1000000;
#else
    return 0; /* no watchdog to start: the variable is for diagnosing */
#endif
}

RT_EXPORT int rt_runtime_new(const rt_config *cfg, rt_runtime **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    rt_config defaults;
    rt_config_init(&defaults);
    if (cfg == NULL)
        cfg = &defaults;
    if (cfg->workers > RT_MAX_WORKERS || cfg->injector_interval == 0 || cfg->spin_rounds == 0 ||
        cfg->blocking_threads == 0 || cfg->blocking_idle_ns <= 0 || cfg->reactor_nap_ns < 0 ||
        cfg->stall_ns < 0 || cfg->poll_timing < 0 || cfg->poll_timing > 1 || cfg->dump_signal < 0 ||
        (cfg->dump_signal > 0 && cfg->dump_fd < 0) || cfg->fiber_shutdown_ns < 0 ||
        cfg->fiber_migrate < 0 || cfg->fiber_migrate > 1 ||
        cfg->fiber_stack_size > ((size_t)1 << 40))
        return -EINVAL;
#ifndef RT_HAVE_DIAGNOSTICS
    /* Built without diagnostics: nothing could do what these ask. */
    if (cfg->stall_ns > 0 || cfg->poll_timing != 0 || cfg->dump_signal > 0)
        return -ENOSYS;
#endif
    rt__diag_install();
    int64_t stall_ns = cfg->stall_ns > 0 ? cfg->stall_ns : stall_ns_from_env();

    rt_runtime *rt = rt__aligned_alloc(RT_CACHELINE, sizeof(*rt));
    if (rt == NULL)
        return -ENOMEM;
    memset(rt, 0, sizeof(*rt));
    rt->config = *cfg;
    const char *migrate = getenv("ASYNCRT_FIBER_MIGRATE");
    if (migrate != NULL && strcmp(migrate, "1") == 0)
        rt->config.fiber_migrate = 1;
    if (rt->config.fiber_stack_size == 0)
        rt->config.fiber_stack_size = defaults.fiber_stack_size;
    rt->fiber_deadline = -1;
    rt->nworkers = cfg->workers != 0 ? cfg->workers : rt__default_workers();
    if (rt->nworkers > RT_MAX_WORKERS)
        rt->nworkers = RT_MAX_WORKERS;
    rt->idle_state = (uint64_t)rt->nworkers * RT__IDLE_UNPARKED_ONE;

    int err = -ENOMEM;
    rt->workers = rt__aligned_alloc(RT_CACHELINE, rt->nworkers * sizeof(rt__worker));
    rt->sleepers = rt__calloc(rt->nworkers, sizeof(unsigned));
    if (rt->workers == NULL || rt->sleepers == NULL)
        goto fail_alloc;
    memset(rt->workers, 0, rt->nworkers * sizeof(rt__worker));
    if ((err = rt__injector_init(&rt->injector)) < 0)
        goto fail_alloc;
    if ((err = rt__injector_init(&rt->wakes)) < 0) {
        rt__injector_destroy(&rt->injector);
        goto fail_alloc;
    }
    if ((err = -rt__pthread_mutex_init(&rt->sleepers_lock, NULL)) < 0)
        goto fail_injector;
    if ((err = -rt__pthread_mutex_init(&rt->lifecycle_lock, NULL)) < 0)
        goto fail_sleepers;
    rt__block_pool_attach();
    if ((err = init_shards(rt)) < 0)
        goto fail_pool;
    if ((err = -rt__pthread_mutex_init(&rt->io_lock, NULL)) < 0)
        goto fail_shards;
    if ((err = rt__blocking_pool_new(cfg, &rt->blocking)) < 0) {
        pthread_mutex_destroy(&rt->io_lock);
        goto fail_shards;
    }

    for (unsigned i = 0; i < rt->nworkers; i++) {
        rt__worker *w = &rt->workers[i];
        rt__deque_init(&w->deque);
        rt__parker_init(&w->parker);
        rt__block_cache_init(&w->own.cache);
        if ((err = rt__injector_init(&w->inbox)) < 0) {
            destroy(rt); /* everything is initialised by now */
            return err;
        }
        w->inbox_ready = true;
        w->rt = rt;
        w->index = i;
        w->own.rng = 0x9e3779b9u * (i + 1);
        w->budget_limit = cfg->budget;
        w->watched = stall_ns > 0;
        w->instrumented = w->watched || cfg->poll_timing != 0;
        w->worker_bits = rt__task_worker_bits(i);
    }
    /* The runtime's threads block SIGPIPE (they inherit the mask): a write
     * to a pipe whose reader is gone returns -EPIPE instead of killing the
     * process. Sockets need no mask: their writes use MSG_NOSIGNAL. */
    sigset_t pipe_only, old_mask;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old_mask);
    rt__reactor_hooks hooks = {
        .rt = rt,
        .task_vtable = &rt__task_waker_vtable,
        .schedule_woken = rt__schedule_woken,
        .every_worker_unparked = rt__every_worker_unparked,
    };
    if ((err = rt__reactor_start(&rt->reactor, cfg->reactor_nap_ns, &hooks)) < 0) {
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        goto fail_io;
    }
    /* Before the workers: it only reads what they write. */
    if (stall_ns > 0 && (err = rt__watchdog_start(rt, stall_ns, &rt->watchdog)) < 0) {
        pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
        rt__reactor_stop(&rt->reactor);
        destroy(rt);
        return err;
    }
    for (unsigned i = 0; i < rt->nworkers; i++) {
        int perr =
            rt__pthread_create(&rt->workers[i].thread, NULL, rt__worker_main, &rt->workers[i]);
        if (perr != 0) {
            pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
            stop_and_join_workers(rt);
            rt__watchdog_stop(rt->watchdog);
            rt__reactor_stop(&rt->reactor);
            destroy(rt);
            return perr == EAGAIN ? -EAGAIN : -perr;
        }
        rt->threads_started++;
        /* Named for top, perf and gdb (at most 15 characters); set here,
         * not by the thread, so the names are in place once we return. */
        char name[32]; /* RT_MAX_WORKERS keeps it under 16 with the NUL */
        snprintf(name, sizeof name, "asyncrt-w%u", i);
        pthread_setname_np(rt->workers[i].thread, name);
    }
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
    /* Last: its listener needs the reactor running. Failing here undoes
     * everything through a shutdown. */
    if (cfg->dump_signal > 0 &&
        (err = rt__dump_trigger_start(rt, cfg->dump_signal, cfg->dump_fd, &rt->dump_trigger)) < 0) {
        rt_runtime_free(rt);
        return err;
    }
    *out = rt;
    return 0;

fail_io:
    rt__blocking_pool_release(rt->blocking);
    pthread_mutex_destroy(&rt->io_lock);
fail_shards:
    destroy_shards(rt, rt->nforeign);
fail_pool:
    rt__block_pool_detach();
    pthread_mutex_destroy(&rt->lifecycle_lock);
fail_sleepers:
    pthread_mutex_destroy(&rt->sleepers_lock);
fail_injector:
    rt__injector_destroy(&rt->injector);
    rt__injector_destroy(&rt->wakes);
fail_alloc:
    free(rt->sleepers);
    free(rt->workers);
    free(rt);
    return err;
}

RT_EXPORT int rt_runtime_shutdown(rt_runtime *rt)
{
    if (rt == NULL)
        return -EINVAL;
    if (on_own_worker(rt) || rt__thread_shutting_down() == rt)
        return -EDEADLK;
    pthread_mutex_lock(&rt->lifecycle_lock);
    if (rt->shut_down) {
        pthread_mutex_unlock(&rt->lifecycle_lock);
        return 0;
    }
    /* Refuse new spawns: a spawn either finds its shard closed or has
     * inserted its task before the shard is walked below. */
    rt__store_release_u32(&rt->closing, 1);
    for (unsigned i = 0; i < rt->nforeign; i++) {
        pthread_mutex_lock(&rt->foreign[i].lock);
        rt->foreign[i].closed = true;
        pthread_mutex_unlock(&rt->foreign[i].lock);
    }
    rt__watchdog_stop(rt->watchdog);
    rt->watchdog = NULL;
    rt__dump_trigger_stop(rt->dump_trigger);
    rt__trace_shutdown(rt);
    stop_and_join_workers(rt);
    /* Fibers run their cleanup in the drops below until this deadline. */
    rt__store_relaxed_u64((uint64_t *)&rt->fiber_deadline,
                          (uint64_t)(rt__now_ns() + rt->config.fiber_shutdown_ns));

    /* Cancel every task that has not finished. The counts stay readable:
     * the registries keep their `spawned` figures. */
    unsigned cancelled = 0;
    rt__set_thread_shutting_down(rt);
    for (unsigned i = 0; i < rt->nworkers; i++)
        cancelled += rt__registry_cancel_all(&rt->workers[i].registry);
    for (unsigned i = 0; i < rt->nforeign; i++) {
        pthread_mutex_lock(&rt->foreign[i].lock);
        cancelled += rt__registry_cancel_all(&rt->foreign[i].registry);
        pthread_mutex_unlock(&rt->foreign[i].lock);
    }
    rt__set_thread_shutting_down(NULL);
    rt__store_relaxed_u64(&rt->shutdown_cancelled, cancelled);
    /* Blocking jobs: the ones not started are cancelled, running ones get
     * until the deadline. Their joiners were cancelled above or are
     * foreign threads, which the cancellation or the result wakes. */
    unsigned abandoned = rt__blocking_pool_shutdown(rt->blocking, rt->config.blocking_shutdown_ns);
    rt__store_relaxed_u64(&rt->blocking_abandoned, abandoned);
    /* The drops above may have closed descriptors and cancelled timers
     * through the reactor. What is still open is closed while the reactor
     * runs (no rt_io can be opened after this), then the reactor stops. */
    rt__io_close_all(rt);
    rt__reactor_stop(&rt->reactor);
    rt__dump_trigger_free(rt->dump_trigger);
    rt->dump_trigger = NULL;
    rt__scheduler_drain(rt);
    rt->shut_down = true;
    pthread_mutex_unlock(&rt->lifecycle_lock);
    return (int)cancelled;
}

RT_EXPORT int rt_runtime_free(rt_runtime *rt)
{
    if (rt == NULL)
        return 0;
    if (on_own_worker(rt) || rt__thread_shutting_down() == rt)
        return -EDEADLK;
    int err = rt_runtime_shutdown(rt);
    if (err < 0)
        return err;
    /* A wake that raced with shutdown may have queued a finished task since. */
    rt__scheduler_drain(rt);
    destroy(rt);
    return 0;
}

RT_EXPORT int rt_block_on_with_site(const char *site, rt_runtime *rt, rt_poll_fn poll,
                                    rt_drop_fn drop, void *state, size_t size, void **value,
                                    int *status)
{
    if (rt == NULL)
        return -EINVAL;
    if (rt__worker_current() != NULL || rt__thread_in_shutdown())
        return -EDEADLK;
    /* Everything the wait needs comes first: once the future is spawned it
     * runs, so nothing after the spawn may fail. */
    rt__thread_waker *tw = rt__thread_waker_new();
    if (tw == NULL)
        return -ENOMEM;
    rt_task *handle;
    int err = rt_spawn_ex_with_site(site, rt, NULL, poll, drop, state, size, &handle);
    /* No limit: the wait itself cannot fail once the waker exists. */
    if (err == 0)
        err = rt__task_wait_with(handle, tw, -1, value, status, state, size);
    rt__thread_waker_release(tw);
    return err;
}
