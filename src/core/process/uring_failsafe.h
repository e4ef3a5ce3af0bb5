/*
 * uring_failsafe.h: what happens once io_uring is seen in this process
 * (core/fd/uring_watch.h): shunt cannot see a ring's I/O, so every
 * connection of the process moves back to kernel TCP and none becomes
 * accelerated again.
 */
#ifndef SHUNT_CORE_PROCESS_URING_FAILSAFE_H
#define SHUNT_CORE_PROCESS_URING_FAILSAFE_H

/* Moves every accelerated (or offered) connection of this process back to
 * kernel TCP with the downgrade protocol (its bytes exact; the other end
 * follows, reason "downgraded"), records the reason "io_uring", and
 * withdraws this process's listeners from the registry.  Idempotent; the
 * caller holds none of shunt's locks (start of an intercepted call, or the
 * syscall wrapper before an io_uring call).  Nothing in a vfork child. */
void uring_failsafe_run(void);

#endif
