/* vfork_exec_downgrade: a vfork child moves a close-on-exec accelerated socket onto its stdin
 * and stdout (dup2) and execs a program without shunt, as subprocess modules and inetd-style
 * servers do: the new program reads the bytes that were waiting, then the rest, and its reply
 * arrives intact; the parent's end and the peer are on kernel TCP afterwards. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <stdlib.h>

#define PRE 8192
#define BULK 200000

static char buf[PRE + BULK];

static int plain_child(void)
{
	expect_no_shunt();
	xread_exact(0, buf, PRE + BULK);
	CHECK_PATTERN(7, 0, buf, PRE + BULK);
	pattern_fill(8, 0, buf, BULK);
	xwrite_all(1, buf, BULK);
	return 0;
}

int main(int argc, char **argv)
{
	char small[1];
	int a, sa;
	pid_t pid;

	if (argc == 2 && strcmp(argv[1], "--plain-child") == 0)
		return plain_child();

	tcp_pair_checked(AF_INET, &a, &sa);
	CHECK_OK(fcntl(a, F_SETFD, FD_CLOEXEC));
	CHECK_OK(fcntl(sa, F_SETFD, FD_CLOEXEC));
	pattern_fill(7, 0, buf, PRE);
	xwrite_all(sa, buf, PRE);   /* waiting, unread, at the exec */

	char *args[] = { argv[0], "--plain-child", NULL };
	char **env = env_without_shunt();
	fflush(NULL);
	pid = vfork();
	if (pid == 0) {
		if (dup2(a, 0) < 0 || dup2(a, 1) < 0)
			_exit(2);
		execve("/proc/self/exe", args, env);
		_exit(3);
	}
	CHECK_OK(pid);
	pattern_fill(7, PRE, buf, BULK);
	xwrite_all(sa, buf, BULK);
	xread_exact(sa, buf, BULK);
	CHECK_PATTERN(8, 0, buf, BULK);
	xwait_child_ok(pid);
	expect_downgraded(a);
	expect_downgraded(sa);
	CHECK_OK(close(a));
	CHECK(recv(sa, small, 1, 0), ==, 0);
	CHECK_OK(close(sa));
	PASS();
}
