/* A timer handed from a future to the reactor. Internal, not installed.
 *
 * Allocated ("Memory" below) and reference counted, because the future
 * that owns it may be dropped (a task aborted) while the reactor still has
 * the timer filed in its wheel or queued as a command.
 *
 * One cache line. A sleeping task's timer is written by a worker (armed),
 * then by the reactor (filed, fired), then by a worker again (polled,
 * dropped), milliseconds apart, so every touch is a cache miss that moves
 * the line between cores: each line the timer spans costs a miss at every
 * hand-off. The timer is therefore exactly 64 bytes and placed at a 64-byte
 * boundary ("Memory" below), and its lock, its phase and its counted
 * references share that line.
 *
 * State word: a phase in bits 0-1 and a lock bit.
 *
 *              reactor takes                 reactor fires
 *              the arm command               (deadline passed)
 *     QUEUED ─────────────────► FILED ─────────────────────► FIRED
 *        │                        │
 *        │ future drops           │ future drops (and queues
 *        │                        │ a cancel command)
 *        ▼                        ▼
 *     CANCELLED ◄─────────────────┘
 *
 * LOCKED (bit 2) guards the phase and `waker`: a thread takes it with a CAS
 * from an unlocked value (the acquire), and releases it with a store of the
 * new phase without the bit (the release). Every phase change and every
 * access to `waker` after the timer is published happens under it, so a
 * timer either fires (its waker is taken and woken) or is cancelled, never
 * both. A poll that stores a waker does so under the lock after checking
 * the phase and the reactor's `stopping` flag there: the fire, or the
 * reactor's stop (rt__timer_release_at_stop, which wakes the waker it finds
 * and leaves the phase FILED), either comes later and takes that waker, or
 * came first and the poll sees FIRED or `stopping` and returns ready. A
 * load-acquire that sees FIRED pairs with the fire's releasing store, so the
 * poll that returns ready sees everything the reactor did.
 *
 * References (`refs`): the future holds one until the sleep finishes or is dropped. The arm
 * command holds one; it becomes the wheel's when the reactor files the
 * timer, or is dropped when the reactor takes the arm command of a timer
 * already cancelled. The wheel's goes when the timer fires, when a cancel
 * command unfiles it, or when the reactor stops (release_at_stop); a timer
 * in the `soon` buckets keeps it there, unfiled as the wheel sees it, so a
 * cancel command leaves it, and its fire, at its deadline, finds it
 * cancelled and gives the reference back. A cancel
 * command holds its own, because the wheel may fire (and so drop its
 * reference) while the command is still queued; when the reactor refuses
 * the command (it is stopping), the future takes that reference back.
 *
 * The command queue's node is reused: the cancel command is queued only
 * after the phase left QUEUED, which the reactor changes only after it
 * dequeued the arm command, so a timer is never in the queue twice. */
#ifndef RT_SRC_TIMER_INTERNAL_H
#define RT_SRC_TIMER_INTERNAL_H

#include <stdint.h>

#include <urcu/wfcqueue.h>

#include <asyncrt/future.h>
#include <asyncrt/runtime.h>

#include "block_cache.h"
#include "common.h"
#include "reactor.h"
#include "spinlock.h"
#include "timer_wheel.h"
#include "waker.h"

enum {
    /* Armed by its future; the arm command is queued (or in a worker's
     * batch), not yet taken by the reactor. */
    RT__TIMER_QUEUED = 0,
    /* In the reactor's wheel, or in its `soon` buckets (its tick has begun,
     * its exact deadline not yet: reactor.c, "Exact deadlines"), or left
     * there when the reactor stopped. */
    RT__TIMER_FILED = 1,
    /* Fired: the reactor took its waker and woke it. */
    RT__TIMER_FIRED = 2,
    /* Dropped by its future before it fired. */
    RT__TIMER_CANCELLED = 3,
    /* The phase bits of the state word. */
    RT__TIMER_PHASE = 3,
    /* The lock bit of the state word. */
    RT__TIMER_LOCKED = 4,
};

typedef struct rt__timer {
    /* The wheel's link (reactor thread only). entry.deadline holds the
     * deadline in wheel ticks from arming on: the future writes it before
     * the timer is published, and the reactor files it with that value. */
    rt__timer_entry entry;
    /* Its place in the reactor's command queue while a command is queued. */
    struct cds_wfcq_node node;
    /* Who to wake when it fires (guarded by RT__TIMER_LOCKED). */
    rt_waker waker;
    /* Counted references (atomic): see above. */
    uint32_t refs;
    /* Phase and lock bit (atomic): see the diagram above. */
    uint32_t state;
} rt__timer;

/* ---- Memory ------------------------------------------------------------------
 *
 * A timer lives in a block of the block pool (RT__BLOCK_SIZE, the size of a
 * small task): on a worker or the reactor thread the block comes from and
 * goes back to that thread's block cache, like a task's, and elsewhere
 * straight from and to the block pool. Every sleep allocates one and frees
 * it when it ends, and malloc's fast bins overflow when 100,000 sleeps are
 * armed before any ends (malloc and free then cost about a fifth of a
 * sleeping task's instructions). All blocks are alike, so any of them may go
 * to any cache.
 *
 * Pool blocks are aligned to their size, so the timer is the block's second
 * line, and the block is found again by subtracting a line. */
_Static_assert(sizeof(rt__timer) == RT_CACHELINE, "a timer is one cache line");
_Static_assert(RT__BLOCK_SIZE == 2 * RT_CACHELINE, "a block is two lines");

static inline rt__timer *rt__timer_alloc(void)
{
    char *block = rt__block_alloc(rt__current_block_cache());
    return block != NULL ? (rt__timer *)(block + RT_CACHELINE) : NULL;
}

static inline void rt__timer_free(rt__timer *t)
{
    rt__block_free(rt__current_block_cache(), (char *)t - RT_CACHELINE);
}

static inline void rt__timer_unref(rt__timer *t, uint32_t n)
{
    /* Full barrier: every use of the timer happens before its free. */
    if (rt__faa_u32(&t->refs, -n) == n) {
        rt__waker_drop(&t->waker);
        rt__timer_free(t);
    }
}

/* ---- The lock bit (timer_internal.h) --------------------------------------- */

/* Takes the lock and returns the phase. `guess` is the phase the caller
 * expects: the first CAS is tried with it, so that the usual case costs one
 * locked instruction on the (usually cold) line instead of a load and then a
 * CAS. The CAS is the acquire that pairs with rt__timer_unlock's release. */
static inline uint32_t rt__timer_lock(rt__timer *t, uint32_t guess)
{
    uint32_t expected = guess;
    unsigned spins = 0;
    for (;;) {
        if (rt__cas_u32(&t->state, &expected, expected | RT__TIMER_LOCKED))
            return expected;
        if (expected & RT__TIMER_LOCKED) {
            /* Held by the timer's other side, for a few instructions. */
            rt__spin_backoff(&spins);
            expected &= RT__TIMER_PHASE;
        }
    }
}

/* Releases the lock, setting the phase: pairs with timer_lock's CAS and
 * with the load-acquire in the sleep's poll (sleep_poll_timer). */
static inline void rt__timer_unlock(rt__timer *t, uint32_t phase)
{
    rt__store_release_u32(&t->state, phase);
}

/* The reactor's side (timer_reactor.c): a command taken from the queue, a
 * timer whose deadline has come (`batch` gathers the wakes; true when it
 * woke its waiter, false for one cancelled), and a timer left in the wheel
 * when the reactor stops (its waiter is woken, to see -ESHUTDOWN). */
void rt__timer_command(rt__reactor *r, rt__timer *t);
bool rt__timer_fire(rt__timer_entry *entry, struct rt__wake_batch *batch);
void rt__timer_release_at_stop(rt__timer_entry *entry, void *unused);

#endif
