/* seccomp_sandbox: a process that installs a seccomp filter in the middle of an accelerated
 * connection, as OpenSSH's pre-authentication child does, goes on with its sockets: shunt makes
 * no system call of its own that the filter refuses, so the process is never killed, and every
 * byte arrives exactly, also the bytes that were in the rings when the filter came.
 *
 * Each round forks a child that holds one end of a fresh connection (an epoll set watches it),
 * has slept on it, has read part of what the parent sent and sent part of its own, then installs
 * a filter and carries on: reads the rest and more (blocking, then with poll and epoll), sends
 * more than a ring holds, forks (the grandchild exits), shuts down, reads to EOF and exits. The
 * parent (not sandboxed) checks every byte and that the child exited with 0.
 *   kill     the filter kills the process on shunt's own calls (eventfd2, unlink, fcntl
 *            F_DUPFD, openat, a MAP_SHARED mmap...), installed with prctl; exit()
 *   trap     the same with SIGSYS (SECCOMP_RET_TRAP), installed with syscall(SYS_seccomp);
 *            _exit()
 *   strict   SECCOMP_MODE_STRICT: read, write and exit only
 *   harmless a filter that refuses one call shunt never makes (acct): the connection stays
 *            accelerated
 *   libseccomp the same through libseccomp's seccomp_load (which first asks the kernel with
 *            seccomp(SECCOMP_SET_MODE_STRICT, 1, NULL), an invalid call that installs nothing),
 *            when libseccomp.so.2 is there
 * Accelerated: after a filter that refuses shunt's calls the connection is on kernel TCP (moved
 * back before the filter came); after the harmless one it is still accelerated. */
#include "check.h"
#include "handoff.h"
#include "net.h"
#include "sandbox.h"

#include <stdbool.h>
#include <sys/epoll.h>

#define PRE 200000        /* sent by each side before the filter, read after it */
#define BULK 3000000      /* more than a ring: sends wait for the reader */
#define SEED_DOWN 41      /* parent to child */
#define SEED_UP 42        /* child to parent */

enum round { KILL, TRAP, STRICT, HARMLESS, LIBSECCOMP, ROUNDS };
static const char *const names[ROUNDS] = { "kill", "trap", "strict", "harmless", "libseccomp" };

static char buf[PRE + BULK];

/* STRICT allows read, write and exit only: the pieces of the child that need nothing else. */
static void strict_child(int fd)
{
	xread_exact(fd, buf, PRE / 2 + BULK);
	CHECK_PATTERN(SEED_DOWN, PRE / 2, buf, PRE / 2 + BULK);
	pattern_fill(SEED_UP, PRE, buf, BULK);
	xwrite_all(fd, buf, BULK);
	syscall(SYS_exit, 0);
}

static void child(enum round r, int fd, int ep)
{
	struct sandbox_filter f;
	struct epoll_event ev;
	char small[4];

	/* a blocking read that sleeps (the parent answers late): shunt's waits are set up */
	xread_exact(fd, small, 4);
	CHECK(memcmp(small, "ping", 4), ==, 0);
	/* half of what the parent sent is read now, the rest stays in the ring */
	xread_exact(fd, buf, PRE / 2);
	CHECK_PATTERN(SEED_DOWN, 0, buf, PRE / 2);
	pattern_fill(SEED_UP, 0, buf, PRE);
	xwrite_all(fd, buf, PRE);

	if (r == STRICT) {
		fflush(NULL);
		CHECK_OK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT));
		strict_child(fd);
	}
	bool stays = r == HARMLESS || r == LIBSECCOMP;
	if (r == LIBSECCOMP) {
		if (!sandbox_install_libseccomp_harmless())
			fprintf(stderr, "round libseccomp: no libseccomp.so.2, no filter\n");
	} else {
		if (r == HARMLESS)
			sandbox_filter_harmless(&f);
		else
			sandbox_filter(&f, r == KILL ? SECCOMP_RET_KILL_PROCESS : SECCOMP_RET_TRAP, 1);
		sandbox_install(&f, r == KILL ? SANDBOX_PRCTL : SANDBOX_SYSCALL);
	}
	if (test_mode() != TEST_MODE_PLAIN)
		CHECK(accelerated_now(fd), ==, stays && test_mode_accelerated());

	xread_exact(fd, buf, PRE / 2);
	CHECK_PATTERN(SEED_DOWN, PRE / 2, buf, PRE / 2);
	/* the parent sends BULK after a pause: poll, then epoll, see it come */
	CHECK(wait_fd(fd, POLLIN, NET_WAIT_MS) & POLLIN, !=, 0);
	CHECK(epoll_wait(ep, &ev, 1, NET_WAIT_MS), ==, 1);
	CHECK(ev.events & EPOLLIN, !=, 0);
	CHECK(ev.data.u64, ==, 0x5eccull << 32 | (unsigned)fd);
	xread_exact(fd, buf, BULK);
	CHECK_PATTERN(SEED_DOWN, PRE, buf, BULK);
	pattern_fill(SEED_UP, PRE, buf, BULK);
	xwrite_all(fd, buf, BULK);

	pid_t pid = CHECK_OK(fork());
	if (pid == 0)
		_exit(0);
	xwait_child_ok(pid);
	CHECK_OK(shutdown(fd, SHUT_WR));
	CHECK(read(fd, small, 1), ==, 0);
	CHECK_OK(close(fd));
	if (r == TRAP)
		_exit(0);
	exit(0);
}

static void round_trip(enum round r)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int c, s, ep;
	pid_t pid;

	tcp_pair_checked(AF_INET, &c, &s);
	ep = CHECK_OK(epoll_create1(0));
	ev.data.u64 = 0x5eccull << 32 | (unsigned)c;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(s));
		child(r, c, ep);
	}
	CHECK_OK(close(c));
	CHECK_OK(close(ep));
	sleep_ms(30);
	xwrite_all(s, "ping", 4);
	pattern_fill(SEED_DOWN, 0, buf, PRE);
	xwrite_all(s, buf, PRE);
	xread_exact(s, buf, PRE);
	CHECK_PATTERN(SEED_UP, 0, buf, PRE);
	sleep_ms(30);
	pattern_fill(SEED_DOWN, PRE, buf, BULK);
	xwrite_all(s, buf, BULK);
	xread_exact(s, buf, BULK);
	CHECK_PATTERN(SEED_UP, PRE, buf, BULK);
	CHECK(read(s, buf, 1), ==, 0);
	CHECK_OK(shutdown(s, SHUT_WR));
	xwait_child_ok(pid);
	if (r == KILL || r == TRAP)
		expect_downgraded(s);
	CHECK_OK(close(s));
	fprintf(stderr, "round %s: ok\n", names[r]);
}

int main(void)
{
	for (int r = 0; r < ROUNDS; r++)
		round_trip((enum round)r);
	PASS();
}
