/*
 * clock.h: the monotonic clock in nanoseconds, read by spins, deadlines and
 * the turns a thread gives (no system call: the vDSO answers).
 */
#ifndef SHUNT_BASE_CLOCK_H
#define SHUNT_BASE_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t timespec_ns(const struct timespec *ts)
{
    return (uint64_t)ts->tv_sec * 1000000000u + (uint64_t)ts->tv_nsec;
}

static inline struct timespec ns_timespec(uint64_t ns)
{
    return (struct timespec){ (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
}

#endif
