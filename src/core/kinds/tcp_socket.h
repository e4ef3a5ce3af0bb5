/*
 * tcp_socket.h: the TCP socket kind: the object of a socket the program
 * creates or shunt takes up, and its operations (tcp_socket.c), which hand
 * each call to the kernel, the negotiation or the channel.  The state it
 * carries is struct tcp_sock (core/fd/tcp_sock.h).
 */
#ifndef SHUNT_CORE_KINDS_TCP_SOCKET_H
#define SHUNT_CORE_KINDS_TCP_SOCKET_H

#include "core/fd/tcp_sock.h"

/* True for the (domain, type, protocol) of a socket shunt manages. */
bool tcp_socket_wanted(int domain, int type, int protocol);

/* A new object for a socket just created by the program; one reference.
 * nonblock: the socket's O_NONBLOCK, or -1 if unknown. */
struct shunt_sock *tcp_socket_new(int fd, int domain, int nonblock);

/* An object for an fd the table has not seen (a socket with this inode),
 * or NULL if it is not a TCP socket.  An fd of an accelerated connection (inherited across exec or
 * received with SCM_RIGHTS) is attached to its channel.  passed: it just
 * arrived with SCM_RIGHTS, and the sender already counted it as a holder.
 * The fd table's probe hook (tcp_probe.c). */
struct shunt_sock *tcp_socket_probe(int fd, uint64_t inode, bool passed);

/* The object another fd of this process has for the socket with this inode
 * (fds dup'ed before an exec, or a socket received that this process already
 * holds), with one reference taken for the caller, or NULL.  The kernel has
 * one file per socket, so the fd that is new to the table shares it, as a
 * dup would: one object per socket keeps one hold on its channel, one
 * O_NONBLOCK and one set of local locks.  A passed fd gives back the hold
 * its sender counted in, which this process already had. */
struct shunt_sock *tcp_socket_share(int fd, uint64_t inode, bool passed);

/* The object of a socket kept LAZY in the fd table (fdtable.h), from what
 * the entry kept. */
struct shunt_sock *tcp_socket_make(int fd, uintptr_t lazy);

/* The fd table's LAZY value for a new socket of these (tcp_socket_wanted). */
uintptr_t tcp_socket_lazy(int domain, int type);

/* connect() on a LAZY fd: the connection's plan without an object; kernel
 * TCP for good from its first byte keeps it without one (KERNEL_SOCK).
 * False: the object's way is to be taken (nothing was done). */
bool tcp_connect_lazy(int fd, uintptr_t lazy, const struct sockaddr *a, socklen_t len, int *r);

/* A first connect whose negotiation (negotiate_offer, or its planned half)
 * has run: the kernel's connect, and what follows from its answer. */
int tcp_connect_negotiated(struct fdref *f, const struct sockaddr *a, socklen_t len);

/* The program waits on this socket (epoll, poll, select): a listener it
 * inherited from the process that registered it is registered for this
 * process too, before the first connection arrives (pre-forked workers
 * wait in epoll, not in accept). */
void tcp_socket_watched(struct shunt_sock *s, int fd);

/* 1 if the connection on this object runs on an accelerated path. */
int tcp_socket_accelerated(struct shunt_sock *s, int fd);

/* Records a fallback (and, under SHUNT_STRICT, says it loudly). */
void fallback_record(struct tcp_sock *t, int fd, enum fallback_reason why, bool should_have);

/* Start-up: the fd table takes up the sockets it has not seen through this
 * kind (tcp_probe.c). */
void tcp_socket_init(void);

#endif
