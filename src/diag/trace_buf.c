/* The trace recorder's hot path and its start/stop protocol (trace_buf.h
 * explains both). */
#include "trace_buf.h"

#include <errno.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "diag_hooks.h"
#include "fault.h"

/* The recording in progress, valid while rt__trace_active is set; and its
 * generation, which a recorder compares with the one it was classified in
 * before it dereferences the recording. */
static rt__trace_recording *trace_recording;
static uint64_t trace_gen;

/* 1 when recorders must run their own StoreLoad fence because the kernel
 * gives no membarrier (trace_buf.h); decided at each begin, before the
 * recording is published. */
static uint32_t trace_fence;

/* Busy counters of the threads sharing the last track, and of the threads
 * asking the classify function: static, each on its own cache line. */
typedef struct busy_counter {
    uint32_t n;
} RT_ALIGNED_CACHELINE busy_counter;
static busy_counter shared_busy;
static busy_counter classify_busy;

/* The calling thread's track in recording tls_gen (-1: none), whether that
 * track is the shared one, and its busy word when it owns its track. */
static __thread uint64_t tls_gen __attribute__((tls_model("initial-exec")));
static __thread int tls_track __attribute__((tls_model("initial-exec"))) = -1;
static __thread bool tls_shared __attribute__((tls_model("initial-exec")));
static __thread uint32_t tls_busy __attribute__((tls_model("initial-exec")));

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Orders the compiler's view only: the recorder's store of its busy word
 * stays before its load of the flag; the CPU's side is the stopper's
 * membarrier. */
static inline void compiler_barrier(void)
{
    __asm__ __volatile__("" ::: "memory");
}

static long membarrier(int cmd)
{
    return syscall(__NR_membarrier, cmd, 0, 0);
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

/* A track's records are mapped, not allocated: nothing is touched until
 * records fill the pages, and the mapping is aligned to huge pages and
 * advised to use them, so that a recorder takes one page fault per 2 MiB
 * (65536 records) instead of one per 4 KiB where the kernel has
 * transparent huge pages; each 4 KiB fault cost it about 15 ns a record. */
#define HUGE_PAGE ((size_t)2 << 20)

static size_t records_bytes(uint64_t cap)
{
    return ((size_t)cap * sizeof(rt__trace_rec) + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

static rt__trace_rec *map_records(uint64_t cap)
{
    size_t len = records_bytes(cap);
    char *map =
        rt__mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return NULL;
    /* Trim the mapping to `len` bytes starting on a huge page. */
    char *start = (char *)(((uintptr_t)map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (start > map)
        munmap(map, (size_t)(start - map));
    size_t tail = (size_t)(map + len + HUGE_PAGE - (start + len));
    if (tail > 0)
        munmap(start + len, tail);
    (void)madvise(start, len, MADV_HUGEPAGE); /* a hint; without THP, 4 KiB pages */
    return (rt__trace_rec *)start;
}

int rt__trace_recording_new(unsigned ntracks, uint64_t cap, int shared_track,
                            rt__trace_recording **out)
{
    *out = NULL;
    if (ntracks == 0 || ntracks > RT__TRACE_TRACKS_MAX)
        return -EINVAL;
    rt__trace_recording *s = rt__calloc(1, sizeof(*s));
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
        t->recs = map_records(cap);
        if (t->recs == NULL) {
            rt__trace_recording_free(s);
            return -ENOMEM;
        }
    }
    *out = s;
    return 0;
}

void rt__trace_recording_free(rt__trace_recording *s)
{
    if (s == NULL)
        return;
    if (s->tracks != NULL) {
        for (unsigned i = 0; i < s->ntracks; i++)
            if (s->tracks[i].recs != NULL)
                munmap(s->tracks[i].recs, records_bytes(s->tracks[i].cap));
        free(s->tracks);
    }
    free(s);
}

void rt__trace_begin(rt__trace_recording *s)
{
    /* Only the start/stop callers (serialized by their lock) write these.
     * The registration is asked for at every begin, not once, since a
     * forked child may not inherit it; a kernel or a seccomp filter without
     * membarrier makes every recorder fence instead. */
    bool ok = membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0 &&
              membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;
    rt__store_relaxed_u32(&trace_fence, ok ? 0 : 1);
    uint64_t gen = rt__load_relaxed_u64(&trace_gen) + 1;
    s->gen = gen;
    s->start_ns = mono_ns();
    /* Release: the recording's contents, trace_fence and the generation come
     * before the flag; recorders load the flag with acquire first. */
    rt__store_release_ptr((void **)&trace_recording, s);
    rt__store_release_u64(&trace_gen, gen);
    rt__store_seq_cst_u32(&rt__trace_active, 1);
}

static void wait_idle(const uint32_t *busy)
{
    /* Acquire: pairs with the release that cleared it, so that what its
     * recorder wrote is the stopper's to read once it reads 0. */
    for (unsigned spins = 0; rt__load_acquire_u32(busy) != 0; spins++) {
        if (spins < 64)
            rt__cpu_relax();
        else
            sched_yield(); /* the recorder inside was preempted */
    }
}

void rt__trace_end(rt__trace_recording *s)
{
    /* The stopper's half of the Dekker pair (trace_buf.h): the flag's
     * store, then a StoreLoad barrier on every thread (the seq_cst store
     * has the stopper's own), then the busy words. */
    rt__store_seq_cst_u32(&rt__trace_active, 0);
    if (rt__load_relaxed_u32(&trace_fence) == 0)
        (void)membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED); /* it worked at begin */
    RT__DEBUG_YIELD(); /* recorders may be entering right here */
    wait_idle(&classify_busy.n);
    wait_idle(&shared_busy.n);
    for (unsigned i = 0; i < s->ntracks; i++) {
        uint64_t owner = rt__load_acquire_u64(&s->tracks[i].owner_busy);
        if (owner != 0)
            wait_idle((const uint32_t *)(uintptr_t)owner);
    }
    rt__store_release_ptr((void **)&trace_recording, NULL);
    s->stop_ns = mono_ns();
}

/* Asks the recording which track the calling thread records into, caches the
 * answer, and registers the thread's busy word in a track it owns. Under
 * classify_busy (a counter: any number of threads may be here). */
static void classify_thread(int worker)
{
    rt__faa_u32(&classify_busy.n, 1);
    RT__DEBUG_YIELD();
    if (rt__load_seq_cst_u32(&rt__trace_active) != 0) {
        rt__trace_recording *s = rt__load_acquire_ptr((void *const *)&trace_recording);
        int track = s->classify(s->ctx, worker);
        bool shared = false;
        if (track < 0 || (unsigned)track >= s->ntracks) {
            track = -1;
        } else if (s->tracks[track].shared) {
            shared = true;
        } else {
            /* One owner per track; a second claimant (no such thread
             * exists) would record nothing rather than share a word. */
            uint64_t mine = (uint64_t)(uintptr_t)&tls_busy;
            uint64_t expected = 0;
            if (!rt__cas_u64(&s->tracks[track].owner_busy, &expected, mine) && expected != mine)
                track = -1;
        }
        tls_track = track;
        tls_shared = shared;
        tls_gen = s->gen;
    }
    rt__faa_u32(&classify_busy.n, (uint32_t)-1);
}

static void write_rec(rt__trace_rec *r, uint32_t type, uint64_t task, int worker, uint64_t arg)
{
    r->ts_ns = (uint64_t)mono_ns();
    r->task = task;
    r->arg = arg;
    r->worker = worker;
    r->type = type;
}

/* The threads that share a track: a fetch-add reserves the slot. */
static void record_shared(uint64_t gen, int track, uint32_t type, uint64_t task, int worker,
                          uint64_t arg)
{
    rt__faa_u32(&shared_busy.n, 1); /* a full barrier: the Dekker pair's */
    RT__DEBUG_YIELD();
    if (rt__load_seq_cst_u32(&rt__trace_active) != 0 && rt__load_acquire_u64(&trace_gen) == gen) {
        rt__trace_recording *s = rt__load_acquire_ptr((void *const *)&trace_recording);
        rt__trace_track *t = &s->tracks[track];
        uint64_t i = rt__faa_u64(&t->len, 1);
        if (i < t->cap)
            write_rec(&t->recs[i], type, task, worker, arg);
        else
            rt__faa_u64(&t->dropped, 1);
    }
    /* A full-barrier RMW, so a release: pairs with wait_idle's acquire. */
    rt__faa_u32(&shared_busy.n, (uint32_t)-1);
}

void rt__trace_record(uint32_t type, uint64_t task, int worker, uint64_t arg)
{
    /* Acquire: trace_fence and the generation were stored before the flag. */
    if (rt__load_acquire_u32(&rt__trace_active) == 0)
        return;
    if (tls_gen != rt__load_relaxed_u64(&trace_gen))
        classify_thread(worker);
    int track = tls_track;
    if (track < 0)
        return;
    uint64_t gen = tls_gen;
    if (tls_shared) {
        record_shared(gen, track, type, task, worker, arg);
        return;
    }
    /* The owner of its track: no other thread writes tls_busy or the track. */
    rt__store_relaxed_u32(&tls_busy, 1);
    if (rt__unlikely(rt__load_relaxed_u32(&trace_fence) != 0))
        rt__fence_store_load();
    else
        compiler_barrier();
    RT__DEBUG_YIELD(); /* a stop may clear the flag right here */
    if (rt__load_acquire_u32(&rt__trace_active) != 0 && rt__load_relaxed_u64(&trace_gen) == gen) {
        rt__trace_recording *s = rt__load_acquire_ptr((void *const *)&trace_recording);
        rt__trace_track *t = &s->tracks[track];
        uint64_t i = rt__load_relaxed_u64(&t->len);
        if (i < t->cap) {
            write_rec(&t->recs[i], type, task, worker, arg);
            rt__store_relaxed_u64(&t->len, i + 1);
        } else {
            rt__stat_add(&t->dropped, 1);
        }
    }
    /* Release: pairs with wait_idle's acquire. */
    rt__store_release_u32(&tls_busy, 0);
}
