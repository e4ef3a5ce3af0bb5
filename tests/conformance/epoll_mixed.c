/* epoll_mixed: one epoll set over a pipe and a socket reports each ready fd with its own
 * data (pipe only, socket only, both); with maxevents 1 and both ready, two waits return both
 * fds (no starvation); closing the only reference of the pipe removes it from the set. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>

#define TAG_PIPE 1001
#define TAG_SOCK 2002

/* Collect events: a bitmask of 1 (pipe) and 2 (socket), each EPOLLIN exactly. */
static int ready(int ep, int timeout_ms)
{
	struct epoll_event out[4];
	int n = CHECK_OK(epoll_wait(ep, out, 4, timeout_ms)), mask = 0;

	for (int i = 0; i < n; i++) {
		CHECK(out[i].events, ==, EPOLLIN);
		if (out[i].data.u64 == TAG_PIPE)
			mask |= 1;
		else if (out[i].data.u64 == TAG_SOCK)
			mask |= 2;
		else
			FAIL("unexpected data %llu", (unsigned long long)out[i].data.u64);
	}
	CHECK(n, ==, __builtin_popcount((unsigned)mask));
	return mask;
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN }, one;
	char buf[4];
	int pp[2], c, s, ep, first;

	CHECK_OK(pipe(pp));
	tcp_pair_checked(AF_INET, &c, &s);
	ep = CHECK_OK(epoll_create1(0));
	ev.data.u64 = TAG_PIPE;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &ev));
	ev.data.u64 = TAG_SOCK;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));

	CHECK(ready(ep, 0), ==, 0);
	xwrite_all(pp[1], "p", 1);
	CHECK(ready(ep, NET_WAIT_MS), ==, 1);
	xread_exact(pp[0], buf, 1);
	CHECK(ready(ep, 0), ==, 0);

	xwrite_all(c, "s", 1);
	CHECK(ready(ep, NET_WAIT_MS), ==, 2);
	xwrite_all(pp[1], "p", 1);
	CHECK(ready(ep, NET_WAIT_MS), ==, 3);

	/* maxevents 1: the two ready fds take turns. */
	CHECK(epoll_wait(ep, &one, 1, 0), ==, 1);
	first = (int)one.data.u64;
	CHECK(epoll_wait(ep, &one, 1, 0), ==, 1);
	CHECK(one.data.u64, !=, first);

	xread_exact(pp[0], buf, 1);
	xread_exact(s, buf, 1);
	CHECK(ready(ep, 0), ==, 0);

	/* Closing the pipe's read end drops it from the set; the socket stays. */
	xwrite_all(pp[1], "p", 1);
	CHECK_OK(close(pp[0]));
	CHECK(ready(ep, 0), ==, 0);
	xwrite_all(c, "s", 1);
	CHECK(ready(ep, NET_WAIT_MS), ==, 2);

	CHECK_OK(close(pp[1]));
	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
