/* so_rcvtimeo: with SO_RCVTIMEO of 200 ms, recv/read/recvmsg on an empty socket and accept on
 * an idle listener fail with EAGAIN after about 200 ms; data already queued is returned at
 * once; the option reads back; an out-of-range tv_usec is EDOM. */
#include "check.h"
#include "net.h"

static void check_timed_out(double t0)
{
	double el = now_sec() - t0;

	if (el < 0.150 || el >= 5.0)
		FAIL("timed out after %.3f s, expected about 0.200 s", el);
}

int main(void)
{
	struct timeval tv = { 0, 200000 }, got;
	socklen_t len = sizeof(got);
	char buf[16];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	double t0;
	int c, s, lfd, port;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	CHECK_OK(getsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &got, &len));
	CHECK(len, ==, sizeof(got));
	CHECK(got.tv_sec, ==, 0);
	CHECK(got.tv_usec, >=, 199000); /* rounded to the kernel's tick */
	CHECK(got.tv_usec, <=, 210000);

	t0 = now_sec();
	CHECK_ERRNO(recv(s, buf, sizeof(buf), 0), EAGAIN);
	check_timed_out(t0);
	t0 = now_sec();
	CHECK_ERRNO(read(s, buf, sizeof(buf)), EAGAIN);
	check_timed_out(t0);
	t0 = now_sec();
	CHECK_ERRNO(recvmsg(s, &mh, 0), EAGAIN);
	check_timed_out(t0);

	/* The connection is unharmed, and queued data comes back without waiting. */
	xwrite_all(c, "data", 4);
	xread_exact(s, buf, 4);
	CHECK(memcmp(buf, "data", 4), ==, 0);
	xexchange_both(c, s);

	/* The timeout applies to accept too. */
	lfd = tcp_listen(AF_INET, &port);
	CHECK_OK(setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	t0 = now_sec();
	CHECK_ERRNO(accept(lfd, NULL, NULL), EAGAIN);
	check_timed_out(t0);

	tv.tv_usec = 1000000;
	CHECK_ERRNO(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), EDOM);

	CHECK_OK(close(lfd));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
