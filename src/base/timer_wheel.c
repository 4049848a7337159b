/* The hierarchical timing wheel; the header explains the geometry and why
 * entries never fire early or late. Owned by one thread: no atomics, no locks. */
#include "timer_wheel.h"

#include <stddef.h>

/* ---- Geometry (see timer_wheel.h) ---- */

/* The base-2 logarithm of the ticks one slot of `level` spans. */
static inline unsigned level_shift(unsigned level)
{
    return level == 0 ? 0 : RT__TIMER_LEVEL0_BITS + (level - 1) * RT__TIMER_SLOT_BITS;
}

static inline unsigned level_slots(unsigned level)
{
    return level == 0 ? RT__TIMER_LEVEL0_SLOTS : RT__TIMER_SLOTS;
}

/* Where the level's slots begin in the wheel's one array of slots. */
static inline unsigned level_base(unsigned level)
{
    return level == 0 ? 0 : RT__TIMER_LEVEL0_SLOTS + (level - 1) * RT__TIMER_SLOTS;
}

static inline void set_occupied(rt__timer_wheel *wheel, unsigned slot)
{
    wheel->occupied[slot / 64] |= (uint64_t)1 << (slot % 64);
}

static inline void clear_occupied(rt__timer_wheel *wheel, unsigned slot)
{
    wheel->occupied[slot / 64] &= ~((uint64_t)1 << (slot % 64));
}

static bool level_is_empty(const rt__timer_wheel *wheel, unsigned level)
{
    const uint64_t *words = &wheel->occupied[level_base(level) / 64];
    for (unsigned i = 0; i < level_slots(level) / 64; i++)
        if (words[i] != 0)
            return false;
    return true;
}

/* ---- Circular doubly-linked lists with a head node ---- */

static void list_init(rt__timer_link *head)
{
    head->next = head;
    head->prev = head;
}

static bool list_is_empty(const rt__timer_link *head)
{
    return head->next == head;
}

static void list_push_back(rt__timer_link *head, rt__timer_link *link)
{
    link->prev = head->prev;
    link->next = head;
    head->prev->next = link;
    head->prev = link;
}

/* Unlinks `link` from whatever list it is in: only its neighbours change. */
static void list_unlink(rt__timer_link *link)
{
    link->prev->next = link->next;
    link->next->prev = link->prev;
    link->next = link;
    link->prev = link;
}

/* Moves every link of `from` to the end of `to`, leaving `from` empty. */
static void list_append_all(rt__timer_link *from, rt__timer_link *to)
{
    if (list_is_empty(from))
        return;
    rt__timer_link *first = from->next, *last = from->prev;
    first->prev = to->prev;
    to->prev->next = first;
    last->next = to;
    to->prev = last;
    list_init(from);
}

/* Moves every link of `from` to the empty list `to`, leaving `from` empty. */
static void list_move_all(rt__timer_link *from, rt__timer_link *to)
{
    list_init(to);
    list_append_all(from, to);
}

static rt__timer_entry *entry_of(rt__timer_link *link)
{
    return (rt__timer_entry *)((char *)link - offsetof(rt__timer_entry, link));
}

/* Whether every chain of the slot is empty. */
static bool slot_is_empty(const rt__timer_wheel *wheel, unsigned slot)
{
    for (unsigned chain = 0; chain < RT__TIMER_CHAINS; chain++)
        if (!list_is_empty(&wheel->slots[slot][chain]))
            return false;
    return true;
}

/* ---- Where an entry goes ---- */

/* The level for a deadline later than `now`. Level 0 is a ring: it takes
 * every deadline less than 512 ticks ahead, whichever of its slots that is,
 * because each of its slots then names exactly one tick of (now, now + 512).
 * Any later deadline differs from `now` above level 0's digit and goes to
 * the level whose digit holds the highest bit in which they differ. Filing
 * level 0 by digit as well would send a deadline just past the next multiple
 * of 512 ticks to level 1 however near it is, and every 128 ms the reactor
 * would move all of those down at once. Deadlines that differ above the
 * top digit, i.e. outside the wheel's current span, are clamped into the
 * last level. */
static unsigned level_for(uint64_t now, uint64_t deadline)
{
    if (deadline - now < RT__TIMER_LEVEL0_SLOTS)
        return 0;
    /* Differing above bit 8, as deadline >= now + 512: clz's argument is
     * non-zero and the level at least 1. */
    uint64_t differing = now ^ deadline;
    unsigned highest_bit = 63u - (unsigned)__builtin_clzll(differing);
    unsigned level = 1 + (highest_bit - RT__TIMER_LEVEL0_BITS) / RT__TIMER_SLOT_BITS;
    return level < RT__TIMER_LEVELS ? level : RT__TIMER_LEVELS - 1;
}

/* Links an unfiled entry, whose deadline is set, where it belongs relative
 * to the wheel's current time. Does not touch the count. */
static void file_entry(rt__timer_wheel *wheel, rt__timer_entry *entry)
{
    uint64_t deadline = entry->deadline;
    if (deadline <= wheel->now) {
        /* No slot is "now": a slot's range begins strictly after the current
         * one, so a due entry waits in its own list for the next advance. */
        list_push_back(&wheel->due, &entry->link);
        entry->where = RT__TIMER_FILED_DUE;
        if (deadline < wheel->due_min_deadline)
            wheel->due_min_deadline = deadline;
        return;
    }
    unsigned level = level_for(wheel->now, deadline);
    unsigned slot =
        level_base(level) + (unsigned)((deadline >> level_shift(level)) & (level_slots(level) - 1));
    unsigned chain = wheel->next_chain++ % RT__TIMER_CHAINS;
    list_push_back(&wheel->slots[slot][chain], &entry->link);
    set_occupied(wheel, slot);
    if (level == 0 && entry->key < wheel->key_min[slot])
        wheel->key_min[slot] = entry->key;
    entry->where = RT__TIMER_FILED_IN_WHEEL;
    entry->chain = (uint8_t)chain;
    entry->slot = (uint16_t)slot;
}

/* The first occupied slot of a non-empty level at or after slot `from`,
 * going round: its index within the level. */
static unsigned first_occupied_from(const rt__timer_wheel *wheel, unsigned level, unsigned from)
{
    const uint64_t *words = &wheel->occupied[level_base(level) / 64];
    unsigned nwords = level_slots(level) / 64;
    unsigned w = from / 64;
    uint64_t bits = words[w] & (~(uint64_t)0 << (from % 64));
    /* nwords + 1 words: the first one is seen again at the end, for the
     * bits below `from` that come last in the round. */
    for (unsigned i = 0; i <= nwords; i++) {
        if (bits != 0)
            return w * 64 + (unsigned)__builtin_ctzll(bits);
        w = (w + 1) % nwords;
        bits = words[w];
    }
    return from; /* unreachable for a non-empty level */
}

/* When the next occupied slot of `level` begins: the first beginning of an
 * occupied slot strictly after the beginning of the current slot of that
 * level. Going round the level (as Tokio rotates its bitmap) finds level 0's
 * ring entries, which lie in the next 512 ticks, and entries at higher
 * levels, which lie within their level's current range; it also covers
 * clamped entries at level 5 whose slot comes round only in a later turn of
 * the wheel, including the current slot itself, which then means one full
 * turn later. The level must be occupied. */
static uint64_t level_next_slot_start(const rt__timer_wheel *wheel, unsigned level)
{
    unsigned shift = level_shift(level);
    unsigned nslots = level_slots(level);
    unsigned current = (unsigned)((wheel->now >> shift) & (nslots - 1));
    unsigned next = first_occupied_from(wheel, level, (current + 1) & (nslots - 1));
    uint64_t slots_ahead = (uint64_t)((next + nslots - current - 1) & (nslots - 1)) + 1;
    uint64_t current_slot_start = wheel->now & ~(((uint64_t)1 << shift) - 1);
    return current_slot_start + (slots_ahead << shift);
}

/* The earliest slot beginning over all levels (UINT64_MAX when the wheel holds
 * nothing), and its level through `level_out`. Only a ring slot can begin
 * together with a slot of another level (slots of levels 1 and up begin at
 * multiples of 512 ticks, and those of a higher level lie beyond the current
 * range of the lower one); the higher level is named then, and advance()
 * empties the ring slot with it. */
static uint64_t next_slot_start(const rt__timer_wheel *wheel, unsigned *level_out)
{
    uint64_t earliest = UINT64_MAX;
    for (unsigned level = 0; level < RT__TIMER_LEVELS; level++) {
        if (level_is_empty(wheel, level))
            continue;
        uint64_t start = level_next_slot_start(wheel, level);
        if (start <= earliest) {
            earliest = start;
            *level_out = level;
        }
    }
    return earliest;
}

/* ---- API ---- */

void rt__timer_wheel_init(rt__timer_wheel *wheel, uint64_t now)
{
    wheel->now = now;
    for (unsigned i = 0; i < RT__TIMER_ALL_SLOTS / 64; i++)
        wheel->occupied[i] = 0;
    for (unsigned slot = 0; slot < RT__TIMER_ALL_SLOTS; slot++)
        for (unsigned chain = 0; chain < RT__TIMER_CHAINS; chain++)
            list_init(&wheel->slots[slot][chain]);
    for (unsigned slot = 0; slot < RT__TIMER_LEVEL0_SLOTS; slot++)
        wheel->key_min[slot] = UINT32_MAX;
    wheel->next_chain = 0;
    list_init(&wheel->due);
    wheel->due_min_deadline = UINT64_MAX;
    wheel->count = 0;
    wheel->slots_processed = 0;
}

void rt__timer_wheel_insert(rt__timer_wheel *wheel, rt__timer_entry *entry, uint64_t deadline)
{
    rt__timer_wheel_cancel(wheel, entry);
    entry->deadline = deadline;
    file_entry(wheel, entry);
    wheel->count++;
}

bool rt__timer_wheel_cancel(rt__timer_wheel *wheel, rt__timer_entry *entry)
{
    switch (entry->where) {
    case RT__TIMER_FILED_IN_WHEEL:
        list_unlink(&entry->link);
        /* The entry may sit in advance()'s private lists of the slot being
         * emptied; then the slot's own lists decide the bit, which is right. */
        if (slot_is_empty(wheel, entry->slot)) {
            clear_occupied(wheel, entry->slot);
            if (entry->slot < RT__TIMER_LEVEL0_SLOTS)
                wheel->key_min[entry->slot] = UINT32_MAX;
        }
        break;
    case RT__TIMER_FILED_DUE:
        list_unlink(&entry->link);
        if (list_is_empty(&wheel->due))
            wheel->due_min_deadline = UINT64_MAX;
        break;
    default:
        return false;
    }
    entry->where = RT__TIMER_NOT_FILED;
    wheel->count--;
    return true;
}

uint32_t rt__timer_wheel_key_bound(const rt__timer_wheel *wheel, uint64_t tick)
{
    if (tick <= wheel->now || tick - wheel->now >= RT__TIMER_LEVEL0_SLOTS)
        return 0;
    /* A slot of a higher level that begins at this tick may hold entries
     * of this very tick, whose keys level 0 does not know. */
    for (unsigned level = 1; level < RT__TIMER_LEVELS; level++)
        if (!level_is_empty(wheel, level) && level_next_slot_start(wheel, level) == tick)
            return 0;
    return wheel->key_min[tick & (RT__TIMER_LEVEL0_SLOTS - 1)];
}

uint64_t rt__timer_wheel_next_deadline(const rt__timer_wheel *wheel)
{
    unsigned level;
    uint64_t earliest = next_slot_start(wheel, &level);
    return wheel->due_min_deadline < earliest ? wheel->due_min_deadline : earliest;
}

/* Takes the entries of the `nlists` lists of `pending` one by one, one list
 * after the other in turn (see RT__TIMER_CHAINS), re-reading each head every
 * time, so that a callback that cancels a later entry is honoured. Unfiles
 * each entry, fires it if its deadline has come and files it again
 * otherwise. Returns the number fired. */
static size_t drain(rt__timer_wheel *wheel, rt__timer_link *pending, unsigned nlists,
                    rt__timer_fire_fn *fire, void *arg)
{
    size_t fired = 0;
    for (bool took = true; took;) {
        took = false;
        for (unsigned i = 0; i < nlists; i++) {
            if (list_is_empty(&pending[i]))
                continue;
            took = true;
            rt__timer_entry *entry = entry_of(pending[i].next);
            list_unlink(&entry->link);
            if (entry->deadline <= wheel->now) {
                entry->where = RT__TIMER_NOT_FILED;
                wheel->count--;
                fired++;
                fire(entry, arg);
            } else {
                /* Still in the future: a finer level now (or, clamped, level
                 * 5 a turn later). Its count is unchanged: it stays filed. */
                file_entry(wheel, entry);
            }
        }
    }
    return fired;
}

size_t rt__timer_wheel_advance(rt__timer_wheel *wheel, uint64_t now, rt__timer_fire_fn *fire,
                               void *arg)
{
    size_t fired = 0;
    if (now < wheel->now)
        now = wheel->now;

    /* The due list first (their deadlines are the oldest). It is moved aside, so
     * that what callbacks file as due now waits for the next advance. Its
     * entries stay marked due, so cancel still finds them in the private list. */
    rt__timer_link pending[RT__TIMER_CHAINS];
    list_move_all(&wheel->due, &pending[0]);
    wheel->due_min_deadline = UINT64_MAX;
    fired += drain(wheel, pending, 1, fire, arg);

    /* Then every occupied slot whose range begins by `now`, in time order: set
     * the time to the slot's beginning and empty the slot. Entries filed again
     * land in slots that begin later; the loop finds them on its next turn. */
    for (;;) {
        unsigned level = 0;
        uint64_t slot_start = next_slot_start(wheel, &level);
        if (slot_start > now)
            break;
        wheel->now = slot_start;
        unsigned slot = level_base(level) +
                        (unsigned)((slot_start >> level_shift(level)) & (level_slots(level) - 1));
        /* Clear the bit before the callbacks run: entries filed into this same
         * slot from now on (clamped ones) are for the next turn of the wheel. */
        for (unsigned chain = 0; chain < RT__TIMER_CHAINS; chain++)
            list_move_all(&wheel->slots[slot][chain], &pending[chain]);
        clear_occupied(wheel, slot);
        if (level == 0)
            wheel->key_min[slot] = UINT32_MAX;
        if (level > 0) {
            /* The ring slot of the same tick goes too: its entries are due
             * now, and once the wheel's time is this tick that slot would be
             * the ring's current one, which means a full lap later. */
            unsigned ring = (unsigned)(slot_start & (RT__TIMER_LEVEL0_SLOTS - 1));
            for (unsigned chain = 0; chain < RT__TIMER_CHAINS; chain++)
                list_append_all(&wheel->slots[ring][chain], &pending[chain]);
            clear_occupied(wheel, ring);
            wheel->key_min[ring] = UINT32_MAX;
        }
        wheel->slots_processed++;
        fired += drain(wheel, pending, RT__TIMER_CHAINS, fire, arg);
    }

    /* No occupied slot begins in (wheel->now, now], so every entry still lies
     * in a slot ahead of `now` as well: the jump keeps the invariant. */
    wheel->now = now;
    return fired;
}
