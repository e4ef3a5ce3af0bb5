/*
 * signals.h: signal handlers of the program and shunt's critical sections.
 *
 * A handler that calls socket functions on a socket its thread is in the
 * middle of using would find shunt's locks taken by the very thread it
 * interrupted.  So shunt installs the program's handlers behind a
 * trampoline (signal_calls.c), and while a thread is inside a critical
 * section (a per-direction lock, the wait lock, a socket's lock) a signal
 * for it is deferred: it is sent again, with its siginfo, the moment the
 * section ends, a few hundred instructions later.  The cost on the data
 * path is a thread-local increment and decrement around each section.
 *
 * The trampoline also counts handlers that ran on each thread, so that a
 * blocked call can end with EINTR when one ran while it spun in user space,
 * as the kernel's call would (or go on, under SA_RESTART).
 */
#ifndef SHUNT_SIGNALS_H
#define SHUNT_SIGNALS_H

#include <pthread.h>
#include <stdatomic.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>

#include "base/tls.h"

extern SHUNT_TLS unsigned shunt_crit;          /* critical sections this thread is in */
extern SHUNT_TLS unsigned shunt_sig_deferred;  /* signals waiting for the end of them */
extern SHUNT_TLS unsigned shunt_sig_ran;       /* handlers run on this thread */
extern SHUNT_TLS unsigned shunt_sig_ran_norestart;   /* ... of which without SA_RESTART */

void signals_run_deferred(void);

static inline void crit_enter(void)
{
    shunt_crit++;
    atomic_signal_fence(memory_order_seq_cst);   /* the count is up before the lock is taken */
}

static inline void crit_leave(void)
{
    atomic_signal_fence(memory_order_seq_cst);   /* the lock is released before the count goes down */
    if (--shunt_crit == 0 && __builtin_expect(shunt_sig_deferred != 0, 0))
        signals_run_deferred();
}

/* A pthread mutex taken inside a critical section. */
static inline void crit_lock(pthread_mutex_t *m)
{
    crit_enter();
    pthread_mutex_lock(m);
}

static inline void crit_unlock(pthread_mutex_t *m)
{
    pthread_mutex_unlock(m);
    crit_leave();
}

/* A blocked call that started when shunt_sig_ran was ran_before: 0 to go
 * on waiting, or -EINTR because a handler ran meanwhile and the kernel's
 * call would have been interrupted (no SA_RESTART, or the socket has a
 * timeout: such calls are never restarted). */
static inline int signal_interrupts(unsigned ran_before, unsigned norestart_before, bool has_timeout)
{
    if (__builtin_expect(shunt_sig_ran == ran_before, 1))
        return 0;
    return shunt_sig_ran_norestart != norestart_before || has_timeout ? -EINTR : 0;
}

/* The handlers a blocking call has seen, counted from its start, not from
 * each of its sleeps: a handler that runs anywhere in the call (in a spin,
 * between two sleeps, as a sleep's time runs out) ends it as the kernel's
 * call would be ended.  Counted from each sleep, one that ran between a
 * futex sleep's timeout and the next sleep was lost, and the call slept on
 * (eintr_spin, once in about 60 calls). */
struct call_sig {
    unsigned ran, norestart;
};

static inline void call_sig_start(struct call_sig *cs)
{
    cs->ran = shunt_sig_ran;
    cs->norestart = shunt_sig_ran_norestart;
}

static inline bool call_sig_new(const struct call_sig *cs)
{
    return shunt_sig_ran != cs->ran;
}

/* -EINTR if a handler the call has not yet answered ends it; 0 to go on
 * (none, or SA_RESTART: the call restarts, and that handler is answered). */
static inline int call_sig_interrupts(struct call_sig *cs, bool has_timeout)
{
    int r = signal_interrupts(cs->ran, cs->norestart, has_timeout);
    if (r == 0)
        call_sig_start(cs);
    return r;
}

/* sigaction and signal as the program calls them (signal_calls.c). */
int signals_sigaction(int sig, const struct sigaction *act, struct sigaction *oact);

#endif
