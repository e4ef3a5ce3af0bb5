/*
 * init.h: start-up of libshunt.so.  Every wrapper calls shunt_ensure_init()
 * first, so the library is ready before the first intercepted call can use
 * it, whether that call comes from main(), from another library's
 * constructor, or from a thread started before ours ran.
 */
#ifndef SHUNT_INIT_H
#define SHUNT_INIT_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "base/self.h"

/* 0 not started, 1 running, 2 done; 3 done, and a fail-safe waits to run
 * (io_uring seen: core/process/uring_failsafe.h), which the next wrapper to
 * start runs, at no cost to the others: the check is the one every wrapper
 * makes anyway. */
extern atomic_int shunt_init_state;

void shunt_init_slow(void);

static inline void shunt_ensure_init(void)
{
    if (__builtin_expect(atomic_load_explicit(&shunt_init_state, memory_order_acquire) != 2, 0))
        shunt_init_slow();
}

/* Start-up is over (a fail-safe may be waiting). */
static inline bool shunt_initialised(void)
{
    return atomic_load_explicit(&shunt_init_state, memory_order_acquire) >= 2;
}

/* At the end of a wrapper whose own call may have asked for the fail-safe
 * (a look before a connection, an fd probed): it runs now rather than at
 * the process's next intercepted call. */
static inline void shunt_run_pending(void)
{
    if (__builtin_expect(atomic_load_explicit(&shunt_init_state, memory_order_acquire) != 2, 0)) {
        int saved = errno;
        shunt_init_slow();
        errno = saved;
    }
}

/* In a child after fork: nothing shared with the parent's threads may be held. */
void shunt_after_fork_child(void);

#endif
