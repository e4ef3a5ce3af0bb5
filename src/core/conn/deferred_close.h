/*
 * deferred_close.h: a close while other threads' calls wait on the socket
 * (see deferred_close.c).
 */
#ifndef SHUNT_CORE_DEFERRED_CLOSE_H
#define SHUNT_CORE_DEFERRED_CLOSE_H

#include <stdbool.h>

#include "core/fd/tcp_sock.h"

/* The last fd closes: true when calls of ours wait on t, so the close is
 * put off until they return (the caller then lets go of nothing). */
bool deferred_close_hold(struct tcp_sock *t, int fd);
/* Calls fn on every socket whose close is put off, with the fd of its
 * private copy (a reference held meanwhile; never under the list's lock). */
void deferred_close_each(void (*fn)(struct tcp_sock *t, int own_fd));
/* exit: every put-off close is finished now */
void deferred_close_at_exit(void);
/* the child after fork forgets them */
void deferred_close_after_fork_child(void);

/* A call that waited ends (f->blocked): the last such call after a close
 * of the socket's last fd finishes that close. */
void deferred_close_call_done(struct tcp_sock *t, struct fdref *f);

/* The private copies of such sockets (core/conn/private_fds.h): whether fd
 * is one, all of them (at most max, unsorted; never more than
 * DEFERRED_CLOSE_MAX), and the program's dup2 onto one (moved: true). */
#define DEFERRED_CLOSE_MAX 64
bool deferred_close_owns(int fd);
int deferred_close_fds(int *out, int max);
bool deferred_close_relocate(int fd);

#endif
