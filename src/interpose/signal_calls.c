/*
 * signal_calls.c: wrappers for sigaction and signal, so that the program's
 * handlers run behind shunt's trampoline (core/signals.c).
 */
#include <string.h>

#include "core/signals.h"
#include "interpose/wrap.h"

SHUNT_EXPORT int sigaction(int sig, const struct sigaction *restrict act, struct sigaction *restrict oact)
{
    shunt_ensure_init();
    return signals_sigaction(sig, act, oact);
}

/* glibc's signal(): BSD semantics (SA_RESTART, the signal blocked in its
 * own handler). */
SHUNT_EXPORT __sighandler_t signal(int sig, __sighandler_t handler)
{
    shunt_ensure_init();
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART;
    sigemptyset(&act.sa_mask);
    if (sig > 0 && sig < NSIG)
        sigaddset(&act.sa_mask, sig);
    if (signals_sigaction(sig, &act, &old) < 0)
        return SIG_ERR;
    return old.sa_handler;
}
