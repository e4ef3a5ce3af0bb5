/* econnreset_linger: when the peer closes with SO_LINGER {1, 0} (a reset), our recv fails with
 * ECONNRESET (also when it was blocked at the time), poll reports POLLERR|POLLHUP before that;
 * afterwards recv returns 0, send fails with EPIPE and getpeername with ENOTCONN. */
#include "check.h"
#include "net.h"

#include <pthread.h>

static int peer;

static void reset_close(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 }, got;
	socklen_t len = sizeof(got);

	CHECK_OK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	CHECK_OK(getsockopt(fd, SOL_SOCKET, SO_LINGER, &got, &len));
	CHECK(got.l_onoff, ==, 1);
	CHECK(got.l_linger, ==, 0);
	CHECK_OK(close(fd));
}

static void *reset_later(void *arg)
{
	(void)arg;
	sleep_ms(100);
	reset_close(peer);
	return NULL;
}

int main(void)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char buf[16];
	pthread_t th;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	xexchange_both(c, s);
	reset_close(s);
	CHECK(wait_fd(c, POLLIN, NET_WAIT_MS) & (POLLERR | POLLHUP), ==, POLLERR | POLLHUP);
	CHECK_ERRNO(recv(c, buf, sizeof(buf), 0), ECONNRESET);
	CHECK(recv(c, buf, sizeof(buf), 0), ==, 0);
	CHECK_ERRNO(send(c, "x", 1, MSG_NOSIGNAL), EPIPE);
	CHECK_ERRNO(getpeername(c, (struct sockaddr *)&ss, &len), ENOTCONN);
	CHECK_OK(close(c));

	/* A reader blocked at the time of the reset. */
	tcp_pair_checked(AF_INET, &c, &s);
	peer = s;
	CHECK(pthread_create(&th, NULL, reset_later, NULL), ==, 0);
	CHECK_ERRNO(recv(c, buf, sizeof(buf), 0), ECONNRESET);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK_OK(close(c));
	PASS();
}
