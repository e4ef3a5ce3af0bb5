/*
 * signal_calls.c: wrappers for sigaction and signal, so that the program's
 * handlers run behind shunt's trampoline (base/signals.c).
 */
#include <string.h>

#include "base/signals.h"
#include "interpose/wrap.h"

/* libc's own, by its other name: reachable before shunt is initialised. */
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *oact);

/* A sigaction before shunt's start-up has run (a sanitizer's runtime
 * installs its handlers while it initialises, before anything else may
 * run, and reaches us as the next sigaction) goes straight to libc and does
 * not start shunt: there is no socket yet whose locks a handler could meet.
 * Neither function is instrumented by ThreadSanitizer: its runtime, preloaded
 * into a program that is not, starts inside our constructor and calls
 * sigaction before its own state exists, so the entry hook the compiler
 * adds to an instrumented function faulted (make SANITIZE=thread). */
__attribute__((no_sanitize_thread)) static int early(int sig, const struct sigaction *act, struct sigaction *oact)
{
    return __sigaction(sig, act, oact);
}

__attribute__((no_sanitize_thread)) SHUNT_EXPORT int sigaction(int sig, const struct sigaction *restrict act,
                                                              struct sigaction *restrict oact)
{
    if (!shunt_initialised())
        return early(sig, act, oact);
    return signals_sigaction(sig, act, oact);
}

/* glibc's signal(): BSD semantics (SA_RESTART, the signal blocked in its
 * own handler). */
SHUNT_EXPORT __sighandler_t signal(int sig, __sighandler_t handler)
{
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART;
    sigemptyset(&act.sa_mask);
    if (sig > 0 && sig < NSIG)
        sigaddset(&act.sa_mask, sig);
    if (sigaction(sig, &act, &old) < 0)
        return SIG_ERR;
    return old.sa_handler;
}
