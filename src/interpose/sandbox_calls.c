/*
 * sandbox_calls.c: wrappers for the ways a seccomp filter comes in:
 * prctl(PR_SET_SECCOMP), the seccomp system call through syscall() (what
 * libseccomp's seccomp_load does) or through the prctl system call, and a
 * libc's seccomp().  Before the kernel gets the filter, core/process/
 * sandbox.c decides what shunt keeps; the call itself is then the program's,
 * unchanged.
 *
 * syscall() is also how programs reach io_uring (libc has no wrapper for
 * its calls): libuv (Node.js, uvloop), Rust's io-uring crate, most C
 * programs that do not link liburing.  A ring's I/O never passes through
 * libc, so before io_uring_setup, io_uring_enter or io_uring_register goes
 * ahead, every connection of the process moves back to kernel TCP
 * (core/fd/uring_watch.h, core/process/uring_failsafe.c).
 *
 * clone and clone3 through syscall() make a process shunt does not follow
 * (vsftpd's sessions, container tools): the trampoline jumps to
 * process_calls.c for them, but for a clone that shares the memory
 * (CLONE_VM in its flags, %esi), which goes to libc's without a frame of
 * shunt's, as before: a vfork made by hand returns twice through the same
 * stack.
 *
 * Every other prctl and system call goes straight through: syscall() is on
 * hot paths of some programs (futexes, gettid, getrandom), so it costs five
 * compares before a jump to libc's.
 */
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "core/fd/uring_watch.h"
#include "core/process/sandbox.h"
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
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
_Static_assert(__NR_io_uring_enter == __NR_io_uring_setup + 1 && __NR_io_uring_register == __NR_io_uring_setup + 2,
               "io_uring's three calls are consecutive numbers");

/* The mode a seccomp() operation installs (0: none).  Strict mode takes
 * no flags and no argument: libseccomp asks with flags 1 whether the
 * system call exists, and the kernel answers EINVAL. */
static unsigned long seccomp_op_mode(unsigned long op, unsigned long flags, const void *args)
{
    if (op == SECCOMP_SET_MODE_STRICT)
        return flags == 0 && !args ? SECCOMP_MODE_STRICT : 0;
    return op == SECCOMP_SET_MODE_FILTER ? SECCOMP_MODE_FILTER : 0;
}

SHUNT_EXPORT int prctl(int option, ...)
{
    va_list ap;
    va_start(ap, option);
    unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
    unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
    va_end(ap);
    if (__builtin_expect(option == PR_SET_SECCOMP, 0)) {
        int saved = errno;
        shunt_ensure_init();
        sandbox_before_filter(a2, (const void *)a3);
        errno = saved;
    }
    return shunt_real.prctl(option, a2, a3, a4, a5);
}

/* An io_uring call: the fail-safe first (at its end, through
 * shunt_run_pending), so that no ring operation meets a channel.  Not in a
 * vfork child (its parent's table), nor in a sandboxed process (its
 * connections left with the sandbox; it makes no call of shunt's own). */
static void before_uring(long number)
{
    if (shunt_in_vfork_child)
        return;
    int saved = errno;
    shunt_ensure_init();
    if (!shunt_sandboxed()) {
        if (!uring_seen())
            uring_note(number == __NR_io_uring_setup ? "io_uring_setup through syscall()" :
                       number == __NR_io_uring_enter ? "io_uring_enter through syscall()" :
                       "io_uring_register through syscall()");
        shunt_run_pending();
    }
    errno = saved;
}

/* The seccomp system call, the prctl one, or one of io_uring's, through
 * syscall(): the trampoline below comes here (a frame of shunt's is
 * harmless for them). */
long shunt_syscall_slow(long number, long a1, long a2, long a3, long a4, long a5, long a6);

__attribute__((used)) long shunt_syscall_slow(long number, long a1, long a2, long a3, long a4, long a5, long a6)
{
    if ((unsigned long)(number - __NR_io_uring_setup) <= 2) {
        before_uring(number);
    } else if (number == SYS_seccomp || a1 == PR_SET_SECCOMP) {
        int saved = errno;
        shunt_ensure_init();
        if (number == SYS_seccomp)
            sandbox_before_filter(seccomp_op_mode((unsigned long)a1, (unsigned long)a2, (const void *)a3),
                                  (const void *)a3);
        else
            sandbox_before_filter((unsigned long)a2, (const void *)a3);
        errno = saved;
    }
    return shunt_real.syscall(number, a1, a2, a3, a4, a5, a6);
}

/*
 * syscall(): every other number goes on to libc's by a jump, with the
 * program's registers and stack as they were, so that shunt adds no frame
 * (a raw clone or vfork made through syscall() returns twice through the
 * same stack) and reads no argument it was not given.  x86_64, as vfork.c.
 * io_uring's three numbers are one unsigned compare of the number less the
 * first (in %r11, a scratch register at a call and clobbered by the
 * syscall instruction anyway: %rax holds a variadic call's count of vector
 * registers).
 */
#define SANDBOX_STR_(x) #x
#define SANDBOX_STR(x) SANDBOX_STR_(x)
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl syscall\n"
        ".type syscall,@function\n"
        "syscall:\n"
        "    endbr64\n"
        "    cmp $" SANDBOX_STR(SYS_seccomp) ", %rdi\n"
        "    je shunt_syscall_slow\n"
        "    cmp $" SANDBOX_STR(SYS_prctl) ", %rdi\n"
        "    je shunt_syscall_slow\n"
        "    cmp $" SANDBOX_STR(SYS_clone) ", %rdi\n"
        "    jne 1f\n"
        "    test $" SANDBOX_STR(CLONE_VM) ", %esi\n"
        "    jz shunt_syscall_clone\n"
        "    jmp *shunt_syscall_next(%rip)\n"
        "1:\n"
        "    cmp $" SANDBOX_STR(__NR_clone3) ", %rdi\n"
        "    je shunt_syscall_clone\n"
        "    lea -" SANDBOX_STR(__NR_io_uring_setup) "(%rdi), %r11\n"
        "    cmp $2, %r11\n"
        "    jbe shunt_syscall_slow\n"
        "    jmp *shunt_syscall_next(%rip)\n"
        ".size syscall, .-syscall\n");
#else
#error "syscall() needs a trampoline for this architecture"
#endif

SHUNT_EXPORT int seccomp(unsigned int op, unsigned int flags, void *args)
{
    int saved = errno;
    shunt_ensure_init();
    sandbox_before_filter(seccomp_op_mode(op, flags, args), args);
    errno = saved;
    return shunt_real.seccomp(op, flags, args);
}
