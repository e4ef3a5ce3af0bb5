/*
 * ticks.h: a cheaper clock for "has this much time passed?" asked on every
 * call of a loop: the CPU's time stamp counter where it is invariant
 * (x86-64), about 10 ns a read against the vDSO clock's 24 (measured here).
 * It is calibrated against clock_now_ns from samples its users take anyway
 * (ticks.c); until then, and where there is no such counter, ticks_per_ms
 * is 0 and callers use clock_now_ns.
 */
#ifndef SHUNT_BASE_TICKS_H
#define SHUNT_BASE_TICKS_H

#include <stdint.h>

static inline uint64_t ticks_now(void)
{
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return 0;
#endif
}

/* A moment read on both clocks, ns first. */
void ticks_sample(uint64_t ns, uint64_t ticks);

/* Ticks per millisecond once calibrated and trusted; 0 otherwise. */
uint64_t ticks_per_ms(void);

#endif
