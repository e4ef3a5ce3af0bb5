/* poll_zero_badfd: a closed fd in a mixed set is reported by the first zero-timeout call,
 * even inside the bound that lets such calls leave the kernel out (SHUNT_POLL_KERNEL_CALLS
 * and SHUNT_POLL_KERNEL_US high here): poll and ppoll give POLLNVAL for it, select and
 * pselect fail with EBADF. The fd is closed by another thread (a close of the calling
 * thread's own makes the next call ask anyway), and also is a number never opened. A
 * regression guard: the kernel's answer, which shunt always gave. */
#include "zero_wait.h"

/* A zero-timeout wait w over the set with fd, which is not open: POLLNVAL
 * for poll and ppoll, EBADF for select and pselect, at this very call. */
static void expect_bad(struct zset *z, int w, int fd)
{
	int n;

	errno = 0;
	short got = zset_wait(z, w, 0, fd, fd, &n);

	if (w == ZW_POLL || w == ZW_PPOLL) {
		CHECK(n, ==, 1);
		CHECK(got, ==, POLLNVAL);
	} else {
		CHECK(n, ==, -1);
		CHECK(errno, ==, EBADF);
	}
}

int main(void)
{
	struct zset z;
	int n;

	zset_bound("1000000", "1000000");
	zset_open(&z);
	for (int w = ZW_POLL; w <= ZW_PSELECT; w++) {
		int spare = CHECK_OK(dup(z.pr));

		for (int i = 0; i < 3; i++)
			CHECK(zset_wait(&z, w, 0, z.s, spare, &n), ==, 0);
		zset_from_thread(~spare);
		expect_bad(&z, w, spare);
	}

	/* a number nobody opened */
	int never = CHECK_OK(dup(z.pr));

	CHECK_OK(close(never));
	for (int w = ZW_POLL; w <= ZW_PSELECT; w++)
		for (int i = 0; i < 3; i++)
			expect_bad(&z, w, never);
	PASS();
}
