/* The reactor's timers: a hierarchical timing wheel, 6 levels of 64 slots at
 * 1 ms resolution (Tokio's geometry). Internal, not installed.
 *
 * Geometry. Time is a 64-bit count of milliseconds in whatever base the owner
 * chooses (the reactor uses a monotonic clock). A level-L slot covers 64^L ms,
 * so a level covers 64^(L+1) ms: level 0 has 64 slots of 1 ms, level 1 64
 * slots of 64 ms, ..., level 5 64 slots of 64^5 ms (about 12.4 days), and the
 * whole wheel spans 64^6 ms = 2^36 ms, about 2.2 years. An entry whose deadline
 * is later than the wheel's time is filed at the level of the highest 6-bit
 * digit in which its deadline differs from the wheel's time, in the slot named
 * by that digit of the deadline. That slot's range therefore begins strictly
 * after the wheel's current slot at that level, and the deadline lies inside
 * it. A deadline too far away to share the top digit group with the current
 * time is clamped into the last level (slot = its level-5 digit) and simply
 * filed again when that slot is reached, as often as needed.
 *
 * Never early, never late. advance() moves time forward slot range by slot
 * range, visiting only occupied slots, in time order: it sets the wheel's time
 * to the exact moment a slot's range begins and empties that slot then. Every
 * entry of the slot has a deadline inside the range, so at that moment it is
 * either due (deadline == now: it fires) or strictly in the future, and filed
 * again it lands in a finer level whose slot lies ahead. An entry is only ever
 * fired after comparing its own deadline with the wheel's time, never because
 * of the slot it was in, so nothing fires early; and since a slot is reached
 * no later than the earliest deadline it holds, every entry is down at
 * level 0 by its deadline and fires in the advance() whose time first reaches
 * it, never late. The Linux kernel's timer wheel (since 4.8) deliberately does
 * not cascade: it rounds each expiry up to its level's granularity and fires
 * the whole bucket at once, so a timer may fire up to 12.5% late, which is
 * cheap and right for timeouts that are almost always cancelled. A runtime's
 * sleep() must be precise, so this wheel pays the cascades instead.
 *
 * Complexity. insert and cancel are O(1) (a count of leading zeros, a list
 * link or unlink, a bit set or cleared) and never allocate: the entry is
 * intrusive, embedded in the caller's own structure. next_deadline is O(6)
 * thanks to a 64-bit occupancy bitmap per level. advance costs O(6) per
 * occupied slot it reaches plus O(1) per entry fired or moved down; an entry
 * moves down at most 5 times (plus once per 2.2 years while clamped), so the
 * cost does not depend on how far time jumps: after a 10-minute sleep the
 * wheel looks at the handful of slots that hold something, not at 600,000
 * milliseconds.
 *
 * Threads. A wheel and its entries belong to ONE thread, the reactor's: there
 * are no atomics and no locks here. Other threads hand timers to that thread
 * through a queue (architecture.md, "Timers").
 *
 * The wheel holds pointers into itself (its list heads are circular), so it
 * must not be moved or copied after rt__timer_wheel_init(). The wheel's time
 * must stay below 2^63 ms (292 million years), so that no computation can
 * overflow; a deadline may be any value (UINT64_MAX is in effect "never"). */
#ifndef RT_SRC_TIMER_WHEEL_H
#define RT_SRC_TIMER_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bits of time per level: each level has 2^6 = 64 slots. */
#define RT__TIMER_SLOT_BITS 6
#define RT__TIMER_SLOTS (1u << RT__TIMER_SLOT_BITS)
#define RT__TIMER_LEVELS 6
/* The span of the whole wheel, 64^6 ms: deadlines further than this from the
 * current top-level digit group are clamped into the last level. */
#define RT__TIMER_WHEEL_SPAN_MS ((uint64_t)1 << (RT__TIMER_SLOT_BITS * RT__TIMER_LEVELS))

/* Where an entry is filed (rt__timer_entry.where). Zero is "not filed", so a
 * zero-initialised entry is a valid, unfiled entry. */
enum {
    /* In no list: insert it, or free it. */
    RT__TIMER_NOT_FILED = 0,
    /* In the due list: its deadline was not later than the wheel's time when it
     * was inserted, so it fires at the next advance. */
    RT__TIMER_FILED_DUE = 1,
    /* In the slot `level`/`slot` of the wheel. */
    RT__TIMER_FILED_IN_WHEEL = 2,
};

/* A link of a circular doubly-linked list. Circular lists with a head node make
 * unlinking need nothing but the entry itself: it works whichever list the
 * entry is in, including the private list advance() moves a slot's entries to
 * while it empties that slot. */
typedef struct rt__timer_link {
    /* The next link in the list; the head itself after the last entry. */
    struct rt__timer_link *next;
    /* The previous link in the list; the head itself before the first entry. */
    struct rt__timer_link *prev;
} rt__timer_link;

/* One timer, embedded by its owner in its own structure (recover the owner with
 * offsetof). The owner allocates and frees it; the wheel only links it. While
 * it is filed, only the wheel writes it; the owner may read deadline_ms. */
typedef struct rt__timer_entry {
    /* Absolute time, in the wheel's millisecond base, at or after which the
     * entry fires. Written by rt__timer_wheel_insert(). */
    uint64_t deadline_ms;
    /* The entry's place in its slot's or the due list; meaningless while the
     * entry is not filed. */
    rt__timer_link link;
    /* RT__TIMER_NOT_FILED, RT__TIMER_FILED_DUE or RT__TIMER_FILED_IN_WHEEL:
     * cancel needs to know which list, if any, the entry is in. */
    uint8_t where;
    /* The level (0..5) of the slot the entry is in, when it is in the wheel:
     * cancel clears that level's occupancy bit when the slot empties. */
    uint8_t level;
    /* The slot (0..63) within that level, for the same reason. */
    uint8_t slot;
} rt__timer_entry;

typedef struct rt__timer_wheel {
    /* The wheel's current time in ms. Moves only forward, in advance(); while a
     * callback runs it is the time being processed (the fired entry's deadline,
     * or the time advance() started from for entries from the due list). */
    uint64_t now_ms;
    /* Bit s of occupied[L] is set exactly when slots[L][s] holds an entry, so
     * the next occupied slot of a level is one count of trailing zeros away:
     * that is what makes next_deadline() and big jumps of advance() cheap. */
    uint64_t occupied[RT__TIMER_LEVELS];
    /* The list heads of the slots. Slot s of level L holds the entries whose
     * deadline lies in the s-th 64^L ms range of the current 64^(L+1) ms range
     * of level L (or, at level 5, in a later turn of the whole wheel). */
    rt__timer_link slots[RT__TIMER_LEVELS][RT__TIMER_SLOTS];
    /* The head of the list of entries inserted with a deadline not later than
     * now_ms: they fire at the start of the next advance(). Kept apart from the
     * slots because no slot of the wheel is "now". */
    rt__timer_link due;
    /* A lower bound of the deadlines in the due list (UINT64_MAX when it is
     * empty). Cancelling a due entry does not raise it (that would cost a scan);
     * it is only used by next_deadline(), which promises a lower bound. */
    uint64_t due_min_deadline_ms;
    /* Entries filed (due or in the wheel), for rt__timer_wheel_count(). */
    size_t count;
    /* Occupied slots advance() has emptied since init. A statistic: the tests
     * use it to check that a jump of years visits a handful of slots. */
    uint64_t slots_processed;
} rt__timer_wheel;

/* Called by rt__timer_wheel_advance() for each entry that fires, after the entry
 * has been unlinked (it is not filed any more): the callback may insert it again
 * (an interval timer), free the structure that embeds it, insert other entries
 * or cancel other entries, even ones due in the same advance (they then do not
 * fire). It must not call rt__timer_wheel_advance() on the same wheel. */
typedef void rt__timer_fire_fn(rt__timer_entry *entry, void *arg);

/* Initialises an empty wheel whose time is now_ms. Nothing to free later. */
void rt__timer_wheel_init(rt__timer_wheel *wheel, uint64_t now_ms);

/* Marks an entry as not filed. A zero-initialised entry is already in that
 * state, so this is only needed for memory that is not zeroed. */
static inline void rt__timer_entry_init(rt__timer_entry *entry)
{
    entry->where = RT__TIMER_NOT_FILED;
}

/* Files `entry` to fire at deadline_ms; O(1), cannot fail. A deadline not later
 * than the wheel's time fires at the next advance(). An entry that is already
 * filed (in this wheel) is moved, as if cancelled first. */
void rt__timer_wheel_insert(rt__timer_wheel *wheel, rt__timer_entry *entry, uint64_t deadline_ms);

/* Unfiles `entry`, so it will not fire; O(1). Returns true if it was filed,
 * false (changing nothing) if it was not: already fired, already cancelled or
 * never inserted. */
bool rt__timer_wheel_cancel(rt__timer_wheel *wheel, rt__timer_entry *entry);

/* Whether `entry` is filed: inserted and neither fired nor cancelled since. */
static inline bool rt__timer_entry_is_filed(const rt__timer_entry *entry)
{
    return entry->where != RT__TIMER_NOT_FILED;
}

/* The earliest time at which an entry may fire: never later than the earliest
 * deadline filed, exactly it when that deadline is within the current level-0
 * range, otherwise the beginning of the slot that holds it (advancing there
 * moves it down and the next call is more precise). A value not later than the
 * wheel's time means "advance now"; UINT64_MAX means the wheel is empty. O(6). */
uint64_t rt__timer_wheel_next_deadline(const rt__timer_wheel *wheel);

/* Moves the wheel's time forward to now_ms (an earlier now_ms leaves it where
 * it is) and calls fire(entry, arg) exactly once for every entry filed with a
 * deadline not later than now_ms, unlinking each before its call. Never fires
 * an entry before its deadline. Entries fire in deadline order, except among
 * those already due when the advance starts (they come first, in no particular
 * order; their deadlines precede all others). An entry inserted by a callback
 * fires in this same advance when its deadline is later than the wheel's time
 * at that moment (see rt__timer_wheel.now_ms) and not later than now_ms; one
 * whose deadline is not later than the wheel's time fires at the next advance,
 * so a callback that keeps re-arming a due timer cannot make an advance
 * endless. Returns the number of entries fired. */
size_t rt__timer_wheel_advance(rt__timer_wheel *wheel, uint64_t now_ms, rt__timer_fire_fn *fire,
                               void *arg);

/* Number of entries filed: inserted and neither fired nor cancelled. */
static inline size_t rt__timer_wheel_count(const rt__timer_wheel *wheel)
{
    return wheel->count;
}

/* The wheel's current time (see rt__timer_wheel.now_ms). */
static inline uint64_t rt__timer_wheel_now(const rt__timer_wheel *wheel)
{
    return wheel->now_ms;
}

#endif
