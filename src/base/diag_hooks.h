/* How the layers below the diagnostics (src/diag/: task dumps, the stall
 * watchdog, lost wake-up reports, the trace recorder, the dump on a signal)
 * reach them: one table of hooks, which rt_runtime_new installs in a build
 * with diagnostics (meson option `diagnostics`, RT_HAVE_DIAGNOSTICS) and
 * which stays absent without them. The scheduler and the reactor call no
 * function of src/diag/ directly, so that they build, link and run the
 * same way without it. Internal, not installed. */
#ifndef RT_SRC_DIAG_HOOKS_H
#define RT_SRC_DIAG_HOOKS_H

#include <stdint.h>

struct rt__worker;
struct rt__registry_entry;

typedef struct rt__diag_hooks {
    /* Records one scheduler or reactor event into the calling thread's
     * trace buffer (events.h). Called only while rt__trace_active is set. */
    void (*trace_record)(uint32_t type, uint64_t task, int worker, uint64_t arg);
    /* Reports the lost wake-ups the idle sweep of worker `w` found (n
     * entries, each holding a reference on its task, which the hook drops)
     * and counts them in w's metrics. The worker holds no lock. */
    void (*report_lost)(struct rt__worker *w, struct rt__registry_entry *lost, unsigned n);
} rt__diag_hooks;

/* Publishes the table (release: what the table points to is complete
 * before a hook is read). Idempotent; every rt_runtime_new of a build with
 * diagnostics calls it with the same table. */
void rt__diag_hooks_install(const rt__diag_hooks *hooks);

/* The table, or NULL before the first install or in a build without
 * diagnostics (an acquire load, pairing with the install). Any thread. */
const rt__diag_hooks *rt__diag_hooks_get(void);

/* Nonzero while a trace records (the recorder in src/diag/trace_buf.c
 * raises and lowers it; the flag lives here so that every event point can
 * test it inline). Read relaxed: a thread that sees it late only misses or
 * adds events at the edges of the trace, and the recorder checks it again
 * under its own protocol. Hidden, so that the load is one PC-relative
 * access, not through the GOT. */
extern uint32_t rt__trace_active __attribute__((visibility("hidden")));

/* The out-of-line half of RT__EV_TRACE (events.h): hands the event to the
 * trace_record hook. Cold: the compiler keeps the call and its argument
 * set-up off the path that runs while no trace records. */
__attribute__((cold)) void rt__trace_event(uint32_t type, uint64_t task, int worker, uint64_t arg);

#endif
