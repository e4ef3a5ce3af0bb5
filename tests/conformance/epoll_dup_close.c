/* epoll_dup_close: epoll watches the open file description, not the fd number: after
 * dup() and closing the registered fd, events keep coming (tagged as registered) while the
 * dup is open; once the dup is closed too they stop. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 4242 }, out;
	char buf[4];
	int c, s, d, ep;

	tcp_pair_checked(AF_INET, &c, &s);
	ep = CHECK_OK(epoll_create1(0));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	d = CHECK_OK(dup(s));
	CHECK_OK(close(s));
	expect_accelerated(d);

	xwrite_all(c, "x", 1);
	CHECK(epoll_wait(ep, &out, 1, NET_WAIT_MS), ==, 1);
	CHECK(out.data.u64, ==, 4242);
	CHECK(out.events, ==, EPOLLIN);
	xread_exact(d, buf, 1);
	CHECK(epoll_wait(ep, &out, 1, 0), ==, 0);

	/* The registration cannot be changed through the closed number... */
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL), EBADF);
	/* ...and the dup is a different (fd, file) key, not registered. */
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_DEL, d, NULL), ENOENT);

	xwrite_all(c, "y", 1);
	CHECK(epoll_wait(ep, &out, 1, NET_WAIT_MS), ==, 1);
	CHECK(out.data.u64, ==, 4242);
	CHECK_OK(close(d)); /* the last reference: the registration goes away */
	CHECK(epoll_wait(ep, &out, 1, 0), ==, 0);

	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	PASS();
}
