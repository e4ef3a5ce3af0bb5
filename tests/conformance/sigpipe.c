/* sigpipe: once the peer has closed (and reset the connection), write, send and sendmsg
 * without MSG_NOSIGNAL fail with EPIPE and deliver exactly one SIGPIPE each, before the call
 * returns; with SIGPIPE ignored the call still fails with EPIPE. */
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

	for (;;) {
		ssize_t n = write(c, "x", 1);

		if (n == -1) {
			CHECK(errno, ==, EPIPE);
			break;
		}
		CHECK(n, ==, 1);
		CHECK(sigpipes, ==, 0);
		if (now_sec() > end)
			FAIL("write to a closed peer still succeeds after %d ms", NET_WAIT_MS);
		sleep_ms(1);
	}
	CHECK(sigpipes, ==, 1);
	CHECK_ERRNO(write(c, "x", 1), EPIPE);
	CHECK(sigpipes, ==, 2);
	CHECK_ERRNO(send(c, "x", 1, 0), EPIPE);
	CHECK(sigpipes, ==, 3);
	CHECK_ERRNO(sendmsg(c, &mh, 0), EPIPE);
	CHECK(sigpipes, ==, 4);
	CHECK_ERRNO(writev(c, &iov, 1), EPIPE);
	CHECK(sigpipes, ==, 5);

	/* Ignored: no handler runs, the call still fails, the process lives on. */
	CHECK(signal(SIGPIPE, SIG_IGN), !=, SIG_ERR);
	CHECK_ERRNO(write(c, "x", 1), EPIPE);
	CHECK(sigpipes, ==, 5);

	CHECK_OK(close(c));
	PASS();
}
