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
    return shunt_real.syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, tmo, NULL, 0) < 0 ? -errno : 0;
}

static inline void futex_wake_all(atomic_uint *word)
{
    shunt_real.syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* spin.c: spins until ready(t) or the spin gives up (false). */
bool wait_spin(struct tcp_sock *t, ready_fn ready);

/* local_wake.c, under wait_lock: a kernel sleeper registers for the local
 * wake (LW_ON, *efd to watch), or is told it is busy or absent. */
int local_wake_register(struct tcp_sock *t, int *efd);
void local_wake_unregister(struct tcp_sock *t, int lw);

/* blocked_calls.c, under wait_lock: this call now waits (*blocked, once). */
void blocked_calls_count(struct tcp_sock *t, bool *blocked);

#endif
