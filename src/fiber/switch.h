/* The context switch between a fiber and the thread that runs it: one
 * assembly routine per architecture (switch_x86_64.S, switch_aarch64.S)
 * that saves what the ABI makes callee-saved on the current stack, stores
 * the stack pointer, loads another and resumes what was saved there.
 * Internal, not installed. */
#ifndef RT_SRC_FIBER_SWITCH_H
#define RT_SRC_FIBER_SWITCH_H

#include <stddef.h>

/* Saves the calling context on its own stack, writes its stack pointer to
 * *from_sp, and resumes the context saved at to_sp, which sees `arg` as
 * the return value of its own rt__fiber_switch (or, for a context made by
 * rt__fiber_make, as the argument of rt__fiber_entry). Returns, in the
 * saved context, the `arg` of whoever switches back to it.
 *
 * Saved: x86-64 SysV rbx, rbp, r12-r15 and the x87 control word; AArch64
 * x19-x30, d8-d15 and FPCR, so a fiber that changes those modes takes
 * them along when it moves to another worker. x86-64's MXCSR (the SSE
 * rounding mode, flush-to-zero) is not switched: loading it (ldmxcsr) took
 * a pair of switches from 7 to 11 ns on the machines this was measured on,
 * and code that changes it must restore it before it awaits (fiber.h).
 * The return address is popped and jumped to on x86-64 (a `ret` would
 * mispredict on every switch, the return stack buffer never knowing where
 * it goes); the object carries no shadow-stack marking, so CET shadow
 * stacks stay off in programs that link it. */
void *rt__fiber_switch(void **from_sp, void *to_sp, void *arg);

/* rt__fiber_switch under another name and type, for a poll that switches
 * into a fiber and returns what the fiber switches back with (an rt_poll,
 * as an int): the same code, so that the poll's call to it can be a tail
 * call. */
int rt__fiber_resume(void **from_sp, void *to_sp, void *arg);

/* Prepares a context at the top of a stack (`top`, the highest address,
 * any alignment) whose first switch-in calls entry(arg), `arg` being what
 * that switch passes. entry runs on the new stack and never returns (a
 * fiber's last act is a switch away that is never resumed). Returns the
 * context's stack pointer, for rt__fiber_switch. */
void *rt__fiber_make(void *top, void (*entry)(void *arg));

#endif
