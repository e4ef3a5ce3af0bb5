/* poll_zero_off: SHUNT_POLL_KERNEL_CALLS=0, and (re-executed) SHUNT_POLL_KERNEL_US=0, turn
 * the bound of zero-timeout waits off: every zero-timeout poll, ppoll, select, pselect,
 * epoll_wait, epoll_pwait and epoll_pwait2 over a mixed set asks the kernel, so an event
 * another thread made on the pipe or the Unix socket is reported by the first call, and under
 * shunt no call leaves the kernel out ("os_polls_skipped" stays as it was). A regression
 * guard: before issue 18 shunt always asked. */
#include "zero_wait.h"

static void check_every_call_asks(void)
{
	struct zset z;
	int n;
	char b;

	zset_open(&z);
	long long before = zset_skipped(&z);

	for (int w = 0; w < ZW_COUNT; w++) {
		if (w == ZW_EPOLL_PWAIT2 && !zset_has_pwait2(&z))
			continue;
		int members[2] = { z.pr, z.ua }, writers[2] = { z.pw, z.ub };

		for (int m = 0; m < 2; m++)
			for (int round = 0; round < 20; round++) {
				CHECK(zset_wait(&z, w, 0, z.s, -1, &n), ==, 0);
				zset_from_thread(writers[m]);
				CHECK(zset_wait(&z, w, 0, members[m], -1, &n) & POLLIN, ==, POLLIN);
				CHECK(n, ==, 1);
				xread_exact(members[m], &b, 1);
			}
	}
	CHECK(zset_skipped(&z), ==, before);
}

int main(void)
{
	const char *us = getenv("SHUNT_POLL_KERNEL_US");

	if (us == NULL || strcmp(us, "0") != 0) {
		zset_bound("0", "1000000");
		check_every_call_asks();
		/* the other setting at 0, the count high */
		CHECK(setenv("SHUNT_POLL_KERNEL_CALLS", "1000000", 1), ==, 0);
		test_setting("SHUNT_POLL_KERNEL_US", "0");
	}
	check_every_call_asks();
	PASS();
}
