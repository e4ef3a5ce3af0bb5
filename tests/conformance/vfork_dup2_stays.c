/* vfork_dup2_stays: a vfork child moves a close-on-exec accelerated socket onto its stdin and
 * stdout and execs a program under shunt (as subprocess modules do), and the parent closes its
 * copy at once: the connection lives on in the new program, accelerated there (found by inode),
 * and every byte arrives both ways, bytes that were waiting before the exec first. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <stdlib.h>

#define PRE 8192
#define BULK 200000

static char buf[PRE + BULK];

static int echo_child(void)
{
	expect_accelerated(0);
	expect_accelerated(1);
	xread_exact(0, buf, PRE + BULK);
	CHECK_PATTERN(31, 0, buf, PRE + BULK);
	pattern_fill(32, 0, buf, BULK);
	xwrite_all(1, buf, BULK);
	return 0;
}

int main(int argc, char **argv)
{
	char *args[] = { argv[0], "--echo", NULL };
	char small[1];
	int a, sa;
	pid_t pid;

	if (argc == 2 && strcmp(argv[1], "--echo") == 0)
		return echo_child();
	tcp_pair_checked(AF_INET, &a, &sa);
	CHECK_OK(fcntl(a, F_SETFD, FD_CLOEXEC));
	pattern_fill(31, 0, buf, PRE);
	xwrite_all(sa, buf, PRE);   /* waiting, unread, when the program starts */
	fflush(NULL);
	pid = vfork();
	if (pid == 0) {
		if (dup2(a, 0) < 0 || dup2(a, 1) < 0)
			_exit(2);
		execve("/proc/self/exe", args, environ);
		_exit(3);
	}
	CHECK_OK(pid);
	CHECK_OK(close(a));   /* the new program's copy keeps the connection */
	pattern_fill(31, PRE, buf, BULK);
	xwrite_all(sa, buf, BULK);
	xread_exact(sa, buf, BULK);
	CHECK_PATTERN(32, 0, buf, BULK);
	xwait_child_ok(pid);
	expect_accelerated(sa);
	CHECK(recv(sa, small, 1, 0), ==, 0);
	CHECK_OK(close(sa));
	PASS();
}
