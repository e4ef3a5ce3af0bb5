/* close_unread_rst: closing a socket that still has unread received data resets the
 * connection (RFC 2525), so the peer's recv fails with ECONNRESET instead of reading EOF. */
#include "check.h"
#include "net.h"

int main(void)
{
	char buf[16];
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	xwrite_all(c, "never read", 10);
	wait_queued(s, 10);
	CHECK_OK(close(s));
	CHECK_ERRNO(recv(c, buf, sizeof(buf), 0), ECONNRESET);
	CHECK_OK(close(c));

	/* Partly read is still unread. */
	tcp_pair_checked(AF_INET, &c, &s);
	xwrite_all(c, "half read", 9);
	wait_queued(s, 9);
	CHECK(recv(s, buf, 4, 0), ==, 4);
	CHECK_OK(close(s));
	CHECK_ERRNO(recv(c, buf, sizeof(buf), 0), ECONNRESET);
	CHECK_OK(close(c));

	/* Fully read: an orderly close, EOF. */
	tcp_pair_checked(AF_INET, &c, &s);
	xwrite_all(c, "all read", 8);
	xread_exact(s, buf, 8);
	CHECK_OK(close(s));
	CHECK(recv(c, buf, sizeof(buf), 0), ==, 0);
	CHECK_OK(close(c));
	PASS();
}
