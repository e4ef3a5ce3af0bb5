/*
 * idle_common.h: what bench/idle_conns.c and bench/shm_idle.c (the
 * idle-connections experiment and its control without shunt) share: the
 * message and batch sizes, dying with errno, the clock, sorting batches.
 */
#ifndef SHUNT_BENCH_IDLE_COMMON_H
#define SHUNT_BENCH_IDLE_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"

#define MSG 64
#define BATCH 1000

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

#endif
