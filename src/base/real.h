/*
 * real.h: the table of libc's own implementations of every intercepted call
 * (the calls of calls.def).  shunt calls through it wherever it means libc
 * and the kernel rather than its own wrapper; the few places that want the
 * wrapper (the _FORTIFY_SOURCE variants, stdio's cookie streams) call the
 * function by its name, and calls nobody intercepts (open, mmap) are made
 * directly.  Before dlsym has answered, each entry points at a stand-in that
 * makes the system call directly (see real.c), so the table is usable from
 * the very first instruction of the process.
 */
#ifndef SHUNT_REAL_H
#define SHUNT_REAL_H

#include "base/sys_headers.h"

struct shunt_real_table {
#define SHUNT_SYS(ret, name, params, args, sysno) ret (*name) params;
#define SHUNT_LIB(ret, name, params) ret (*name) params;
#include "base/calls.def"
#undef SHUNT_SYS
#undef SHUNT_LIB
};

extern struct shunt_real_table shunt_real;

/* Replaces the stand-ins by what dlsym(RTLD_NEXT) finds; called once, by
 * start-up (interpose/init.c). */
void shunt_real_resolve(void);

#endif
