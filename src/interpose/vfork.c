/*
 * vfork.c: vfork, with its real semantics.
 *
 * The child of vfork borrows the parent's stack until it execs or exits, so
 * a wrapper must not return into a frame of its own in the child.  vfork
 * here is a few instructions that make sure shunt is initialised, then jump
 * (not call) to libc's vfork, which therefore returns straight to the
 * program in both processes.
 */
#include "interpose/wrap.h"

void *shunt_vfork_target(void);

__attribute__((used)) void *shunt_vfork_target(void)
{
    shunt_ensure_init();
    return (void *)shunt_real.vfork;
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl vfork\n"
        ".type vfork,@function\n"
        "vfork:\n"
        "    endbr64\n"
        "    sub $8, %rsp\n"              /* keep the stack 16-byte aligned for the call */
        "    call shunt_vfork_target\n"
        "    add $8, %rsp\n"
        "    jmp *%rax\n"
        ".size vfork, .-vfork\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl vfork\n"
        ".type vfork,%function\n"
        "vfork:\n"
        "    stp x29, x30, [sp, #-16]!\n"
        "    mov x29, sp\n"
        "    bl shunt_vfork_target\n"
        "    ldp x29, x30, [sp], #16\n"
        "    br x0\n"
        ".size vfork, .-vfork\n");
#else
#error "vfork needs a tail-jump stub for this architecture"
#endif
