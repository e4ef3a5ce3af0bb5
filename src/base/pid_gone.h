/*
 * pid_gone.h: whether a process of this pid namespace has ended, and whether
 * /proc can tell.
 */
#ifndef SHUNT_BASE_PID_GONE_H
#define SHUNT_BASE_PID_GONE_H

#include <stdbool.h>
#include <stdint.h>

/* Whether the process pid is gone or a zombie (its fds closed already):
 * its /proc entry's state.  An entry that cannot be read counts as alive,
 * and so does a missing one where /proc is not there at all. */
bool pid_gone(uint32_t pid);

/* Whether /proc is there to ask: not so in a chroot without it (vsftpd's
 * sessions, sshd's privilege separation), where every /proc/<pid> is
 * missing and says nothing of the process. */
bool proc_mounted(void);

#endif
