/*
 * fabric_process.h: the process's side of the fabric (issue 19): the
 * engine (UCX), opened at the first connection that needs it (about 10 ms,
 * once; a forked child opens its own, never touching its parent's), the
 * one lock over every call into it and every fabric stream (UCX's worker is
 * not thread-safe; never held across a wait), and the process's own
 * doorbell (docs/architecture.md, "Built: the connection paths").
 */
#ifndef SHUNT_CORE_CONN_FABRIC_PROCESS_H
#define SHUNT_CORE_CONN_FABRIC_PROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

struct fabric_engine;

/* The lock; the thread is inside the engine while it holds it (its sockets
 * are UCX's own: base/self.h, shunt_in_engine). */
void fabric_process_lock(void);
void fabric_process_unlock(void);
/* Held across fork, taken last before it: a child must not inherit the
 * lock held by one of its parent's other threads (it would wait for it
 * for ever; threads_fork_waiting). */
void fabric_process_fork_lock(void);
void fabric_process_fork_unlock(bool child);

/* Whether this process's engine was refused because it was forked while its
 * parent's, on lanes a child cannot be reached on, was in use (by design:
 * reason fabric_fork_busy). */
bool fabric_process_fork_refused(void);
/* Whether the fd limit leaves no room above it for the engine's fds, at a
 * limit a program may reach (by design: reason fabric_no_room). */
bool fabric_process_no_room(void);
/* Whether this process has an engine of its own open. */
bool fabric_process_has_engine(void);
/* The engine, opened if it is not (under the lock): NULL with a line in why
 * if it cannot be (no UCX, an engine error: not tried again). */
struct fabric_engine *fabric_process_engine(char *why, size_t whylen);

/* The process's doorbell: its name's random id (0: none), and the fd a
 * sleeper waits on (an epoll set of the engine's wake-up fd and the
 * doorbell's socket; the engine's fd alone if the doorbell could not be
 * made).  Both once the engine is open, under the lock. */
uint64_t fabric_process_bell_id(void);
int fabric_process_wake_fd(void);
/* Takes the doorbells that came out: before a sleeper says it sleeps (one
 * that comes after rings its sleep). */
void fabric_process_drain_bells(void);

/* Rings this process's own doorbell: every sleeper looks again (the
 * progress thread took news from the engine's fd: fabric_progress.c). */
void fabric_process_wake_self(void);

/* A proven peer's doorbell (its pid and id from its proof), and a ring. */
void fabric_process_peer_bell(struct sockaddr_un *out, uint32_t pid, uint64_t id);
void fabric_process_ring(const struct sockaddr_un *peer);

#endif
