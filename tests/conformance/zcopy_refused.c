/* zcopy_refused: when the kernel refuses the single copy, large transfers still arrive
 * exactly (the ring carries them) and the refusal is recorded for that direction. Two
 * refusals, each with a forked receiver: EPERM (the sender is not dumpable and the receiver
 * lacks CAP_SYS_PTRACE, as under ptrace restrictions) and ENOSYS (a seccomp filter of the
 * receiver, as in a container). Accelerated: shunt_counter(sender, "zc_off") names the
 * reason (1 EPERM, 2 ENOSYS). */
#include "check.h"
#include "settings.h"
#include "net.h"
#include "deny.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#define BIG (2u * 1024 * 1024)
#define ROUNDS 4
#define SEED 95

static char buf[BIG];

static void drop_ptrace_cap(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	CHECK_OK(syscall(SYS_capget, &h, d));
	d[0].effective &= ~(1u << CAP_SYS_PTRACE);
	d[0].permitted &= ~(1u << CAP_SYS_PTRACE);
	CHECK_OK(syscall(SYS_capset, &h, d));
}

static void run(int how, long long reason)
{
	int c, s;
	pid_t pid;

	tcp_pair_checked(AF_INET, &c, &s);
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		uint64_t off = 0;

		CHECK_OK(close(c));
		if (how == 1)
			drop_ptrace_cap();
		else
			deny_syscall(SYS_process_vm_readv);
		while (off < (uint64_t)ROUNDS * BIG) {
			ssize_t n = read(s, buf, BIG);

			CHECK(n, >, 0);
			CHECK_PATTERN(SEED + how, off, buf, (size_t)n);
			off += (uint64_t)n;
		}
		CHECK(write(s, "k", 1), ==, 1);
		_exit(0);
	}
	CHECK_OK(close(s));
	if (how == 1)
		CHECK_OK(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0));
	for (uint64_t r = 0; r < ROUNDS; r++) {
		pattern_fill(SEED + how, r * BIG, buf, BIG);
		CHECK(write_all(c, buf, BIG), ==, (ssize_t)BIG);
	}
	xread_exact(c, buf, 1);
	CHECK(buf[0], ==, 'k');
	xwait_child_ok(pid);
	if (how == 1)
		CHECK_OK(prctl(PR_SET_DUMPABLE, 1, 0, 0, 0));
	if (test_mode_accelerated())
		CHECK(shunt_counter(c, "zc_off"), ==, reason);
	CHECK_OK(close(c));
}

int main(void)
{
	/* single copy is off by default (docs/benchmarks.md, the sweep): on at its old default */
	test_setting("SHUNT_ZCOPY_THRESHOLD", "256K");
	run(1, 1);
	run(2, 2);
	PASS();
}
