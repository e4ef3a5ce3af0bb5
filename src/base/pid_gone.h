/*
 * pid_gone.h: whether a process of this pid namespace has ended.
 */
#ifndef SHUNT_BASE_PID_GONE_H
#define SHUNT_BASE_PID_GONE_H

#include <stdbool.h>
#include <stdint.h>

/* Whether the process pid is gone or a zombie (its fds closed already):
 * its /proc entry's state.  An entry that cannot be read counts as alive. */
bool pid_gone(uint32_t pid);

#endif
