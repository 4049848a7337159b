/* Fiber stacks: mapped on first use, committed page by page as the fiber
 * touches them, and pooled once the fiber returns, since fibers migrate and
 * a stack freed on one worker is as good on another. Internal, not
 * installed. */
#ifndef RT_SRC_FIBER_STACK_H
#define RT_SRC_FIBER_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt__stack {
    unsigned char *low;   /* lowest usable address (just above the guard) */
    size_t size;          /* usable bytes, a whole number of pages */
    bool guarded;         /* a PROT_NONE page lies just below `low` */
    bool chunked;         /* carved out of a shared mapping (never unmapped) */
    unsigned valgrind_id; /* its registration with Valgrind, where built with it */
} rt__stack;

/* The value an unguarded stack keeps in its lowest word, checked at every
 * switch-out (rt__stack_intact). */
#define RT__STACK_CANARY 0x5374616b43616e61ull

/* Gives a stack of at least `size` usable bytes (rounded up to pages), from
 * the pool when one of that size is there. Guarded while the guarded
 * stacks alive stay under the budget (docs/fibers.md), else carved from a
 * shared mapping with a canary. Returns 0 or -ENOMEM (the mapping failed).
 * Any thread. */
int rt__stack_get(size_t size, rt__stack *out);

/* Gives a stack back to the pool (or unmaps it when the pool is full).
 * Any thread. */
void rt__stack_put(rt__stack *s);

/* Whether an unguarded stack's canary is intact (always true for a guarded
 * one, whose guard page stops an overflow). */
static inline bool rt__stack_intact(const rt__stack *s)
{
    return s->guarded || *(const volatile uint64_t *)(const void *)s->low == RT__STACK_CANARY;
}

/* The guarded stack whose guard page holds `addr`, if any: for the overflow
 * report of the SIGSEGV handler. Async-signal-safe (reads without locks
 * what rt__stack_get wrote before the stack was used). */
bool rt__stack_guard_holds(const rt__stack *s, const void *addr);

/* Page size, read once. */
size_t rt__page_size(void);

#endif
