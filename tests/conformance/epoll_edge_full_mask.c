/* epoll_edge_full_mask: an edge-triggered registration reports, at each edge, everything that is
 * ready on the socket, not only what changed: the kernel's answer for an edge is the socket's
 * whole poll mask. A server end registered EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET is writable
 * first (EPOLLOUT); the client's byte then makes EPOLLIN|EPOLLOUT; its shutdown(SHUT_WR), once
 * the byte was read, EPOLLIN|EPOLLOUT|EPOLLRDHUP. mio (tokio) takes a socket for closed for
 * reading only when EPOLLRDHUP comes with EPOLLIN: before 2026-11-30 shunt reported the new bits
 * alone, so an edge that added EPOLLRDHUP to an EPOLLIN already reported carried EPOLLRDHUP
 * alone, mio ignored it, and a tokio echo server whose last read was short (tokio then takes
 * the socket for drained) never read its peer's end: one run in about 500 hung (the tokio
 * corpus test). Then the same with the client's byte and its shutdown close together, and a
 * one-shot round. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>

#define WANT (EPOLLIN | EPOLLOUT | EPOLLRDHUP)

/* One wait of at most 2 s that must report exactly one event for fd, with exactly mask. */
static void expect_edge(int ep, int fd, uint32_t mask, const char *what)
{
	struct epoll_event ev[4];
	int n = epoll_wait(ep, ev, 4, 2000);

	if (n != 1)
		FAIL("%s: epoll_wait returned %d events, expected 1", what, n);
	CHECK(ev[0].data.fd, ==, fd);
	if (ev[0].events != mask)
		FAIL("%s: events %#x, expected %#x", what, ev[0].events, mask);
}

/* Nothing more within 100 ms: the edges above were reported once each. */
static void expect_quiet(int ep, const char *what)
{
	struct epoll_event ev[4];
	int n = epoll_wait(ep, ev, 4, 100);

	if (n != 0)
		FAIL("%s: %d more events (the first %#x), expected none", what, n, n > 0 ? ev[0].events : 0);
}

static void round_apart(int oneshot)
{
	int c, s;
	char b;

	tcp_pair_checked(AF_INET, &c, &s);
	int ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	struct epoll_event reg = { .events = WANT | EPOLLET | (oneshot ? EPOLLONESHOT : 0), .data.fd = s };

	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &reg));
	expect_edge(ep, s, EPOLLOUT, "a new connection");
	expect_quiet(ep, "a new connection");
	CHECK(write(c, "x", 1), ==, 1);
	if (oneshot)
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &reg));
	expect_edge(ep, s, EPOLLIN | EPOLLOUT, "the client's byte");
	CHECK(read(s, &b, 1), ==, 1);
	expect_quiet(ep, "the byte read");
	CHECK_OK(shutdown(c, SHUT_WR));
	if (oneshot)
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &reg));
	expect_edge(ep, s, EPOLLIN | EPOLLOUT | EPOLLRDHUP, "the client's shutdown");
	CHECK(read(s, &b, 1), ==, 0);
	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

/* The byte and the end come close together, after the byte alone was reported: whatever
 * edges come, the last report carries EPOLLIN with EPOLLRDHUP. */
static void round_close_together(void)
{
	int c, s;
	char buf[8];

	tcp_pair_checked(AF_INET, &c, &s);
	int ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	struct epoll_event reg = { .events = WANT | EPOLLET, .data.fd = s };

	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &reg));
	expect_edge(ep, s, EPOLLOUT, "a new connection");
	CHECK(write(c, "ab", 2), ==, 2);
	expect_edge(ep, s, EPOLLIN | EPOLLOUT, "the client's bytes");
	CHECK(read(s, buf, 1), ==, 1);   /* a short read: the byte after it stays */
	CHECK(write(c, "c", 1), ==, 1);
	CHECK_OK(shutdown(c, SHUT_WR));
	uint32_t last = 0;
	struct epoll_event ev[4];
	int n;

	while ((n = epoll_wait(ep, ev, 4, 200)) > 0) {
		CHECK(n, ==, 1);
		last = ev[0].events;
	}
	CHECK(n, ==, 0);
	if ((last & (EPOLLIN | EPOLLRDHUP)) != (EPOLLIN | EPOLLRDHUP))
		FAIL("the last report after the end was %#x: EPOLLIN with EPOLLRDHUP expected", last);
	CHECK(read(s, buf, sizeof(buf)), ==, 2);
	CHECK(read(s, buf, sizeof(buf)), ==, 0);
	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

int main(void)
{
	round_apart(0);
	round_apart(1);
	round_close_together();
	PASS();
}
