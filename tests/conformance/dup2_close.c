/* dup2_close: dup2 onto a number holding another connection closes that connection (its peer
 * sees EOF); after closing the original the new number works both ways; dup2 onto itself is a
 * no-op and dup3 onto itself is EINVAL; dup3(O_CLOEXEC) sets FD_CLOEXEC. */
#include "check.h"
#include "net.h"

int main(void)
{
	char b;
	int c, s, c2, s2, target, r;

	tcp_pair_checked(AF_INET, &c, &s);
	tcp_pair_checked(AF_INET, &c2, &s2);

	/* dup2 onto c2: the second connection loses its only reference. */
	target = c2;
	r = CHECK_OK(dup2(c, target));
	CHECK(r, ==, target);
	CHECK(recv(s2, &b, 1, 0), ==, 0);
	CHECK_OK(close(s2));

	CHECK_OK(close(c));
	expect_accelerated(target);
	CHECK_ERRNO(recv(s, &b, 1, MSG_DONTWAIT), EAGAIN);
	xexchange_both(target, s);

	CHECK(dup2(target, target), ==, target);
	CHECK_ERRNO(dup3(target, target, 0), EINVAL);
	xexchange_both(target, s);

	/* dup3 with O_CLOEXEC onto a free number. */
	int hi = 200;
	CHECK(dup3(target, hi, O_CLOEXEC), ==, hi);
	CHECK(CHECK_OK(fcntl(hi, F_GETFD)) & FD_CLOEXEC, ==, FD_CLOEXEC);
	CHECK_OK(close(target));
	expect_accelerated(hi);
	xexchange_both(hi, s);

	CHECK_OK(close(hi));
	CHECK(recv(s, &b, 1, 0), ==, 0);
	CHECK_OK(close(s));
	PASS();
}
