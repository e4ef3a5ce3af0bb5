/* fionread: ioctl FIONREAD and SIOCINQ report exactly the bytes queued for reading (0 when
 * empty, the total of several sends once arrived, the rest after a partial read, the data
 * before a FIN without counting it), also when the server writes first and the client's first
 * look is FIONREAD (no byte of shunt's own is ever counted); asking does not take the
 * connection off its accelerated path; on a listening socket they fail with EINVAL. */
#include "check.h"
#include "net.h"

#include <linux/sockios.h>
#include <sys/ioctl.h>

static int inq(int fd, unsigned long req)
{
	int n = -1;

	CHECK_OK(ioctl(fd, req, &n));
	return n;
}

/* Poll until readable, then wait (bounded) until the count reaches want. */
static void wait_inq(int fd, int want)
{
	CHECK(wait_fd(fd, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	for (int i = 0; i < NET_WAIT_MS; i++) {
		int n = inq(fd, FIONREAD);

		CHECK(n, <=, want);
		if (n == want)
			return;
		sleep_ms(1);
	}
	FAIL("FIONREAD never reached %d", want);
}

int main(void)
{
	static char buf[1000];
	int c, s, port, lfd, n;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK(inq(s, FIONREAD), ==, 0);
	CHECK(inq(s, SIOCINQ), ==, 0);

	memset(buf, 'q', sizeof(buf));
	xwrite_all(c, buf, 100);
	xwrite_all(c, buf, 400);
	xwrite_all(c, buf, 500);
	wait_inq(s, 1000);
	CHECK(inq(s, SIOCINQ), ==, 1000);
	CHECK(inq(c, FIONREAD), ==, 0);

	CHECK(read(s, buf, 300), ==, 300);
	CHECK(inq(s, FIONREAD), ==, 700);
	CHECK(inq(s, SIOCINQ), ==, 700);
	/* A peek does not change it. */
	CHECK(recv(s, buf, 10, MSG_PEEK), ==, 10);
	CHECK(inq(s, FIONREAD), ==, 700);
	xread_exact(s, buf, 700);
	CHECK(inq(s, FIONREAD), ==, 0);
	expect_stayed_accelerated(c);   /* the questions kept the connection where it was */
	expect_stayed_accelerated(s);

	/* The server's bytes come first; the client's first call is FIONREAD. */
	{
		int c2, s2;

		tcp_pair(AF_INET, &c2, &s2);
		xwrite_all(s2, buf, 123);
		wait_inq(c2, 123);
		CHECK(inq(c2, SIOCINQ), ==, 123);
		xread_exact(c2, buf, 123);
		CHECK(inq(c2, FIONREAD), ==, 0);
		xwrite_all(c2, buf, 7);
		wait_inq(s2, 7);
		xread_exact(s2, buf, 7);
		expect_stayed_accelerated(c2);
		expect_stayed_accelerated(s2);
		CHECK_OK(close(c2));
		CHECK_OK(close(s2));
	}

	/* Data followed by the peer's FIN: the FIN is not a byte. */
	xwrite_all(c, "tail", 4);
	CHECK_OK(shutdown(c, SHUT_WR));
	wait_inq(s, 4);
	sleep_ms(20);
	CHECK(inq(s, FIONREAD), ==, 4);
	xread_exact(s, buf, 4);
	CHECK(read(s, buf, 1), ==, 0);
	CHECK(inq(s, FIONREAD), ==, 0);

	lfd = tcp_listen(AF_INET, &port);
	CHECK_ERRNO(ioctl(lfd, FIONREAD, &n), EINVAL);
	CHECK_ERRNO(ioctl(lfd, SIOCINQ, &n), EINVAL);

	CHECK_OK(close(lfd));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
