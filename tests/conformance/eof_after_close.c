/* eof_after_close: after the peer sends and closes, we read its data and then recv/read
 * return 0 every time (blocking or not), poll reports POLLIN|POLLRDHUP; a recv blocked when the
 * peer closes wakes up with 0. */
#include "check.h"
#include "net.h"

#include <pthread.h>

static int peer;

static void *close_later(void *arg)
{
	(void)arg;
	sleep_ms(100);
	CHECK_OK(close(peer));
	return NULL;
}

int main(void)
{
	struct pollfd p;
	char buf[16];
	pthread_t th;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	xwrite_all(s, "bye", 3);
	CHECK_OK(close(s));
	xread_exact(c, buf, 3);
	CHECK(memcmp(buf, "bye", 3), ==, 0);
	for (int i = 0; i < 3; i++)
		CHECK(recv(c, buf, sizeof(buf), 0), ==, 0);
	CHECK(read(c, buf, sizeof(buf)), ==, 0);
	CHECK(recv(c, buf, sizeof(buf), MSG_DONTWAIT), ==, 0);
	CHECK(recv(c, buf, sizeof(buf), MSG_PEEK), ==, 0);
	set_nonblocking(c, 1);
	CHECK(read(c, buf, sizeof(buf)), ==, 0);
	p = (struct pollfd){ .fd = c, .events = POLLIN | POLLRDHUP };
	CHECK(poll(&p, 1, 0), ==, 1);
	CHECK(p.revents, ==, POLLIN | POLLRDHUP);
	CHECK_OK(close(c));

	/* A reader blocked at the time of the close. */
	tcp_pair_checked(AF_INET, &c, &s);
	peer = s;
	CHECK(pthread_create(&th, NULL, close_later, NULL), ==, 0);
	CHECK(recv(c, buf, sizeof(buf), 0), ==, 0);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(recv(c, buf, sizeof(buf), 0), ==, 0);
	CHECK_OK(close(c));
	PASS();
}
