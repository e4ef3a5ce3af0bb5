/*
 * raw_clone.h: a process made by the clone system call itself (libc's
 * clone(), or clone/clone3 through syscall()), not by fork, vfork or
 * posix_spawn: shunt does not follow into it, so the connections it
 * inherits move back to kernel TCP first, and it passes every call through
 * (raw_clone.c says why).
 */
#ifndef SHUNT_CORE_PROCESS_RAW_CLONE_H
#define SHUNT_CORE_PROCESS_RAW_CLONE_H

#include <stdbool.h>

/* Before the clone of this thread with these flags: false for one that
 * shares the memory (CLONE_VM: a thread, or a vfork made by hand), which
 * is left alone; else every accelerated connection of the process has
 * moved back to kernel TCP (reason "raw_clone"; the other end follows),
 * nothing new is accelerated until raw_clone_after, and this thread's
 * copy of memory says "pass every call through", which the new process
 * keeps.  The caller holds none of shunt's locks; errno is kept. */
bool raw_clone_before(unsigned long flags);

/* After it, in the caller (result: what the clone returned; 0 is the new
 * process on this stack, which keeps passing through).  Only when
 * raw_clone_before said true; errno is kept. */
void raw_clone_after(long result);

#endif
