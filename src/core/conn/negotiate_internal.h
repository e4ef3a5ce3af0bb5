/*
 * negotiate_internal.h: what the files of the negotiation share
 * (negotiate.c, negotiate_listen.c, negotiate_offer.c, negotiate_claim.c);
 * nothing outside core/conn's negotiate*.c includes it.  The public side is
 * negotiate.h.
 */
#ifndef SHUNT_CORE_CONN_NEGOTIATE_INTERNAL_H
#define SHUNT_CORE_CONN_NEGOTIATE_INTERNAL_H

#include <netinet/tcp.h>
#include <stdint.h>

#include "core/conn/negotiate.h"
#include "registry/registry.h"

#ifndef TCP_SAVE_SYN
#define TCP_SAVE_SYN 27
#endif

/* negotiate.c: a socket's inode, its addresses, its doorbells past Nagle,
 * and the registry its connection's record is in. */
uint64_t neg_fd_inode(int fd);
int neg_local_addr(int fd, struct reg_addr *out);
int neg_peer_addr(int fd, struct reg_addr *out);
void neg_companion_nodelay(int fd);
enum reg_scope neg_scope_of(const struct tcp_sock *t);

#endif
