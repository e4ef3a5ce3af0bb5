/* dup_close: a dup of a connected socket shares the open file (status flags) but not
 * FD_CLOEXEC; after closing the original the dup works both ways and the peer sees no EOF;
 * the same for F_DUPFD and F_DUPFD_CLOEXEC; the peer sees EOF only when the last one closes. */
#include "check.h"
#include "net.h"

static void no_eof(int peer)
{
	char b;

	CHECK_ERRNO(recv(peer, &b, 1, MSG_DONTWAIT), EAGAIN);
}

int main(void)
{
	char b;
	int c, s, d, d2, d3;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(fcntl(c, F_SETFD, FD_CLOEXEC));

	d = CHECK_OK(dup(c));
	CHECK(d, !=, c);
	CHECK(CHECK_OK(fcntl(d, F_GETFD)) & FD_CLOEXEC, ==, 0);
	/* One open file: O_NONBLOCK set through one number shows through the other. */
	set_nonblocking(d, 1);
	CHECK(CHECK_OK(fcntl(c, F_GETFL)) & O_NONBLOCK, ==, O_NONBLOCK);
	set_nonblocking(c, 0);
	CHECK(CHECK_OK(fcntl(d, F_GETFL)) & O_NONBLOCK, ==, 0);

	CHECK_OK(close(c));
	expect_accelerated(d);
	no_eof(s);
	xexchange_both(d, s);
	xexchange_both(s, d);
	no_eof(s);

	d2 = CHECK_OK(fcntl(d, F_DUPFD, 100));
	CHECK(d2, >=, 100);
	CHECK(CHECK_OK(fcntl(d2, F_GETFD)) & FD_CLOEXEC, ==, 0);
	d3 = CHECK_OK(fcntl(d, F_DUPFD_CLOEXEC, 0));
	CHECK(CHECK_OK(fcntl(d3, F_GETFD)) & FD_CLOEXEC, ==, FD_CLOEXEC);
	expect_accelerated(d2);
	expect_accelerated(d3);

	CHECK_OK(close(d));
	no_eof(s);
	xexchange_both(d2, s);
	CHECK_OK(close(d2));
	no_eof(s);
	xexchange_both(d3, s);

	/* Interleaved use of two numbers for one connection keeps the stream in order. */
	d = CHECK_OK(dup(d3));
	xwrite_all(d, "ab", 2);
	xwrite_all(d3, "cd", 2);
	xwrite_all(d, "ef", 2);
	char buf[6];
	xread_exact(s, buf, 6);
	CHECK(memcmp(buf, "abcdef", 6), ==, 0);
	CHECK_OK(close(d));

	CHECK_OK(close(d3));
	CHECK(recv(s, &b, 1, 0), ==, 0);
	CHECK_OK(close(s));
	PASS();
}
