/*
 * sandbox.h: shunt in a process under a seccomp filter (sandbox.c): the
 * filter a process installs is judged before the kernel gets it, a filter
 * a process starts with is probed, and a process whose filter would refuse
 * shunt's own calls gets shunt out of its way (base/self.h, SANDBOXED).
 */
#ifndef SHUNT_CORE_PROCESS_SANDBOX_H
#define SHUNT_CORE_PROCESS_SANDBOX_H

/* Start-up, before anything else that makes a system call of shunt's own:
 * a process that starts under a filter (inherited across exec) is probed
 * (SHUNT_SANDBOX_PROBE) and sandboxed unless the probe says every call of
 * shunt's runs. */
void sandbox_at_start(void);

/* The program is about to install a filter: mode is SECCOMP_MODE_STRICT or
 * SECCOMP_MODE_FILTER (prog: the program's struct sock_fprog pointer, not
 * read yet); any other mode installs nothing and changes nothing.  A filter
 * that would refuse one of shunt's calls (and strict mode always) makes the
 * process sandboxed now, before the kernel has it. */
void sandbox_before_filter(unsigned long mode, const void *prog);

#endif
