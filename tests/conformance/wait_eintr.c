/* wait_eintr: a signal whose handler runs while epoll_wait, epoll_pwait, poll, ppoll, select
 * or pselect sleeps on idle accelerated sockets ends the call with EINTR, with or without
 * SA_RESTART (these calls are never restarted, signal(7)); the signal is sent after the call
 * surely sleeps, by a thread or by a child process. */
#include "check.h"
#include "net.h"
#include "usr1.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/select.h>

#define PAIRS 4

enum call { C_EPOLL_WAIT, C_EPOLL_PWAIT, C_POLL, C_PPOLL, C_SELECT, C_PSELECT, C_COUNT };
static const char *const names[C_COUNT] = { "epoll_wait", "epoll_pwait", "poll", "ppoll",
					    "select", "pselect" };


/* The call sleeping on the servers s[]; returns its result, errno kept. */
static int sleep_in(enum call call, int ep, const int *s)
{
	struct epoll_event out[PAIRS];
	struct pollfd p[PAIRS];
	struct timespec ts = { NET_WAIT_MS / 1000, 0 };
	struct timeval tv = { NET_WAIT_MS / 1000, 0 };
	sigset_t none;
	fd_set rd;
	int nfds = 0;

	sigemptyset(&none);
	FD_ZERO(&rd);
	for (int i = 0; i < PAIRS; i++) {
		p[i] = (struct pollfd){ .fd = s[i], .events = POLLIN };
		CHECK(s[i], <, FD_SETSIZE);
		FD_SET(s[i], &rd);
		if (s[i] >= nfds)
			nfds = s[i] + 1;
	}
	switch (call) {
	case C_EPOLL_WAIT:
		return epoll_wait(ep, out, PAIRS, NET_WAIT_MS);
	case C_EPOLL_PWAIT:
		return epoll_pwait(ep, out, PAIRS, NET_WAIT_MS, &none);
	case C_POLL:
		return poll(p, PAIRS, NET_WAIT_MS);
	case C_PPOLL:
		return ppoll(p, PAIRS, &ts, &none);
	case C_SELECT:
		return select(nfds, &rd, NULL, NULL, &tv);
	case C_PSELECT:
		return pselect(nfds, &rd, NULL, NULL, &ts, &none);
	default:
		FAIL("bad call %d", (int)call);
	}
}

int main(void)
{
	struct sigaction sa;
	struct epoll_event ev = { .events = EPOLLIN };
	int c[PAIRS], s[PAIRS], ep, expect = 0;

	waiter = pthread_self();
	ep = CHECK_OK(epoll_create1(0));
	for (int i = 0; i < PAIRS; i++) {
		tcp_pair_checked(AF_INET, &c[i], &s[i]);
		ev.data.u32 = (uint32_t)i;
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s[i], &ev));
	}

	for (int restart = 0; restart < 2; restart++) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_usr1;
		sigemptyset(&sa.sa_mask);
		sa.sa_flags = restart ? SA_RESTART : 0;
		CHECK_OK(sigaction(SIGUSR1, &sa, NULL));
		for (int call = 0; call < C_COUNT; call++) {
			for (int from_child = 0; from_child < 2; from_child++) {
				pthread_t th;
				pid_t pid = 0;
				int r, e;

				if (from_child) {
					pid_t parent = getpid();

					pid = CHECK_OK(fork());
					if (pid == 0) {
						sleep_ms(100);
						CHECK_OK(kill(parent, SIGUSR1));
						_exit(0);
					}
				} else {
					CHECK(pthread_create(&th, NULL, signal_later, NULL), ==, 0);
				}
				errno = 0;
				r = sleep_in((enum call)call, ep, s);
				e = errno;
				if (from_child)
					xwait_child_ok(pid);
				else
					CHECK(pthread_join(th, NULL), ==, 0);
				expect++;
				if (r != -1 || e != EINTR)
					FAIL("%s (%s, signal from a %s): returned %d, errno %d (%s); "
					     "expected EINTR", names[call],
					     restart ? "SA_RESTART" : "no SA_RESTART",
					     from_child ? "child" : "thread", r, e, strerror(e));
				CHECK(handled, ==, expect);
			}
		}
	}

	CHECK_OK(close(ep));
	for (int i = 0; i < PAIRS; i++) {
		CHECK_OK(close(c[i]));
		CHECK_OK(close(s[i]));
	}
	PASS();
}
