/*
 * copy.h: the byte copy of the ring's copies in and out (ring.c).
 */
#ifndef SHUNT_COPY_H
#define SHUNT_COPY_H

#include <stddef.h>

/* memcpy's contract (no overlap); large blocks go through a vector loop
 * where the CPU has one (see copy.c for why). */
void ring_copy(void *dst, const void *src, size_t n);

#endif
