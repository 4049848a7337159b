/* The monotonic clock every deadline of the library is measured on, and the
 * per-thread cache of its last reading. */
#ifndef RT_SRC_CLOCK_H
#define RT_SRC_CLOCK_H

#include <stdint.h>

/* Monotonic clock in nanoseconds. */
int64_t rt__now_ns(void);

/* What rt__now_ns() (and so rt_now_ns()) last returned on this thread, and how
 * many times it has been called there. A reading costs 25 ns on a VM's
 * kvm-clock; the worker loop reuses one its last poll made instead of taking
 * its own (worker.c, the timer batch's age). Only its own thread touches
 * it. */
typedef struct rt__clock_reading {
    int64_t last;   /* the value last returned */
    uint64_t count; /* readings taken, wrapping */
} rt__clock_reading;
extern __thread rt__clock_reading rt__tls_clock __attribute__((tls_model("initial-exec")));
/* The absolute deadline `timeout_ns` from now, or -1 (none) for a negative
 * timeout or one that would overflow. */
int64_t rt__deadline_after(int64_t timeout_ns);

#endif
