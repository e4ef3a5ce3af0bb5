/* exec_inherit: a connected socket survives fork + exec (the test re-executes itself through
 * /proc/self/exe with the fd number as an argument) and the new program exchanges data on it;
 * a socket created with SOCK_CLOEXEC is closed by the exec (F_GETFD is EBADF there, and its
 * peer sees EOF while the new program still runs). */
#include "check.h"
#include "net.h"

#include <stdlib.h>

static int exec_child(int fd, int cloexec_fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char buf[8];

	CHECK_ERRNO(fcntl(cloexec_fd, F_GETFD), EBADF);
	CHECK(CHECK_OK(fcntl(fd, F_GETFD)) & FD_CLOEXEC, ==, 0);
	CHECK_OK(getpeername(fd, (struct sockaddr *)&ss, &len));
	expect_accelerated(fd);

	xread_exact(fd, buf, 4);
	CHECK(memcmp(buf, "ping", 4), ==, 0);
	xwrite_all(fd, "pong", 4);
	xread_exact(fd, buf, 3);
	CHECK(memcmp(buf, "bye", 3), ==, 0);
	CHECK_OK(close(fd));
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char buf[8], fdarg[16], cxarg[16];
	int a, sa, lfd, port, cx, scx;
	pid_t pid;

	if (argc == 4 && strcmp(argv[1], "--exec-child") == 0)
		return exec_child(atoi(argv[2]), atoi(argv[3]));

	tcp_pair_checked(AF_INET, &a, &sa);

	lfd = tcp_listen(AF_INET, &port);
	cx = CHECK_OK(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
	len = loopback_addr(AF_INET, port, &ss);
	CHECK_OK(connect(cx, (struct sockaddr *)&ss, len));
	scx = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK_OK(close(lfd));
	expect_accelerated(cx);
	expect_accelerated(scx);
	CHECK(CHECK_OK(fcntl(cx, F_GETFD)) & FD_CLOEXEC, ==, FD_CLOEXEC);

	snprintf(fdarg, sizeof(fdarg), "%d", a);
	snprintf(cxarg, sizeof(cxarg), "%d", cx);
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], "--exec-child", fdarg, cxarg, (char *)NULL);
		fprintf(stderr, "exec /proc/self/exe: %s\n", strerror(errno));
		_exit(1);
	}
	CHECK_OK(close(a));
	CHECK_OK(close(cx));

	xwrite_all(sa, "ping", 4);
	xread_exact(sa, buf, 4);
	CHECK(memcmp(buf, "pong", 4), ==, 0);

	/* The new program runs (it waits for "bye") and holds no copy of cx: EOF now. */
	if (!(wait_fd(scx, POLLIN, NET_WAIT_MS) & POLLIN))
		FAIL("no EOF on the SOCK_CLOEXEC connection: the exec'd program still holds it");
	CHECK(recv(scx, buf, 1, 0), ==, 0);

	xwrite_all(sa, "bye", 3);
	xwait_child_ok(pid);
	CHECK(recv(sa, buf, 1, 0), ==, 0);

	CHECK_OK(close(sa));
	CHECK_OK(close(scx));
	PASS();
}
