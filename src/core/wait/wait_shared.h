/*
 * wait_shared.h: what the files of core/wait/ share among themselves, and
 * nobody outside the folder includes: the process-wide wait lock, the
 * futex calls, and the steps that one file's wait takes in another's.
 */
#ifndef SHUNT_CORE_WAIT_WAIT_SHARED_H
#define SHUNT_CORE_WAIT_WAIT_SHARED_H

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/real.h"
#include "core/wait/wait.h"

/* Announcing a sleep, draining doorbells, the local wake's state and the
 * counts of calls that wait, for all sockets of this process (doorbell.c). */
extern pthread_mutex_t wait_lock;

static inline int futex_wait(atomic_uint *word, unsigned expected, const struct timespec *tmo)
{
    return shunt_syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, tmo, NULL, 0) < 0 ? -errno : 0;
}

static inline void futex_wake_all(atomic_uint *word)
{
    shunt_syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* The same on a word of a segment, which the peer's process wakes (not
 * _PRIVATE): every wait on it is bounded by the caller (sleep.c). */
static inline int futex_wait_shared(atomic_uint *word, unsigned expected, const struct timespec *tmo)
{
    return shunt_syscall(SYS_futex, word, FUTEX_WAIT, expected, tmo, NULL, 0) < 0 ? -errno : 0;
}

static inline void futex_wake_shared(atomic_uint *word)
{
    shunt_syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* The end's own futex (sleep.c, futex_sleep): what changed for its
 * sleeper is in the end's state already; it wakes, whichever process it
 * is in, and looks.  Not counted: only a shutdown or a move back to TCP
 * calls this, so one system call each time is nothing. */
static inline void futex_wake_end(struct tcp_sock *t)
{
    if (!t->ch.self)
        return;
    atomic_fetch_add(&t->ch.self->fwake, 1);
    futex_wake_shared(&t->ch.self->fwake);
}

/* doorbell.c: a blocking call of this end announces a sleep on its futex
 * (chan_side.fwake) instead of asking for a doorbell; leave takes it back
 * (and drains doorbells only if the peer counted some we did not take). */
void doorbell_enter_futex(struct tcp_sock *t, int what);
void doorbell_leave_futex(struct tcp_sock *t, int fd, int what);

/* spin.c: spins until ready(t) or the spin gives up (false); a sleep that
 * ended soon after a spin gave up says spinning pays again. */
bool wait_spin(struct tcp_sock *t, ready_fn ready);
void wait_spin_paid(struct tcp_sock *t);

/* local_wake.c, under wait_lock: a kernel sleeper registers for the local
 * wake (LW_ON, *efd to watch), or is told it is busy or absent. */
int local_wake_register(struct tcp_sock *t, int *efd);
void local_wake_unregister(struct tcp_sock *t, int lw);

/* blocked_calls.c, under wait_lock: this call now waits (*blocked, once). */
void blocked_calls_count(struct tcp_sock *t, bool *blocked);

#endif
