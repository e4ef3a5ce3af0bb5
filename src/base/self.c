/*
 * self.c: the process's identity, settings and sandbox state as shunt keeps
 * them (self.h); written by start-up (interpose/init.c), after fork, and
 * when a seccomp filter comes (core/process/sandbox.c).
 */
#include "base/self.h"

pid_t shunt_pid;
struct shunt_settings shunt_settings;
atomic_int shunt_sandbox;
atomic_bool shunt_filtered;
SHUNT_TLS bool shunt_thread_passes;
atomic_int shunt_raw_clones;
SHUNT_TLS unsigned shunt_in_engine;
SHUNT_TLS bool shunt_engine_thread;
