/*
 * holders.h: how many processes hold each end of a channel, kept in step
 * with fork, vfork/posix_spawn, exec, SCM_RIGHTS and exit (who counts whom:
 * holders.c); the same passes mark the listeners a child or a receiver may
 * now hold too.
 */
#ifndef SHUNT_CORE_PROCESS_HOLDERS_H
#define SHUNT_CORE_PROCESS_HOLDERS_H

#include <stddef.h>

void holders_before_fork(void);
void holders_after_fork(void);
void holders_fork_failed(void);
void holders_after_fork_child(void);
void holders_before_spawn(void);
void holders_spawn_failed(void);
void holders_before_exec(void);
void holders_exec_failed(void);

/* sendmsg with SCM_RIGHTS: each accelerated socket in flight is held for
 * its receiver (delta +1 before sending, -1 if the send failed). */
void holders_in_flight(const int *fds, size_t n, int delta);

/* The process exits normally: let go of every channel as close would. */
void holders_at_exit(void);

#endif
