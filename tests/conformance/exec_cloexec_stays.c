/* exec_cloexec_stays: a child exec's a program without shunt while holding copies of two
 * accelerated sockets that close at exec (one SOCK_CLOEXEC, one FD_CLOEXEC set with fcntl): the
 * new program does not have them (EBADF), and the connections stay accelerated for the parent,
 * which keeps exchanging data on them. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <stdlib.h>

static int plain_child(int fd1, int fd2)
{
	expect_no_shunt();
	CHECK_ERRNO(fcntl(fd1, F_GETFD), EBADF);
	CHECK_ERRNO(fcntl(fd2, F_GETFD), EBADF);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char arg1[16], arg2[16];
	int a, sa, b, sb, lfd, port;
	pid_t pid;

	if (argc == 4 && strcmp(argv[1], "--plain-child") == 0)
		return plain_child(atoi(argv[2]), atoi(argv[3]));

	tcp_pair_checked(AF_INET, &a, &sa);
	CHECK_OK(fcntl(a, F_SETFD, FD_CLOEXEC));
	lfd = tcp_listen(AF_INET, &port);
	b = CHECK_OK(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	len = loopback_addr(AF_INET, port, &ss);
	CHECK_OK(connect(b, (struct sockaddr *)&ss, len));
	sb = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK_OK(close(lfd));
	expect_accelerated(b);
	expect_accelerated(sb);

	snprintf(arg1, sizeof(arg1), "%d", a);
	snprintf(arg2, sizeof(arg2), "%d", b);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(sa));
		CHECK_OK(close(sb));
		exec_self_without_shunt((char *[]){ argv[0], "--plain-child", arg1, arg2, NULL });
	}
	xwait_child_ok(pid);

	xexchange_both(a, sa);
	xexchange_both(b, sb);
	expect_accelerated(a);
	expect_accelerated(sa);
	expect_accelerated(b);
	expect_accelerated(sb);
	CHECK_OK(close(a));
	CHECK_OK(close(b));
	CHECK(recv(sa, arg1, 1, 0), ==, 0);
	CHECK(recv(sb, arg1, 1, 0), ==, 0);
	CHECK_OK(close(sa));
	CHECK_OK(close(sb));
	PASS();
}
