/* Writes an ended trace recording as Chrome trace-event JSON, the format
 * Perfetto (ui.perfetto.dev) and chrome://tracing open. docs/tracing.md
 * describes what comes out; in short, one thread track per recording track
 * (tid = track index + 1), polls and parks as B/E slices, the other events
 * as thread-scoped instants, and a flow (ph "s" at the wake, ph "f" bound
 * to the enclosing slice at the poll) from each wake to the next poll of
 * the same task.
 *
 * The records of all tracks are merged in time order (a small heap of the
 * tracks' cursors; each single-writer track is already in order, the shared
 * one is sorted first), so a wake is always seen before the poll it
 * caused, and its flow is written when that poll is reached. */
#include "trace_buf.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atomic.h"
#include "fault.h"

/* ---- Output --------------------------------------------------------------- */

#define OUT_BUF 65536
/* Room that one event always fits in (names are short and fixed). */
#define OUT_EVENT_MAX 512

typedef struct out {
    int fd;
    int err; /* the first write error, negative; 0 while none */
    size_t n;
    bool first; /* no event written yet: no comma before the next */
    char buf[OUT_BUF];
} out;

static void out_flush(out *o)
{
    size_t done = 0;
    while (done < o->n && o->err == 0) {
        ssize_t w = write(o->fd, o->buf + done, o->n - done);
        if (w < 0) {
            if (errno != EINTR)
                o->err = -errno;
            continue;
        }
        done += (size_t)w;
    }
    o->n = 0;
}

__attribute__((format(printf, 2, 3))) static void out_printf(out *o, const char *fmt, ...)
{
    if (OUT_BUF - o->n < OUT_EVENT_MAX)
        out_flush(o);
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->buf + o->n, OUT_BUF - o->n, fmt, ap);
    va_end(ap);
    if (k > 0)
        o->n += (size_t)k < OUT_BUF - o->n ? (size_t)k : OUT_BUF - o->n - 1;
}

/* Starts one event object: the separator, then the fields every event has. */
static void out_event(out *o, const char *name, const char *cat, char ph, int pid, unsigned tid,
                      uint64_t rel_ns)
{
    out_printf(o,
               "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"%c\",\"pid\":%d,\"tid\":%u,"
               "\"ts\":%" PRIu64 ".%03u",
               o->first ? "" : ",", name, cat, ph, pid, tid, rel_ns / 1000,
               (unsigned)(rel_ns % 1000));
    o->first = false;
}

/* ---- Per-track state while writing ---------------------------------------- */

/* Slices open on a track: polls and parks never nest more than this. */
#define OPEN_MAX 8

typedef struct open_slice {
    uint32_t type; /* RT__EVT_POLL_START or RT__EVT_PARK */
    uint64_t task;
} open_slice;

typedef struct track_state {
    uint64_t pos, end; /* the cursor into the track's records */
    uint64_t last_ns;  /* the last record's time (relative) */
    unsigned nopen;
    open_slice open[OPEN_MAX];
} track_state;

/* ---- Pending wakes: task id -> the last wake not yet followed by a poll ---- */

typedef struct pending_wake {
    uint64_t task; /* 0: empty slot */
    uint64_t rel_ns;
    unsigned tid;
    bool pending;
} pending_wake;

typedef struct wake_map {
    pending_wake *slots;
    size_t mask;
} wake_map;

static pending_wake *wake_slot(wake_map *m, uint64_t task)
{
    /* Fibonacci hashing: ids are handed out in blocks per thread. */
    size_t i = (size_t)((task * 0x9e3779b97f4a7c15ull) >> 17) & m->mask;
    while (m->slots[i].task != 0 && m->slots[i].task != task)
        i = (i + 1) & m->mask;
    return &m->slots[i];
}

/* ---- Merge ------------------------------------------------------------------ */

static int cmp_rec(const void *a, const void *b)
{
    const rt__trace_rec *x = a, *y = b;
    return x->ts_ns < y->ts_ns ? -1 : x->ts_ns > y->ts_ns;
}

typedef struct merge {
    rt__trace_recording *s;
    track_state *ts;
    unsigned *heap; /* track indices, by their next record's time */
    unsigned n;
} merge;

static bool merge_less(const merge *m, unsigned a, unsigned b)
{
    uint64_t ta = m->s->tracks[a].recs[m->ts[a].pos].ts_ns;
    uint64_t tb = m->s->tracks[b].recs[m->ts[b].pos].ts_ns;
    return ta != tb ? ta < tb : a < b;
}

static void merge_down(merge *m, unsigned i)
{
    for (;;) {
        unsigned l = 2 * i + 1, r = l + 1, best = i;
        if (l < m->n && merge_less(m, m->heap[l], m->heap[best]))
            best = l;
        if (r < m->n && merge_less(m, m->heap[r], m->heap[best]))
            best = r;
        if (best == i)
            return;
        unsigned t = m->heap[i];
        m->heap[i] = m->heap[best];
        m->heap[best] = t;
        i = best;
    }
}

/* ---- Events ----------------------------------------------------------------- */

typedef struct writer {
    out *o;
    int pid;
    uint64_t start_ns;
    wake_map wakes;
    uint64_t next_flow;
} writer;

static uint64_t rel(const writer *w, uint64_t ts_ns)
{
    return ts_ns > w->start_ns ? ts_ns - w->start_ns : 0;
}

static void begin_slice(writer *w, track_state *st, unsigned tid, uint32_t type, uint64_t task,
                        uint64_t at, bool truncated)
{
    char name[40];
    if (type == RT__EVT_POLL_START) {
        snprintf(name, sizeof name, "task %" PRIu64, task);
        out_event(w->o, name, "poll", 'B', w->pid, tid, at);
        out_printf(w->o, ",\"args\":{\"task\":%" PRIu64 "%s}}", task,
                   truncated ? ",\"truncated\":\"began before the trace\"" : "");
    } else {
        out_event(w->o, "park", "idle", 'B', w->pid, tid, at);
        out_printf(w->o, "%s}",
                   truncated ? ",\"args\":{\"truncated\":\"began before the trace\"}" : "");
    }
    if (st->nopen < OPEN_MAX)
        st->open[st->nopen++] = (open_slice){type, task};
}

static void end_slice(writer *w, track_state *st, unsigned tid, uint64_t at, const char *extra)
{
    open_slice sl = st->open[--st->nopen];
    if (sl.type == RT__EVT_POLL_START) {
        char name[40];
        snprintf(name, sizeof name, "task %" PRIu64, sl.task);
        out_event(w->o, name, "poll", 'E', w->pid, tid, at);
    } else {
        out_event(w->o, "park", "idle", 'E', w->pid, tid, at);
    }
    out_printf(w->o, "%s}", extra);
}

static void instant(writer *w, const char *name, const char *cat, unsigned tid, uint64_t at)
{
    out_event(w->o, name, cat, 'i', w->pid, tid, at);
    out_printf(w->o, ",\"s\":\"t\"");
}

static void emit(writer *w, track_state *st, unsigned tid, const rt__trace_rec *r)
{
    uint64_t at = rel(w, r->ts_ns);
    st->last_ns = at;
    switch (r->type) {
    case RT__EVT_POLL_START: {
        begin_slice(w, st, tid, RT__EVT_POLL_START, r->task, at, false);
        pending_wake *p = wake_slot(&w->wakes, r->task);
        if (p->task == r->task && p->pending) {
            /* The flow's start is written after the wake's instant, its end
             * right after this slice's begin: a viewer that keeps the file's
             * order among equal times binds each to the right event. */
            uint64_t id = w->next_flow++;
            out_event(w->o, "wake", "wake", 's', w->pid, p->tid, p->rel_ns);
            out_printf(w->o, ",\"id\":%" PRIu64 "}", id);
            out_event(w->o, "wake", "wake", 'f', w->pid, tid, at);
            out_printf(w->o, ",\"bp\":\"e\",\"id\":%" PRIu64 "}", id);
            p->pending = false;
        }
        break;
    }
    case RT__EVT_POLL_END:
    case RT__EVT_UNPARK: {
        uint32_t want = r->type == RT__EVT_POLL_END ? RT__EVT_POLL_START : RT__EVT_PARK;
        if (st->nopen == 0) {
            /* It began before the trace did. */
            begin_slice(w, st, tid, want, r->task, 0, true);
        } else if (st->open[st->nopen - 1].type != want) {
            break; /* no such nesting happens; keep the file balanced anyway */
        }
        char extra[48] = "";
        if (r->type == RT__EVT_POLL_END)
            snprintf(extra, sizeof extra, ",\"args\":{\"ready\":%" PRIu64 "}", r->arg);
        end_slice(w, st, tid, at, extra);
        break;
    }
    case RT__EVT_PARK:
        begin_slice(w, st, tid, RT__EVT_PARK, 0, at, false);
        break;
    case RT__EVT_WAKE: {
        instant(w, "wake", "wake", tid, at);
        out_printf(w->o, ",\"args\":{\"task\":%" PRIu64 "}}", r->task);
        pending_wake *p = wake_slot(&w->wakes, r->task);
        *p = (pending_wake){r->task, at, tid, true};
        break;
    }
    case RT__EVT_SPAWN:
        instant(w, "spawn", "task", tid, at);
        out_printf(w->o, ",\"args\":{\"task\":%" PRIu64 "}}", r->task);
        break;
    case RT__EVT_STEAL:
        instant(w, "steal", "steal", tid, at);
        out_printf(w->o, ",\"args\":{\"task\":%" PRIu64 ",\"victim\":%" PRIu64 "}}", r->task,
                   r->arg);
        break;
    case RT__EVT_REACTOR_TURN:
        instant(w, "reactor turn", "reactor", tid, at);
        out_printf(w->o, ",\"args\":{\"events\":%" PRIu64 "}}", r->arg);
        break;
    case RT__EVT_TIMER_FIRE:
        instant(w, "timer fire", "timer", tid, at);
        out_printf(w->o, ",\"args\":{\"task\":%" PRIu64 "}}", r->task);
        break;
    default:
        break;
    }
}

int rt__trace_write_json(rt__trace_recording *s, int fd, const char *process)
{
    unsigned nt = s->ntracks;
    out *o = rt__malloc(sizeof(out));
    track_state *ts = rt__calloc(nt, sizeof(track_state));
    unsigned *heap = rt__calloc(nt, sizeof(unsigned));
    uint64_t nwakes = 0;
    for (unsigned i = 0; i < nt; i++) {
        rt__trace_track *t = &s->tracks[i];
        uint64_t len = rt__load_relaxed_u64(&t->len);
        uint64_t n = len < t->cap ? len : t->cap;
        for (uint64_t k = 0; k < n; k++)
            nwakes += t->recs[k].type == RT__EVT_WAKE;
    }
    size_t slots = 16;
    while (slots < 2 * nwakes + 16)
        slots *= 2;
    pending_wake *wake_slots = rt__calloc(slots, sizeof(pending_wake));
    int err = 0;
    if (o == NULL || ts == NULL || heap == NULL || wake_slots == NULL) {
        err = -ENOMEM;
        goto done;
    }
    o->fd = fd;
    o->err = 0;
    o->n = 0;
    o->first = true;
    writer w = {o, (int)getpid(), (uint64_t)s->start_ns, {wake_slots, slots - 1}, 1};

    out_printf(o, "{\"traceEvents\":[");
    out_event(o, "process_name", "__metadata", 'M', w.pid, 0, 0);
    out_printf(o, ",\"args\":{\"name\":\"%s\"}}", process);
    for (unsigned i = 0; i < nt; i++) {
        out_event(o, "thread_name", "__metadata", 'M', w.pid, i + 1, 0);
        out_printf(o, ",\"args\":{\"name\":\"%s\"}}", s->tracks[i].name);
        out_event(o, "thread_sort_index", "__metadata", 'M', w.pid, i + 1, 0);
        out_printf(o, ",\"args\":{\"sort_index\":%u}}", i);
    }

    merge m = {s, ts, heap, 0};
    for (unsigned i = 0; i < nt; i++) {
        rt__trace_track *t = &s->tracks[i];
        uint64_t len = rt__load_relaxed_u64(&t->len);
        ts[i].end = len < t->cap ? len : t->cap;
        if (t->shared)
            qsort(t->recs, ts[i].end, sizeof(rt__trace_rec), cmp_rec);
        if (ts[i].end > 0)
            heap[m.n++] = i;
    }
    for (unsigned i = m.n; i-- > 0;)
        merge_down(&m, i);
    while (m.n > 0 && o->err == 0) {
        unsigned i = heap[0];
        emit(&w, &ts[i], i + 1, &s->tracks[i].recs[ts[i].pos]);
        if (++ts[i].pos == ts[i].end)
            heap[0] = heap[--m.n];
        merge_down(&m, 0);
    }

    /* Slices still open: in progress when the trace stopped, or cut short
     * where the track filled up. */
    uint64_t stop = rel(&w, (uint64_t)s->stop_ns);
    uint64_t dropped_total = 0;
    for (unsigned i = 0; i < nt; i++) {
        uint64_t dropped = rt__load_relaxed_u64(&s->tracks[i].dropped);
        dropped_total += dropped;
        uint64_t at = dropped != 0 ? ts[i].last_ns : stop;
        while (ts[i].nopen > 0)
            end_slice(&w, &ts[i], i + 1, at,
                      dropped != 0 ? ",\"args\":{\"truncated\":\"the track filled up\"}"
                                   : ",\"args\":{\"truncated\":\"ended after the trace\"}");
        if (dropped != 0) {
            instant(&w, "events dropped", "trace", i + 1, ts[i].last_ns);
            out_printf(o, ",\"args\":{\"dropped\":%" PRIu64 "}}", dropped);
        }
    }
    out_printf(o,
               "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"asyncrt_trace_format\":1,"
               "\"records_per_track\":%" PRIu64 ",\"duration_ns\":%" PRIu64
               ",\"dropped_events\":%" PRIu64 ",\"dropped\":{",
               nt > 0 ? s->tracks[0].cap : 0, stop, dropped_total);
    for (unsigned i = 0; i < nt; i++)
        out_printf(o, "%s\"%s\":%" PRIu64, i == 0 ? "" : ",", s->tracks[i].name,
                   rt__load_relaxed_u64(&s->tracks[i].dropped));
    out_printf(o, "}}}\n");
    out_flush(o);
    err = o->err;
done:
    free(wake_slots);
    free(heap);
    free(ts);
    free(o);
    return err;
}
