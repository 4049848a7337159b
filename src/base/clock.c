/* The monotonic clock; see clock.h. */
#include "clock.h"

#include <stdint.h>
#include <time.h>

__thread rt__clock_reading rt__tls_clock __attribute__((tls_model("initial-exec")));

int64_t rt__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    rt__tls_clock.last = now;
    rt__tls_clock.count++;
    return now;
}

int64_t rt__deadline_after(int64_t timeout_ns)
{
    if (timeout_ns < 0)
        return -1;
    int64_t now = rt__now_ns();
    /* A timeout too long to add is no limit at all (292 years). */
    return timeout_ns > INT64_MAX - now ? -1 : now + timeout_ns;
}
