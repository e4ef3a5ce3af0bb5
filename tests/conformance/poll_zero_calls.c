/* poll_zero_calls: a zero-timeout poll, ppoll, select, pselect, epoll_wait, epoll_pwait or
 * epoll_pwait2 over a set that mixes an accelerated socket with a pipe and a Unix socket
 * reports an event on the pipe or the Unix socket, made by another thread, within
 * SHUNT_POLL_KERNEL_CALLS calls (set to 8 here, with SHUNT_POLL_KERNEL_US at a second, so
 * that the count is what bounds), and the socket's own data at the first call. Under shunt
 * (accelerated) most of those calls must leave the kernel out: the "os_polls_skipped"
 * counter grows (before issue 18 every zero-timeout call entered the kernel, and this test
 * failed there). What the bound must not delay: the calling thread's own write to the
 * pipe, and its own close of the pipe's writer, are reported at the first call. */
#include "zero_wait.h"

#define CALLS 8

/* Zero-timeout waits through w until fd is reported; how many it took (fails past limit). */
static int calls_until(const struct zset *z, enum zwait w, int fd, short want, int limit)
{
	for (int i = 1; i <= limit; i++) {
		int n;

		if (zset_wait(z, w, 0, fd, -1, &n) & want)
			return i;
		CHECK(n, >=, 0);
	}
	FAIL("%s: fd %d not reported within %d zero-timeout calls", zwait_name[w], fd, limit);
}

static void drain(int fd)
{
	char b;

	xread_exact(fd, &b, 1);
}

int main(void)
{
	struct zset z;
	int n;

	zset_bound("8", "1000000");
	zset_open(&z);
	for (int w = 0; w < ZW_COUNT; w++) {
		if (w == ZW_EPOLL_PWAIT2 && !zset_has_pwait2(&z))
			continue;
		int members[2] = { z.pr, z.ua }, writers[2] = { z.pw, z.ub };

		for (int m = 0; m < 2; m++) {
			long long before;

			/* a question to the kernel that finds the others quiet starts the bound */
			zset_warm(&z);
			CHECK(zset_wait(&z, w, 0, z.s, -1, &n), ==, 0);
			CHECK(n, ==, 0);
			before = zset_skipped(&z);
			zset_from_thread(writers[m]);
			CHECK(calls_until(&z, w, members[m], POLLIN, CALLS), <=, CALLS);
			if (test_mode_accelerated())
				CHECK(zset_skipped(&z) - before, >=, 1);
			drain(members[m]);

			/* the socket's data is ours to see: at the first call, kernel asked or not */
			CHECK(zset_wait(&z, w, 0, z.s, -1, &n), ==, 0);
			zset_from_thread(writers[m]);
			xwrite_all(z.c, "s", 1);
			wait_queued(z.s, 1);
			CHECK(zset_wait(&z, w, 0, z.s, -1, &n) & POLLIN, ==, POLLIN);
			CHECK(n, >=, 1);
			drain(z.s);
			CHECK(calls_until(&z, w, members[m], POLLIN, CALLS), <=, CALLS);
			drain(members[m]);

			/* what this thread did itself is never late */
			CHECK(zset_wait(&z, w, 0, z.s, -1, &n), ==, 0);
			xwrite_all(writers[m], "o", 1);
			CHECK(calls_until(&z, w, members[m], POLLIN, CALLS), ==, 1);
			drain(members[m]);
		}
		CHECK(zset_wait(&z, w, 0, z.s, -1, &n), ==, 0);
		CHECK(n, ==, 0);
	}

	/* this thread closes the pipe's writer: the hang-up comes at the first call */
	CHECK(zset_wait(&z, ZW_POLL, 0, z.s, -1, &n), ==, 0);
	CHECK_OK(close(z.pw));
	CHECK(calls_until(&z, ZW_POLL, z.pr, POLLHUP, CALLS), ==, 1);
	CHECK(calls_until(&z, ZW_EPOLL_WAIT, z.pr, EPOLLHUP, CALLS), ==, 1);
	PASS();
}
