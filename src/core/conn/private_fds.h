/*
 * private_fds.h: the fds shunt keeps for itself in the program's fd space:
 * the local wake (core/wait/local_wake.c), the private copies of sockets
 * closed while calls wait on them (deferred_close.c) and the wake FIFOs
 * epoll sets keep (core/wait/xwake.c).  The program's close of one fails
 * with EBADF, as it would without shunt, close_range goes around them, and
 * the program's dup2 onto one moves it first.
 */
#ifndef SHUNT_CORE_CONN_PRIVATE_FDS_H
#define SHUNT_CORE_CONN_PRIVATE_FDS_H

#include <stdbool.h>

/* Whether fd is one of them. */
bool private_fd_is(int fd);

/* Them, sorted, at most max; there are never more than PRIVATE_FDS_MAX. */
#define PRIVATE_FDS_MAX 160
int private_fds_list(int *out, int max);

/* The program's dup2/dup3 onto fd: if fd is one of them, moves it to
 * another number first (true if it did). */
bool private_fd_relocate(int fd);

/* The program's call to make an fd failed with EMFILE: gives back, where
 * shunt can, a number of the program's range that one of them holds (true:
 * the call may be tried again). */
bool private_fds_yield(void);

#endif
