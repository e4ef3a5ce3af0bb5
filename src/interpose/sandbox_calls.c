/*
 * sandbox_calls.c: wrappers for the ways a seccomp filter comes in:
 * prctl(PR_SET_SECCOMP), the seccomp system call through syscall() (what
 * libseccomp's seccomp_load does) or through the prctl system call, and a
 * libc's seccomp().  Before the kernel gets the filter, core/process/
 * sandbox.c decides what shunt keeps; the call itself is then the program's,
 * unchanged.  Every other prctl and system call goes straight through:
 * syscall() is on hot paths of some programs (futexes), so it costs two
 * compares before a jump to libc's.
 */
#include <linux/seccomp.h>
#include <stdarg.h>
#include <sys/prctl.h>

#include "core/process/sandbox.h"
#include "interpose/wrap.h"

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

/* The seccomp system call, or the prctl one, through syscall(): the
 * trampoline below comes here (a frame of shunt's is harmless for them). */
long shunt_syscall_slow(long number, long a1, long a2, long a3, long a4, long a5, long a6);

__attribute__((used)) long shunt_syscall_slow(long number, long a1, long a2, long a3, long a4, long a5, long a6)
{
    if (number == SYS_seccomp || a1 == PR_SET_SECCOMP) {
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
