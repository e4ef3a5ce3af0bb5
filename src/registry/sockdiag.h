/*
 * sockdiag.h: asks the kernel (NETLINK_SOCK_DIAG) about one TCP socket.
 * The server uses it to check that an offer really belongs to the
 * connection it accepted: the client socket's inode for that exact 4-tuple
 * must be the one the offer names, and its owner the same user.
 */
#ifndef SHUNT_SOCKDIAG_H
#define SHUNT_SOCKDIAG_H

#include <stdint.h>
#include <sys/types.h>

#include "registry/registry.h"

/* Looks up the TCP socket whose local end is src and remote end is dst.
 * 0 with *inode and *uid set, -ENOENT if there is none, or a negative errno. */
int sockdiag_lookup(const struct reg_addr *src, const struct reg_addr *dst, uint64_t *inode, uid_t *uid);

#endif
