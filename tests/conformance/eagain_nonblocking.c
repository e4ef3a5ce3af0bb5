/* eagain_nonblocking: on an empty non-blocking socket read, recv, recvfrom, recvmsg and readv
 * fail with EAGAIN (on both ends); after data arrives they return it, then EAGAIN again; at
 * EOF they return 0, not EAGAIN. */
#include "check.h"
#include "net.h"

static void check_all_eagain(int fd)
{
	char buf[32];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	CHECK_ERRNO(read(fd, buf, sizeof(buf)), EAGAIN);
	CHECK_ERRNO(recv(fd, buf, sizeof(buf), 0), EAGAIN);
	CHECK_ERRNO(recvfrom(fd, buf, sizeof(buf), 0, NULL, NULL), EAGAIN);
	CHECK_ERRNO(recvmsg(fd, &mh, 0), EAGAIN);
	CHECK_ERRNO(readv(fd, &iov, 1), EAGAIN);
	CHECK(EAGAIN, ==, EWOULDBLOCK);
}

int main(void)
{
	char buf[32];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	set_nonblocking(c, 1);
	set_nonblocking(s, 1);
	check_all_eagain(c);
	check_all_eagain(s);

	/* Data, consumed with each call in turn, then EAGAIN again. */
	xwrite_all(c, "12345", 5);
	wait_queued(s, 5);
	CHECK(read(s, buf, 1), ==, 1);
	CHECK(recv(s, buf, 1, 0), ==, 1);
	CHECK(recvfrom(s, buf, 1, 0, NULL, NULL), ==, 1);
	iov.iov_len = 1;
	CHECK(recvmsg(s, &mh, 0), ==, 1);
	CHECK(readv(s, &iov, 1), ==, 1);
	CHECK(buf[0], ==, '5');
	check_all_eagain(s);

	xwrite_all(s, "z", 1);
	wait_queued(c, 1);
	CHECK(read(c, buf, sizeof(buf)), ==, 1);
	CHECK(buf[0], ==, 'z');
	check_all_eagain(c);

	/* EOF is 0, repeatedly, never EAGAIN. */
	CHECK_OK(shutdown(c, SHUT_WR));
	CHECK(wait_fd(s, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	CHECK(read(s, buf, sizeof(buf)), ==, 0);
	CHECK(recv(s, buf, sizeof(buf), 0), ==, 0);
	iov.iov_len = sizeof(buf);
	CHECK(recvmsg(s, &mh, 0), ==, 0);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
