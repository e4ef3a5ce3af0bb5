/*
 * sockdiag.h: asks the kernel (NETLINK_SOCK_DIAG) about one TCP socket, or
 * about the peer of a Unix socket.
 * The server uses it to check that an offer really belongs to the
 * connection it accepted: the client socket's inode for that exact 4-tuple
 * must be the one the offer names, and its owner the same user.  `shunt
 * stat` asks it for the counters of connections on kernel TCP; the close of
 * a listener whether another process still listens on it (in the
 * listener's namespace only: a question sees the asking thread's).  Before an
 * SCM_RIGHTS send of an accelerated socket, the peer of the Unix socket
 * says whose hands it will reach (core/process/runs_shunt.c).
 */
#ifndef SHUNT_SOCKDIAG_H
#define SHUNT_SOCKDIAG_H

#include <linux/inet_diag.h>
#include <stdint.h>
#include <sys/types.h>

#include "registry/registry.h"

/* Looks up the TCP socket whose local end is src and remote end is dst.
 * 0 with *inode and *uid set, -ENOENT if there is none, or a negative errno. */
int sockdiag_lookup(const struct reg_addr *src, const struct reg_addr *dst, uint64_t *inode, uid_t *uid);

/* The same in the network namespace whose SO_NETNS_COOKIE is netns (0: any):
 * a sock_diag question sees only the namespace of the thread that asks, so
 * -EXDEV when that is another (a process whose sockets live in two
 * namespaces: one it made after setns, one it was handed). */
int sockdiag_lookup_in(uint64_t netns, const struct reg_addr *src, const struct reg_addr *dst, uint64_t *inode,
                       uid_t *uid);

/* SO_NETNS_COOKIE of fd's network namespace, or 0 when the kernel cannot
 * say (before Linux 5.14). */
uint64_t sockdiag_netns_cookie(int fd);

/* The inode of the socket at the other end of the Unix socket whose inode
 * is ino (UNIX_DIAG_PEER): 0 with *peer set, -ENOENT if it has no peer (a
 * datagram socket not connected, a listener), or a negative errno (no
 * unix_diag in this kernel, a lost answer). */
int sockdiag_unix_peer(uint64_t ino, uint64_t *peer);

/* Sends r (a question about TCP sockets; flags: NLM_F_DUMP or 0) on a new
 * sock_diag socket whose receives time out: the caller reads the answer and
 * closes it.  The fd, or a negative errno. */
int sockdiag_send(const struct inet_diag_req_v2 *r, uint16_t flags, uint32_t seq);

#endif
