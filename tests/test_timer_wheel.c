/* The timer wheel (white box). The wheel counts abstract ticks (the reactor's
 * are 125 us); the tests name them as if they were milliseconds, for the
 * feel of the distances. The properties: an entry never fires before its
 * deadline, fires exactly once, and fires in the advance whose time first
 * reaches its deadline (never late, never missed), however time moves: by 1 tick,
 * by minutes, by years and by several turns of the whole wheel; a cancelled entry never fires;
 * next_deadline() is never later than the earliest pending deadline; a callback may re-insert,
 * cancel or free entries; and a jump of years costs a handful of slot visits. */
#include <criterion/criterion.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "timer_wheel.h"

#define MS_PER_DAY (24ull * 3600 * 1000)

struct timer {
    rt__timer_entry entry; /* what the wheel links */
    uint64_t inserted_at;  /* the wheel's time when it was last inserted */
    uint32_t fired;        /* how many times the callback saw it */
    bool inserted;
    bool cancelled;
    bool to_cancel; /* the random test cancels the timers marked so */
};

static struct timer *timer_of(rt__timer_entry *entry)
{
    return (struct timer *)((char *)entry - offsetof(struct timer, entry));
}

/* A private generator (xorshift64), so no test depends on the C library's. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

/* 1 ms to about 4.4 minutes: mostly steps of up to 4 s (1 ms as often as
 * 2 s), one time in eight a jump of 4 s to 4.4 minutes. */
static uint64_t random_step(uint64_t *state)
{
    bool jump = next_random(state) % 8 == 0;
    unsigned bits =
        jump ? 12 + (unsigned)(next_random(state) % 7) : (unsigned)(next_random(state) % 12);
    return 1 + next_random(state) % (1ull << bits);
}

/* What the callback checks each firing against: the advance in progress. */
struct window {
    rt__timer_wheel *wheel;
    uint64_t from; /* the wheel's time before this advance */
    uint64_t to;   /* the time this advance moves to */
    size_t fired;
};

/* Never early (deadline <= to, and the wheel's own time has reached it), never
 * late (the previous advance had not reached it, unless it was inserted already
 * due, in which case this is the first advance since) and exactly once. */
static void check_and_count(rt__timer_entry *entry, void *arg)
{
    struct window *w = arg;
    struct timer *t = timer_of(entry);
    uint64_t deadline = entry->deadline;
    cr_assert_not(rt__timer_entry_is_filed(entry), "fired while still filed");
    cr_assert_eq(t->fired, 0, "timer with deadline %llu fired twice", (unsigned long long)deadline);
    cr_assert_not(t->cancelled, "cancelled timer (deadline %llu) fired",
                  (unsigned long long)deadline);
    cr_assert_leq(deadline, w->to, "fired early: deadline %llu, advancing to %llu",
                  (unsigned long long)deadline, (unsigned long long)w->to);
    cr_assert_leq(deadline, rt__timer_wheel_now(w->wheel),
                  "fired before the wheel's time reached its deadline %llu (time %llu)",
                  (unsigned long long)deadline, (unsigned long long)rt__timer_wheel_now(w->wheel));
    bool was_due_at_insert = deadline <= t->inserted_at;
    if (was_due_at_insert)
        cr_assert_eq(w->from, t->inserted_at,
                     "timer due at insertion (%llu) fired in a later advance (from %llu)",
                     (unsigned long long)t->inserted_at, (unsigned long long)w->from);
    else
        cr_assert_gt(deadline, w->from, "fired late: deadline %llu, previous advance reached %llu",
                     (unsigned long long)deadline, (unsigned long long)w->from);
    t->fired++;
    w->fired++;
}

static size_t advance_to(rt__timer_wheel *wheel, struct window *w, uint64_t to)
{
    w->wheel = wheel;
    w->from = rt__timer_wheel_now(wheel);
    w->to = to;
    size_t before = w->fired;
    size_t returned = rt__timer_wheel_advance(wheel, to, check_and_count, w);
    cr_assert_eq(returned, w->fired - before, "advance returned %zu, fired %zu", returned,
                 w->fired - before);
    cr_assert_eq(rt__timer_wheel_now(wheel), to > w->from ? to : w->from);
    return returned;
}

static void insert_timer(rt__timer_wheel *wheel, struct timer *t, uint64_t deadline)
{
    t->inserted = true;
    t->inserted_at = rt__timer_wheel_now(wheel);
    rt__timer_wheel_insert(wheel, &t->entry, deadline);
    cr_assert(rt__timer_entry_is_filed(&t->entry));
}

/* next_deadline() against a brute-force scan of the timers still pending: never
 * later than the earliest, exact when that one is in the current level-0 range,
 * never in the past right after an advance (everything due has fired), and
 * UINT64_MAX when nothing is pending. Also checks count(). */
static void check_next_deadline(const rt__timer_wheel *wheel, const struct timer *timers, size_t n)
{
    uint64_t earliest = UINT64_MAX;
    size_t pending = 0;
    for (size_t i = 0; i < n; i++) {
        const struct timer *t = &timers[i];
        if (!t->inserted || t->fired || t->cancelled)
            continue;
        pending++;
        if (t->entry.deadline < earliest)
            earliest = t->entry.deadline;
    }
    cr_assert_eq(rt__timer_wheel_count(wheel), pending, "count() %zu, brute force %zu",
                 rt__timer_wheel_count(wheel), pending);
    uint64_t next = rt__timer_wheel_next_deadline(wheel);
    uint64_t now = rt__timer_wheel_now(wheel);
    if (pending == 0) {
        cr_assert_eq(next, UINT64_MAX, "empty wheel, next_deadline %llu", (unsigned long long)next);
        return;
    }
    cr_assert_leq(next, earliest, "next_deadline %llu later than the earliest deadline %llu",
                  (unsigned long long)next, (unsigned long long)earliest);
    cr_assert_gt(next, now, "next_deadline %llu not after the time %llu right after an advance",
                 (unsigned long long)next, (unsigned long long)now);
    if (earliest >> RT__TIMER_LEVEL0_BITS == now >> RT__TIMER_LEVEL0_BITS)
        cr_assert_eq(next, earliest, "level 0: next_deadline %llu, earliest %llu",
                     (unsigned long long)next, (unsigned long long)earliest);
}

#define RANDOM_TIMERS 200000u
#define RANDOM_SPAN_MS (3ull * 64 * 64 * 64) /* 786,432 ms, about 13 minutes */

static struct timer timers[RANDOM_TIMERS];

/* Inserts the timers in batches between advances of random size, with random
 * deadlines over [start, start + RANDOM_SPAN_MS) (some of them already due when
 * inserted), optionally cancels half of them at random moments, and checks every
 * property at every firing and after every advance. */
static void run_random(uint64_t seed, uint64_t start, bool cancel_half)
{
    static rt__timer_wheel wheel;
    rt__timer_wheel_init(&wheel, start);
    uint64_t state = seed;
    for (size_t i = 0; i < RANDOM_TIMERS; i++) {
        timers[i] = (struct timer){0};
        timers[i].to_cancel = cancel_half && (next_random(&state) & 1);
    }
    struct window w = {.wheel = &wheel};
    size_t inserted = 0, cancelled = 0, advances = 0, largest_batch_fired = 0;
    uint64_t end = start + RANDOM_SPAN_MS;
    while (inserted < RANDOM_TIMERS || rt__timer_wheel_now(&wheel) < end) {
        /* Half of them at the start, the rest in batches as time goes by. */
        size_t batch = inserted == 0 ? RANDOM_TIMERS / 2
                                     : (size_t)(next_random(&state) % (RANDOM_TIMERS / 40));
        if (rt__timer_wheel_now(&wheel) >= end || batch > RANDOM_TIMERS - inserted)
            batch = RANDOM_TIMERS - inserted;
        for (size_t k = 0; k < batch; k++, inserted++)
            insert_timer(&wheel, &timers[inserted], start + next_random(&state) % RANDOM_SPAN_MS);

        uint64_t to = rt__timer_wheel_now(&wheel) + random_step(&state);
        if (to > end)
            to = end;
        if (cancel_half) {
            /* Each marked timer is cancelled at a random advance, and at the
             * latest just before the advance that would fire it. */
            for (size_t i = 0; i < inserted; i++) {
                struct timer *t = &timers[i];
                if (!t->to_cancel || t->cancelled)
                    continue;
                if (t->entry.deadline > to && next_random(&state) % 4 != 0)
                    continue;
                size_t count = rt__timer_wheel_count(&wheel);
                cr_assert(rt__timer_wheel_cancel(&wheel, &t->entry),
                          "a pending timer was not filed");
                cr_assert_not(rt__timer_entry_is_filed(&t->entry));
                cr_assert_eq(rt__timer_wheel_count(&wheel), count - 1);
                cr_assert_not(rt__timer_wheel_cancel(&wheel, &t->entry),
                              "cancelling twice found it filed");
                t->cancelled = true;
                cancelled++;
            }
        }
        size_t fired = advance_to(&wheel, &w, to);
        if (fired > largest_batch_fired)
            largest_batch_fired = fired;
        advances++;
        check_next_deadline(&wheel, timers, RANDOM_TIMERS);
    }

    /* One more advance far past everything fires nothing more. */
    cr_assert_eq(advance_to(&wheel, &w, end + 10 * MS_PER_DAY), 0);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), UINT64_MAX);
    for (size_t i = 0; i < RANDOM_TIMERS; i++) {
        struct timer *t = &timers[i];
        cr_assert_eq(t->fired, t->cancelled ? 0u : 1u, "timer %zu (deadline %llu) fired %u times",
                     i, (unsigned long long)t->entry.deadline, t->fired);
        cr_assert_not(rt__timer_entry_is_filed(&t->entry));
    }
    /* Cancelling after firing is a no-op. */
    cr_assert_not(rt__timer_wheel_cancel(&wheel, &timers[0].entry));
    cr_assert_eq(w.fired + cancelled, RANDOM_TIMERS);
    /* The run must have exercised what it claims to: many small and big steps,
     * big batches at once, and (when asked) cancellation of about half. */
    cr_assert_gt(advances, 50, "only %zu advances", advances);
    cr_assert_gt(largest_batch_fired, 1000);
    if (cancel_half) {
        cr_assert_gt(cancelled, RANDOM_TIMERS * 2 / 5);
        cr_assert_lt(cancelled, RANDOM_TIMERS * 3 / 5);
    }
}

Test(timer_wheel, random_deadlines_fire_once_never_early_never_late)
{
    run_random(0x9e3779b97f4a7c15ull, 0, false);
}

Test(timer_wheel, random_deadlines_from_an_unaligned_start)
{
    /* Not a multiple of any level's range: every level starts mid-slot. */
    run_random(0x2545f4914f6cdd1dull, (1ull << 40) + 64 * 64 * 64 * 5 + 64 * 37 + 11, false);
}

Test(timer_wheel, cancelled_half_never_fires_the_rest_fire_once)
{
    run_random(0xd1b54a32d192ed03ull, 123456789, true);
}

/* Advancing 1 ms at a time across the beginning of a level-3 range: each timer
 * fires in exactly the advance whose time equals its deadline, including those
 * that were filed at levels 1 to 3 and had to cascade down on the way. */
Test(timer_wheel, one_ms_steps_fire_each_timer_exactly_at_its_deadline)
{
    enum { N = 30000, WINDOW = 9000 };
    static rt__timer_wheel wheel;
    uint64_t start = 64ull * 64 * 64 * 7 - 4000 + 17;
    rt__timer_wheel_init(&wheel, start);
    uint64_t state = 42;
    for (size_t i = 0; i < N; i++) {
        timers[i] = (struct timer){0};
        /* A few already due, the rest over the window. */
        insert_timer(&wheel, &timers[i], start - 20 + next_random(&state) % WINDOW);
    }
    struct window w = {.wheel = &wheel};
    for (uint64_t now = start + 1; now <= start + WINDOW; now++) {
        advance_to(&wheel, &w, now);
        if (now % 97 == 0)
            check_next_deadline(&wheel, timers, N);
    }
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(timers[i].fired, 1, "timer %zu fired %u times", i, timers[i].fired);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);
}

/* An interval: the callback re-inserts the same entry 7 ms after its deadline. */
struct interval {
    struct timer timer;
    struct window window;
    uint64_t first_deadline;
    unsigned periods;
};

static void interval_fire(rt__timer_entry *entry, void *arg)
{
    struct interval *iv = arg;
    cr_assert_eq(entry, &iv->timer.entry);
    check_and_count(entry, &iv->window);
    iv->timer.fired = 0; /* check_and_count's once-only check is per insertion */
    iv->periods++;
    cr_assert_eq(entry->deadline, iv->first_deadline + 7ull * (iv->periods - 1),
                 "period %u fired with deadline %llu", iv->periods,
                 (unsigned long long)entry->deadline);
    cr_assert_eq(rt__timer_wheel_now(iv->window.wheel), entry->deadline,
                 "the wheel's time in the callback is not the deadline");
    if (iv->periods < 1000)
        insert_timer(iv->window.wheel, &iv->timer, entry->deadline + 7);
}

Test(timer_wheel, interval_reinserted_from_the_callback_fires_1000_times_on_time)
{
    static rt__timer_wheel wheel;
    uint64_t start = 987654321;
    rt__timer_wheel_init(&wheel, start);
    struct interval iv = {.first_deadline = start + 7};
    iv.window.wheel = &wheel;
    insert_timer(&wheel, &iv.timer, iv.first_deadline);
    uint64_t state = 7;
    while (rt__timer_wheel_now(&wheel) < start + 7000 + 500) {
        /* Steps from 1 ms to about 1 s: sometimes one period per advance,
         * sometimes a hundred re-insertions within one advance. */
        unsigned bits = (unsigned)(next_random(&state) % 11);
        uint64_t to = rt__timer_wheel_now(&wheel) + 1 + next_random(&state) % (1ull << bits);
        iv.window.from = rt__timer_wheel_now(&wheel);
        iv.window.to = to;
        rt__timer_wheel_advance(&wheel, to, interval_fire, &iv);
        cr_assert_eq(iv.periods, (to - start) / 7 < 1000 ? (to - start) / 7 : 1000,
                     "after advancing to start + %llu ms, %u periods",
                     (unsigned long long)(to - start), iv.periods);
    }
    cr_assert_eq(iv.periods, 1000);
    cr_assert_not(rt__timer_entry_is_filed(&iv.timer.entry));
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);
}

/* Far deadlines: one half the wheel's span out (inside it), one two spans
 * out (clamped into the last level and re-filed each time its slot comes
 * round). A single advance past both fires each once and visits a handful of
 * slots, where stepping through the ticks would take 10^12 iterations. */
Test(timer_wheel, jumps_of_years_fire_once_and_visit_few_slots)
{
    static rt__timer_wheel wheel;
    uint64_t start = 5555555555ull;
    rt__timer_wheel_init(&wheel, start);
    struct timer two = {0}, five = {0};
    insert_timer(&wheel, &two, start + RT__TIMER_WHEEL_SPAN / 2);
    insert_timer(&wheel, &five, start + 2 * RT__TIMER_WHEEL_SPAN + 12345);
    cr_assert_leq(rt__timer_wheel_next_deadline(&wheel), two.entry.deadline);

    struct window w = {.wheel = &wheel};
    clock_t began = clock();
    cr_assert_eq(advance_to(&wheel, &w, start + 3 * RT__TIMER_WHEEL_SPAN), 2);
    double seconds = (double)(clock() - began) / CLOCKS_PER_SEC;
    cr_assert_eq(two.fired, 1);
    cr_assert_eq(five.fired, 1);
    cr_assert_lt(wheel.slots_processed, 100, "%llu slot visits for two timers",
                 (unsigned long long)wheel.slots_processed);
    cr_assert_lt(seconds, 0.5, "a jump of three spans took %.3f s", seconds);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), UINT64_MAX);
}

/* The same far timers approached in steps: nothing fires before its deadline,
 * each fires in the step that reaches it, and empty stretches cost nothing. */
Test(timer_wheel, far_timers_approached_in_steps_fire_exactly_when_reached)
{
    static rt__timer_wheel wheel;
    uint64_t start = 777;
    rt__timer_wheel_init(&wheel, start);
    struct window w = {.wheel = &wheel};

    /* A 2-hour jump over an empty wheel visits no slot at all. */
    cr_assert_eq(advance_to(&wheel, &w, start + 2 * 3600 * 1000), 0);
    cr_assert_eq(wheel.slots_processed, 0);

    struct timer two = {0}, five = {0};
    insert_timer(&wheel, &two, rt__timer_wheel_now(&wheel) + RT__TIMER_WHEEL_SPAN / 2);
    insert_timer(&wheel, &five, rt__timer_wheel_now(&wheel) + 2 * RT__TIMER_WHEEL_SPAN + 999);
    uint64_t step = RT__TIMER_WHEEL_SPAN / 150 + 12345;
    while (!five.fired) {
        uint64_t now = rt__timer_wheel_now(&wheel);
        uint64_t next_deadline = two.fired ? five.entry.deadline : two.entry.deadline;
        uint64_t to = now + step;
        /* Land 1 ms short of each deadline, then exactly on it. */
        if (to >= next_deadline)
            to = now + 1 < next_deadline ? next_deadline - 1 : next_deadline;
        advance_to(&wheel, &w, to);
        cr_assert_leq(rt__timer_wheel_next_deadline(&wheel),
                      two.fired ? (five.fired ? UINT64_MAX : five.entry.deadline)
                                : two.entry.deadline);
    }
    cr_assert_eq(two.fired, 1);
    cr_assert_eq(five.fired, 1);
    cr_assert_lt(wheel.slots_processed, 200, "%llu slot visits",
                 (unsigned long long)wheel.slots_processed);
}

Test(timer_wheel, next_deadline_is_exact_at_level_0_and_a_lower_bound_above)
{
    static rt__timer_wheel wheel;
    rt__timer_wheel_init(&wheel, 1000); /* 1000 = 1 * 512 + 488 */
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), UINT64_MAX);
    struct timer near = {0}, far = {0};
    insert_timer(&wheel, &far, 1600); /* 3 * 512 + 64: level 1, slot beginning at 1536 */
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), 1536);
    insert_timer(&wheel, &near, 1010); /* level 0 */
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), 1010);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 2);

    struct window w = {.wheel = &wheel};
    cr_assert_eq(advance_to(&wheel, &w, 1010), 1);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), 1536);
    cr_assert_eq(advance_to(&wheel, &w, 1536), 0);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), 1600, "cascaded to level 0: exact");
    cr_assert_eq(advance_to(&wheel, &w, 1599), 0);
    cr_assert_eq(advance_to(&wheel, &w, 1600), 1);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), UINT64_MAX);
    cr_assert_eq(wheel.slots_processed, 3);
}

/* Inserts timers[i] with deadline start + 1 + i for each of the 511 ticks
 * after `start` and checks that each was filed at level 0. */
static void insert_a_lap_at_level_0(rt__timer_wheel *wheel, struct timer *timers, uint64_t start)
{
    for (unsigned i = 0; i < RT__TIMER_LEVEL0_SLOTS - 1; i++) {
        timers[i] = (struct timer){0};
        insert_timer(wheel, &timers[i], start + 1 + i);
        cr_assert_lt(timers[i].entry.slot, RT__TIMER_LEVEL0_SLOTS,
                     "deadline +%u filed above level 0 (slot %u)", i + 1, timers[i].entry.slot);
    }
}

/* The first level has 512 slots: every deadline up to 511 ticks ahead of a
 * time at the start of a level-0 range goes straight to level 0 and never
 * cascades, so stepping tick by tick visits each occupied slot exactly once,
 * and each timer fires in the step that reaches it. */
Test(timer_wheel, deadlines_within_the_first_level_never_cascade)
{
    static rt__timer_wheel wheel;
    uint64_t start = 512ull * 12345;
    rt__timer_wheel_init(&wheel, start);
    static struct timer level0[RT__TIMER_LEVEL0_SLOTS - 1];
    insert_a_lap_at_level_0(&wheel, level0, start);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), start + 1);
    struct window w = {.wheel = &wheel};
    for (unsigned i = 0; i < RT__TIMER_LEVEL0_SLOTS - 1; i++) {
        cr_assert_eq(advance_to(&wheel, &w, start + 1 + i), 1, "step %u", i + 1);
        cr_assert_eq(level0[i].fired, 1);
    }
    cr_assert_eq(wheel.slots_processed, RT__TIMER_LEVEL0_SLOTS - 1, "%llu slot visits",
                 (unsigned long long)wheel.slots_processed);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);
}

/* Level 0 is a ring: from a time in the middle of a 512-tick range too,
 * every deadline less than 512 ticks ahead goes to level 0, including those
 * past the next multiple of 512. Filed by digit, those would go to level 1
 * and all move down at once when the wheel reaches that multiple (15% of
 * the timers benchmark's sleeps were re-filed that way). */
Test(timer_wheel, deadlines_across_a_level_boundary_stay_in_the_first_level)
{
    static rt__timer_wheel wheel;
    uint64_t start = 512ull * 12345 + 300;
    rt__timer_wheel_init(&wheel, start);
    static struct timer near[RT__TIMER_LEVEL0_SLOTS - 1];
    insert_a_lap_at_level_0(&wheel, near, start);
    /* 512 ahead is one lap of the ring: it must go up a level. */
    struct timer lap = {0};
    insert_timer(&wheel, &lap, start + RT__TIMER_LEVEL0_SLOTS);
    cr_assert_geq(lap.entry.slot, RT__TIMER_LEVEL0_SLOTS, "a full lap ahead filed at level 0");
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), start + 1);
    struct window w = {.wheel = &wheel};
    for (unsigned i = 0; i < RT__TIMER_LEVEL0_SLOTS - 1; i++) {
        cr_assert_eq(advance_to(&wheel, &w, start + 1 + i), 1, "step %u", i + 1);
        cr_assert_eq(near[i].fired, 1);
        /* The lap's level-1 slot begins at start + 212, before the later
         * ring entries; reached there, the lap moves down to the ring. */
        uint64_t next = i + 2 < RT__TIMER_LEVEL0_SLOTS ? start + 2 + i : start + 512;
        cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), next, "after step %u", i + 1);
    }
    /* One visit per ring slot; the lap's level-1 slot begins with the ring
     * slot of start + 212 and is emptied in the same visit. */
    cr_assert_eq(wheel.slots_processed, RT__TIMER_LEVEL0_SLOTS - 1, "%llu slot visits",
                 (unsigned long long)wheel.slots_processed);
    cr_assert_eq(advance_to(&wheel, &w, start + RT__TIMER_LEVEL0_SLOTS), 1);
    cr_assert_eq(lap.fired, 1);
    cr_assert_eq(wheel.slots_processed, RT__TIMER_LEVEL0_SLOTS);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);
}

Test(timer_wheel, deadlines_in_the_past_or_now_fire_at_the_next_advance)
{
    static rt__timer_wheel wheel;
    rt__timer_wheel_init(&wheel, 1000);
    struct timer past = {0}, now = {0}, next = {0}, zero = {0};
    insert_timer(&wheel, &past, 5);
    insert_timer(&wheel, &now, 1000);
    insert_timer(&wheel, &next, 1001);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 3);
    cr_assert_leq(rt__timer_wheel_next_deadline(&wheel), 5);

    /* An advance to the same time fires the due ones, not the next. */
    struct window w = {.wheel = &wheel};
    cr_assert_eq(advance_to(&wheel, &w, 1000), 2);
    cr_assert_eq(past.fired, 1);
    cr_assert_eq(now.fired, 1);
    cr_assert_eq(next.fired, 0);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), 1001);

    /* Time never goes back, but an earlier time still fires what is due. */
    insert_timer(&wheel, &zero, 0);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), 0);
    cr_assert_eq(advance_to(&wheel, &w, 400), 1);
    cr_assert_eq(zero.fired, 1);
    cr_assert_eq(rt__timer_wheel_now(&wheel), 1000);
    cr_assert_eq(advance_to(&wheel, &w, 1001), 1);
    cr_assert_eq(next.fired, 1);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);

    /* Cancelling the only due entry empties the wheel's next deadline too. */
    struct timer again = {0};
    insert_timer(&wheel, &again, 3);
    cr_assert(rt__timer_wheel_cancel(&wheel, &again.entry));
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), UINT64_MAX);
    cr_assert_eq(advance_to(&wheel, &w, 1002), 0);
}

Test(timer_wheel, cancel_of_an_entry_not_filed_is_a_no_op)
{
    static rt__timer_wheel wheel;
    rt__timer_wheel_init(&wheel, 0);
    struct timer zeroed = {0}, initialised;
    rt__timer_entry_init(&initialised.entry);
    cr_assert_not(rt__timer_entry_is_filed(&zeroed.entry));
    cr_assert_not(rt__timer_wheel_cancel(&wheel, &zeroed.entry));
    cr_assert_not(rt__timer_wheel_cancel(&wheel, &initialised.entry));
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);

    insert_timer(&wheel, &zeroed, 5000);
    cr_assert(rt__timer_wheel_cancel(&wheel, &zeroed.entry));
    cr_assert_not(rt__timer_wheel_cancel(&wheel, &zeroed.entry));
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), UINT64_MAX);
    for (unsigned i = 0; i < RT__TIMER_ALL_SLOTS / 64; i++)
        cr_assert_eq(wheel.occupied[i], 0, "the emptied slot's bit stayed set (word %u)", i);
}

Test(timer_wheel, insert_of_a_filed_entry_moves_it)
{
    static rt__timer_wheel wheel;
    rt__timer_wheel_init(&wheel, 0);
    struct timer t = {0};
    insert_timer(&wheel, &t, 100000);
    insert_timer(&wheel, &t, 1500);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 1);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), 1024,
                 "the slot of 1500 at level 1, [1024, 1536)");
    struct window w = {.wheel = &wheel};
    cr_assert_eq(advance_to(&wheel, &w, 200000), 1);
    cr_assert_eq(t.fired, 1);
    cr_assert_eq(t.entry.deadline, 1500);
}

/* The callback cancels the others of its own slot: one still waiting in the
 * slot being emptied, one already moved down to level 0. */
struct siblings {
    struct timer a, b, c;
    rt__timer_wheel *wheel;
    unsigned fired, cancelled;
};

static void cancel_siblings(rt__timer_entry *entry, void *arg)
{
    struct siblings *s = arg;
    s->fired++;
    struct timer *all[] = {&s->a, &s->b, &s->c};
    for (size_t i = 0; i < 3; i++)
        if (&all[i]->entry != entry && rt__timer_wheel_cancel(s->wheel, &all[i]->entry))
            s->cancelled++;
}

Test(timer_wheel, callback_may_cancel_entries_of_the_slot_being_emptied)
{
    static rt__timer_wheel wheel;
    rt__timer_wheel_init(&wheel, 0);
    struct siblings s = {.wheel = &wheel};
    /* All three in level 1, slot 2 ([1024, 1536)), in this order: c moves
     * down to level 0, then a fires (1024 is the slot's beginning) and cancels
     * b, still in the slot's private list, and c, now at level 0. Level 1's
     * bitmap is word 8, after level 0's eight. */
    rt__timer_wheel_insert(&wheel, &s.c.entry, 1030);
    rt__timer_wheel_insert(&wheel, &s.a.entry, 1024);
    rt__timer_wheel_insert(&wheel, &s.b.entry, 1024);
    cr_assert_eq(wheel.occupied[8], 1ull << 2);
    cr_assert_eq(rt__timer_wheel_advance(&wheel, 2000, cancel_siblings, &s), 1);
    cr_assert_eq(s.fired, 1);
    cr_assert_eq(s.cancelled, 2);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), UINT64_MAX);
    for (unsigned i = 0; i < RT__TIMER_ALL_SLOTS / 64; i++)
        cr_assert_eq(wheel.occupied[i], 0, "bitmap word %u not empty", i);
}

/* A slot's entries are spread over RT__TIMER_CHAINS lists. The slot must stay
 * occupied until its last entry goes, whichever chain that is in: cancelling
 * the entries chain by chain fails here if cancel looked at one chain only
 * (the entry's own, or the first). */
Test(timer_wheel, a_slot_stays_occupied_until_the_last_entry_of_every_chain_goes)
{
    static rt__timer_wheel wheel;
    rt__timer_wheel_init(&wheel, 0);
    enum { N = 3 * RT__TIMER_CHAINS + 1 };
    struct timer t[N];
    memset(t, 0, sizeof t);
    unsigned per_chain[RT__TIMER_CHAINS] = {0};
    for (unsigned i = 0; i < N; i++) {
        insert_timer(&wheel, &t[i], 100);
        cr_assert_lt(t[i].entry.chain, RT__TIMER_CHAINS);
        per_chain[t[i].entry.chain]++;
    }
    for (unsigned c = 0; c < RT__TIMER_CHAINS; c++)
        cr_assert_gt(per_chain[c], 0, "chain %u unused: nothing would be tested", c);
    unsigned left = N;
    for (unsigned c = 0; c < RT__TIMER_CHAINS; c++) {
        for (unsigned i = 0; i < N; i++) {
            if (t[i].entry.chain != c || !rt__timer_entry_is_filed(&t[i].entry))
                continue;
            cr_assert(rt__timer_wheel_cancel(&wheel, &t[i].entry));
            left--;
            uint64_t want = left > 0 ? 100 : UINT64_MAX;
            cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), want,
                         "after emptying part of chain %u, %u left: next deadline %llu", c, left,
                         (unsigned long long)rt__timer_wheel_next_deadline(&wheel));
        }
    }
    for (unsigned i = 0; i < RT__TIMER_ALL_SLOTS / 64; i++)
        cr_assert_eq(wheel.occupied[i], 0, "bitmap word %u not empty", i);
    /* And a full slot fires every entry once, from every chain. */
    for (unsigned i = 0; i < N; i++)
        insert_timer(&wheel, &t[i], 200);
    struct window w = {.wheel = &wheel};
    cr_assert_eq(advance_to(&wheel, &w, 200), N);
    for (unsigned i = 0; i < N; i++)
        cr_assert_eq(t[i].fired, 1, "entry %u fired %u times", i, t[i].fired);
}

/* Entries of one level-1 slot and of the ring slot emptied with it, spread
 * over every chain: each fired entry cancels two others still pending, some
 * still in advance()'s private lists, some already moved down to level 0.
 * Every entry must end fired exactly once (on time) or cancelled, and the
 * wheel empty. */
struct cross_cancel {
    struct window w;
    struct timer *timers;
    unsigned n;
    uint32_t rng;
    unsigned cancelled;
};

static void fire_and_cancel_two(rt__timer_entry *entry, void *arg)
{
    struct cross_cancel *c = arg;
    check_and_count(entry, &c->w);
    for (int k = 0; k < 2; k++) {
        c->rng = c->rng * 1103515245u + 12345u;
        struct timer *victim = &c->timers[(c->rng >> 8) % c->n];
        if (rt__timer_wheel_cancel(c->w.wheel, &victim->entry)) {
            victim->cancelled = true;
            c->cancelled++;
        }
    }
}

Test(timer_wheel, callbacks_cancel_entries_across_the_chains_of_the_slots_being_emptied)
{
    static rt__timer_wheel wheel;
    rt__timer_wheel_init(&wheel, 600);
    enum { N = 200 };
    static struct timer t[N];
    memset(t, 0, sizeof t);
    /* From 600, level 0 takes deadlines below 1112 (the ring slot of 1024
     * among them); the rest up to 1535 go to level 1's slot [1024, 1536). */
    for (unsigned i = 0; i < N; i++)
        insert_timer(&wheel, &t[i], i % 4 == 0 ? 1024 : 1024 + (i * 37) % 512);
    unsigned chains_used = 0;
    for (unsigned i = 0; i < N; i++)
        chains_used |= 1u << t[i].entry.chain;
    cr_assert_eq(chains_used, (1u << RT__TIMER_CHAINS) - 1, "not every chain was used");
    struct cross_cancel c = {.timers = t, .n = N, .rng = 12345};
    c.w.wheel = &wheel;
    c.w.from = rt__timer_wheel_now(&wheel);
    c.w.to = 2000;
    size_t fired = rt__timer_wheel_advance(&wheel, 2000, fire_and_cancel_two, &c);
    cr_assert_eq(fired, c.w.fired);
    cr_assert_gt(c.cancelled, 0, "no callback found anything to cancel");
    cr_assert_eq(c.w.fired + c.cancelled, N, "%zu fired and %u cancelled of %d", c.w.fired,
                 c.cancelled, N);
    for (unsigned i = 0; i < N; i++)
        cr_assert_eq(t[i].fired + (t[i].cancelled ? 1u : 0u), 1u,
                     "entry %u: fired %u, cancelled %d", i, t[i].fired, t[i].cancelled);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), UINT64_MAX);
    for (unsigned i = 0; i < RT__TIMER_ALL_SLOTS / 64; i++)
        cr_assert_eq(wheel.occupied[i], 0, "bitmap word %u not empty", i);
}

/* The callback frees the structure embedding the entry: the wheel must not
 * touch it afterwards (AddressSanitizer checks this in its build). */
static void free_it(rt__timer_entry *entry, void *arg)
{
    (*(unsigned *)arg)++;
    free(timer_of(entry));
}

Test(timer_wheel, callback_may_free_the_entry)
{
    static rt__timer_wheel wheel;
    rt__timer_wheel_init(&wheel, 0);
    for (uint64_t i = 0; i < 1000; i++) {
        struct timer *t = calloc(1, sizeof *t);
        cr_assert_not_null(t);
        /* Many per slot, several levels, some due already. */
        rt__timer_wheel_insert(&wheel, &t->entry, (i * 7919) % 300000);
    }
    unsigned freed = 0;
    cr_assert_eq(rt__timer_wheel_advance(&wheel, 300000, free_it, &freed), 1000);
    cr_assert_eq(freed, 1000);
    cr_assert_eq(rt__timer_wheel_count(&wheel), 0);
}

/* A callback that re-arms its entry as already due does not make the advance
 * loop: the entry fires at the next advance instead. */
static void rearm_now(rt__timer_entry *entry, void *arg)
{
    rt__timer_wheel *wheel = arg;
    rt__timer_wheel_insert(wheel, entry, rt__timer_wheel_now(wheel));
}

Test(timer_wheel, reinsert_as_due_from_the_callback_waits_for_the_next_advance, .timeout = 10)
{
    static rt__timer_wheel wheel;
    rt__timer_wheel_init(&wheel, 0);
    struct timer t = {0};
    rt__timer_wheel_insert(&wheel, &t.entry, 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(rt__timer_wheel_advance(&wheel, 0, rearm_now, &wheel), 1);
        cr_assert(rt__timer_entry_is_filed(&t.entry));
    }
    rt__timer_wheel_cancel(&wheel, &t.entry);
    rt__timer_wheel_insert(&wheel, &t.entry, 50);
    cr_assert_eq(rt__timer_wheel_advance(&wheel, 100, rearm_now, &wheel), 1);
    cr_assert_eq(t.entry.deadline, 50, "re-armed at the wheel's time during the callback");
    cr_assert_eq(rt__timer_wheel_advance(&wheel, 100, rearm_now, &wheel), 1);
    cr_assert_eq(t.entry.deadline, 100);
}
