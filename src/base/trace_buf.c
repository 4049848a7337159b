/* The trace recorder's hot path and its start/stop protocol (trace_buf.h
 * explains both). */
#include "trace_buf.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "atomic.h"
#include "fault.h"

uint32_t rt__trace_active;

/* The session that records, valid while rt__trace_active is set; and the
 * generation of the last session begun, a hint that lets a thread see
 * without any protection that its cached track is from an older session. */
static rt__trace_session *trace_session;
static uint64_t trace_gen;

/* The busy counters of trace_buf.h, one per track index, each on its own
 * cache line, plus one for threads asking the classify function. */
typedef struct busy_counter {
    uint32_t n;
} RT_ALIGNED_CACHELINE busy_counter;
static busy_counter track_busy[RT__TRACE_TRACKS_MAX];
static busy_counter classify_busy;

/* The calling thread's track in session tls_gen (-1: none). */
static __thread uint64_t tls_gen __attribute__((tls_model("initial-exec")));
static __thread int tls_track __attribute__((tls_model("initial-exec"))) = -1;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint64_t rt__trace_records_per_track(void)
{
    const char *v = secure_getenv("ASYNCRT_TRACE_EVENTS");
    if (v == NULL || *v == '\0')
        return RT__TRACE_RECORDS_DEFAULT;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < RT__TRACE_RECORDS_MIN || n > RT__TRACE_RECORDS_MAX)
        return RT__TRACE_RECORDS_DEFAULT;
    return n;
}

int rt__trace_session_new(unsigned ntracks, uint64_t cap, int shared_track, rt__trace_session **out)
{
    *out = NULL;
    if (ntracks == 0 || ntracks > RT__TRACE_TRACKS_MAX)
        return -EINVAL;
    rt__trace_session *s = rt__calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->ntracks = ntracks;
    s->tracks = rt__aligned_alloc(RT_CACHELINE, ntracks * sizeof(rt__trace_track));
    if (s->tracks == NULL) {
        free(s);
        return -ENOMEM;
    }
    memset(s->tracks, 0, ntracks * sizeof(rt__trace_track));
    for (unsigned i = 0; i < ntracks; i++) {
        rt__trace_track *t = &s->tracks[i];
        t->cap = cap;
        t->shared = (int)i == shared_track;
        /* Not zeroed: the pages are only touched as records fill them. */
        t->recs = rt__malloc(cap * sizeof(rt__trace_rec));
        if (t->recs == NULL) {
            rt__trace_session_free(s);
            return -ENOMEM;
        }
    }
    *out = s;
    return 0;
}

void rt__trace_session_free(rt__trace_session *s)
{
    if (s == NULL)
        return;
    if (s->tracks != NULL) {
        for (unsigned i = 0; i < s->ntracks; i++)
            free(s->tracks[i].recs);
        free(s->tracks);
    }
    free(s);
}

void rt__trace_begin(rt__trace_session *s)
{
    /* Only the start/stop callers (serialized by their lock) write these. */
    uint64_t gen = rt__load_relaxed_u64(&trace_gen) + 1;
    s->gen = gen;
    s->start_ns = mono_ns();
    /* Release: the session's contents before its pointer; the seq_cst store
     * of the flag below follows both, and recorders load the pointer with
     * acquire only after loading the flag (trace_buf.h). */
    rt__store_release_ptr((void **)&trace_session, s);
    rt__store_release_u64(&trace_gen, gen);
    rt__store_seq_cst_u32(&rt__trace_active, 1);
}

static void wait_idle(uint32_t *busy)
{
    /* Acquire: pairs with the release in each recorder's decrement, so that
     * what it wrote is the stopper's to read once the count reads 0. */
    for (unsigned spins = 0; rt__load_seq_cst_u32(busy) != 0; spins++) {
        if (spins < 64)
            rt__cpu_relax();
        else
            sched_yield(); /* the recorder inside was preempted */
    }
}

void rt__trace_end(rt__trace_session *s)
{
    /* The stopper's half of the Dekker pair (trace_buf.h): the flag's store
     * is followed by a StoreLoad fence before the counters are read. */
    rt__store_seq_cst_u32(&rt__trace_active, 0);
    wait_idle(&classify_busy.n);
    /* Every counter, not only the session's tracks: a thread whose cached
     * track is from an older, larger session may be reading this one. */
    for (unsigned i = 0; i < RT__TRACE_TRACKS_MAX; i++)
        wait_idle(&track_busy[i].n);
    rt__store_release_ptr((void **)&trace_session, NULL);
    s->stop_ns = mono_ns();
}

/* Asks the session which track the calling thread records into, and caches
 * the answer; protected by classify_busy as a record is by its track's. */
static void classify_thread(int worker)
{
    rt__faa_u32(&classify_busy.n, 1);
    if (rt__load_seq_cst_u32(&rt__trace_active) != 0) {
        rt__trace_session *s = rt__load_acquire_ptr((void *const *)&trace_session);
        int track = s->classify(s->ctx, worker);
        tls_track = track >= 0 && (unsigned)track < s->ntracks ? track : -1;
        tls_gen = s->gen;
    }
    rt__faa_u32(&classify_busy.n, (uint32_t)-1);
}

static void append(rt__trace_track *t, uint32_t type, uint64_t task, int worker, uint64_t arg)
{
    uint64_t i;
    if (t->shared) {
        i = rt__faa_u64(&t->len, 1);
        if (i >= t->cap) {
            rt__faa_u64(&t->dropped, 1);
            return;
        }
    } else {
        i = rt__load_relaxed_u64(&t->len);
        if (i >= t->cap) {
            rt__stat_add(&t->dropped, 1);
            return;
        }
    }
    rt__trace_rec *r = &t->recs[i];
    r->ts_ns = (uint64_t)mono_ns();
    r->task = task;
    r->arg = arg;
    r->worker = worker;
    r->type = type;
    if (!t->shared)
        rt__store_relaxed_u64(&t->len, i + 1);
}

void rt__trace_record(uint32_t type, uint64_t task, int worker, uint64_t arg)
{
    if (tls_gen != rt__load_relaxed_u64(&trace_gen))
        classify_thread(worker);
    int track = tls_track;
    if (track < 0)
        return;
    uint64_t gen = tls_gen;
    uint32_t *busy = &track_busy[track].n;
    rt__faa_u32(busy, 1);
    if (rt__load_seq_cst_u32(&rt__trace_active) != 0) {
        rt__trace_session *s = rt__load_acquire_ptr((void *const *)&trace_session);
        /* A session begun since this thread's classification gets nothing
         * from it until the thread asks again (its next event). */
        if (s->gen == gen)
            append(&s->tracks[track], type, task, worker, arg);
    }
    /* A full-barrier RMW, so a release: pairs with wait_idle's acquire. */
    rt__faa_u32(busy, (uint32_t)-1);
}
