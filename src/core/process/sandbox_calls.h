/*
 * sandbox_calls.h: the system calls shunt makes of its own accord (the
 * ones a program's call does not simply become), each with the arguments a
 * seccomp filter may judge as shunt passes them.  What a filter is asked
 * about (sandbox_filter.c) and what the probe of an inherited filter tries
 * (sandbox_probe.c), so that both judge the same list.
 */
#ifndef SHUNT_CORE_PROCESS_SANDBOX_CALLS_H
#define SHUNT_CORE_PROCESS_SANDBOX_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* refusable: a filter may answer with an errno and shunt copes */
#define SANDBOX_MUST_RUN 0        /* it must run */
#define SANDBOX_ANY_ERRNO (-1)    /* any errno (the feature it serves turns itself off) */

struct sandbox_call {
    const char *name;
    int nr;
    uint8_t fixed;        /* bit i: args[i] is what shunt passes; the other arguments vary */
    int16_t refusable;    /* SANDBOX_MUST_RUN, SANDBOX_ANY_ERRNO, or the one errno shunt copes with */
    bool makes_fd;        /* the probe's call opens an fd, which it closes */
    /* The fixed arguments; the others are what the probe passes: a bad fd,
     * a null or bad address, a zero length, so that the kernel answers at
     * once (never EPERM, EACCES or ENOSYS, the answers of filters) */
    uint64_t args[6];
};

extern const struct sandbox_call sandbox_calls[];
extern const size_t sandbox_call_count;

/* An errno a filter may have put in the place of the kernel's answer to
 * the probe's call i (EPERM, EACCES, ENOSYS) that shunt does not cope
 * with. */
bool sandbox_call_refused(size_t i, int err);

#endif
