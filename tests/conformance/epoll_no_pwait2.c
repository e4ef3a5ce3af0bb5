/* epoll_no_pwait2: a kernel without epoll_pwait2 (before Linux 5.11; here a seccomp filter
 * answers ENOSYS for it, as the old kernel does). epoll_wait and epoll_pwait keep working on a
 * set of accelerated sockets and a pipe: a zero timeout returns 0 at once, a timeout returns 0
 * no earlier than it, data wakes a wait without timeout, also data written later by a thread;
 * the program's own epoll_pwait2 fails with ENOSYS, as the kernel's. */
#include "check.h"
#include "net.h"
#include "deny.h"
#include "usr1.h"

#include <sys/epoll.h>
#include <sys/syscall.h>

#ifndef SYS_epoll_pwait2
#define SYS_epoll_pwait2 441
#endif

#define PAIRS 4

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN }, out[PAIRS + 1];
	struct timespec ts = { 0, 1000000 };
	int c[PAIRS], s[PAIRS], pp[2], ep;
	pthread_t th;
	double start;
	char b;

	deny_syscall(SYS_epoll_pwait2);
	ep = CHECK_OK(epoll_create1(0));
	for (int i = 0; i < PAIRS; i++) {
		tcp_pair_checked(AF_INET, &c[i], &s[i]);
		ev.data.u32 = (uint32_t)i;
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s[i], &ev));
	}
	CHECK_OK(pipe(pp));
	ev.data.u32 = PAIRS;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &ev));

	CHECK(epoll_wait(ep, out, PAIRS + 1, 0), ==, 0);
	start = now_sec();
	CHECK(epoll_wait(ep, out, PAIRS + 1, 20), ==, 0);
	if ((now_sec() - start) * 1000.0 < 20)
		FAIL("a timeout of 20 ms returned after %.3f ms", (now_sec() - start) * 1000.0);
	CHECK(epoll_pwait(ep, out, PAIRS + 1, 5, NULL), ==, 0);

	xwrite_all(c[1], "x", 1);
	CHECK(epoll_wait(ep, out, PAIRS + 1, -1), ==, 1);
	CHECK(out[0].data.u32, ==, 1);
	CHECK(out[0].events, ==, EPOLLIN);
	xread_exact(s[1], &b, 1);

	xwrite_all(pp[1], "p", 1);
	CHECK(epoll_pwait(ep, out, PAIRS + 1, NET_WAIT_MS, NULL), ==, 1);
	CHECK(out[0].data.u32, ==, PAIRS);
	xread_exact(pp[0], &b, 1);

	/* asleep in the kernel when the data comes */
	late_fd = c[2];
	CHECK(pthread_create(&th, NULL, write_later, NULL), ==, 0);
	CHECK(epoll_wait(ep, out, PAIRS + 1, -1), ==, 1);
	CHECK(out[0].data.u32, ==, 2);
	CHECK(pthread_join(th, NULL), ==, 0);
	xread_exact(s[2], &b, 1);
	CHECK(epoll_wait(ep, out, PAIRS + 1, 0), ==, 0);

	errno = 0;
	CHECK(epoll_pwait2(ep, out, PAIRS + 1, &ts, NULL), ==, -1);
	CHECK(errno, ==, ENOSYS);

	CHECK_OK(close(ep));
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	for (int i = 0; i < PAIRS; i++) {
		CHECK_OK(close(c[i]));
		CHECK_OK(close(s[i]));
	}
	PASS();
}
