/* msg_nosignal: once the peer has closed (and reset the connection), send(MSG_NOSIGNAL) and
 * sendmsg(MSG_NOSIGNAL) fail with EPIPE and no SIGPIPE is delivered. */
#include "check.h"
#include "net.h"

static volatile sig_atomic_t sigpipes;

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipes++;
}

int main(void)
{
	struct sigaction sa = { .sa_handler = on_sigpipe };
	struct iovec iov = { .iov_base = "y", .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	double end = now_sec() + NET_WAIT_MS / 1000.0;
	char b;
	int c, s;

	CHECK_OK(sigaction(SIGPIPE, &sa, NULL));
	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(close(s));
	CHECK(recv(c, &b, 1, 0), ==, 0); /* the FIN arrived */

	/* The first sends may still be accepted; the peer answers them with RST. */
	for (;;) {
		ssize_t n = send(c, "x", 1, MSG_NOSIGNAL);

		if (n == -1) {
			CHECK(errno, ==, EPIPE);
			break;
		}
		CHECK(n, ==, 1);
		if (now_sec() > end)
			FAIL("send to a closed peer still succeeds after %d ms", NET_WAIT_MS);
		sleep_ms(1);
	}
	CHECK(sigpipes, ==, 0);
	CHECK_ERRNO(send(c, "x", 1, MSG_NOSIGNAL), EPIPE);
	CHECK_ERRNO(sendto(c, "x", 1, MSG_NOSIGNAL, NULL, 0), EPIPE);
	CHECK_ERRNO(sendmsg(c, &mh, MSG_NOSIGNAL), EPIPE);
	CHECK(sigpipes, ==, 0);

	CHECK_OK(close(c));
	PASS();
}
