/* poll_zero_time: the time bound of zero-timeout waits over a mixed set. With
 * SHUNT_POLL_KERNEL_US at 2 ms (and SHUNT_POLL_KERNEL_CALLS at a million, so that time is
 * what bounds), an event another thread made on the pipe or the Unix socket is reported by
 * the first zero-timeout poll, ppoll, select, pselect, epoll_wait, epoll_pwait or
 * epoll_pwait2 made more than 2 ms after the set's last question to the kernel, however many
 * calls came before; and by a loop of such calls within 2 ms of it (plus the time one call
 * takes). Under shunt (accelerated) the calls inside the bound leave the kernel out
 * ("os_polls_skipped" grows). A regression guard: the kernel reports every event at once,
 * and so did every earlier version of shunt. */
#include "zero_wait.h"

#define BOUND_MS 2

int main(void)
{
	struct zset z;
	int n;

	zset_bound("1000000", "2000");
	zset_open(&z);
	for (int w = 0; w < ZW_COUNT; w++) {
		if (w == ZW_EPOLL_PWAIT2 && !zset_has_pwait2(&z))
			continue;
		int members[2] = { z.pr, z.ua }, writers[2] = { z.pw, z.ub };

		for (int m = 0; m < 2; m++) {
			char b;

			/* after the bound: at the first call */
			CHECK(zset_wait(&z, w, 0, z.s, -1, &n), ==, 0);
			zset_from_thread(writers[m]);
			sleep_ms(BOUND_MS + 1);
			CHECK(zset_wait(&z, w, 0, members[m], -1, &n) & POLLIN, ==, POLLIN);
			CHECK(n, ==, 1);
			xread_exact(members[m], &b, 1);

			/* a loop of calls: within the bound of the question that starts it */
			zset_warm(&z);
			double start = now_sec();

			CHECK(zset_wait(&z, w, 0, z.s, -1, &n), ==, 0);
			long long before = zset_skipped(&z);

			zset_from_thread(writers[m]);
			while (!(zset_wait(&z, w, 0, members[m], -1, &n) & POLLIN))
				CHECK(n, ==, 0);
			/* the bound, and a generous allowance for a machine busy elsewhere */
			CHECK((now_sec() - start) * 1000, <, BOUND_MS + 50);
			/* all of it inside half the bound (not on a machine busy elsewhere): the
			 * calls before the event was seen left the kernel out */
			if (test_mode_accelerated() && now_sec() - start < BOUND_MS / 2000.0)
				CHECK(zset_skipped(&z) - before, >=, 1);
			xread_exact(members[m], &b, 1);
		}
	}
	PASS();
}
