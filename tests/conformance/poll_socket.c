/* poll_socket: poll on a connected socket reports exactly POLLOUT when idle, POLLIN (and
 * POLLRDNORM) once data arrives and not after it is drained, times out with 0, reports
 * POLLIN|POLLRDHUP after the peer closes and adds POLLHUP once we shut down our side too. */
#include "check.h"
#include "net.h"

static short poll1(int fd, short events, int timeout_ms, int expect_n)
{
	struct pollfd p = { .fd = fd, .events = events, .revents = (short)0x7fff };

	CHECK(poll(&p, 1, timeout_ms), ==, expect_n);
	return p.revents;
}

int main(void)
{
	const short all = POLLIN | POLLOUT | POLLRDHUP;
	char buf[16];
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK(poll1(c, all, 0, 1), ==, POLLOUT);
	CHECK(poll1(s, all, 0, 1), ==, POLLOUT);
	CHECK(poll1(s, POLLIN, 0, 0), ==, 0);
	CHECK(poll1(s, POLLIN, 50, 0), ==, 0);
	CHECK(poll1(c, POLLOUT | POLLWRNORM, 0, 1), ==, POLLOUT | POLLWRNORM);

	xwrite_all(c, "abc", 3);
	CHECK(poll1(s, POLLIN, NET_WAIT_MS, 1), ==, POLLIN);
	CHECK(poll1(s, POLLRDNORM, 0, 1), ==, POLLRDNORM);
	CHECK(poll1(s, all, 0, 1), ==, POLLIN | POLLOUT);
	CHECK(poll1(s, POLLIN, 0, 1), ==, POLLIN); /* level: still there */
	xread_exact(s, buf, 3);
	CHECK(poll1(s, POLLIN, 0, 0), ==, 0);

	/* Events not asked for are not reported, except the error conditions. */
	CHECK(poll1(s, 0, 0, 0), ==, 0);

	/* Peer closes: readable (EOF) with RDHUP, still writable. */
	CHECK_OK(close(c));
	CHECK(wait_fd(s, POLLRDHUP, NET_WAIT_MS) & POLLRDHUP, ==, POLLRDHUP);
	CHECK(poll1(s, all, 0, 1), ==, POLLIN | POLLOUT | POLLRDHUP);
	CHECK(poll1(s, POLLIN, 0, 1), ==, POLLIN);
	CHECK(read(s, buf, sizeof(buf)), ==, 0);
	CHECK(poll1(s, all, 0, 1), ==, POLLIN | POLLOUT | POLLRDHUP);

	/* Both directions shut: POLLHUP, reported even when not asked for. */
	CHECK_OK(shutdown(s, SHUT_WR));
	CHECK(poll1(s, all, 0, 1), ==, POLLIN | POLLOUT | POLLHUP | POLLRDHUP);
	CHECK(poll1(s, 0, 0, 1), ==, POLLHUP);

	CHECK_OK(close(s));
	PASS();
}
