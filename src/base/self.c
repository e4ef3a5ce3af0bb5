/*
 * self.c: the process's identity and settings as shunt keeps them
 * (self.h); written by start-up (interpose/init.c) and after fork.
 */
#include "base/self.h"

pid_t shunt_pid;
struct shunt_settings shunt_settings;
