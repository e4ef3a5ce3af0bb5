/* epoll_level: level-triggered EPOLLIN repeats while data is queued (after a partial read
 * too) and stops once drained; EPOLLOUT on an idle connected socket repeats; data.u64 comes
 * back unchanged; ADD twice is EEXIST, MOD/DEL of an unregistered fd ENOENT, DEL stops events. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>

#define TAG 0x1122334455667788ULL

static int wait1(int ep, int timeout_ms, uint32_t *events)
{
	struct epoll_event out[4];
	int n = CHECK_OK(epoll_wait(ep, out, 4, timeout_ms));

	CHECK(n, <=, 1);
	if (n == 1) {
		CHECK(out[0].data.u64, ==, TAG);
		*events = out[0].events;
	}
	return n;
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG };
	uint32_t events = 0;
	char buf[16];
	int c, s, ep;

	tcp_pair_checked(AF_INET, &c, &s);
	ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev), EEXIST);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev), ENOENT);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_DEL, c, &ev), ENOENT);

	CHECK(wait1(ep, 0, &events), ==, 0);
	CHECK(wait1(ep, 50, &events), ==, 0);

	xwrite_all(c, "0123456789", 10);
	CHECK(wait1(ep, NET_WAIT_MS, &events), ==, 1);
	CHECK(events, ==, EPOLLIN);
	for (int i = 0; i < 3; i++) {
		CHECK(wait1(ep, 0, &events), ==, 1);
		CHECK(events, ==, EPOLLIN);
	}
	wait_queued(s, 10);
	CHECK(read(s, buf, 4), ==, 4);
	CHECK(wait1(ep, 0, &events), ==, 1);
	CHECK(read(s, buf, sizeof(buf)), ==, 6);
	CHECK(wait1(ep, 0, &events), ==, 0);

	/* EPOLLOUT: always ready on an idle socket. */
	ev.events = EPOLLIN | EPOLLOUT;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	for (int i = 0; i < 3; i++) {
		CHECK(wait1(ep, 0, &events), ==, 1);
		CHECK(events, ==, EPOLLOUT);
	}
	xwrite_all(c, "x", 1);
	wait_queued(s, 1);
	CHECK(wait1(ep, 0, &events), ==, 1);
	CHECK(events, ==, EPOLLIN | EPOLLOUT);

	/* Deleted: no more events though data is queued. */
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	CHECK(wait1(ep, 0, &events), ==, 0);
	CHECK(read(s, buf, sizeof(buf)), ==, 1);

	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
