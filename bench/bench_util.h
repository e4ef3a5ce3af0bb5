/*
 * bench_util.h: what the measuring programs of bench/ share: dying with the
 * failed call's name, and the monotonic clock in nanoseconds.
 */
#ifndef SHUNT_BENCH_UTIL_H
#define SHUNT_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
