/*
 * xwake.h: waking the sleepers of one end that run in other processes
 * holding the same socket (after fork, or SCM_RIGHTS), when something
 * changes that no doorbell announces: a shutdown, or a move back to TCP by
 * another holder of the end.  The kernel's shutdown wakes every waiter of
 * the socket, whichever process it is in.
 */
#ifndef SHUNT_XWAKE_H
#define SHUNT_XWAKE_H

#include "core/kinds/tcp_socket.h"

/* Whether another process holds t's end (only then is there a wake FIFO
 * to watch). */
bool xwake_shared(struct tcp_sock *t);

/* Before a sleeper's last look at the end's state: the end's wake FIFO
 * opened for reading when another process holds the end, else -1.  It
 * reports POLLHUP (EPOLLHUP) once a wake was sent after this open, and
 * nothing before.  xwake_close after the sleep. */
int xwake_open(struct tcp_sock *t);
void xwake_close(int xfd);

/* The end's state changed: every sleeper of it that opened the FIFO
 * before now, in any process, wakes and looks again. */
void xwake_send(struct tcp_sock *t);

/*
 * An epoll set keeps the FIFO of a member that waits idle (cold) open and
 * registered in its kernel set, for as long as it stays cold.  Those fds
 * are shunt's: kept near the top of the fd limit, and the program's close,
 * close_range, closefrom and dup2 go around them (private_fd_is*).
 * xwake_keep opens t's FIFO (whoever holds the end) and returns a handle
 * (-1: none, or XWAKE_KEPT_MAX are kept already); xwake_kept_fd its number
 * now; xwake_drop closes it.
 */
#define XWAKE_KEPT_MAX 64
int xwake_keep(struct tcp_sock *t);
int xwake_kept_fd(int h);
void xwake_drop(int h);

/* The numbers of the kept fds (at most max, unsorted); whether fd is one;
 * the program's dup2 onto one moves it (true if it did). */
int xwake_kept_fds(int *out, int max);
bool xwake_kept_is(int fd);
bool xwake_kept_relocate(int fd);

/* In the child after fork: the copies of the parent's kept fds close. */
void xwake_after_fork_child(void);

#endif
