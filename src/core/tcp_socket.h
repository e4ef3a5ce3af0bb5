/*
 * tcp_socket.h: the kind of socket shunt manages: AF_INET and AF_INET6
 * stream sockets.
 */
#ifndef SHUNT_TCP_SOCKET_H
#define SHUNT_TCP_SOCKET_H

#include "core/sock.h"

/* True for the (domain, type, protocol) of a socket shunt manages. */
bool tcp_socket_wanted(int domain, int type, int protocol);

/* A new object for a socket just created by the program; one reference. */
struct shunt_sock *tcp_socket_new(int fd, int domain);

/* An object for an fd the table has not seen, or NULL if it is not a TCP socket. */
struct shunt_sock *tcp_socket_probe(int fd);

/* 1 if the connection on this object runs on an accelerated path. */
int tcp_socket_accelerated(const struct shunt_sock *s);

#endif
