/* White-box tests of fiber stacks (src/fiber/stack.h): the first 16,384
 * stacks alive at once have a guard page below them, those beyond come
 * carved out of shared mappings with a canary in their lowest word, which
 * rt__stack_intact checks (the fiber's switch out calls it: fiber.h,
 * "Stacks"); a pooled stack comes back with its canary rewritten, and a
 * thread's cache hands back the stack it was given last. */
#include <criterion/criterion.h>

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "stack.h"

/* The budget of guarded stacks (stack.c). */
#define GUARDED 16384u

Test(fiber_stack, beyond_the_guard_budget_stacks_come_unguarded_with_a_canary)
{
    size_t page = rt__page_size();
    rt__stack *held = calloc(GUARDED + 8, sizeof(*held));
    cr_assert_not_null(held);
    size_t guarded = 0;
    for (size_t i = 0; i < GUARDED + 8; i++) {
        cr_assert_eq(rt__stack_get(4 * page, &held[i]), 0);
        cr_assert_eq(held[i].size, 4 * page);
        if (held[i].guarded) {
            guarded++;
            /* The page below is the guard, where the overflow report
             * looks. */
            cr_assert(rt__stack_guard_holds(&held[i], held[i].low - 1));
            cr_assert_not(rt__stack_guard_holds(&held[i], held[i].low));
        } else {
            cr_assert(held[i].chunked);
            cr_assert_eq(*(uint64_t *)(void *)held[i].low, RT__STACK_CANARY);
        }
        cr_assert(rt__stack_intact(&held[i]));
        /* Its top byte is writable (where the control block goes). */
        held[i].low[held[i].size - 1] = 1;
    }
    cr_assert_eq(guarded, GUARDED, "%zu guarded", guarded);
    cr_assert_not(held[GUARDED + 7].guarded);

    /* An overflow that reached the canary is seen. */
    rt__stack *s = &held[GUARDED + 3];
    *(volatile char *)s->low = 0;
    cr_assert_not(rt__stack_intact(s));

    /* Back to the cache and out again: the last one given back comes first,
     * its canary written anew. */
    unsigned char *low = s->low;
    rt__stack_put(s);
    cr_assert_null(s->low);
    rt__stack again;
    cr_assert_eq(rt__stack_get(4 * page, &again), 0);
    cr_assert_eq(again.low, low);
    cr_assert(rt__stack_intact(&again));
    held[GUARDED + 3] = again;

    for (size_t i = 0; i < GUARDED + 8; i++)
        rt__stack_put(&held[i]);
    free(held);
}
