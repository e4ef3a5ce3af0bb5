/* msg_peek: recv(MSG_PEEK) returns queued data without consuming it (repeatedly, across
 * several sends, limited by the buffer), and the next normal recv returns the same bytes. */
#include "check.h"
#include "net.h"

int main(void)
{
	char buf[64], peek[64];
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_ERRNO(recv(s, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT), EAGAIN);

	xwrite_all(c, "hello ", 6);
	xwrite_all(c, "world", 5);
	wait_queued(s, 11); /* itself a peek that must see both sends together */

	CHECK(recv(s, peek, sizeof(peek), MSG_PEEK), ==, 11);
	CHECK(memcmp(peek, "hello world", 11), ==, 0);
	CHECK(recv(s, peek, sizeof(peek), MSG_PEEK), ==, 11);
	CHECK(memcmp(peek, "hello world", 11), ==, 0);
	CHECK(recv(s, peek, 5, MSG_PEEK), ==, 5);
	CHECK(memcmp(peek, "hello", 5), ==, 0);

	CHECK(recv(s, buf, 3, 0), ==, 3);
	CHECK(memcmp(buf, "hel", 3), ==, 0);
	CHECK(recv(s, peek, sizeof(peek), MSG_PEEK), ==, 8);
	CHECK(memcmp(peek, "lo world", 8), ==, 0);
	CHECK(recv(s, buf, sizeof(buf), 0), ==, 8);
	CHECK(memcmp(buf, "lo world", 8), ==, 0);
	CHECK_ERRNO(recv(s, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT), EAGAIN);
	CHECK_ERRNO(recv(s, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);

	/* A blocking peek waits for data, then leaves it queued. */
	xwrite_all(c, "x", 1);
	CHECK(recv(s, peek, sizeof(peek), MSG_PEEK), ==, 1);
	CHECK(peek[0], ==, 'x');
	CHECK(recv(s, buf, sizeof(buf), 0), ==, 1);
	CHECK(buf[0], ==, 'x');

	/* Peek at EOF returns 0 and does not consume it. */
	CHECK_OK(shutdown(c, SHUT_WR));
	CHECK(recv(s, peek, sizeof(peek), MSG_PEEK), ==, 0);
	CHECK(recv(s, buf, sizeof(buf), 0), ==, 0);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
