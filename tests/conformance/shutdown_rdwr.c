/* shutdown_rdwr: after shutdown(SHUT_RDWR) our recv returns 0, send fails with EPIPE, poll
 * reports POLLHUP; the peer reads EOF. Linux quirk (measured in plain mode): data the peer
 * sends afterwards is answered with a reset, so our next recv is ECONNRESET. */
#include "check.h"
#include "net.h"

static short revents(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT | POLLRDHUP };

	CHECK(poll(&p, 1, 0), ==, 1);
	return p.revents;
}

int main(void)
{
	char buf[16];
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	xwrite_all(s, "before", 6);
	wait_queued(c, 6);
	CHECK_OK(shutdown(c, SHUT_RDWR));

	/* Data queued before the shutdown is still readable, then EOF. */
	CHECK(recv(c, buf, sizeof(buf), 0), ==, 6);
	CHECK(memcmp(buf, "before", 6), ==, 0);
	CHECK(recv(c, buf, sizeof(buf), 0), ==, 0);
	CHECK_ERRNO(send(c, "x", 1, MSG_NOSIGNAL), EPIPE);
	CHECK(revents(c), ==, POLLIN | POLLOUT | POLLHUP | POLLRDHUP);

	CHECK(recv(s, buf, sizeof(buf), 0), ==, 0);
	CHECK(revents(s), ==, POLLIN | POLLOUT | POLLRDHUP);

	/* The peer writes anyway: the kernel resets the connection. */
	CHECK(send(s, "abc", 3, MSG_NOSIGNAL), ==, 3);
	CHECK(wait_fd(c, POLLERR, NET_WAIT_MS) & POLLERR, ==, POLLERR);
	CHECK_ERRNO(recv(c, buf, sizeof(buf), 0), ECONNRESET);
	CHECK(recv(c, buf, sizeof(buf), 0), ==, 0);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
