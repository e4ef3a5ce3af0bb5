/*
 * downgrade_points.h: the moments at which ends of accelerated connections
 * leave for a program without shunt (downgrade_points.c); the move itself
 * is core/conn/downgrade.c's.
 */
#ifndef SHUNT_CORE_PROCESS_DOWNGRADE_POINTS_H
#define SHUNT_CORE_PROCESS_DOWNGRADE_POINTS_H

#include <stdbool.h>
#include <stddef.h>

/* Before exec: every accelerated socket that survives it moves back to
 * TCP if the new program will not run shunt (arguments as below). */
void downgrade_before_exec(const char *path, int fd, char *const envp[], bool search);

/* Before a program without shunt gets this process's Unix sockets (exec,
 * posix_spawn): accelerated sockets in messages already queued on them
 * move back to TCP (a vfork child cannot: it must not touch our table). */
void downgrade_queued_before_exec(void);

/* Looks up every open fd, so that an accelerated socket this image
 * inherited and never used is attached (and may move back). */
void downgrade_take_up_inherited(void);

/* In a vfork child: every accelerated socket of its own fds that survives
 * exec moves back to TCP, as before an exec into a program without shunt,
 * without changing the parent's table. */
void downgrade_vfork_child_leave(void);

/* Before sendmsg with SCM_RIGHTS on unix_fd: every accelerated socket among
 * fds moves back to TCP unless the receiver is known to run shunt.  named:
 * the message has a destination address of its own (msg_name). */
void downgrade_sending(const int *fds, size_t n, int unix_fd, bool named);

#endif
