/* epoll_edge: edge-triggered EPOLLIN gives one event per arrival: no repeat while the data
 * stays queued (also after a partial read), a new event when more data arrives (one for
 * several arrivals between waits), and one at EOF. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>

static int wait1(int ep, int timeout_ms, uint32_t *events)
{
	struct epoll_event out[4];
	int n = CHECK_OK(epoll_wait(ep, out, 4, timeout_ms));

	CHECK(n, <=, 1);
	if (n == 1) {
		CHECK(out[0].data.u32, ==, 77);
		*events = out[0].events;
	}
	return n;
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u32 = 77 };
	uint32_t events = 0;
	char buf[64];
	int c, s, ep;

	tcp_pair_checked(AF_INET, &c, &s);
	ep = CHECK_OK(epoll_create1(0));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	CHECK(wait1(ep, 0, &events), ==, 0);

	xwrite_all(c, "0123456789", 10);
	CHECK(wait1(ep, NET_WAIT_MS, &events), ==, 1);
	CHECK(events, ==, EPOLLIN);
	CHECK(wait1(ep, 0, &events), ==, 0);
	CHECK(wait1(ep, 50, &events), ==, 0);
	CHECK(read(s, buf, 5), ==, 5);
	CHECK(wait1(ep, 0, &events), ==, 0); /* 5 bytes still queued, no new edge */

	xwrite_all(c, "abc", 3);
	CHECK(wait1(ep, NET_WAIT_MS, &events), ==, 1);
	CHECK(events, ==, EPOLLIN);
	CHECK(wait1(ep, 0, &events), ==, 0);

	/* Two arrivals before the wait: one event. */
	xwrite_all(c, "d", 1);
	xwrite_all(c, "e", 1);
	wait_queued(s, 10);
	CHECK(wait1(ep, 0, &events), ==, 1);
	CHECK(wait1(ep, 0, &events), ==, 0);

	CHECK(read(s, buf, sizeof(buf)), ==, 10);
	CHECK(memcmp(buf, "56789abcde", 10), ==, 0);
	CHECK(wait1(ep, 0, &events), ==, 0);

	/* EOF is an edge too. */
	CHECK_OK(shutdown(c, SHUT_WR));
	CHECK(wait1(ep, NET_WAIT_MS, &events), ==, 1);
	CHECK(events & EPOLLIN, ==, EPOLLIN);
	CHECK(wait1(ep, 0, &events), ==, 0);
	CHECK(read(s, buf, sizeof(buf)), ==, 0);

	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
