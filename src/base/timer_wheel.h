/* The reactor's timers: a hierarchical timing wheel of 6 levels, whose first
 * level has 512 slots of one tick and each higher one 64 slots. Internal, not
 * installed.
 *
 * Geometry. Time is a 64-bit count of ticks in whatever base and unit the
 * owner chooses (the reactor: 250 us ticks of a monotonic clock, within
 * which it orders timers by their exact deadlines itself, with the entries'
 * keys). Level 0 has
 * 512 slots of 1 tick and covers 2^9 ticks; level L >= 1 has 64 slots of
 * 2^(9+6(L-1)) ticks each and covers 2^(9+6L) ticks; the whole wheel spans
 * 2^39 ticks (at 250 us, about 4.4 years). The deadline's bits are split into
 * digits: bits 0-8 name the level-0 slot, then 6 bits per level. An entry
 * whose deadline is less than 512 ticks after the wheel's time is filed at
 * level 0, in the slot named by its level-0 digit: level 0 is a ring, whose
 * slots each name exactly one tick of the next 512. A later entry is filed at
 * the level of the highest digit in which its deadline differs from the
 * wheel's time, in the slot named by that digit of the deadline. Either way
 * the slot's range begins strictly after the wheel's current slot at that
 * level (going round, for level 0), and the deadline lies inside it. A
 * deadline too far away to share the top digit with the current time is
 * clamped into the last level (slot = its level-5 digit) and simply filed
 * again when that slot is reached, as often as needed.
 *
 * Why not Tokio's 6 levels of 64 slots at 1 ms: a 1 ms slot rounds every
 * deadline up to the next millisecond, so a sleep wakes on average 0.5 ms and
 * up to 1 ms late before any other delay. 250 us ticks cut that to 125 us on
 * average (the median lateness of 30,000 concurrent sleeps halves). The
 * price is up to four reactor wake-ups per millisecond while timers are
 * dense, each of which may unpark workers: about 10-20% more CPU in the
 * timers benchmark. Plain 64-slot levels at 250 us would put every sleep
 * between 16 and 128 ms at level 1, and each level-1 slot reached would move
 * 16 ms worth of timers down at once: a burst of the reactor during which
 * nothing fires. A 512-slot first level, filed as a ring rather than by
 * digit, keeps every timer under 128 ms out of the cascades, for eight 64-bit
 * words of occupancy bitmap instead of one. (Tokio files its first level by
 * digit, so a 10 ms sleep that crosses a multiple of 64 ms cascades once.)
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
 * intrusive, embedded in the caller's own structure. next_deadline is O(13)
 * word reads thanks to an occupancy bitmap per level. advance costs O(13) per
 * occupied slot it reaches plus O(1) per entry fired or moved down; an entry
 * moves down at most 5 times (plus once per 2.2 years while clamped), so the
 * cost does not depend on how far time jumps: after a 10-minute sleep the
 * wheel looks at the handful of slots that hold something, not at millions
 * of ticks.
 *
 * Threads. A wheel and its entries belong to ONE thread, the reactor's: there
 * are no atomics and no locks here. Other threads hand timers to that thread
 * through a queue (docs/design.md, "Timers").
 *
 * The wheel holds pointers into itself (its list heads are circular), so it
 * must not be moved or copied after rt__timer_wheel_init(). The wheel's time
 * must stay below 2^63 ticks, so that no computation can overflow; a deadline
 * may be any value (UINT64_MAX is in effect "never"). */
#ifndef RT_SRC_TIMER_WHEEL_H
#define RT_SRC_TIMER_WHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Level 0: 2^9 = 512 slots of one tick. */
#define RT__TIMER_LEVEL0_BITS 9
#define RT__TIMER_LEVEL0_SLOTS (1u << RT__TIMER_LEVEL0_BITS)
/* Levels 1 and up: 2^6 = 64 slots each. */
#define RT__TIMER_SLOT_BITS 6
#define RT__TIMER_SLOTS (1u << RT__TIMER_SLOT_BITS)
#define RT__TIMER_LEVELS 6
/* All slots of all levels, level 0's first, then 64 per level. */
#define RT__TIMER_ALL_SLOTS (RT__TIMER_LEVEL0_SLOTS + (RT__TIMER_LEVELS - 1) * RT__TIMER_SLOTS)
/* Lists per slot. A slot's entries are spread over its chains in turn, and
 * advance() takes one entry from each chain in turn, so that the cache
 * misses of walking them overlap: the entries of a slot were filed
 * milliseconds apart, their lines have mostly left the cache, and a single
 * list can only be walked one miss after the other (the address of the next
 * entry is in the line being waited for). In the timers benchmark (100,000
 * sleeps, 2 workers) firing took 172-197 ns per timer with one list per
 * slot, 101-111 ns with 4 and 95-147 ns with 8. */
#define RT__TIMER_CHAINS 4
/* The span of the whole wheel, 2^39 ticks: deadlines further than this from
 * the current top-level digit are clamped into the last level. */
#define RT__TIMER_WHEEL_SPAN                                                                       \
    ((uint64_t)1 << (RT__TIMER_LEVEL0_BITS + RT__TIMER_SLOT_BITS * (RT__TIMER_LEVELS - 1)))

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
 * it is filed, only the wheel writes it; the owner may read the deadline. */
typedef struct rt__timer_entry {
    /* Absolute time, in the wheel's ticks, at or after which the entry
     * fires. Written by rt__timer_wheel_insert(). */
    uint64_t deadline;
    /* The entry's place in its slot's or the due list; meaningless while the
     * entry is not filed. */
    rt__timer_link link;
    /* RT__TIMER_NOT_FILED, RT__TIMER_FILED_DUE or RT__TIMER_FILED_IN_WHEEL:
     * cancel needs to know which list, if any, the entry is in. */
    uint8_t where;
    /* Which of its slot's chains the entry is in, when it is in the wheel
     * (below RT__TIMER_CHAINS). The wheel never needs it (cancel looks at
     * every chain of the slot); tests and debuggers read it. */
    uint8_t chain;
    /* The index in rt__timer_wheel.slots (all levels in one array) of the
     * slot the entry is in, when it is in the wheel: cancel clears that
     * slot's occupancy bit when the slot empties. Level 0's slots come
     * first, so an index below RT__TIMER_LEVEL0_SLOTS means level 0. */
    uint16_t slot;
    /* The owner's order among entries of the same tick (the reactor: the
     * nanoseconds of the deadline past the tick's start). The wheel never
     * fires by it; it keeps the lowest key of each level-0 slot, which
     * rt__timer_wheel_key_bound reports. Set before insert. */
    uint32_t key;
} rt__timer_entry;

typedef struct rt__timer_wheel {
    /* The wheel's current time in ticks. Moves only forward, in advance(); while a
     * callback runs it is the time being processed (the fired entry's deadline,
     * or the time advance() started from for entries from the due list). */
    uint64_t now;
    /* Bit i (word i / 64, bit i % 64) is set exactly when slots[i] holds an
     * entry, so the next occupied slot of a level is a few counts of trailing
     * zeros away: that is what makes next_deadline() and big jumps of
     * advance() cheap. Level 0 owns words 0-7, level L >= 1 word 7 + L. */
    uint64_t occupied[RT__TIMER_ALL_SLOTS / 64];
    /* The lowest key filed into each level-0 slot since it was last empty:
     * a lower bound of the keys it holds (a cancel does not raise it: that
     * would cost a scan). UINT32_MAX for an empty slot. */
    uint32_t key_min[RT__TIMER_LEVEL0_SLOTS];
    /* The list heads of the slots, RT__TIMER_CHAINS per slot: level 0's 512
     * slots, then 64 per level. Slot s of level 0 holds the entries due at
     * the one tick of the next 512 whose low 9 bits are s; slot s of level
     * L >= 1 holds the entries whose deadline lies in the s-th slot-sized
     * range of the level's current range (or, at level 5, in a later turn of
     * the whole wheel). */
    rt__timer_link slots[RT__TIMER_ALL_SLOTS][RT__TIMER_CHAINS];
    /* The chain the next entry filed in a slot goes to (any slot: taking
     * turns across slots spreads each slot's entries as well). */
    unsigned next_chain;
    /* The head of the list of entries inserted with a deadline not later than
     * now: they fire at the start of the next advance(). Kept apart from the
     * slots because no slot of the wheel is "now". */
    rt__timer_link due;
    /* A lower bound of the deadlines in the due list (UINT64_MAX when it is
     * empty). Cancelling a due entry does not raise it (that would cost a scan);
     * it is only used by next_deadline(), which promises a lower bound. */
    uint64_t due_min_deadline;
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

/* Initialises an empty wheel whose time is `now`. Nothing to free later. */
void rt__timer_wheel_init(rt__timer_wheel *wheel, uint64_t now);

/* Marks an entry as not filed. A zero-initialised entry is already in that
 * state, so this is only needed for memory that is not zeroed. */
static inline void rt__timer_entry_init(rt__timer_entry *entry)
{
    entry->where = RT__TIMER_NOT_FILED;
}

/* Files `entry` to fire at `deadline`; O(1), cannot fail. A deadline not later
 * than the wheel's time fires at the next advance(). An entry that is already
 * filed (in this wheel) is moved, as if cancelled first. */
void rt__timer_wheel_insert(rt__timer_wheel *wheel, rt__timer_entry *entry, uint64_t deadline);

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
 * wheel's time means "advance now"; UINT64_MAX means the wheel is empty. O(13). */
uint64_t rt__timer_wheel_next_deadline(const rt__timer_wheel *wheel);

/* A lower bound of the keys of the entries filed with deadline `tick`, when
 * `tick` lies within the current level-0 range (later than the wheel's time
 * and less than 512 ticks ahead), where each slot holds exactly one tick's
 * entries, and no slot of a higher level begins at it; 0 otherwise (nothing
 * known), and UINT32_MAX when no entry of that tick is filed. With
 * next_deadline(), it tells an owner that orders its entries within a tick
 * how early the first of them can be due. O(1). */
uint32_t rt__timer_wheel_key_bound(const rt__timer_wheel *wheel, uint64_t tick);

/* Moves the wheel's time forward to `now` (an earlier `now` leaves it where
 * it is) and calls fire(entry, arg) exactly once for every entry filed with a
 * deadline not later than `now`, unlinking each before its call. Never fires
 * an entry before its deadline. Entries fire in deadline order, except among
 * those already due when the advance starts (they come first, in no particular
 * order; their deadlines precede all others). An entry inserted by a callback
 * fires in this same advance when its deadline is later than the wheel's time
 * at that moment (see rt__timer_wheel.now) and not later than `now`; one
 * whose deadline is not later than the wheel's time fires at the next advance,
 * so a callback that keeps re-arming a due timer cannot make an advance
 * endless. Returns the number of entries fired. */
size_t rt__timer_wheel_advance(rt__timer_wheel *wheel, uint64_t now, rt__timer_fire_fn *fire,
                               void *arg);

/* Number of entries filed: inserted and neither fired nor cancelled. */
static inline size_t rt__timer_wheel_count(const rt__timer_wheel *wheel)
{
    return wheel->count;
}

/* The wheel's current time (see rt__timer_wheel.now). */
static inline uint64_t rt__timer_wheel_now(const rt__timer_wheel *wheel)
{
    return wheel->now;
}

#endif
