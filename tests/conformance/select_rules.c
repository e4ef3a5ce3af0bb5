/* select_rules: select and pselect over accelerated sockets and a pipe follow Linux's rules:
 * nfds < 0 is EINVAL, a negative timeout EINVAL, a closed fd in any set EBADF; fds at or
 * above nfds are not looked at; nfds = FD_SETSIZE works; exceptfds stays empty for sockets
 * with data (no urgent data) and pipes; select writes the time left back into the timeval
 * (pselect leaves its timespec alone); pselect's mask replaces the thread's only during the
 * call (EINTR when it opens a signal sent while it sleeps; the timeout when it blocks it). */
#include "check.h"
#include "net.h"
#include "usr1.h"

#include <pthread.h>
#include <sys/select.h>


static void set3(fd_set *f, int a, int b, int d)
{
	FD_ZERO(f);
	FD_SET(a, f);
	FD_SET(b, f);
	if (d >= 0)
		FD_SET(d, f);
}

int main(void)
{
	struct sigaction sa;
	struct timeval tv;
	struct timespec ts;
	sigset_t open_mask, usr1_mask;
	fd_set rd, wr, ex;
	pthread_t th;
	double start, took;
	char b;
	int c, s, pp[2], dead, nfds;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	CHECK_OK(sigaction(SIGUSR1, &sa, NULL));
	waiter = pthread_self();
	sigemptyset(&open_mask);
	sigemptyset(&usr1_mask);
	sigaddset(&usr1_mask, SIGUSR1);

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(pp));
	dead = CHECK_OK(dup(pp[0]));
	CHECK_OK(close(dead));
	nfds = 1 + (s > pp[0] ? s : pp[0]);
	if (pp[1] >= nfds)
		nfds = pp[1] + 1;
	if (c >= nfds)
		nfds = c + 1;
	CHECK(nfds, <, FD_SETSIZE);

	/* Errors. */
	set3(&rd, s, pp[0], -1);
	tv = (struct timeval){ 0, 0 };
	CHECK_ERRNO(select(-1, &rd, NULL, NULL, &tv), EINVAL);
	tv = (struct timeval){ -1, 0 };
	CHECK_ERRNO(select(nfds, &rd, NULL, NULL, &tv), EINVAL);
	ts = (struct timespec){ 0, 1000000000L };
	CHECK_ERRNO(pselect(nfds, &rd, NULL, NULL, &ts, NULL), EINVAL);
	ts = (struct timespec){ -1, 0 };
	CHECK_ERRNO(pselect(nfds, &rd, NULL, NULL, &ts, NULL), EINVAL);
	for (int which = 0; which < 3; which++) {
		set3(&rd, s, pp[0], -1);
		set3(&wr, c, pp[1], -1);
		set3(&ex, s, pp[0], -1);
		FD_SET(dead, which == 0 ? &rd : which == 1 ? &wr : &ex);
		tv = (struct timeval){ 0, 0 };
		CHECK_ERRNO(select(dead >= nfds ? dead + 1 : nfds, &rd, &wr, &ex, &tv), EBADF);
	}

	/* Data on the socket and the pipe; exceptfds stays empty. */
	xwrite_all(c, "s", 1);
	xwrite_all(pp[1], "p", 1);
	wait_queued(s, 1);
	set3(&rd, s, pp[0], -1);
	set3(&wr, c, pp[1], -1);
	set3(&ex, s, pp[0], c);
	FD_SET(pp[1], &ex);
	tv = (struct timeval){ 0, 0 };
	CHECK(select(nfds, &rd, &wr, &ex, &tv), ==, 4);
	CHECK(FD_ISSET(s, &rd) && FD_ISSET(pp[0], &rd), ==, 1);
	CHECK(FD_ISSET(c, &wr) && FD_ISSET(pp[1], &wr), ==, 1);
	for (int fd = 0; fd < nfds; fd++)
		CHECK(FD_ISSET(fd, &ex), ==, 0);

	/* nfds = FD_SETSIZE. */
	set3(&rd, s, pp[0], -1);
	tv = (struct timeval){ 0, 0 };
	CHECK(select(FD_SETSIZE, &rd, NULL, NULL, &tv), ==, 2);
	CHECK(FD_ISSET(s, &rd) && FD_ISSET(pp[0], &rd), ==, 1);

	/* fds at or above nfds are not looked at. */
	set3(&rd, s, pp[0], -1);
	tv = (struct timeval){ 0, 0 };
	CHECK(select(s < pp[0] ? pp[0] : s, &rd, NULL, NULL, &tv), ==, 1);
	CHECK(FD_ISSET(s < pp[0] ? s : pp[0], &rd), ==, 1);
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	tv = (struct timeval){ 0, 0 };
	CHECK(select(s, &rd, NULL, NULL, &tv), ==, 0);
	xread_exact(s, &b, 1);
	xread_exact(pp[0], &b, 1);

	/* The time left is written back; ended by data that arrives while select sleeps. */
	late_fd = c;
	CHECK(pthread_create(&th, NULL, write_later, NULL), ==, 0);
	set3(&rd, s, pp[0], -1);
	tv = (struct timeval){ 2, 0 };
	start = now_sec();
	CHECK(select(nfds, &rd, NULL, NULL, &tv), ==, 1);
	took = now_sec() - start;
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(FD_ISSET(s, &rd), ==, 1);
	{
		long long left = (long long)tv.tv_sec * 1000000 + tv.tv_usec;

		CHECK(tv.tv_usec, <, 1000000);
		CHECK(left, <, 2000000 - 50000);
		CHECK(left, >=, 2000000 - (long long)(took * 1e6) - 1000);
	}
	xread_exact(s, &b, 1);

	/* pselect: the timespec is left alone. */
	set3(&rd, s, pp[0], -1);
	ts = (struct timespec){ 0, 20000003L };
	start = now_sec();
	CHECK(pselect(nfds, &rd, NULL, NULL, &ts, NULL), ==, 0);
	CHECK(now_sec() - start, >=, 0.020000003);
	CHECK(ts.tv_sec, ==, 0);
	CHECK(ts.tv_nsec, ==, 20000003L);
	CHECK(FD_ISSET(s, &rd) || FD_ISSET(pp[0], &rd), ==, 0);

	/* pselect's mask: blocked normally, open during the call. */
	CHECK(pthread_sigmask(SIG_BLOCK, &usr1_mask, NULL), ==, 0);
	CHECK(pthread_create(&th, NULL, signal_later, NULL), ==, 0);
	set3(&rd, s, pp[0], -1);
	ts = (struct timespec){ NET_WAIT_MS / 1000, 0 };
	CHECK_ERRNO(pselect(nfds, &rd, NULL, NULL, &ts, &open_mask), EINTR);
	CHECK(handled, ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	/* ...blocked by the mask too: the timeout ends it, the signal stays pending. */
	CHECK(pthread_create(&th, NULL, signal_later, NULL), ==, 0);
	set3(&rd, s, pp[0], -1);
	ts = (struct timespec){ 0, 300000000L };
	CHECK(pselect(nfds, &rd, NULL, NULL, &ts, &usr1_mask), ==, 0);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(handled, ==, 1);
	CHECK(pthread_sigmask(SIG_UNBLOCK, &usr1_mask, NULL), ==, 0);
	CHECK(handled, ==, 2);
	/* ...and data ends a call with a mask, sleeping. */
	late_fd = pp[1];
	CHECK(pthread_create(&th, NULL, write_later, NULL), ==, 0);
	set3(&rd, s, pp[0], -1);
	CHECK(pselect(nfds, &rd, NULL, NULL, NULL, &usr1_mask), ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(FD_ISSET(pp[0], &rd), ==, 1);
	xread_exact(pp[0], &b, 1);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	PASS();
}
