/* accept4_flags: accept4's SOCK_NONBLOCK and SOCK_CLOEXEC show up in F_GETFL / F_GETFD of the
 * accepted socket, plain accept gives neither (not even from a non-blocking listener), an
 * empty non-blocking listener says EAGAIN and unknown flags are EINVAL. */
#include "check.h"
#include "net.h"
#include "settings.h"

struct variant {
	const char *name;
	int use_accept4;
	int flags;
	int expect_nonblock;
	int expect_cloexec;
};

int main(void)
{
	static const struct variant v[] = {
		{ "accept", 0, 0, 0, 0 },
		{ "accept4(0)", 1, 0, 0, 0 },
		{ "accept4(SOCK_NONBLOCK)", 1, SOCK_NONBLOCK, 1, 0 },
		{ "accept4(SOCK_CLOEXEC)", 1, SOCK_CLOEXEC, 0, 1 },
		{ "accept4(SOCK_NONBLOCK|SOCK_CLOEXEC)", 1, SOCK_NONBLOCK | SOCK_CLOEXEC, 1, 1 },
	};
	int port, lfd;

	/* many short connections to one listener, each to be accelerated: without this the
	 * later ones would be kernel TCP by design (short_conns.c) */
	test_setting("SHUNT_SHORT_CONNS", "0");
	lfd = tcp_listen(AF_INET, &port);
	set_nonblocking(lfd, 1);
	CHECK_ERRNO(accept(lfd, NULL, NULL), EAGAIN);
	CHECK_ERRNO(accept4(lfd, NULL, NULL, SOCK_NONBLOCK), EAGAIN);
	CHECK_ERRNO(accept4(lfd, NULL, NULL, 0x1), EINVAL);

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		int c = tcp_connect(AF_INET, port);
		int s, fl, fdfl;

		CHECK(wait_fd(lfd, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
		if (v[i].use_accept4)
			s = CHECK_OK(accept4(lfd, NULL, NULL, v[i].flags));
		else
			s = CHECK_OK(accept(lfd, NULL, NULL));
		fprintf(stderr, "%s\n", v[i].name);
		expect_accelerated(c);
		expect_accelerated(s);

		fl = CHECK_OK(fcntl(s, F_GETFL));
		fdfl = CHECK_OK(fcntl(s, F_GETFD));
		CHECK(!!(fl & O_NONBLOCK), ==, v[i].expect_nonblock);
		CHECK(!!(fdfl & FD_CLOEXEC), ==, v[i].expect_cloexec);
		/* The client end is untouched by the server's flags. */
		CHECK(CHECK_OK(fcntl(c, F_GETFL)) & O_NONBLOCK, ==, 0);
		CHECK(CHECK_OK(fcntl(c, F_GETFD)) & FD_CLOEXEC, ==, 0);

		char b;
		if (v[i].expect_nonblock)
			CHECK_ERRNO(recv(s, &b, 1, 0), EAGAIN);
		xexchange_both(c, s);
		CHECK_OK(close(c));
		CHECK_OK(close(s));
	}
	CHECK_OK(close(lfd));
	PASS();
}
