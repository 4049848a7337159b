/* Black-box tests of the reactor's nap (rt_config.reactor_nap_ns and
 * rt_metrics' reactor_naps): a worker that parks ends the reactor's nap,
 * naps that run to their end shrink beside a worker that never parks, and a
 * nap of zero turns naps off. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>

#include <asyncrt.h>

#include "support.h"
#include "support_io.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

TestSuite(io, .timeout = 110, .fini = fail_on_leaks);

/* ---- the reactor's nap ends when a worker parks ----------------------------- */

/* Pipes written in one burst, so that a reactor turn collects several events. */
#define NAP_PIPES 8
/* Rounds at most before the test gives up waiting for the reactor to nap. */
#define NAP_ROUNDS_MAX 300

/* Every byte a nap reader reads. */
static struct event nap_reads = EVENT_INIT;

struct nap_holder {
    rt_runtime *rt;
    uint64_t io_events; /* the reactor's event count to wait for */
    uint64_t naps;      /* ... or its nap count */
};

/* Holds the only worker, busy, until the reactor has collected every event of
 * the burst or has napped (holding the rest back): the reactor's turns see
 * every worker busy meanwhile. Returns 0, or -ETIMEDOUT after 20 s. */
static rt_poll nap_holder_poll(void *state, rt_context *cx, void **out)
{
    (void)cx;
    const struct nap_holder *h = state;
    int64_t give_up = rt_now_ns() + 20 * SEC;
    for (;;) {
        rt_metrics m;
        cr_assert_eq(rt_metrics_read(h->rt, &m, sizeof m), 0);
        if (m.reactor_io_events >= h->io_events || m.reactor_naps >= h->naps)
            break;
        if (rt_now_ns() > give_up) {
            *out = (void *)(intptr_t)-ETIMEDOUT;
            return RT_READY;
        }
    }
    *out = NULL;
    return RT_READY;
}

/* NAP_PIPES pipes, each with a nap reader on its read end. */
static void start_nap_readers(rt_runtime *rt, int fds[NAP_PIPES][2], rt_io *ends[NAP_PIPES],
                              rt_task *readers[NAP_PIPES])
{
    for (int i = 0; i < NAP_PIPES; i++) {
        make_pipe(fds[i]);
        cr_assert_eq(rt_io_open(rt, fds[i][0], &ends[i]), 0);
        struct drain_reader r = {.io = ends[i], .each_byte = &nap_reads};
        cr_assert_eq(RT_SPAWN_STATE(rt, drain_reader_poll, NULL, &r, &readers[i]), 0);
    }
}

/* A runtime with one worker and naps of `nap_ns`. */
static rt_runtime *new_napping_runtime(int64_t nap_ns)
{
    rt_config cfg;
    rt_config_init(&cfg);
    cfg.workers = 1;
    cfg.reactor_nap_ns = nap_ns;
    rt_runtime *rt = NULL;
    cr_assert_eq(rt_runtime_new(&cfg, &rt), 0);
    return rt;
}

/* With naps as long as an hour, only a parking worker's kick ends them: if
 * it is lost, the rest of a burst, or the next burst, is never collected.
 * Each round holds the worker busy while a burst of single bytes arrives on
 * NAP_PIPES pipes, then lets it run the readers and park. */
Test(io, a_worker_that_parks_ends_the_reactors_nap)
{
    rt_runtime *rt = new_napping_runtime(3600 * SEC);
    int fds[NAP_PIPES][2];
    rt_io *ends[NAP_PIPES];
    rt_task *readers[NAP_PIPES];
    start_nap_readers(rt, fds, ends, readers);
    unsigned long bytes = 0;
    uint64_t naps_verified = 0; /* naps followed by a whole round */
    for (int round = 0; round < NAP_ROUNDS_MAX && naps_verified < 3; round++) {
        rt_metrics m;
        cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
        uint64_t naps_before = m.reactor_naps;
        struct nap_holder h = {
            .rt = rt, .io_events = m.reactor_io_events + NAP_PIPES, .naps = naps_before + 1};
        rt_task *holder = NULL;
        cr_assert_eq(RT_SPAWN_STATE(rt, nap_holder_poll, NULL, &h, &holder), 0);
        for (int i = 0; i < NAP_PIPES; i++)
            cr_assert_eq(write(fds[i][1], "x", 1), 1);
        bytes += NAP_PIPES;
        void *value = NULL;
        cr_assert_eq(task_wait_status(holder, WAIT_DEADLINE_NS, &value), 0);
        rt_metrics after;
        cr_assert_eq(rt_metrics_read(rt, &after, sizeof after), 0);
        cr_assert_null(value,
                       "round %d: the reactor neither collected the burst nor napped (events "
                       "%llu -> %llu, naps %llu -> %llu)",
                       round, (unsigned long long)m.reactor_io_events,
                       (unsigned long long)after.reactor_io_events, (unsigned long long)naps_before,
                       (unsigned long long)after.reactor_naps);
        /* After a nap, the rest of the burst is collected only once the
         * worker, out of work, ends the nap. */
        cr_assert(event_wait_for(&nap_reads, bytes), "round %d: %lu of %lu bytes read", round,
                  event_count(&nap_reads), bytes);
        /* A worker that takes the next holder without parking first is
         * busy, and the reactor rightly naps on: the round ends with the
         * worker parked, which must have ended any nap. */
        cr_assert(wait_all_workers_parked(rt), "round %d: the worker never parked", round);
        naps_verified = naps_before;
    }
    cr_assert_geq(naps_verified, 1, "the reactor never napped in %d rounds", NAP_ROUNDS_MAX);
    for (int i = 0; i < NAP_PIPES; i++) {
        cr_assert_eq(close(fds[i][1]), 0);
        void *value = (void *)1;
        cr_assert_eq(task_wait_status(readers[i], WAIT_DEADLINE_NS, &value), 0);
        cr_assert_eq((intptr_t)value, 0, "reader %d: %ld", i, (long)(intptr_t)value);
        cr_assert_eq(rt_io_close(ends[i]), 0);
    }
    finish_runtime(rt, 0);
}

/* Keeps the only worker busy in polls of 100 us until `stop` is set: the
 * worker never parks meanwhile, so no nap is ended early. */
struct nap_spinner {
    rt_coro co;
    atomic_bool *stop;
};

static rt_poll nap_spinner_poll(void *state, rt_context *cx, void **out)
{
    struct nap_spinner *s = state;
    RT_CORO_BEGIN(&s->co);
    while (!atomic_load(s->stop)) {
        for (int64_t until = rt_now_ns() + 100000; rt_now_ns() < until;)
            ;
        RT_CORO_YIELD(&s->co, cx);
    }
    RT_RETURN(&s->co, out, NULL);
    RT_CORO_END(&s->co, out);
}

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#define SHRINK_NAP_NS (100 * MS)
/* Naps before the rounds are timed, timed rounds, and rounds at most. On a
 * loaded 2-CPU machine most bursts can arrive one event per reactor turn,
 * which never naps: 400 rounds once yielded only 18 that napped. A round
 * that does not nap takes well under a millisecond, so the generous bound
 * costs little and changes nothing about what is checked. */
#define SHRINK_NAPS 8
#define SHRINK_TIMED 20
#define SHRINK_ROUNDS_MAX 4000

/* A nap that runs to its end halves the next one (reactor.c, "Naps"). Beside
 * a task that keeps the only worker busy, so that no nap ends early, naps of
 * 100 ms shrink to a few tens of microseconds within a dozen, and bursts of
 * bytes stop waiting for them. Were every nap as long as
 * rt_config.reactor_nap_ns, each round that napped would take 100 ms. The
 * check is on the median of 20 such rounds, so that a few rounds stalled by
 * a loaded machine (this suite runs beside others) do not fail it. */
Test(io, naps_that_run_to_their_end_shrink_beside_a_worker_that_never_parks)
{
    rt_runtime *rt = new_napping_runtime(SHRINK_NAP_NS);
    int fds[NAP_PIPES][2];
    rt_io *ends[NAP_PIPES];
    rt_task *readers[NAP_PIPES];
    start_nap_readers(rt, fds, ends, readers);
    static atomic_bool stop;
    atomic_store(&stop, false);
    struct nap_spinner sp = {.stop = &stop};
    rt_task *spinner = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, nap_spinner_poll, NULL, &sp, &spinner), 0);
    rt_metrics before;
    cr_assert_eq(rt_metrics_read(rt, &before, sizeof before), 0);
    unsigned long bytes = event_count(&nap_reads);
    /* Bursts until the reactor has napped SHRINK_NAPS times (halving each
     * time a nap ran to its end: 100 ms down to under 1 ms), then until
     * SHRINK_TIMED rounds that included a nap have been timed. A round
     * without a nap proves nothing (a loaded machine may deliver a burst one
     * event per turn) and is not timed. */
    int64_t timed[SHRINK_TIMED];
    int ntimed = 0;
    for (int round = 0; round < SHRINK_ROUNDS_MAX && ntimed < SHRINK_TIMED; round++) {
        rt_metrics m;
        cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
        int64_t start = rt_now_ns();
        for (int i = 0; i < NAP_PIPES; i++)
            cr_assert_eq(write(fds[i][1], "x", 1), 1);
        bytes += NAP_PIPES;
        cr_assert(event_wait_for(&nap_reads, bytes), "round %d: %lu of %lu bytes read", round,
                  event_count(&nap_reads), bytes);
        int64_t took = rt_now_ns() - start;
        rt_metrics after;
        cr_assert_eq(rt_metrics_read(rt, &after, sizeof after), 0);
        if (m.reactor_naps - before.reactor_naps >= SHRINK_NAPS &&
            after.reactor_naps > m.reactor_naps)
            timed[ntimed++] = took;
    }
    atomic_store(&stop, true);
    cr_assert_eq(task_wait_status(spinner, WAIT_DEADLINE_NS, NULL), 0);
    cr_assert_eq(ntimed, SHRINK_TIMED, "only %d rounds of %d napped after the first %d naps",
                 ntimed, SHRINK_ROUNDS_MAX, SHRINK_NAPS);
    qsort(timed, SHRINK_TIMED, sizeof timed[0], compare_i64);
    int64_t median = timed[SHRINK_TIMED / 2];
    cr_assert_lt(median, SHRINK_NAP_NS / 2, "rounds with a nap took %lld us at the median",
                 (long long)(median / 1000));
    for (int i = 0; i < NAP_PIPES; i++) {
        cr_assert_eq(close(fds[i][1]), 0);
        cr_assert_eq(task_wait_status(readers[i], WAIT_DEADLINE_NS, NULL), 0);
        cr_assert_eq(rt_io_close(ends[i]), 0);
    }
    finish_runtime(rt, 0);
}

/* With naps off, a busy worker never makes the reactor nap. */
Test(io, a_reactor_nap_of_zero_turns_naps_off)
{
    rt_runtime *rt = new_napping_runtime(0);
    int fds[NAP_PIPES][2];
    rt_io *ends[NAP_PIPES];
    for (int i = 0; i < NAP_PIPES; i++) {
        make_pipe(fds[i]);
        cr_assert_eq(rt_io_open(rt, fds[i][0], &ends[i]), 0);
    }
    rt_metrics m;
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    struct nap_holder h = {.rt = rt, .io_events = m.reactor_io_events + NAP_PIPES, .naps = 1};
    rt_task *holder = NULL;
    cr_assert_eq(RT_SPAWN_STATE(rt, nap_holder_poll, NULL, &h, &holder), 0);
    for (int i = 0; i < NAP_PIPES; i++)
        cr_assert_eq(write(fds[i][1], "x", 1), 1);
    void *value = NULL;
    cr_assert_eq(task_wait_status(holder, WAIT_DEADLINE_NS, &value), 0);
    cr_assert_null(value, "the reactor did not collect the burst");
    cr_assert_eq(rt_metrics_read(rt, &m, sizeof m), 0);
    cr_assert_eq(m.reactor_naps, 0);
    cr_assert_geq(m.reactor_io_events, NAP_PIPES);
    for (int i = 0; i < NAP_PIPES; i++) {
        cr_assert_eq(rt_io_close(ends[i]), 0);
        cr_assert_eq(close(fds[i][1]), 0);
    }
    finish_runtime(rt, 0);
}
