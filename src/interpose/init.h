/*
 * init.h: start-up of libshunt.so.  Every wrapper calls shunt_ensure_init()
 * first, so the library is ready before the first intercepted call can use
 * it, whether that call comes from main(), from another library's
 * constructor, or from a thread started before ours ran.
 */
#ifndef SHUNT_INIT_H
#define SHUNT_INIT_H

#include <stdatomic.h>
#include <sys/types.h>

#include "base/self.h"

extern atomic_int shunt_init_state;   /* 0 not started, 1 running, 2 done */

void shunt_init_slow(void);

static inline void shunt_ensure_init(void)
{
    if (__builtin_expect(atomic_load_explicit(&shunt_init_state, memory_order_acquire) != 2, 0))
        shunt_init_slow();
}

/* In a child after fork: nothing shared with the parent's threads may be held. */
void shunt_after_fork_child(void);

#endif
