/*
 * deferred_close.h: a close while other threads' calls wait on the socket
 * (see deferred_close.c).
 */
#ifndef SHUNT_CORE_DEFERRED_CLOSE_H
#define SHUNT_CORE_DEFERRED_CLOSE_H

#include <stdbool.h>

#include "core/kinds/tcp_socket.h"

/* The last fd closes: true when calls of ours wait on t, so the close is
 * put off until they return (the caller then lets go of nothing). */
bool deferred_close_hold(struct tcp_sock *t, int fd);
/* exit: every put-off close is finished now */
void deferred_close_at_exit(void);
/* the child after fork forgets them */
void deferred_close_after_fork_child(void);

#endif
