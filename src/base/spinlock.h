/* A small test-and-test-and-set spinlock for critical sections of a few
 * instructions (a waker slot). Built on the atomics layer, so TSan sees it:
 * the CAS that takes the lock is the acquire, the store that releases it the
 * release. After a few spins it yields the CPU, since on a two-core machine
 * the holder may be preempted. Internal, not installed. */
#ifndef RT_SRC_SPINLOCK_H
#define RT_SRC_SPINLOCK_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#include "atomic.h"

typedef struct rt__spinlock {
    uint32_t held; /* 0 free, 1 held */
} rt__spinlock;

/* One step of waiting for a lock held for a few instructions: pause, and
 * after 64 steps (`*spins` counts them) give the CPU away instead. */
static inline void rt__spin_backoff(unsigned *spins)
{
    if (++*spins < 64)
        rt__cpu_relax();
    else
        sched_yield();
}

static inline void rt__spin_lock(rt__spinlock *l)
{
    unsigned spins = 0;
    for (;;) {
        uint32_t expected = 0;
        if (rt__cas_u32(&l->held, &expected, 1))
            return;
        while (rt__load_relaxed_u32(&l->held) != 0)
            rt__spin_backoff(&spins);
    }
}

/* Takes the lock if it is free; false, without waiting, if it is held. */
static inline bool rt__spin_trylock(rt__spinlock *l)
{
    uint32_t expected = 0;
    return rt__load_relaxed_u32(&l->held) == 0 && rt__cas_u32(&l->held, &expected, 1);
}

static inline void rt__spin_unlock(rt__spinlock *l)
{
    rt__store_release_u32(&l->held, 0);
}

#endif
