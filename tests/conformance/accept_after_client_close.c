/* accept_after_client_close: a client that connects, sends and closes before the server
 * accepts: accept still returns the connection, the server reads the data, then EOF. */
#include "check.h"
#include "net.h"

int main(void)
{
	char buf[32];
	int lfd, port, c, s;

	lfd = tcp_listen(AF_INET, &port);
	c = tcp_connect(AF_INET, port);
	xwrite_all(c, "sent before accept", 18);
	CHECK_OK(close(c));

	s = CHECK_OK(accept(lfd, NULL, NULL));
	/* The client is gone before the server side existed: with shunt either path is right
	 * (acceleration may be missed, never bytes), so the path is checked only where it is
	 * certain. */
	if (!test_mode_accelerated())
		expect_accelerated(s);
	CHECK(read_exact(s, buf, sizeof(buf)), ==, 18);
	CHECK(memcmp(buf, "sent before accept", 18), ==, 0);
	CHECK(read(s, buf, 1), ==, 0);
	CHECK_OK(close(s));

	/* The listener is unaffected: a normal connection afterwards. */
	c = tcp_connect(AF_INET, port);
	s = CHECK_OK(accept(lfd, NULL, NULL));
	expect_accelerated(c);
	expect_accelerated(s);
	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	CHECK_OK(close(lfd));
	PASS();
}
