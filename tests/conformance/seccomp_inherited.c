/* seccomp_inherited: a program that starts with a seccomp filter already installed (inherited
 * across exec, as under systemd's SystemCallFilter= or a container runtime's profile) works
 * under shunt, whatever the filter refuses, and keeps acceleration when the filter allows what
 * shunt needs.
 *
 * Each round forks a child that holds one end of an accelerated connection with bytes unread
 * both ways, installs a filter and execs this program again (the filter goes along). The new
 * image reads what the parent had sent, connects a second time to the parent's listener (and
 * waits for the parent's accept before it sends there), exchanges data on both connections,
 * forks, and exits. The parent checks every byte and that
 * the child exited with 0.
 *   refusing  the filter kills the process on shunt's own calls (eventfd2, unlink, fcntl F_DUPFD,
 *             a MAP_SHARED mmap, a netlink socket...); open and openat stay allowed for the
 *             loader.  Accelerated: the new connection stays on kernel TCP, and so does the
 *             inherited one (moved back before the filter came).
 *   harmless  the filter refuses one call shunt never makes (acct): accelerated, the new
 *             connection is accelerated at both ends and the inherited one stays so.
 *   vfork     as refusing, with the filter installed by a vfork child before its exec (which
 *             shares the parent's memory: shunt must change nothing of the parent's but the
 *             connection that leaves). */
#include "check.h"
#include "handoff.h"
#include "net.h"
#include "sandbox.h"

#include <stdlib.h>

#define PRE 100000
#define BULK 2000000
#define SEED_OLD 51       /* parent to child on the first connection */
#define SEED_OLD_UP 52
#define SEED_NEW 53       /* child to parent on the second */

enum round { REFUSING, HARMLESS, VFORK, ROUNDS };
static const char *const names[ROUNDS] = { "refusing", "harmless", "vfork" };

static char buf[PRE + BULK];

/* Whether a connection made under a filter that lets shunt's calls run is accelerated: in the
 * modes that accelerate, the fabric's too (an inherited one left the fabric at the exec). */
static int new_accelerates(void)
{
	return test_mode_accelerated() || test_mode() == TEST_MODE_FABRIC;
}

static int exec_child(enum round r, int fd, int port)
{
	int fresh;

	/* what the parent sent before the exec, then what it sends after */
	xread_exact(fd, buf, PRE + BULK);
	CHECK_PATTERN(SEED_OLD, 0, buf, PRE + BULK);
	if (test_mode() != TEST_MODE_PLAIN)
		CHECK(accelerated_now(fd), ==, r == HARMLESS && test_mode_accelerated());
	pattern_fill(SEED_OLD_UP, 0, buf, BULK);
	xwrite_all(fd, buf, BULK);

	fresh = tcp_connect(AF_INET, port);
	/* the parent has accepted: a send of BULK before that would wait on full socket buffers
	 * over a veth (crossns), and a claim cannot settle while a send waits (compatibility.md,
	 * "claim did not settle"); over loopback the kernel took it all at once */
	xread_exact(fresh, buf, 2);
	CHECK(memcmp(buf, "go", 2), ==, 0);
	pattern_fill(SEED_NEW, 0, buf, BULK);
	xwrite_all(fresh, buf, BULK);
	xread_exact(fresh, buf, 4);
	CHECK(memcmp(buf, "done", 4), ==, 0);
	/* the server has claimed it (or not) by now */
	if (test_mode() != TEST_MODE_PLAIN)
		CHECK(accelerated_now(fresh), ==, r == HARMLESS && new_accelerates());

	pid_t pid = CHECK_OK(fork());
	if (pid == 0)
		_exit(0);
	xwait_child_ok(pid);
	CHECK_OK(close(fresh));
	CHECK_OK(close(fd));
	return 0;
}

static void round_trip(enum round r, const char *self)
{
	struct sandbox_filter f;
	char fdarg[16], portarg[16], roundarg[16];
	int c, s, lfd, port, fresh;
	pid_t pid;

	tcp_pair_checked(AF_INET, &c, &s);
	lfd = tcp_listen(AF_INET, &port);
	pattern_fill(SEED_OLD, 0, buf, PRE);
	xwrite_all(s, buf, PRE);   /* unread when the filter comes */
	fflush(NULL);
	if (r == HARMLESS)
		sandbox_filter_harmless(&f);
	else
		sandbox_filter(&f, SECCOMP_RET_KILL_PROCESS, 0);
	snprintf(fdarg, sizeof(fdarg), "%d", c);
	snprintf(portarg, sizeof(portarg), "%d", port);
	snprintf(roundarg, sizeof(roundarg), "%d", (int)r);
	fflush(NULL);
	if (r == VFORK) {
		/* the child borrows this process's memory: it only closes, installs and execs */
		struct sock_fprog prog = { f.len, f.insn };
		pid = vfork();
		if (pid == 0) {
			close(s);
			close(lfd);
			if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
			    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0)
				execl(self, self, "--exec-child", roundarg, fdarg, portarg, (char *)NULL);
			_exit(3);
		}
		CHECK_OK(pid);
	} else {
		pid = CHECK_OK(fork());
		if (pid == 0) {
			CHECK_OK(close(s));
			CHECK_OK(close(lfd));
			sandbox_install(&f, r == HARMLESS ? SANDBOX_SYSCALL : SANDBOX_PRCTL);
			execl(self, self, "--exec-child", roundarg, fdarg, portarg, (char *)NULL);
			FAIL("exec %s: %s", self, strerror(errno));
		}
	}
	CHECK_OK(close(c));
	sleep_ms(30);
	pattern_fill(SEED_OLD, PRE, buf, BULK);
	xwrite_all(s, buf, BULK);
	xread_exact(s, buf, BULK);
	CHECK_PATTERN(SEED_OLD_UP, 0, buf, BULK);

	fresh = CHECK_OK(accept(lfd, NULL, NULL));
	xwrite_all(fresh, "go", 2);
	xread_exact(fresh, buf, BULK);
	CHECK_PATTERN(SEED_NEW, 0, buf, BULK);
	/* (after its first bytes: on the fabric a server's end is decided at its first byte) */
	if (test_mode() != TEST_MODE_PLAIN)
		CHECK(accelerated_now(fresh), ==, r == HARMLESS && new_accelerates());
	xwrite_all(fresh, "done", 4);
	CHECK(read(fresh, buf, 1), ==, 0);
	CHECK(read(s, buf, 1), ==, 0);
	xwait_child_ok(pid);
	if (r != HARMLESS)
		expect_downgraded(s);
	CHECK_OK(close(fresh));
	CHECK_OK(close(s));
	CHECK_OK(close(lfd));
	fprintf(stderr, "round %s: ok\n", names[r]);
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "--exec-child") == 0)
		return exec_child((enum round)atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	for (int r = 0; r < ROUNDS; r++)
		round_trip((enum round)r, "/proc/self/exe");
	PASS();
}
