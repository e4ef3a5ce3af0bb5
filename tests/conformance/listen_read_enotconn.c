/* listen_read_enotconn: I/O on sockets that are not connected (values measured in plain
 * mode): read/recv on a listening socket fail with ENOTCONN, write/send with EPIPE; the same
 * on a fresh unconnected socket; FIONREAD on a listener is EINVAL; getpeername is ENOTCONN. */
#include "check.h"
#include "net.h"

#include <sys/ioctl.h>

static void check_unconnected(int fd)
{
	char buf[4];
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	CHECK_ERRNO(read(fd, buf, sizeof(buf)), ENOTCONN);
	CHECK_ERRNO(recv(fd, buf, sizeof(buf), 0), ENOTCONN);
	CHECK_ERRNO(recv(fd, buf, sizeof(buf), MSG_DONTWAIT), ENOTCONN);
	CHECK_ERRNO(send(fd, "x", 1, MSG_NOSIGNAL), EPIPE);
	CHECK_ERRNO(getpeername(fd, (struct sockaddr *)&ss, &len), ENOTCONN);
}

int main(void)
{
	int lfd, port, u, n;

	CHECK(signal(SIGPIPE, SIG_IGN), !=, SIG_ERR);
	lfd = tcp_listen(AF_INET, &port);
	check_unconnected(lfd);
	CHECK_ERRNO(write(lfd, "x", 1), EPIPE);
	CHECK_ERRNO(ioctl(lfd, FIONREAD, &n), EINVAL);

	u = CHECK_OK(socket(AF_INET, SOCK_STREAM, 0));
	check_unconnected(u);
	CHECK_ERRNO(write(u, "x", 1), EPIPE);

	/* The listener still works afterwards. */
	int c = tcp_connect(AF_INET, port);
	int s = CHECK_OK(accept(lfd, NULL, NULL));
	expect_accelerated(c);
	expect_accelerated(s);
	xexchange_both(c, s);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	CHECK_OK(close(u));
	CHECK_OK(close(lfd));
	PASS();
}
