/*
 * deny.h: makes one system call fail with ENOSYS in this process from now
 * on (a seccomp filter), as on a kernel without it or in a container that
 * refuses it.
 */
#ifndef SHUNT_TESTS_DENY_H
#define SHUNT_TESTS_DENY_H

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "check.h"

static inline void deny_syscall(unsigned nr)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof f / sizeof f[0], f };

	CHECK_OK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
	CHECK_OK(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
}

#endif
