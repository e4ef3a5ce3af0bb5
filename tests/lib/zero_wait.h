/*
 * zero_wait.h: the mixed set of the zero-timeout tests (poll_zero_*.c): an accelerated TCP
 * connection, a pipe and a Unix socket, watched for reading by one set, waited on with any of
 * poll, ppoll, select, pselect, epoll_wait, epoll_pwait and epoll_pwait2.
 *
 * Owns: zset_open() (the set, and an epoll set holding the same three fds), zset_wait() (one
 * wait through a chosen call, with a timeout in milliseconds, answering the events reported
 * for one fd), zset_from_thread() (a write or close made by another thread, which is what a
 * thread cannot tell from an event that came late), and the bound the tests set
 * (zset_bound()). Under shunt a zero-timeout wait over such a set asks the kernel about the
 * pipe and the Unix socket only once in SHUNT_POLL_KERNEL_CALLS calls or after
 * SHUNT_POLL_KERNEL_US (docs/settings.md); these tests check that bound and what it must never
 * delay.
 */
#ifndef SHUNT_TESTS_ZERO_WAIT_H
#define SHUNT_TESTS_ZERO_WAIT_H

#include "check.h"
#include "net.h"
#include "settings.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>

enum zwait { ZW_POLL, ZW_PPOLL, ZW_SELECT, ZW_PSELECT, ZW_EPOLL_WAIT, ZW_EPOLL_PWAIT, ZW_EPOLL_PWAIT2, ZW_COUNT };

static const char *const zwait_name[ZW_COUNT] = { "poll", "ppoll", "select", "pselect",
						  "epoll_wait", "epoll_pwait", "epoll_pwait2" };

struct zset {
	int c, s;     /* the TCP connection: s is in the set, c its peer */
	int pr, pw;   /* the pipe: pr is in the set */
	int ua, ub;   /* the Unix socket pair: ua is in the set */
	int ep;       /* an epoll set holding s, pr and ua */
};

/* Sets SHUNT_POLL_KERNEL_CALLS and SHUNT_POLL_KERNEL_US (re-executing the test, see
 * settings.h); call first in main. */
static inline void zset_bound(const char *calls, const char *us)
{
	test_setting("SHUNT_POLL_KERNEL_CALLS", calls);
	test_setting("SHUNT_POLL_KERNEL_US", us);
}

static inline void zset_open(struct zset *z)
{
	int pp[2], sv[2];

	tcp_pair_checked(AF_INET, &z->c, &z->s);
	CHECK_OK(pipe(pp));
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	z->pr = pp[0];
	z->pw = pp[1];
	z->ua = sv[0];
	z->ub = sv[1];
	z->ep = CHECK_OK(epoll_create1(0));
	int fds[3] = { z->s, z->pr, z->ua };
	for (int i = 0; i < 3; i++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fds[i] };

		CHECK_OK(epoll_ctl(z->ep, EPOLL_CTL_ADD, fds[i], &ev));
	}
}

/* Makes the socket's member of the epoll set hot (looked at in user space at every wait,
 * architecture.md "Readiness"): a byte from the peer, waited for and read. A member that sat
 * idle through waits that slept is cold, seen through the kernel alone, and a zero-timeout
 * wait then asks the kernel every time. */
static inline void zset_warm(const struct zset *z)
{
	struct epoll_event ev;
	char b;

	xwrite_all(z->c, "w", 1);
	CHECK(epoll_wait(z->ep, &ev, 1, NET_WAIT_MS), ==, 1);
	CHECK(ev.data.fd, ==, z->s);
	xread_exact(z->s, &b, 1);
}

/* Whether this kernel has epoll_pwait2 (glibc's wrapper says ENOSYS otherwise). */
static inline int zset_has_pwait2(const struct zset *z)
{
	struct epoll_event ev;
	struct timespec zero = { 0, 0 };

	return epoll_pwait2(z->ep, &ev, 1, &zero, NULL) >= 0 || errno != ENOSYS;
}

/* One wait over {s, pr, ua} (and extra, when not -1) through w, timeout_ms 0 or more: the
 * events reported for fd (for select: POLLIN if it is in the read set); *count gets what the
 * call returned (-1: failed, errno kept). */
static inline short zset_wait(const struct zset *z, enum zwait w, int timeout_ms, int fd, int extra, int *count)
{
	struct timespec ts = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L };
	struct timeval tv = { timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000L };
	sigset_t none;
	short got = 0;

	sigemptyset(&none);
	if (w == ZW_POLL || w == ZW_PPOLL) {
		struct pollfd p[4] = { { .fd = z->s, .events = POLLIN }, { .fd = z->pr, .events = POLLIN },
				       { .fd = z->ua, .events = POLLIN }, { .fd = extra, .events = POLLIN } };
		nfds_t n = extra >= 0 ? 4 : 3;

		*count = w == ZW_POLL ? poll(p, n, timeout_ms) : ppoll(p, n, &ts, &none);
		for (nfds_t i = 0; i < n; i++)
			if (p[i].fd == fd)
				got = p[i].revents;
	} else if (w == ZW_SELECT || w == ZW_PSELECT) {
		fd_set r;
		int hi = 0, fds[4] = { z->s, z->pr, z->ua, extra };

		FD_ZERO(&r);
		for (int i = 0; i < 4; i++)
			if (fds[i] >= 0) {
				FD_SET(fds[i], &r);
				hi = fds[i] > hi ? fds[i] : hi;
			}
		*count = w == ZW_SELECT ? select(hi + 1, &r, NULL, NULL, &tv)
					: pselect(hi + 1, &r, NULL, NULL, &ts, &none);
		got = *count > 0 && FD_ISSET(fd, &r) ? POLLIN : 0;
	} else {
		struct epoll_event ev[4];

		*count = w == ZW_EPOLL_WAIT    ? epoll_wait(z->ep, ev, 4, timeout_ms)
			 : w == ZW_EPOLL_PWAIT ? epoll_pwait(z->ep, ev, 4, timeout_ms, &none)
					       : epoll_pwait2(z->ep, ev, 4, &ts, &none);
		for (int i = 0; i < *count; i++)
			if (ev[i].data.fd == fd)
				got = (short)ev[i].events;
	}
	return got;
}

/* Another thread's action on an fd: a byte written to it, or (fd < 0: ~fd) closing it. */
static void *zset_act(void *arg)
{
	int fd = (int)(intptr_t)arg;

	if (fd >= 0)
		xwrite_all(fd, "x", 1);
	else
		CHECK_OK(close(~fd));
	return NULL;
}

/* Runs zset_act in a thread of its own and waits for it. */
static inline void zset_from_thread(int fd_or_closed)
{
	pthread_t t;

	CHECK(pthread_create(&t, NULL, zset_act, (void *)(intptr_t)fd_or_closed), ==, 0);
	CHECK(pthread_join(t, NULL), ==, 0);
}

/* The calling thread's zero-timeout waits that left the kernel out so far (-1 without shunt
 * or outside accelerated mode). */
static inline long long zset_skipped(const struct zset *z)
{
	return shunt_counter(z->s, "os_polls_skipped");
}

#endif /* SHUNT_TESTS_ZERO_WAIT_H */
