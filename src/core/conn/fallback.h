/*
 * fallback.h: why a connection is on kernel TCP (enum fallback_reason, in
 * core/fd/tcp_sock.h), recorded once per socket and shown by SHUNT_LOG and
 * `shunt stat`.
 */
#ifndef SHUNT_CORE_CONN_FALLBACK_H
#define SHUNT_CORE_CONN_FALLBACK_H

#include <stdatomic.h>
#include <stdbool.h>

#include "core/fd/tcp_sock.h"

const char *fallback_reason_name(enum fallback_reason r);
/* A short key for the reason (no_listener, no_offer...), as `shunt stat` shows it. */
const char *fallback_reason_key(enum fallback_reason r);

/* Puts t on kernel TCP for this reason.  should_have: it would have been
 * accelerated but for this; under SHUNT_STRICT the socket must then fail
 * (t->strict_failed), and the reason goes to standard error. */
void fallback_record(struct tcp_sock *t, int fd, enum fallback_reason why, bool should_have);

/* Bumped each time a socket of this process goes to kernel TCP (here, a
 * fabric end's forget, a downgrade): an epoll set then hands such members
 * back to the kernel before it asks the kernel (epoll_look.c). */
extern atomic_uint fallback_leaves;
/* Counts t's move to kernel TCP, only if an epoll set holds it: a process
 * making many kernel-TCP connections makes its sets look at nothing. */
static inline void fallback_count_leave(struct tcp_sock *t)
{
    if (atomic_load_explicit(&t->epoll_entries, memory_order_relaxed))
        atomic_fetch_add(&fallback_leaves, 1);
}

/* The same for a connection kept without an object (fdt_install_kernel_sock):
 * its log line only; never strict (should_have is false for all such). */
void fallback_note(int fd, enum fallback_reason why);

#endif
