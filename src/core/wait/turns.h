/*
 * turns.h: taking turns on a crowded CPU (turns.c).
 */
#ifndef SHUNT_CORE_TURNS_H
#define SHUNT_CORE_TURNS_H

#include <stdint.h>

/* At the start of an epoll, poll or select that may block (not one with a
 * zero timeout): yields when the calling thread has run SHUNT_YIELD_US
 * without sleeping or yielding. */
void turn_take(void);

/* The calling thread gave the CPU away at now (a kernel sleep ended then). */
void turn_gave_way(uint64_t now);

/* A spin's yield: a thread queued on this CPU runs first (now: the spin's
 * last look at the clock). */
void turn_spin_yield(uint64_t now);

/* This thread's yields of turn_take (the "turns_given" counter). */
long long turn_count(void);

#endif
