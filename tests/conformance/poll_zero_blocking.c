/* poll_zero_blocking: a wait that may block always asks the kernel, whatever the bound of
 * zero-timeout waits says (SHUNT_POLL_KERNEL_CALLS at a million and SHUNT_POLL_KERNEL_US at
 * a second here, so a zero-timeout wait would leave the kernel out for long). Right after a
 * zero-timeout question, an event another thread made on the pipe or the Unix socket is
 * reported by the first poll, ppoll, select, pselect, epoll_wait, epoll_pwait or
 * epoll_pwait2 with a timeout, at once: with the accelerated socket's data there too (both
 * reported, the wait does not sleep) and without it (the wait finds it in the kernel). A
 * regression guard: every version of shunt passed it. */
#include "zero_wait.h"

int main(void)
{
	struct zset z;
	int n;
	char b;

	zset_bound("1000000", "1000000");
	zset_open(&z);
	for (int w = 0; w < ZW_COUNT; w++) {
		if (w == ZW_EPOLL_PWAIT2 && !zset_has_pwait2(&z))
			continue;
		int members[2] = { z.pr, z.ua }, writers[2] = { z.pw, z.ub };

		for (int m = 0; m < 2; m++) {
			/* the socket's data and the member's event together */
			for (int i = 0; i < 3; i++)
				CHECK(zset_wait(&z, w, 0, z.s, -1, &n), ==, 0);
			xwrite_all(z.c, "s", 1);
			wait_queued(z.s, 1);
			CHECK(zset_wait(&z, w, 0, z.s, -1, &n) & POLLIN, ==, POLLIN);
			zset_from_thread(writers[m]);
			double start = now_sec();

			CHECK(zset_wait(&z, w, NET_WAIT_MS, members[m], -1, &n) & POLLIN, ==, POLLIN);
			CHECK(n, ==, 2);
			CHECK(now_sec() - start, <, 1.0);
			xread_exact(members[m], &b, 1);
			xread_exact(z.s, &b, 1);

			/* the member's event alone */
			for (int i = 0; i < 3; i++)
				CHECK(zset_wait(&z, w, 0, z.s, -1, &n), ==, 0);
			zset_from_thread(writers[m]);
			start = now_sec();
			CHECK(zset_wait(&z, w, NET_WAIT_MS, members[m], -1, &n) & POLLIN, ==, POLLIN);
			CHECK(n, ==, 1);
			CHECK(now_sec() - start, <, 1.0);
			xread_exact(members[m], &b, 1);
		}
	}
	PASS();
}
