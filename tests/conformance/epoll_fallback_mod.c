/* epoll_fallback_mod: a socket registered while its connection was being negotiated, which
 * then stays on kernel TCP (the client shuts down its sending side before the server accepts:
 * shunt withdraws the offer), keeps the program's registration: an EPOLL_CTL_MOD made after
 * the fallback is the one that counts (an event-loop library registers EPOLLOUT for the
 * connect and adds EPOLLIN later), and the answer arriving afterwards is reported. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <sys/epoll.h>

int main(void)
{
	int port, l, c, s, ep;
	char buf[8];
	struct epoll_event ev = { .events = EPOLLOUT, .data.u64 = 77 }, out;

	l = tcp_listen(AF_INET, &port);
	c = tcp_connect(AF_INET, port);
	ep = CHECK_OK(epoll_create1(0));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	CHECK(epoll_wait(ep, &out, 1, NET_WAIT_MS), ==, 1);
	CHECK(out.events, ==, EPOLLOUT);
	xwrite_all(c, "req", 3);
	CHECK_OK(shutdown(c, SHUT_WR));   /* before the accept: the offer is withdrawn */
	s = CHECK_OK(accept(l, NULL, NULL));
	xread_exact(s, buf, 3);
	CHECK(memcmp(buf, "req", 3), ==, 0);
	CHECK(read(s, buf, 1), ==, 0);
	expect_downgraded(c);   /* in accelerated mode: on kernel TCP */
	expect_downgraded(s);

	/* the change comes before any wait has looked at the socket since the fallback */
	ev.events = EPOLLIN;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev));
	for (int i = 0; i < 3; i++)
		CHECK(epoll_wait(ep, &out, 1, 0), ==, 0);
	xwrite_all(s, "answer", 6);
	CHECK(epoll_wait(ep, &out, 1, NET_WAIT_MS), ==, 1);
	CHECK(out.events, ==, EPOLLIN);
	CHECK(out.data.u64, ==, 77);
	xread_exact(c, buf, 6);
	CHECK(memcmp(buf, "answer", 6), ==, 0);

	CHECK_OK(close(ep));
	CHECK_OK(close(s));
	CHECK_OK(close(c));
	CHECK_OK(close(l));
	PASS();
}
