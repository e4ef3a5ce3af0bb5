/*
 * real.h: the table of libc's own implementations of every intercepted call.
 * shunt reaches the kernel only through this table, never through its own
 * wrappers.  Before dlsym has answered, each entry points at a stand-in that
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

/* Replaces the stand-ins by what dlsym(RTLD_NEXT) finds; called once by init. */
void shunt_real_resolve(void);

#endif
