/*
 * self.h: what every layer may ask about the process it runs in: its pid
 * as shunt last saw it (set at start-up and in the child of fork), and the
 * settings it was started with (loaded once, base/settings.h).
 */
#ifndef SHUNT_BASE_SELF_H
#define SHUNT_BASE_SELF_H

#include <sys/types.h>

#include "base/settings.h"

/* A different getpid() means we run in a vfork child, which shares the
 * parent's memory. */
extern pid_t shunt_pid;

/* All zero (acceleration off) until start-up has read the environment. */
extern struct shunt_settings shunt_settings;

#endif
