/* epoll_no_duplicates: one epoll_wait never reports an fd twice, and reports every ready one
 * (up to maxevents).  Eight connections in one level-triggered set; some stay readable
 * (never read) while others go quiet for several waits and then receive data, so that
 * sockets that were just looked at and sockets woken by the kernel meet in one call. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>

#define N 8

static int c[N], s[N], ep;

/* One wait; returns the mask of fds reported, failing on a duplicate. */
static unsigned wait_mask(int timeout_ms)
{
	struct epoll_event out[2 * N];
	int n = CHECK_OK(epoll_wait(ep, out, 2 * N, timeout_ms));
	unsigned mask = 0;

	for (int i = 0; i < n; i++) {
		unsigned bit = 1u << out[i].data.u32;
		CHECK(out[i].data.u32, <, N);
		if (mask & bit)
			FAIL("fd of connection %u reported twice in one epoll_wait", out[i].data.u32);
		mask |= bit;
	}
	return mask;
}

int main(void)
{
	char buf[8];

	ep = CHECK_OK(epoll_create1(0));
	for (int i = 0; i < N; i++) {
		tcp_pair_checked(AF_INET, &c[i], &s[i]);
		expect_accelerated(s[i]);
		struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s[i], &ev));
	}
	for (int round = 0; round < 20; round++) {
		/* the even ones are made readable and left so */
		for (int i = 0; i < N; i += 2)
			if (round == 0)
				xwrite_all(c[i], "e", 1);
		/* quiet waits: the odd ones show nothing several times over */
		for (int q = 0; q < 6; q++)
			CHECK(wait_mask(0), ==, 0x55u);
		/* then data on one odd one (the kernel names it, or a look finds it) */
		int odd = 1 + 2 * (round % (N / 2));
		xwrite_all(c[odd], "o", 1);
		unsigned want = 0x55u | (1u << odd), got = 0;
		for (int tries = 0; tries < 100 && got != want; tries++)
			got |= wait_mask(NET_WAIT_MS);
		CHECK(got, ==, want);
		CHECK(wait_mask(0), ==, want);   /* level-triggered: all still there, once each */
		xread_exact(s[odd], buf, 1);
	}
	for (int i = 0; i < N; i++) {
		CHECK_OK(close(c[i]));
		CHECK_OK(close(s[i]));
	}
	CHECK_OK(close(ep));
	PASS();
}
