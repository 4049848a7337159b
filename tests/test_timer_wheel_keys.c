/* The timer wheel's keys (white box): the owner's order among the entries of
 * one tick, of which the wheel keeps the lowest per level-0 slot. The
 * reactor sleeps until the tick's start plus that bound, so the bound must
 * never be above the lowest key of the tick's entries (a timer would fire
 * late), while for ticks it cannot vouch for the answer is 0 (the tick's
 * start: early enough). */
#include <criterion/criterion.h>

#include <stdint.h>
#include <string.h>

#include "timer_wheel.h"

static rt__timer_wheel wheel; /* large: static, zeroed */

static size_t fired;

static void count(rt__timer_entry *entry, void *arg)
{
    (void)entry;
    (void)arg;
    fired++;
}

static void file(rt__timer_entry *e, uint64_t deadline, uint32_t key)
{
    memset(e, 0, sizeof *e);
    e->key = key;
    rt__timer_wheel_insert(&wheel, e, deadline);
}

Test(timer_wheel_keys, the_bound_is_the_lowest_key_of_a_level0_tick)
{
    rt__timer_wheel_init(&wheel, 1000);
    cr_assert_eq(rt__timer_wheel_key_bound(&wheel, 1010), UINT32_MAX, "an empty tick");
    rt__timer_entry a, b, c;
    file(&a, 1010, 900);
    cr_assert_eq(rt__timer_wheel_key_bound(&wheel, 1010), 900);
    file(&b, 1010, 300);
    file(&c, 1010, 700);
    cr_assert_eq(rt__timer_wheel_key_bound(&wheel, 1010), 300);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), 1010);
    /* A cancel keeps a lower bound: never above the lowest key left. */
    rt__timer_wheel_cancel(&wheel, &b);
    cr_assert_leq(rt__timer_wheel_key_bound(&wheel, 1010), 700);
    rt__timer_wheel_cancel(&wheel, &a);
    rt__timer_wheel_cancel(&wheel, &c);
    cr_assert_eq(rt__timer_wheel_key_bound(&wheel, 1010), UINT32_MAX,
                 "the last cancel empties the slot and forgets the bound");
}

Test(timer_wheel_keys, ticks_the_wheel_cannot_vouch_for_are_bound_by_0)
{
    rt__timer_wheel_init(&wheel, 1000);
    rt__timer_entry far;
    file(&far, 1000 + 5000, 42); /* beyond the level-0 range: a higher level */
    cr_assert_eq(rt__timer_wheel_key_bound(&wheel, 1000 + 5000), 0);
    cr_assert_eq(rt__timer_wheel_key_bound(&wheel, 1000), 0, "the wheel's own time");
    cr_assert_eq(rt__timer_wheel_key_bound(&wheel, 999), 0, "the past");
    /* Moved down to level 0 by an advance to its slot, it is vouched for. */
    fired = 0;
    rt__timer_wheel_advance(&wheel, rt__timer_wheel_next_deadline(&wheel), count, NULL);
    cr_assert_eq(fired, 0);
    cr_assert_lt(1000 + 5000 - rt__timer_wheel_now(&wheel), RT__TIMER_LEVEL0_SLOTS,
                 "the advance did not bring the entry into level 0's range");
    cr_assert_eq(rt__timer_wheel_key_bound(&wheel, 1000 + 5000), 42,
                 "a cascaded entry's key is kept for its level-0 slot");
    rt__timer_wheel_cancel(&wheel, &far);
}

Test(timer_wheel_keys, a_fired_slot_forgets_its_bound)
{
    rt__timer_wheel_init(&wheel, 1000);
    rt__timer_entry a, b;
    file(&a, 1001, 10);
    fired = 0;
    rt__timer_wheel_advance(&wheel, 1001, count, NULL);
    cr_assert_eq(fired, 1);
    /* The slot of tick 1001 is tick 1513's a lap later, in the level-0
     * range once the wheel's time is past 1001. */
    rt__timer_wheel_advance(&wheel, 1002, count, NULL);
    file(&b, 1001 + RT__TIMER_LEVEL0_SLOTS, 200);
    cr_assert_eq(rt__timer_wheel_key_bound(&wheel, 1001 + RT__TIMER_LEVEL0_SLOTS), 200,
                 "the key of the tick fired a lap earlier is not kept");
    rt__timer_wheel_cancel(&wheel, &b);
}

Test(timer_wheel_keys, a_higher_level_slot_beginning_at_the_tick_voids_the_bound)
{
    /* Entry a, filed from far ahead, waits in level 1's slot [1536, 2048);
     * entry b of the same tick 1536 is filed later, when 1536 is within
     * level 0's range. Both slots begin at 1536: level 0's key alone
     * (900) would wake the owner after a's deadline (key 10). */
    rt__timer_wheel_init(&wheel, 1000);
    rt__timer_entry a, b;
    file(&a, 1536, 10);
    fired = 0;
    rt__timer_wheel_advance(&wheel, 1100, count, NULL);
    cr_assert_eq(fired, 0);
    file(&b, 1536, 900);
    cr_assert_eq(rt__timer_wheel_next_deadline(&wheel), 1536);
    cr_assert_leq(rt__timer_wheel_key_bound(&wheel, 1536), 10,
                  "the bound ignores the level-1 entry due at the same tick");
    rt__timer_wheel_advance(&wheel, 1536, count, NULL);
    cr_assert_eq(fired, 2, "both fire when the tick begins");
}
