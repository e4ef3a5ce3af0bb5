/*
 * sockstat.h: what this process tells `shunt stat` about its TCP sockets,
 * and the connection id its log lines carry.  Written at state changes
 * only (listen, connect, accept, fallback, claim, dup, close, fork, exec,
 * an fd received), never on the data path; see registry/procstat.h for
 * the table itself.
 */
#ifndef SHUNT_SOCKSTAT_H
#define SHUNT_SOCKSTAT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/fd/tcp_sock.h"

/* Records t at fd (and at the other fds of this process that hold it).
 * kind and role: 0 keeps what was recorded; dst: a connecting client's
 * destination, for the peer address until the kernel knows it. */
void sockstat_publish(struct tcp_sock *t, int fd, unsigned kind, unsigned role, const struct sockaddr *dst,
                      socklen_t dstlen);

/* Records fd, a connection on kernel TCP for good that has no object
 * (fdt_install_kernel_sock): role, why, and a client's destination. */
void sockstat_publish_kernel(int fd, unsigned role, enum fallback_reason why, const struct sockaddr *dst,
                             socklen_t dstlen);

/* A socket found by probing (after exec, or received with SCM_RIGHTS). */
void sockstat_inherited(struct tcp_sock *t, int fd);

/* newfd is a duplicate of fd. */
void sockstat_dup(int fd, int newfd);

void sockstat_after_fork_child(void);
void sockstat_at_exit(void);

#endif
