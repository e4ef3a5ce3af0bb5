/*
 * ticks.c: calibrates the time stamp counter against the monotonic clock
 * from pairs of readings callers take anyway (ticks.h), so no thread ever
 * waits to measure it.  The first pair is the base; the first later pair
 * between 2 ms and 1 s after it gives the rate (shorter is imprecise, longer
 * could overflow the product below: the base moves on instead).
 *
 * Trusted only where the CPU says its counter is invariant (constant rate
 * in every power state).  A thread that moves to a CPU whose counter is
 * behind reads a difference that wraps to a huge value: its user takes the
 * time as passed, which is the safe answer for every user (ask the kernel
 * now); one whose counter is ahead makes the time pass early.  Each thread
 * keeps its own base, so a pair is never half another thread's; the rate,
 * once one thread found it, is everybody's.  A rate no CPU has (under
 * 100 MHz or over 10 GHz: a counter that stopped or jumped) is never used.
 */
#include <stdatomic.h>
#include <stdbool.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "base/ticks.h"
#include "base/tls.h"

#define CALIBRATE_MIN_NS (2u * 1000u * 1000u)
#define CALIBRATE_MAX_NS (1000u * 1000u * 1000u)

#define RATE_MIN (100u * 1000u)          /* ticks per ms: 100 MHz */
#define RATE_MAX (10u * 1000u * 1000u)   /* 10 GHz */

static SHUNT_TLS uint64_t base_ns, base_ticks;
static _Atomic uint64_t rate;   /* ticks per ms; UINT64_MAX: never usable */
static _Atomic int invariant;   /* 0 unknown, 1 yes, -1 no */

static bool counter_invariant(void)
{
    int v = atomic_load_explicit(&invariant, memory_order_relaxed);
    if (v == 0) {
        v = -1;
#if defined(__x86_64__)
        unsigned a, b, c, d;
        if (__get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8)))
            v = 1;
#endif
        atomic_store_explicit(&invariant, v, memory_order_relaxed);
    }
    return v > 0;
}

void ticks_sample(uint64_t ns, uint64_t ticks)
{
    if (atomic_load_explicit(&rate, memory_order_relaxed) || !counter_invariant())
        return;
    if (base_ns == 0 || ns <= base_ns || ns - base_ns > CALIBRATE_MAX_NS || ticks <= base_ticks) {
        base_ticks = ticks;
        base_ns = ns;
        return;
    }
    if (ns - base_ns < CALIBRATE_MIN_NS)
        return;
    /* (ticks - base_ticks) < 2^64 / 10^6 for any counter under 18 GHz over 1 s */
    uint64_t r = (ticks - base_ticks) * 1000000u / (ns - base_ns);
    atomic_store_explicit(&rate, r >= RATE_MIN && r <= RATE_MAX ? r : UINT64_MAX, memory_order_relaxed);
}

uint64_t ticks_per_ms(void)
{
    uint64_t r = atomic_load_explicit(&rate, memory_order_relaxed);
    return r == UINT64_MAX ? 0 : r;
}
