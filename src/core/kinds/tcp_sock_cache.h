/*
 * tcp_sock_cache.h: a few TCP socket objects kept after their last
 * reference, for the next socket() or accept() (tcp_sock_cache.c).
 */
#ifndef SHUNT_CORE_TCP_SOCK_CACHE_H
#define SHUNT_CORE_TCP_SOCK_CACHE_H

#include "core/fd/tcp_sock.h"

/* A zeroed object: a cached one, or calloc's; NULL without memory. */
struct tcp_sock *tcp_sock_cache_get(void);

/* Takes back an object nothing refers to any more (its mutexes destroyed). */
void tcp_sock_cache_put(struct tcp_sock *t);

#endif
