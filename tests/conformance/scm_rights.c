/* scm_rights: a connected TCP socket passed with SCM_RIGHTS over a Unix socketpair to a
 * forked child (forked before the connection existed) arrives as a new fd (MSG_CMSG_CLOEXEC
 * honoured) for the same connection; the child exchanges data on it; once both the child and
 * the sender have closed it the peer sees an orderly EOF, also when the child closes right
 * after its last write. */
#include "check.h"
#include "scm.h"
#include "net.h"

#include <sys/un.h>

static int recv_fd_cloexec(int unix_sock)
{
	int fd = recv_fd_flags(unix_sock, MSG_CMSG_CLOEXEC);

	CHECK(CHECK_OK(fcntl(fd, F_GETFD)) & FD_CLOEXEC, ==, FD_CLOEXEC);
	return fd;
}

static int child(int unix_sock, int quick_close)
{
	char buf[8];
	int fd = recv_fd_cloexec(unix_sock);
	int type = 0;
	socklen_t len = sizeof(type);

	CHECK_OK(getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len));
	CHECK(type, ==, SOCK_STREAM);
	expect_accelerated(fd);
	xread_exact(fd, buf, 4);
	CHECK(memcmp(buf, "ping", 4), ==, 0);
	xwrite_all(fd, "pong", 4);
	if (!quick_close) {
		xread_exact(fd, buf, 3);
		CHECK(memcmp(buf, "bye", 3), ==, 0);
	}
	CHECK_OK(close(fd));
	return 0;
}

/* quick_close: the child closes right after its last write instead of waiting for "bye". */
static void run_round(int quick_close)
{
	struct sockaddr_in before, after;
	socklen_t len;
	char buf[8];
	int sp[2], c, s;
	pid_t pid;

	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp));
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(sp[0]));
		_exit(child(sp[1], quick_close));
	}
	CHECK_OK(close(sp[1]));

	/* The connection is made after the fork: the child can only get it by SCM_RIGHTS. */
	tcp_pair_checked(AF_INET, &c, &s);
	xexchange_both(c, s);
	len = sizeof(before);
	CHECK_OK(getsockname(c, (struct sockaddr *)&before, &len));
	send_fd(sp[0], c);
	CHECK_OK(close(c));

	xwrite_all(s, "ping", 4);
	xread_exact(s, buf, 4);
	CHECK(memcmp(buf, "pong", 4), ==, 0);
	if (!quick_close) {
		len = sizeof(after);
		CHECK_OK(getpeername(s, (struct sockaddr *)&after, &len));
		CHECK(after.sin_port, ==, before.sin_port);
		xwrite_all(s, "bye", 3);
	}
	/* The child held the last reference and read everything: an orderly EOF. */
	CHECK(recv(s, buf, 1, 0), ==, 0);
	xwait_child_ok(pid);

	CHECK_OK(close(sp[0]));
	CHECK_OK(close(s));
}

int main(void)
{
	run_round(0);
	run_round(1);
	PASS();
}
