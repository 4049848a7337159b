/* rt__fiber_switch and rt__fiber_make for x86-64 System V (switch.h).
 *
 * A saved context, from the saved stack pointer up:
 *     0  padding (4 bytes), x87 control word (2 bytes), padding
 *     8  padding
 *    16  r15, r14, r13, r12, rbx, rbp
 *    64  the address to resume at
 * The stack pointer a context resumes with (after the address is popped) is
 * the one its call to rt__fiber_switch had before the call, as a `ret`
 * would leave it. */
#if defined(__x86_64__)

#if defined(__CET__)
#define RT__ENDBR endbr64
#else
#define RT__ENDBR
#endif

    .text
    .globl rt__fiber_switch
    .hidden rt__fiber_switch
    .type rt__fiber_switch, @function
    /* The same code under the name a poll tail-calls (switch.h). */
    .globl rt__fiber_resume
    .hidden rt__fiber_resume
    .type rt__fiber_resume, @function
    .p2align 4
rt__fiber_switch:
rt__fiber_resume:
    .cfi_startproc
    RT__ENDBR
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    /* MXCSR stays the thread's: loading it costs more than the rest of the
     * switch together (switch.h). */
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    /* The other context, from here on. */
    movq %rsi, %rsp
    fldcw 4(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    /* Pop the address and jump to it instead of `ret`: see switch.h. */
    popq %rcx
    movq %rdx, %rax
    movq %rdx, %rdi
    jmpq *%rcx
    .cfi_endproc
    .size rt__fiber_switch, .-rt__fiber_switch
    .size rt__fiber_resume, .-rt__fiber_resume

/* The first code a made context runs: rdi holds the switch's arg, r12 the
 * entry function rt__fiber_make was given. Marked
 * with an undefined return address, so that debuggers and unwinders stop
 * here instead of walking into whatever lies above the stack. */
    .type rt__fiber_trampoline, @function
    .p2align 4
rt__fiber_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    RT__ENDBR
    call *%r12
    ud2
    .cfi_endproc
    .size rt__fiber_trampoline, .-rt__fiber_trampoline

/* void *rt__fiber_make(void *top, void (*entry)(void *)): rdi = top,
 * rsi = entry, which the trampoline finds in r12. */
    .globl rt__fiber_make
    .hidden rt__fiber_make
    .type rt__fiber_make, @function
    .p2align 4
rt__fiber_make:
    .cfi_startproc
    RT__ENDBR
    /* The trampoline runs with rsp 16-aligned, as a function's body after
     * its call has pushed nothing yet: its own call then aligns the
     * callee as the ABI says. The resume address sits 8 below that. */
    movq %rdi, %rax
    andq $-16, %rax
    subq $8, %rax
    leaq rt__fiber_trampoline(%rip), %rcx
    movq %rcx, (%rax)
    /* Six callee-saved registers: r12 the entry, the others zero. */
    xorl %ecx, %ecx
    movq %rcx, -8(%rax)
    movq %rcx, -16(%rax)
    movq %rsi, -24(%rax)
    movq %rcx, -32(%rax)
    movq %rcx, -40(%rax)
    movq %rcx, -48(%rax)
    /* The x87 control word of the thread making it (the default, normally). */
    subq $64, %rax
    movq %rcx, (%rax)
    movq %rcx, 8(%rax)
    fnstcw 4(%rax)
    ret
    .cfi_endproc
    .size rt__fiber_make, .-rt__fiber_make

#if defined(__CET__)
/* IBT only (every entry above starts with endbr64); no SHSTK: see switch.h. */
    .section .note.gnu.property, "a"
    .p2align 3
    .long 4
    .long 16
    .long 5
    .asciz "GNU"
    .long 0xc0000002
    .long 4
    .long 1
    .p2align 3
#endif

#endif
    .section .note.GNU-stack, "", @progbits
