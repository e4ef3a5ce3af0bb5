/*
 * shutdown_wake.h: waits that a shutdown of the socket must end, for the threads_* and
 * procs_* shutdown conformance tests.
 *
 * Owns: the kinds of epoll wait (epoll_wait, epoll_pwait, epoll_pwait2, poll on the epoll
 * fd) with a 10 s timeout that the shutdown must cut short, the events Linux reports on the
 * socket after each shutdown, the set of cases every such test runs, and the check that a
 * child process blocked on a socket ends at once when this one shuts it down.
 * Header-only; needs check.h and net.h first.
 */
#ifndef SHUNT_TESTS_SHUTDOWN_WAKE_H
#define SHUNT_TESTS_SHUTDOWN_WAKE_H

#include <sys/epoll.h>
#include <sys/wait.h>

enum variant { V_WAIT, V_PWAIT, V_PWAIT2, V_POLL };

/* One wait of kind v on epfd (one event); poll reports its revents, with epfd as data. */
static inline int epoll_wait_as(int epfd, enum variant v, struct epoll_event *ev)
{
	struct pollfd p = { .fd = epfd, .events = POLLIN };
	struct timespec ts = { 10, 0 };
	sigset_t none;
	int r = -1;

	sigemptyset(&none);
	memset(ev, 0, sizeof(*ev));
	switch (v) {
	case V_WAIT:
		r = epoll_wait(epfd, ev, 1, 10000);
		break;
	case V_PWAIT:
		r = epoll_pwait(epfd, ev, 1, 10000, &none);
		break;
	case V_PWAIT2:
		r = epoll_pwait2(epfd, ev, 1, &ts, &none);
		break;
	case V_POLL:
		r = poll(&p, 1, 10000);
		ev->events = (uint32_t)p.revents;
		ev->data.u64 = (uint64_t)epfd;
		break;
	}
	return r;
}

/* What a member waits for, and what Linux reports after shutdown(how) (SHUT_WR: on a
 * socket whose send buffer the test filled). */
static inline uint32_t shutdown_wanted(int how)
{
	return how == SHUT_WR ? EPOLLOUT : EPOLLIN | EPOLLRDHUP;
}

static inline uint32_t shutdown_events(int how)
{
	return how == SHUT_WR ? EPOLLOUT : how == SHUT_RD ? EPOLLIN | EPOLLRDHUP : EPOLLIN | EPOLLRDHUP | EPOLLHUP;
}

/* Every shutdown, level-triggered and EPOLLET, with epoll_wait; then the other waits. */
#define FOR_EACH_SHUTDOWN_CASE(one)                                                          \
	do {                                                                                 \
		static const int hows_[] = { SHUT_RD, SHUT_RDWR, SHUT_WR };                  \
		for (unsigned i_ = 0; i_ < 3; i_++)                                          \
			for (unsigned et_ = 0; et_ < 2; et_++)                               \
				one(hows_[i_], et_ ? EPOLLET : 0, V_WAIT);                   \
		one(SHUT_RD, 0, V_PWAIT);                                                    \
		one(SHUT_RD, EPOLLET, V_PWAIT2);                                             \
		one(SHUT_WR, 0, V_PWAIT2);                                                   \
	} while (0)

/* The child pid blocks on fd; shutdown(fd, how) here must end it within 3 s, its checks
 * passed (exit status 0). */
static inline void shutdown_wakes_child(pid_t pid, int fd, int how)
{
	int status;
	double t0;

	sleep_ms(300);
	CHECK(waitpid(pid, &status, WNOHANG), ==, 0);   /* it really blocks */
	t0 = now_sec();
	CHECK_OK(shutdown(fd, how));
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now_sec() - t0 > 3.0)
			FAIL("the child blocked on the socket was not woken by shutdown(%d) in another process", how);
		sleep_ms(2);
	}
	CHECK(WIFEXITED(status), ==, 1);
	CHECK(WEXITSTATUS(status), ==, 0);
}

#endif
