/* connect_blocking: a blocking connect to a loopback listener returns 0, the connection is
 * established both ways, and a second connect on it fails with EISCONN. */
#include "check.h"
#include "net.h"

int main(void)
{
	struct sockaddr_storage ss, peer;
	socklen_t len, plen = sizeof(peer);
	int port, lfd, c, s;

	lfd = tcp_listen(AF_INET, &port);
	c = CHECK_OK(socket(AF_INET, SOCK_STREAM, 0));
	len = loopback_addr(AF_INET, port, &ss);
	CHECK(connect(c, (struct sockaddr *)&ss, len), ==, 0);

	s = CHECK_OK(accept(lfd, (struct sockaddr *)&peer, &plen));
	CHECK(plen, ==, sizeof(struct sockaddr_in));
	CHECK(peer.ss_family, ==, AF_INET);
	CHECK(sockaddr_port(&peer), ==, local_port(c));
	expect_accelerated(c);
	expect_accelerated(s);

	xexchange_both(c, s);
	CHECK_ERRNO(connect(c, (struct sockaddr *)&ss, len), EISCONN);
	/* The failed connect did not disturb the connection. */
	xexchange_both(c, s);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	CHECK_OK(close(lfd));
	PASS();
}
