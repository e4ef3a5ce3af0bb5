/* connect_nonblocking: a non-blocking connect returns EINPROGRESS, poll then reports POLLOUT
 * (without POLLERR/POLLHUP), SO_ERROR is 0, connect again returns 0 then EISCONN, and the
 * connection carries data both ways. */
#include "check.h"
#include "net.h"

int main(void)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int port, lfd, c, s, err = -1;
	socklen_t elen = sizeof(err);
	short rev;

	lfd = tcp_listen(AF_INET, &port);
	c = CHECK_OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	len = loopback_addr(AF_INET, port, &ss);
	/* Linux never completes a non-blocking TCP connect inside the call, even on loopback. */
	CHECK_ERRNO(connect(c, (struct sockaddr *)&ss, len), EINPROGRESS);

	rev = wait_fd(c, POLLOUT, NET_WAIT_MS);
	CHECK(rev & POLLOUT, ==, POLLOUT);
	CHECK(rev & (POLLERR | POLLHUP), ==, 0);
	CHECK_OK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &elen));
	CHECK(elen, ==, sizeof(int));
	CHECK(err, ==, 0);
	/* Linux quirk (plain mode measured): the first connect after an asynchronous connect
	 * completed returns 0 (it moves the socket to SS_CONNECTED); only later ones say EISCONN. */
	CHECK(connect(c, (struct sockaddr *)&ss, len), ==, 0);
	CHECK_ERRNO(connect(c, (struct sockaddr *)&ss, len), EISCONN);

	s = CHECK_OK(accept(lfd, NULL, NULL));
	expect_accelerated(c);
	expect_accelerated(s);
	/* Still non-blocking: nothing to read yet. */
	char b;
	CHECK_ERRNO(recv(c, &b, 1, 0), EAGAIN);
	xexchange_both(c, s);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	CHECK_OK(close(lfd));
	PASS();
}
