/* close_unknown_fds: a program that closes every fd it does not know (as daemons do, with a
 * close() loop up to its limit, then close_range to the top) keeps working as with the kernel
 * alone: the connection it had carries bytes both ways, a new one connects, carries bytes and
 * is accelerated, and a close of a number the program never opened fails with EBADF. In the
 * fabric modes the fabric engine (UCX) and shunt's doorbell hold fds of their own that the loop
 * meets; before they were shunt's own (FDT_OWN), the loop closed them and UCX's async thread
 * aborted the process (threads_shutdown_blocked in fabric-tcp, some runs), or the engine lost
 * its listener. */
#include "check.h"
#include "net.h"

#include <linux/close_range.h>
#include <stdbool.h>
#include <sys/resource.h>

static void exchange(int a, int b, const char *what)
{
	char out[4096], in[4096];

	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = (char)(i * 7 + what[0]);
	xwrite_all(a, out, sizeof(out));
	xread_exact(b, in, sizeof(in));
	CHECK(memcmp(out, in, sizeof(in)), ==, 0);
	xwrite_all(b, out, 100);
	xread_exact(a, in, 100);
	CHECK(memcmp(out, in, 100), ==, 0);
}

static bool known(int fd, const int *keep, int n)
{
	for (int i = 0; i < n; i++)
		if (keep[i] == fd)
			return true;
	return false;
}

int main(void)
{
	struct rlimit rl;
	int c, s, c2, s2, top, keep[3];
	long closed = 0;

	tcp_pair_checked(AF_INET, &c, &s);
	exchange(c, s, "a");   /* in the fabric modes: the engine is open, its fds among ours */
	expect_accelerated(c);
	expect_accelerated(s);

	keep[0] = c;
	keep[1] = s;
	keep[2] = c > s ? c : s;
	CHECK_OK(getrlimit(RLIMIT_NOFILE, &rl));
	top = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 65536 ? 65536 : (int)rl.rlim_cur;
	for (int fd = 3; fd < top; fd++) {
		if (known(fd, keep, 2))
			continue;
		if (close(fd) == 0)
			closed++;
		else
			CHECK(errno, ==, EBADF);
	}
	/* and everything above the program's own, to the top (above the limit too) */
	CHECK_OK(close_range((unsigned)keep[2] + 1, ~0U, 0));
	printf("closed %ld fds the program did not know\n", closed);

	/* a number nobody opened */
	errno = 0;
	CHECK(close(top - 1), ==, -1);
	CHECK(errno, ==, EBADF);

	exchange(c, s, "b");
	exchange(s, c, "c");
	tcp_pair_checked(AF_INET, &c2, &s2);
	exchange(c2, s2, "d");
	expect_accelerated(c2);
	expect_accelerated(s2);
	exchange(c, s, "e");
	CHECK_OK(close(c2));
	CHECK_OK(close(s2));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
