/*
 * real.h: the table of libc's own implementations of every intercepted call
 * (the calls of calls.def).  shunt calls through it wherever it means libc
 * and the kernel rather than its own wrapper; the few places that want the
 * wrapper (the _FORTIFY_SOURCE variants, stdio's cookie streams) call the
 * function by its name, and calls nobody intercepts (open, mmap) are made
 * directly.  Before dlsym has answered, each entry points at a stand-in that
 * makes the system call directly (see real.c), so the table is usable from
 * the very first instruction of the process.
 */
#ifndef SHUNT_REAL_H
#define SHUNT_REAL_H

#include "base/sys_headers.h"

struct shunt_real_table {
#define SHUNT_SYS(ret, name, params, args, sysno) ret (*name) params;
#define SHUNT_LIB(ret, name, params) ret (*name) params;
#include "base/calls.def"
#undef SHUNT_SYS
#undef SHUNT_LIB
};

extern struct shunt_real_table shunt_real;

/* Replaces the stand-ins by what dlsym(RTLD_NEXT) finds; called once, by
 * start-up (interpose/init.c). */
void shunt_real_resolve(void);

/*
 * A system call made directly, as libc's syscall() makes it (up to six
 * arguments, each read as a long; -1 and errno on failure).  shunt's own
 * code uses this, never syscall(): inside libshunt.so syscall() is shunt's
 * wrapper (a seccomp filter may come through it, interpose/sandbox_calls.c),
 * and the stand-ins must not reach a wrapper at all.
 */
long shunt_syscall_va(long nr, ...);
/* Six arguments are always passed, those not given as 0: the callee reads
 * six, and reading past what a caller passed is undefined (ASan reports
 * it as a stack-buffer-underflow). */
#define shunt_syscall(...) shunt_syscall_va(__VA_ARGS__, 0L, 0L, 0L, 0L, 0L, 0L)

/* shunt_real.syscall again, for interpose/sandbox_calls.c's syscall(): a
 * jump through it without a frame of shunt's, as if the program had called
 * libc's (set with the table). */
extern long (*shunt_syscall_next)(long nr, ...);

/* Takes up to n queued bytes off a TCP socket without copying them
 * anywhere (MSG_TRUNC, tcp(7)), never waiting: what recv would answer.
 * The system call itself: a sanitizer's recv would take the bytes
 * discarded for bytes written at the (absent) buffer. */
static inline ssize_t shunt_discard(int fd, size_t n)
{
    return (ssize_t)shunt_syscall(SYS_recvfrom, fd, 0L, (long)n, MSG_TRUNC | MSG_DONTWAIT, 0L, 0L);
}

/* As much as shunt_discard may be asked at once. */
#define SHUNT_DISCARD_ALL ((size_t)1 << 30)

#endif
