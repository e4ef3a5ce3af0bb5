/*
 * short_conns.h: whether a connection is likely to live long enough to pay
 * for its channel, judged from the connections this process made to the
 * same destination before (short_conns.c).
 */
#ifndef SHUNT_CORE_CONN_SHORT_CONNS_H
#define SHUNT_CORE_CONN_SHORT_CONNS_H

#include <stdbool.h>
#include <stdint.h>

#include "registry/registry.h"

/* True if a new connection to dst should stay on kernel TCP (fallback
 * reason "short"): its recent connections were all too short to pay for a
 * channel.  *sample: this one is the next sample, whose data calls are
 * counted on kernel TCP and judged at its close (short_conns_record). */
bool short_conns_skip(const struct reg_addr *dst, bool *sample);

/* An accelerated connection this process made to dst ends, having made
 * sends and recvs data calls and moved bytes bytes through the channel at
 * this end. */
void short_conns_record(const struct reg_addr *dst, uint64_t sends, uint64_t recvs, uint64_t bytes);

#endif
