/* The trace recorder's buffers: what rt__trace_record (the trace_record
 * hook of diag_hooks.h, which events.h calls) writes into while a trace
 * records, and how a trace starts and stops without
 * stopping the threads that record. It knows no runtime: which buffer
 * ("track") a thread writes to is decided by a function the layer above
 * installs (rt__trace_recording.classify), asked once per thread and trace.
 *
 * Buffers. A recording has one track per worker, one for the reactor and one
 * shared by every other thread; the caller sizes them. Each track is a
 * fixed array of records mapped when the recording is made (its pages are
 * touched only as records fill them); a thread whose track is full stops
 * recording and counts what it drops. Nothing on the recording path
 * allocates, takes a lock or waits. A track that one thread writes (a
 * worker, the reactor) appends with plain stores; the shared track
 * reserves a slot with a fetch-add.
 *
 * Starting and stopping (the flag protocol). rt__trace_active says whether
 * a trace is being recorded. Each recorder announces that it may be using the
 * recording in a busy word before it looks at the flag, and the stopper
 * clears the flag before it waits for every busy word to read 0:
 *
 *   recorder                          stopper (rt__trace_end)
 *   busy = 1                          active = 0
 *   StoreLoad barrier (see below)     StoreLoad barrier (see below)
 *   if (active && gen is its own)     wait until every busy word == 0
 *       write into the recording        the recording is now the stopper's:
 *   busy = 0            (release)     read the records, free the buffers
 *
 * This is a Dekker pair: a recorder whose busy = 1 the stopper missed sees
 * active == 0 and touches nothing of the recording; one that saw active == 1
 * is waited for. The release that clears busy pairs with the stopper's
 * acquire load that reads 0, so every record written is visible to it.
 *
 * Which busy word: a worker or the reactor (a thread that owns its track)
 * uses a thread-local word, registered in its track when the thread is
 * first classified, and plain stores: its side of the StoreLoad barrier is
 * the stopper's membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), which runs a
 * full barrier on every thread of the process, so recording costs no
 * locked instruction. Where the kernel refuses membarrier, recorders run a
 * real fence instead (trace_fence). The threads sharing the last track
 * count themselves in one static counter with fetch-adds (full barriers),
 * and threads asking the classify function in another. The counters are
 * static and the thread-local words outlive every recording their threads
 * record in (the workers and the reactor outlive the trace, which
 * shutdown stops first), so a recorder may touch its word after the
 * recording it read has gone; it dereferences the recording only after
 * checking, under its busy word, that the recording is the one it was
 * classified in (the generation, in static storage).
 *
 * The recording is published by a release store of its pointer and of its
 * generation before the store that sets active; a recorder loads active
 * with acquire before it reads either.
 *
 * So a stop first stops recording (every thread sees active == 0 from its
 * next event on, and the stopper waits out the few that were inside), then
 * the stopped recording is written at leisure, while the threads keep
 * running. Internal, not installed. */
#ifndef RT_SRC_TRACE_BUF_H
#define RT_SRC_TRACE_BUF_H

#include <stdbool.h>
#include <stdint.h>

#include <asyncrt/runtime.h>

#include "common.h"
#include "events.h"

/* One event: 32 bytes. */
typedef struct rt__trace_rec {
    uint64_t ts_ns; /* CLOCK_MONOTONIC */
    uint64_t task;  /* task id, 0 when the event has none */
    uint64_t arg;   /* events.h: the event's extra integer */
    int32_t worker; /* as the event site passed it (events.h) */
    uint32_t type;  /* enum rt__ev_type */
} rt__trace_rec;

/* Tracks a recording may have: every worker, the reactor, the other threads. */
#define RT__TRACE_TRACKS_MAX (RT_MAX_WORKERS + 2)

/* Records per track unless ASYNCRT_TRACE_EVENTS says otherwise, and the
 * bounds of that variable. */
#define RT__TRACE_RECORDS_DEFAULT (1u << 18)
#define RT__TRACE_RECORDS_MIN 16u
#define RT__TRACE_RECORDS_MAX (1u << 26)

typedef struct rt__trace_track {
    rt__trace_rec *recs;
    uint64_t cap;
    /* Records written (single writer: stored relaxed by its thread), or
     * slots reserved, possibly past cap (shared: fetch-add). */
    uint64_t len;
    /* Events not recorded because the track was full. */
    uint64_t dropped;
    bool shared; /* several threads write it */
    /* The address of the owning thread's busy word (a single-writer
     * track), 0 until that thread's first event in the recording. */
    uint64_t owner_busy;
    char name[32];
} RT_ALIGNED_CACHELINE rt__trace_track;

/* Returns the track the calling thread records into for this recording
 * (0 .. ntracks - 1), or -1 when it records nothing. `worker` is what the
 * thread's first event passed (events.h). Called once per thread and
 * recording, with the recording protected as for a record. */
typedef int (*rt__trace_classify_fn)(void *ctx, int worker);

typedef struct rt__trace_recording {
    uint64_t gen;     /* set by rt__trace_begin: unique per recording */
    int64_t start_ns; /* CLOCK_MONOTONIC at begin */
    int64_t stop_ns;  /* at end */
    unsigned ntracks;
    rt__trace_track *tracks;
    rt__trace_classify_fn classify;
    void *ctx;
} rt__trace_recording;

/* Records per track for a new recording: ASYNCRT_TRACE_EVENTS when it is a
 * number in [RT__TRACE_RECORDS_MIN, RT__TRACE_RECORDS_MAX], else the
 * default. */
uint64_t rt__trace_records_per_track(void);

/* Makes a recording of `ntracks` tracks (at most RT__TRACE_TRACKS_MAX) of
 * `cap` records each; track `shared_track` (or none: -1) is the shared one.
 * The buffers are mapped, not touched. Returns 0, -EINVAL (ntracks out of
 * range) or -ENOMEM. */
int rt__trace_recording_new(unsigned ntracks, uint64_t cap, int shared_track,
                            rt__trace_recording **out);
/* Frees a recording that is not in progress (never begun, or ended). */
void rt__trace_recording_free(rt__trace_recording *s);

/* Starts recording into `s` (classify and ctx set). The caller makes sure
 * that no other recording is in progress (the public API's lock). */
void rt__trace_begin(rt__trace_recording *s);
/* Stops recording and waits until no thread is inside rt__trace_record:
 * afterwards the recording's records are the caller's alone. Same caller
 * rule as rt__trace_begin. Costs one membarrier system call, and never
 * waits longer than the recorders that were inside take to leave (a few
 * instructions each, unless one was preempted there). */
void rt__trace_end(rt__trace_recording *s);

/* Writes an ended recording to `fd` as Chrome trace-event JSON (see
 * docs/tracing.md): `process` names the process track. Returns 0, or a
 * negative errno from write(2), or -ENOMEM. (trace_json.c) */
int rt__trace_write_json(rt__trace_recording *s, int fd, const char *process);

/* Records one event into the calling thread's track: the trace_record
 * hook. */
void rt__trace_record(uint32_t type, uint64_t task, int worker, uint64_t arg);

#endif
