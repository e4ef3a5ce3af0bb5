/*
 * self.h: what every layer may ask about the process it runs in: its pid
 * as shunt last saw it (set at start-up and in the child of fork), the
 * settings it was started with (loaded once, base/settings.h), and whether
 * a seccomp sandbox keeps shunt out of its way (core/process/sandbox.c).
 */
#ifndef SHUNT_BASE_SELF_H
#define SHUNT_BASE_SELF_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

#include "base/settings.h"
#include "base/tls.h"

/* A different getpid() means we run in a vfork child, which shares the
 * parent's memory. */
extern pid_t shunt_pid;

/* All zero (acceleration off) until start-up has read the environment. */
extern struct shunt_settings shunt_settings;

/*
 * The process and seccomp.  SANDBOX_NONE: shunt works as usual (no filter,
 * or only filters that allow every call shunt makes).  SANDBOX_LEAVING: a
 * filter shunt cannot live with is about to be installed, and this
 * process's connections are moving back to kernel TCP (nothing new is
 * accelerated meanwhile).  SANDBOXED: from then on shunt makes no system
 * call of its own; every wrapper hands its call to libc as it is.  Inherited
 * by fork (the filter is too); an exec starts over (sandbox.c decides again).
 */
enum shunt_sandbox_state { SANDBOX_NONE, SANDBOX_LEAVING, SANDBOXED };
extern atomic_int shunt_sandbox;

/* Some seccomp filter is in place: inherited at start (and found harmless,
 * or the process is SANDBOXED), or installed since.  shunt then starts no
 * thread of its own: making one is a call its checks of a filter do not
 * cover (core/conn/fabric_progress.c). */
extern atomic_bool shunt_filtered;

/* This thread's process passes every call through, as a SANDBOXED one:
 * a vfork child that installed such a filter (its parent, whose memory it
 * borrows, goes on as before; interpose/vfork.c clears it when the parent
 * resumes), or a process made by a raw clone, which inherits it from the
 * thread that made it (core/process/raw_clone.c sets it there around the
 * clone, and clears it in the parent after). */
extern SHUNT_TLS bool shunt_thread_passes;

/* Raw clones under way in this process: nothing new is accelerated
 * meanwhile, since the new process would inherit it (core/process/
 * raw_clone.c). */
extern atomic_int shunt_raw_clones;
/* This thread is inside shunt's calls into the fabric engine (UCX): the
 * sockets it makes there are the engine's, never the program's
 * (interpose/socket_calls.c), and what their listeners accept too. */
extern SHUNT_TLS unsigned shunt_in_engine;
/* This thread is one of the engine's own (UCX's async thread: it waited on
 * an epoll set the engine made, interpose/epoll_calls.c): its closes of the
 * engine's fds are the engine's, not the program's (core/fd/fdtable.h,
 * FDT_OWN). */
extern SHUNT_TLS bool shunt_engine_thread;

static inline bool shunt_sandboxed(void)
{
    return atomic_load_explicit(&shunt_sandbox, memory_order_acquire) == SANDBOXED || shunt_thread_passes;
}

/* No new connection is accelerated (leaving or sandboxed). */
static inline bool shunt_sandbox_refuses(void)
{
    return atomic_load_explicit(&shunt_sandbox, memory_order_acquire) != SANDBOX_NONE;
}

#endif
