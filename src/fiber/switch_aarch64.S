/* rt__fiber_switch and rt__fiber_make for AArch64 (AAPCS64; switch.h).
 *
 * A saved context, 176 bytes from the saved stack pointer up:
 *     0  x19 .. x28
 *    80  x29 (frame pointer), x30 (the address to resume at)
 *    96  d8 .. d15 (the low halves of v8-v15, all AAPCS64 preserves)
 *   160  FPCR, padding */
#if defined(__aarch64__)

#if defined(__ARM_FEATURE_BTI_DEFAULT) && __ARM_FEATURE_BTI_DEFAULT
#define RT__BTI_C hint 34
#define RT__GNU_PROPERTY_BTI 1
#else
#define RT__BTI_C
#define RT__GNU_PROPERTY_BTI 0
#endif

    .text
    .globl rt__fiber_switch
    .hidden rt__fiber_switch
    .type rt__fiber_switch, %function
    /* The same code under the name a poll tail-calls (switch.h). */
    .globl rt__fiber_resume
    .hidden rt__fiber_resume
    .type rt__fiber_resume, %function
    .p2align 4
rt__fiber_switch:
rt__fiber_resume:
    .cfi_startproc
    RT__BTI_C
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mrs x9, fpcr
    str x9, [sp, #160]
    mov x9, sp
    str x9, [x0]
    /* The other context, from here on. */
    mov sp, x1
    ldr x9, [sp, #160]
    msr fpcr, x9
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    mov x0, x2
    ret
    .cfi_endproc
    .size rt__fiber_switch, .-rt__fiber_switch
    .size rt__fiber_resume, .-rt__fiber_resume

/* The first code a made context runs (x0 holds the switch's arg, x19 the
 * entry function rt__fiber_make was given), reached
 * by the switch's `ret`. Unwinders stop here: the return address is
 * undefined. */
    .type rt__fiber_trampoline, %function
    .p2align 4
rt__fiber_trampoline:
    .cfi_startproc
    .cfi_undefined x30
    RT__BTI_C
    mov x29, #0
    blr x19
    brk #0
    .cfi_endproc
    .size rt__fiber_trampoline, .-rt__fiber_trampoline

/* void *rt__fiber_make(void *top, void (*entry)(void *)): x0 = top,
 * x1 = entry, which the trampoline finds in x19. */
    .globl rt__fiber_make
    .hidden rt__fiber_make
    .type rt__fiber_make, %function
    .p2align 4
rt__fiber_make:
    .cfi_startproc
    RT__BTI_C
    and x0, x0, #~15
    sub x0, x0, #176
    /* Every saved register zero but x19, the entry, x30, the trampoline,
     * and FPCR, this thread's. */
    mov x9, #0
    mov x10, x0
    add x11, x0, #176
1:  str x9, [x10], #8
    cmp x10, x11
    b.lo 1b
    adr x9, rt__fiber_trampoline
    str x9, [x0, #88]
    str x1, [x0, #0]
    mrs x9, fpcr
    str x9, [x0, #160]
    ret
    .cfi_endproc
    .size rt__fiber_make, .-rt__fiber_make

#if RT__GNU_PROPERTY_BTI
    .section .note.gnu.property, "a"
    .p2align 3
    .long 4
    .long 16
    .long 5
    .asciz "GNU"
    .long 0xc0000000
    .long 4
    .long 1
    .p2align 3
#endif

#endif
    .section .note.GNU-stack, "", %progbits
