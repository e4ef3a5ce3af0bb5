/*
 * xwake.h: waking the sleepers of one end that run in other processes
 * holding the same socket (after fork, or SCM_RIGHTS), when something
 * changes that no doorbell announces: a shutdown, or a move back to TCP by
 * another holder of the end.  The kernel's shutdown wakes every waiter of
 * the socket, whichever process it is in.
 */
#ifndef SHUNT_XWAKE_H
#define SHUNT_XWAKE_H

#include "core/tcp_socket.h"

/* What a sleeper gets for the wake: an fd to watch for POLLIN, none, or
 * XWAKE_BUSY (a wake is being emptied: sleep at most a millisecond). */
#define XWAKE_BUSY (-2)

/* Before taking the end's wait lock: the end's wake FIFO opened for
 * reading when another process holds the end, else -1. */
int xwake_open(struct tcp_sock *t);

/* Under the end's wait lock (taken shared: lk > 0): registers the sleeper
 * that opened xfd; returns xfd, XWAKE_BUSY or -1 (xfd is then closed). */
int xwake_register(struct tcp_sock *t, int lk, int xfd);

/* Under the end's wait lock: the sleeper leaves (xfd as register returned
 * it); the last one empties the FIFO.  xwake_close after the lock. */
void xwake_unregister(struct tcp_sock *t, int lk, int xfd);
void xwake_close(int xfd);

/* The end's state changed: every registered sleeper of it, in any
 * process, wakes and looks again.  Takes the end's wait lock. */
void xwake_send(struct tcp_sock *t);

#endif
