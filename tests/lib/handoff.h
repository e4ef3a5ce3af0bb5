/*
 * handoff.h: helpers of the tests that hand an accelerated socket to a program that does not
 * run shunt (exec without LD_PRELOAD, SCM_RIGHTS to such a process): the environment without
 * the preload, re-executing this test program in it, and asking shunt whether an fd is still
 * accelerated.
 */
#ifndef SHUNT_TESTS_HANDOFF_H
#define SHUNT_TESTS_HANDOFF_H

#include "check.h"

#include <dlfcn.h>
#include <unistd.h>

extern char **environ;

/* environ without LD_PRELOAD (a static array: the caller execs right after). */
static inline char **env_without_shunt(void)
{
	static char *env[512];
	size_t n = 0;

	for (char **e = environ; *e && n < 511; e++)
		if (strncmp(*e, "LD_PRELOAD=", 11) != 0)
			env[n++] = *e;
	env[n] = NULL;
	return env;
}

/* 1 or 0 as shunt says for fd; -1 when shunt is not loaded. */
static inline int accelerated_now(int fd)
{
	int (*accelerated)(int);

	*(void **)&accelerated = dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
	return accelerated ? accelerated(fd) : -1;
}

/* In the exec'd program: shunt must not be there. */
static inline void expect_no_shunt(void)
{
	if (dlsym(RTLD_DEFAULT, "shunt_fd_accelerated") != NULL)
		FAIL("libshunt.so is loaded in a program exec'd without it");
}

/* Re-executes this test program (argv[0]) with args, without shunt; returns only on error. */
static inline void exec_self_without_shunt(char *const args[])
{
	fflush(NULL);
	execve("/proc/self/exe", args, env_without_shunt());
	fprintf(stderr, "exec /proc/self/exe: %s\n", strerror(errno));
	_exit(1);
}

/* In accelerated mode the connection left the channel: shunt says 0 now. */
static inline void expect_downgraded(int fd)
{
	if (test_mode() == TEST_MODE_PLAIN)
		return;
	CHECK(accelerated_now(fd), ==, 0);
}

#endif
