/*
 * syscall_calls.c: libc's generic system call entry, syscall().
 *
 * Programs reach io_uring through it (libc has no wrapper for io_uring's
 * calls): libuv (Node.js, uvloop), Rust's io-uring crate (tokio-uring),
 * most C programs that do not link liburing.  A ring's I/O never passes
 * through libc, so before io_uring_setup, io_uring_enter or
 * io_uring_register goes ahead, every connection of the process moves back
 * to kernel TCP (core/process/uring_failsafe.c); every other number, and
 * those calls themselves, go to libc's syscall unchanged.
 *
 * On x86_64 the entry is a few instructions of assembly: a number other
 * than io_uring's jumps to libc's syscall with every register and the
 * stack as the program left them, so the many programs that make other
 * calls through syscall() (futexes, gettid, getrandom...) pay a compare and
 * a jump.  (A C function would take six arguments out of a va_list and
 * call again: about 15 ns a call on the test machine.)
 */
#include <stdarg.h>
#include <stddef.h>
#include <sys/syscall.h>

#include "core/fd/uring_watch.h"
#include "interpose/wrap.h"

#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425
#endif
#ifndef __NR_io_uring_enter
#define __NR_io_uring_enter 426
#endif
#ifndef __NR_io_uring_register
#define __NR_io_uring_register 427
#endif
_Static_assert(__NR_io_uring_enter == __NR_io_uring_setup + 1 && __NR_io_uring_register == __NR_io_uring_setup + 2,
               "io_uring's three calls are consecutive numbers");

/* An io_uring call: the fail-safe first, then the call.  Six arguments,
 * whatever the number takes, as libc's syscall reads as many. */
long shunt_syscall_uring(long number, long a, long b, long c, long d, long e, long f);
__attribute__((used)) long shunt_syscall_uring(long number, long a, long b, long c, long d, long e, long f)
{
    if (!shunt_in_vfork_child) {
        int saved = errno;
        shunt_ensure_init();
        if (!uring_seen())
            uring_note(number == __NR_io_uring_setup ? "io_uring_setup through syscall()" :
                       number == __NR_io_uring_enter ? "io_uring_enter through syscall()" :
                       "io_uring_register through syscall()");
        shunt_run_pending();   /* before the call: no ring operation may meet a channel */
        errno = saved;
    }
    return shunt_real.syscall(number, a, b, c, d, e, f);
}

#if defined(__x86_64__)
#define SYSCALL_STR_(x) #x
#define SYSCALL_STR(x) SYSCALL_STR_(x)

/* Where libc's syscall is in the table, for the jump below. */
__attribute__((used)) static void table_offsets(void)
{
    __asm__(".set shunt_real_syscall_at, %c0" : : "i"(offsetof(struct shunt_real_table, syscall)));
}

/* The number is in %rdi: io_uring's three go to the C function above, with
 * the arguments where the program put them (the sixth on the stack). */
__asm__(".text\n"
        ".globl syscall\n"
        ".type syscall,@function\n"
        "syscall:\n"
        "    endbr64\n"
        "    lea -" SYSCALL_STR(__NR_io_uring_setup) "(%rdi), %rax\n"
        "    cmp $2, %rax\n"
        "    jbe shunt_syscall_uring\n"
        "    jmp *shunt_real+shunt_real_syscall_at(%rip)\n"
        ".size syscall, .-syscall\n");
#else
SHUNT_EXPORT long syscall(long number, ...)
{
    va_list ap;
    va_start(ap, number);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if ((unsigned long)(number - __NR_io_uring_setup) <= 2)
        return shunt_syscall_uring(number, a, b, c, d, e, f);
    return shunt_real.syscall(number, a, b, c, d, e, f);
}
#endif
