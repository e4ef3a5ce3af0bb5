/* close_after_accept_unlooked: a client that connects (and maybe sends), and closes after
 * the server accepted, with no call in between that looks at the connection, as UCX's TCP
 * lanes close the duplicate of two crossing connections. The kernel sends a FIN: the server's
 * end stays connected (getpeername answers, SO_ERROR is 0), reads the bytes, then the end of
 * stream, and never a reset.
 *
 *   sent      the client writes before the accept (its bytes go as TCP), then closes
 *   silent    the client only connects, then closes
 *   nonblock  a non-blocking connect (EINPROGRESS at most), then the close
 *
 * Under shunt the server claims the client's offer in accept and rings the client once (a
 * client asleep in the kernel on the TCP path would wake up and see the claim). Before the
 * fix that byte was still unread in the client's socket when it closed, and its kernel
 * answered with a reset: getpeername on the server's end failed with ENOTCONN (UCX printed
 * "connection establishment ... was unsuccessful"). */
#include "check.h"
#include "net.h"

#include <string.h>

static void one(const char *name, const char *msg, int nonblock)
{
	struct sockaddr_storage ss, peer;
	socklen_t len = sizeof peer;
	int lfd, port, c, s, err = -1;
	socklen_t elen = sizeof err;
	char buf[64];
	size_t n = strlen(msg);

	lfd = tcp_listen(AF_INET, &port);
	if (nonblock) {
		socklen_t alen = loopback_addr(AF_INET, port, &ss);

		c = CHECK_OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
		if (connect(c, (struct sockaddr *)&ss, alen) < 0)
			CHECK(errno, ==, EINPROGRESS);
	} else {
		c = tcp_connect(AF_INET, port);
	}
	if (n)
		xwrite_all(c, msg, n);
	s = CHECK_OK(accept(lfd, NULL, NULL));
	if (test_mode_accelerated())
		expect_accelerated(s);   /* claimed in accept: the client never looked */
	CHECK_OK(close(c));

	CHECK_OK(getpeername(s, (struct sockaddr *)&peer, &len));
	CHECK(wait_fd(s, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	CHECK_OK(getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen));
	CHECK(err, ==, 0);
	CHECK(read_all(s, buf, sizeof buf), ==, (ssize_t)n);
	CHECK(memcmp(buf, msg, n), ==, 0);
	CHECK(read(s, buf, 1), ==, 0);
	CHECK(read(s, buf, 1), ==, 0);
	CHECK_OK(getpeername(s, (struct sockaddr *)&peer, &len));
	CHECK_OK(close(s));
	CHECK_OK(close(lfd));
	printf("%s: ok\n", name);
}

int main(void)
{
	for (int i = 0; i < 3; i++) {
		one("sent", "sent before the accept", 0);
		one("silent", "", 0);
		one("nonblock", "", 1);
	}
	PASS();
}
