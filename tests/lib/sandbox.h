/*
 * sandbox.h: seccomp filters of the kind sandboxed programs install (OpenSSH's pre-authentication
 * child, systemd's SystemCallFilter=, a container runtime), for the tests of shunt under them.
 *
 * Owns: sandbox_filter(), a filter that stops the system calls shunt makes for itself and a
 * program that only moves bytes on sockets it already has never makes (eventfd2, unlink,
 * fcntl F_DUPFD, openat, mknodat, ftruncate, fallocate, fchmod, link, memfd_create, socket,
 * getdents64, readlinkat, kill, rt_tgsigqueueinfo, process_vm_readv, dup3, a MAP_SHARED mmap),
 * with one action, and lets everything else through (read, write, recv, send, poll, ppoll, epoll,
 * futex, close, shutdown, clone, wait4, exit_group...); sandbox_install() in each of the ways a
 * program installs one, libseccomp's included. x86_64 only, as shunt is.
 */
#ifndef SHUNT_TESTS_SANDBOX_H
#define SHUNT_TESTS_SANDBOX_H

#include "check.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SANDBOX_MAX_INSNS 96

struct sandbox_filter {
	struct sock_filter insn[SANDBOX_MAX_INSNS];
	unsigned short len;
};

static inline void sandbox_emit(struct sandbox_filter *f, struct sock_filter insn)
{
	CHECK(f->len, <, SANDBOX_MAX_INSNS);
	f->insn[f->len++] = insn;
}

#define SANDBOX_ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))

/*
 * The filter: action (SECCOMP_RET_KILL_PROCESS, SECCOMP_RET_TRAP, SECCOMP_RET_ERRNO | e...) for
 * the calls a program that only moves bytes never makes; with openat false, open and openat are
 * let through (a program about to exec needs them, and the loader after it).
 */
static inline void sandbox_filter(struct sandbox_filter *f, unsigned action, int openat)
{
	static const int denied[] = {
		SYS_eventfd2, SYS_eventfd, SYS_unlink, SYS_unlinkat, SYS_mknod, SYS_mknodat,
		SYS_ftruncate, SYS_fallocate, SYS_fchmod, SYS_link, SYS_linkat, SYS_memfd_create,
		SYS_getdents64, SYS_readlinkat, SYS_kill, SYS_rt_tgsigqueueinfo, SYS_process_vm_readv,
		SYS_dup3, SYS_rename, SYS_renameat, SYS_renameat2,
	};

	f->len = 0;
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
	sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
	for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
		sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)denied[i], 0, 1));
		sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, action));
	}
	if (openat) {
		sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_open, 1, 0));
		sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat, 0, 1));
		sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, action));
	}
	/* socket: every family but the ones the tests use (a netlink socket is shunt's) */
	sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 4));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SANDBOX_ARG_LO(0)));
	sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 1, 0));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, action));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
	/* fcntl: F_DUPFD and F_DUPFD_CLOEXEC (shunt's fds near the top of the limit) */
	sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fcntl, 0, 5));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SANDBOX_ARG_LO(1)));
	sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_DUPFD, 1, 0));
	sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_DUPFD_CLOEXEC, 0, 1));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, action));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
	/* mmap: a shared mapping (a new segment in /dev/shm) */
	sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 0, 4));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SANDBOX_ARG_LO(3)));
	sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, MAP_SHARED, 0, 1));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, action));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
}

/* A filter that refuses one call nobody here makes (acct) with EPERM: shunt can live with it. */
static inline void sandbox_filter_harmless(struct sandbox_filter *f)
{
	f->len = 0;
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
	sandbox_emit(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_acct, 0, 1));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
	sandbox_emit(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
}

/* How the program installs it: libc's prctl, or the seccomp system call through libc's
 * syscall() (what libseccomp's seccomp_load does). */
enum sandbox_how { SANDBOX_PRCTL, SANDBOX_SYSCALL };

static inline void sandbox_install(const struct sandbox_filter *f, enum sandbox_how how)
{
	struct sock_fprog prog = { f->len, (struct sock_filter *)f->insn };

	CHECK_OK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
	if (how == SANDBOX_PRCTL)
		CHECK_OK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog));
	else
		CHECK_OK(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
}

/*
 * libseccomp's way (seccomp_init, seccomp_rule_add, seccomp_load: it asks the kernel with
 * syscall(SYS_seccomp) whether the call exists and which flags it takes, then installs with it):
 * a filter that allows everything but acct, which kills. Through dlopen, so that the tests need
 * no headers; 0 if libseccomp.so.2 is not there.
 */
static inline int sandbox_install_libseccomp_harmless(void)
{
	void *h = dlopen("libseccomp.so.2", RTLD_NOW);
	void *(*init)(uint32_t);
	int (*add)(void *, uint32_t, int, unsigned int, ...);
	int (*load)(void *);

	if (h == NULL)
		return 0;
	*(void **)&init = dlsym(h, "seccomp_init");
	*(void **)&add = dlsym(h, "seccomp_rule_add");
	*(void **)&load = dlsym(h, "seccomp_load");
	CHECK(init != NULL && add != NULL && load != NULL, ==, 1);
	void *ctx = init(SECCOMP_RET_ALLOW);
	CHECK(ctx != NULL, ==, 1);
	CHECK(add(ctx, SECCOMP_RET_KILL_PROCESS, SYS_acct, 0), ==, 0);
	CHECK(load(ctx), ==, 0);
	return 1;
}

#endif /* SHUNT_TESTS_SANDBOX_H */
