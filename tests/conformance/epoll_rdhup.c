/* epoll_rdhup: after the peer's shutdown(SHUT_WR) epoll reports exactly EPOLLIN|EPOLLRDHUP
 * (data first, then EOF), without EPOLLHUP; once we shut down too EPOLLHUP is added; a full
 * close of the peer is reported the same way; EPOLLRDHUP is not reported unless asked. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>

static uint32_t wait_events(int ep, int timeout_ms)
{
	struct epoll_event out;

	CHECK(epoll_wait(ep, &out, 1, timeout_ms), ==, 1);
	return out.events;
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };
	char buf[16];
	int c, s, ep;

	tcp_pair_checked(AF_INET, &c, &s);
	ep = CHECK_OK(epoll_create1(0));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));

	xwrite_all(c, "last", 4);
	CHECK_OK(shutdown(c, SHUT_WR));
	CHECK(wait_fd(s, POLLRDHUP, NET_WAIT_MS) & POLLRDHUP, ==, POLLRDHUP);
	CHECK(wait_events(ep, 0), ==, EPOLLIN | EPOLLRDHUP);
	xread_exact(s, buf, 4);
	CHECK(memcmp(buf, "last", 4), ==, 0);
	CHECK(wait_events(ep, 0), ==, EPOLLIN | EPOLLRDHUP); /* level: EOF stays */
	CHECK(read(s, buf, sizeof(buf)), ==, 0);

	/* Not asked for: EPOLLIN only. */
	ev.events = EPOLLIN;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	CHECK(wait_events(ep, 0), ==, EPOLLIN);

	/* Our side shut too: EPOLLHUP, reported even when not asked for. */
	ev.events = EPOLLIN | EPOLLRDHUP;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	CHECK_OK(shutdown(s, SHUT_WR));
	CHECK(wait_events(ep, 0), ==, EPOLLIN | EPOLLRDHUP | EPOLLHUP);
	ev.events = 0;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	CHECK(wait_events(ep, 0), ==, EPOLLHUP);
	CHECK_OK(close(c));
	CHECK_OK(close(s));

	/* The peer closes outright. */
	tcp_pair_checked(AF_INET, &c, &s);
	ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	CHECK_OK(close(c));
	CHECK(wait_events(ep, NET_WAIT_MS), ==, EPOLLIN | EPOLLRDHUP);

	CHECK_OK(close(ep));
	CHECK_OK(close(s));
	PASS();
}
