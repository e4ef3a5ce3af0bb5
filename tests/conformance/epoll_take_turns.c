/* epoll_take_turns: a thread whose epoll_wait and poll keep finding data at once gets every
 * event right, and under shunt it still gives the CPU away now and then. Kernel TCP never needs
 * to: a real exchange blocks in the kernel at every wait, and every block lets a thread queued
 * on the CPU run. Under shunt such a thread never blocks, so after SHUNT_YIELD_US of running
 * without sleeping its next epoll_wait, poll or select yields (else a thread it woke waits for
 * the end of its scheduler slice, up to a tick: nginx+wrk's 99th percentile of
 * docs/benchmarks.md). The loops run 40 ms each; at SHUNT_YIELD_US=100 they must have yielded at
 * least 20 times (a loop that never yielded gives 0), and at SHUNT_YIELD_US=0 (re-executed
 * with it) never. */
#include "check.h"
#include "net.h"
#include "settings.h"

#include <poll.h>
#include <stdbool.h>
#include <sys/epoll.h>

#define LOOP_SEC 0.04

static long long epoll_loop(int c, int s)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = s };
	int ep = CHECK_OK(epoll_create1(0));
	long long rounds = 0;
	char b;

	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	for (double end = now_sec() + LOOP_SEC; now_sec() < end; rounds++) {
		struct epoll_event out[2];

		xwrite_all(c, "e", 1);
		CHECK(epoll_wait(ep, out, 2, 5000), ==, 1);
		CHECK(out[0].data.fd, ==, s);
		CHECK(out[0].events, ==, EPOLLIN);
		xread_exact(s, &b, 1);
		CHECK(b, ==, 'e');
	}
	CHECK(epoll_wait(ep, &ev, 1, 0), ==, 0);
	CHECK_OK(close(ep));
	return rounds;
}

static long long poll_loop(int c, int s)
{
	long long rounds = 0;
	char b;

	for (double end = now_sec() + LOOP_SEC; now_sec() < end; rounds++) {
		struct pollfd p[2] = { { .fd = s, .events = POLLIN }, { .fd = c, .events = POLLIN } };

		xwrite_all(c, "p", 1);
		CHECK(poll(p, 2, 5000), ==, 1);
		CHECK(p[0].revents, ==, POLLIN);
		CHECK(p[1].revents, ==, 0);
		xread_exact(s, &b, 1);
		CHECK(b, ==, 'p');
	}
	return rounds;
}

int main(int argc, char **argv)
{
	bool off = argc > 1 && strcmp(argv[1], "off") == 0;
	long long before, after, rounds;
	int c, s;

	if (!off)
		test_setting("SHUNT_YIELD_US", "100");
	tcp_pair_checked(AF_INET, &c, &s);
	before = shunt_counter(s, "turns_given");
	rounds = epoll_loop(c, s);
	rounds += poll_loop(c, s);
	after = shunt_counter(s, "turns_given");
	CHECK(rounds, >, 0);
	if (test_mode_accelerated()) {
		if (off)
			CHECK(after - before, ==, 0);
		else
			CHECK(after - before, >=, 20);
	} else {
		CHECK(after, ==, -1);   /* nothing of shunt's on this fd */
	}
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	if (!off && test_mode() != TEST_MODE_PLAIN) {
		char *const args[] = { "/proc/self/exe", "off", NULL };

		CHECK(setenv("SHUNT_YIELD_US", "0", 1), ==, 0);
		execv("/proc/self/exe", args);
		FAIL("exec /proc/self/exe: %s", strerror(errno));
	}
	PASS();
}
