/* epoll_oneshot: with EPOLLONESHOT one event is reported, then none (even for new data)
 * until EPOLL_CTL_MOD rearms it, after which the pending data is reported again once. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.fd = -1 }, out[2];
	char buf[16];
	int c, s, ep;

	tcp_pair_checked(AF_INET, &c, &s);
	ev.data.fd = s;
	ep = CHECK_OK(epoll_create1(0));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	CHECK(epoll_wait(ep, out, 2, 0), ==, 0);

	xwrite_all(c, "one", 3);
	CHECK(epoll_wait(ep, out, 2, NET_WAIT_MS), ==, 1);
	CHECK(out[0].data.fd, ==, s);
	CHECK(out[0].events, ==, EPOLLIN);
	CHECK(epoll_wait(ep, out, 2, 0), ==, 0);

	/* Disarmed: new data is not reported (poll proves it is there). */
	xwrite_all(c, "two", 3);
	wait_queued(s, 6);
	CHECK(wait_fd(s, POLLIN, 0), ==, POLLIN);
	CHECK(epoll_wait(ep, out, 2, 0), ==, 0);
	CHECK(epoll_wait(ep, out, 2, 50), ==, 0);

	/* Rearmed: reported once more. */
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	CHECK(epoll_wait(ep, out, 2, 0), ==, 1);
	CHECK(out[0].data.fd, ==, s);
	CHECK(out[0].events, ==, EPOLLIN);
	CHECK(epoll_wait(ep, out, 2, 0), ==, 0);

	xread_exact(s, buf, 6);
	CHECK(memcmp(buf, "onetwo", 6), ==, 0);

	/* Rearmed with nothing queued: the next arrival is reported, once. */
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	CHECK(epoll_wait(ep, out, 2, 0), ==, 0);
	xwrite_all(c, "three", 5);
	CHECK(epoll_wait(ep, out, 2, NET_WAIT_MS), ==, 1);
	CHECK(epoll_wait(ep, out, 2, 0), ==, 0);

	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
