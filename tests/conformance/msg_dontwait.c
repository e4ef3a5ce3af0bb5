/* msg_dontwait: on a blocking socket, recv(MSG_DONTWAIT) on an empty queue and
 * send(MSG_DONTWAIT) into a full send path fail with EAGAIN, without making the socket
 * non-blocking; with data queued recv(MSG_DONTWAIT) returns it. */
#include "check.h"
#include "net.h"

int main(void)
{
	static char big[64 * 1024];
	char buf[16];
	unsigned long long total = 0;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);

	CHECK_ERRNO(recv(s, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
	CHECK(CHECK_OK(fcntl(s, F_GETFL)) & O_NONBLOCK, ==, 0);

	xwrite_all(c, "abc", 3);
	CHECK(wait_fd(s, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	CHECK(recv(s, buf, sizeof(buf), MSG_DONTWAIT), ==, 3);
	CHECK(memcmp(buf, "abc", 3), ==, 0);
	CHECK_ERRNO(recv(s, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);

	/* Blocking recv still blocks: it returns data that comes later, not EAGAIN. */
	xwrite_all(c, "d", 1);
	CHECK(recv(s, buf, sizeof(buf), 0), ==, 1);

	/* Fill the send path without ever blocking. */
	for (;;) {
		ssize_t n = send(c, big, sizeof(big), MSG_DONTWAIT);

		if (n == -1) {
			CHECK(errno, ==, EAGAIN);
			break;
		}
		CHECK(n, >, 0);
		total += (unsigned long long)n;
		if (total > 1024ULL * 1024 * 1024)
			FAIL("send(MSG_DONTWAIT) never reported EAGAIN");
	}
	CHECK(CHECK_OK(fcntl(c, F_GETFL)) & O_NONBLOCK, ==, 0);
	CHECK(total, >, 0);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
