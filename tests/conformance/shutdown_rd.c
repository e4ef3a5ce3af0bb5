/* shutdown_rd: after shutdown(SHUT_RD) our recv returns 0 at once (blocking or not,
 * repeatedly), we can still send, and the peer sees no EOF. Linux quirk (measured in plain
 * mode): data the peer sends afterwards is still delivered, then 0 again. */
#include "check.h"
#include "net.h"

int main(void)
{
	struct pollfd p;
	char buf[16];
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(shutdown(c, SHUT_RD));

	CHECK(recv(c, buf, sizeof(buf), 0), ==, 0);
	CHECK(recv(c, buf, sizeof(buf), 0), ==, 0);
	CHECK(read(c, buf, sizeof(buf)), ==, 0);
	CHECK(recv(c, buf, sizeof(buf), MSG_DONTWAIT), ==, 0);
	p = (struct pollfd){ .fd = c, .events = POLLIN | POLLOUT | POLLRDHUP };
	CHECK(poll(&p, 1, 0), ==, 1);
	CHECK(p.revents, ==, POLLIN | POLLOUT | POLLRDHUP);

	/* Our sending side is untouched, and the peer sees no EOF. */
	xexchange(c, s, "still sending");
	CHECK_ERRNO(recv(s, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);

	xwrite_all(s, "late", 4);
	wait_queued(c, 4);
	CHECK(recv(c, buf, sizeof(buf), 0), ==, 4);
	CHECK(memcmp(buf, "late", 4), ==, 0);
	CHECK(recv(c, buf, sizeof(buf), 0), ==, 0);

	CHECK_OK(close(c));
	CHECK(recv(s, buf, sizeof(buf), 0), ==, 0);
	CHECK_OK(close(s));
	PASS();
}
