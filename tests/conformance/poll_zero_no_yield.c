/* poll_zero_no_yield: zero-timeout poll, ppoll, select, pselect, epoll_wait, epoll_pwait and
 * epoll_pwait2 never take turns (sched_yield), however long a thread loops over them
 * finding data: the kernel's poll with a zero timeout never yields either, and a thread
 * that polls without waiting has chosen to keep its CPU. Each loop runs 20 ms over a mixed
 * set whose accelerated socket always has data, at SHUNT_YIELD_US=100; under shunt
 * (accelerated) the calling thread's "turns_given" must not move (before issue 18 every
 * such wait took its turn after 100 us, some 200 yields a loop, and this test failed there).
 * The same loop with a timeout of 5 s must still yield (architecture.md, "Taking turns"). */
#include "zero_wait.h"

#define LOOP_SEC 0.02

static long long loop(const struct zset *z, enum zwait w, int timeout_ms)
{
	long long rounds = 0;
	int n;

	for (double end = now_sec() + LOOP_SEC; now_sec() < end; rounds++) {
		CHECK(zset_wait(z, w, timeout_ms, z->s, -1, &n) & POLLIN, ==, POLLIN);
		CHECK(n, >=, 1);
	}
	return rounds;
}

int main(void)
{
	struct zset z;

	test_setting("SHUNT_YIELD_US", "100");
	zset_open(&z);
	xwrite_all(z.c, "d", 1);   /* never read: the socket is always ready */
	wait_queued(z.s, 1);
	for (int w = 0; w < ZW_COUNT; w++) {
		if (w == ZW_EPOLL_PWAIT2 && !zset_has_pwait2(&z))
			continue;
		long long before = shunt_counter(z.s, "turns_given");

		CHECK(loop(&z, w, 0), >, 0);
		if (test_mode_accelerated() && shunt_counter(z.s, "turns_given") != before)
			FAIL("%s with a zero timeout took %lld turns", zwait_name[w],
			     shunt_counter(z.s, "turns_given") - before);
	}
	long long before = shunt_counter(z.s, "turns_given");

	CHECK(loop(&z, ZW_POLL, NET_WAIT_MS), >, 0);
	if (test_mode_accelerated())
		CHECK(shunt_counter(z.s, "turns_given") - before, >=, 10);
	PASS();
}
