/* ppoll_sigmask: ppoll over idle accelerated sockets and a pipe: the mask replaces the
 * thread's only during the call (a signal blocked normally but not by the mask ends a sleeping
 * ppoll with EINTR after its handler ran; one the mask blocks is not delivered during the call,
 * which ends by its timeout, and stays pending); the timespec timeout: {0, 0} at once, never
 * early, not written back, NULL until data arrives, invalid tv_nsec or tv_sec EINVAL. */
#include "check.h"
#include "net.h"
#include "usr1.h"

#include <pthread.h>

#define PAIRS 3


int main(void)
{
	struct sigaction sa;
	struct pollfd p[PAIRS + 1];
	struct timespec ts;
	sigset_t open_mask, usr1_mask;
	pthread_t th;
	double start;
	char b;
	int c[PAIRS], s[PAIRS], pp[2];

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	CHECK_OK(sigaction(SIGUSR1, &sa, NULL));
	waiter = pthread_self();
	sigemptyset(&open_mask);
	sigemptyset(&usr1_mask);
	sigaddset(&usr1_mask, SIGUSR1);

	for (int i = 0; i < PAIRS; i++) {
		tcp_pair_checked(AF_INET, &c[i], &s[i]);
		p[i] = (struct pollfd){ .fd = s[i], .events = POLLIN };
	}
	CHECK_OK(pipe(pp));
	p[PAIRS] = (struct pollfd){ .fd = pp[0], .events = POLLIN };

	/* Blocked normally, open during the call. */
	CHECK(pthread_sigmask(SIG_BLOCK, &usr1_mask, NULL), ==, 0);
	CHECK(pthread_create(&th, NULL, signal_later, NULL), ==, 0);
	ts = (struct timespec){ NET_WAIT_MS / 1000, 0 };
	CHECK_ERRNO(ppoll(p, PAIRS + 1, &ts, &open_mask), EINTR);
	CHECK(handled, ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(usr1_pending(), ==, 0);

	/* Blocked by the mask too: the call ends by its timeout. */
	CHECK(pthread_create(&th, NULL, signal_later, NULL), ==, 0);
	ts = (struct timespec){ 0, 300000000L };
	CHECK(ppoll(p, PAIRS + 1, &ts, &usr1_mask), ==, 0);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(handled, ==, 1);
	CHECK(usr1_pending(), ==, 1);
	/* A pending signal the mask opens: EINTR at once. */
	ts = (struct timespec){ NET_WAIT_MS / 1000, 0 };
	CHECK_ERRNO(ppoll(p, PAIRS + 1, &ts, &open_mask), EINTR);
	CHECK(handled, ==, 2);
	CHECK(pthread_sigmask(SIG_UNBLOCK, &usr1_mask, NULL), ==, 0);

	/* Unblocked normally, blocked by the mask: ended by data, not EINTR. */
	CHECK(pthread_create(&th, NULL, signal_later, NULL), ==, 0);
	late_fd = c[1];
	{
		pthread_t tw;

		CHECK(pthread_create(&tw, NULL, write_later, NULL), ==, 0);
		ts = (struct timespec){ NET_WAIT_MS / 1000, 0 };
		CHECK(ppoll(p, PAIRS + 1, &ts, &usr1_mask), >=, 1);
		CHECK(pthread_join(tw, NULL), ==, 0);
	}
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(p[1].revents, ==, POLLIN);
	xread_exact(s[1], &b, 1);
	CHECK(handled, ==, 3);

	/* Timeouts. */
	ts = (struct timespec){ 0, 0 };
	CHECK(ppoll(p, PAIRS + 1, &ts, NULL), ==, 0);
	for (long ns = 10; ns <= 100000000L; ns *= 100) {
		ts = (struct timespec){ 0, ns + 3 };
		start = now_sec();
		CHECK(ppoll(p, PAIRS + 1, &ts, NULL), ==, 0);
		if ((now_sec() - start) * 1e9 < (double)(ns + 3))
			FAIL("timeout of %ld ns returned after %.0f ns", ns + 3,
			     (now_sec() - start) * 1e9);
		CHECK(ts.tv_sec, ==, 0);
		CHECK(ts.tv_nsec, ==, ns + 3);
	}
	late_fd = pp[1];
	CHECK(pthread_create(&th, NULL, write_later, NULL), ==, 0);
	CHECK(ppoll(p, PAIRS + 1, NULL, NULL), ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(p[PAIRS].revents, ==, POLLIN);
	xread_exact(pp[0], &b, 1);
	late_fd = c[2];
	CHECK(pthread_create(&th, NULL, write_later, NULL), ==, 0);
	CHECK(ppoll(p, PAIRS + 1, NULL, &open_mask), ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(p[2].revents, ==, POLLIN);
	xread_exact(s[2], &b, 1);

	ts = (struct timespec){ 0, 1000000000L };
	CHECK_ERRNO(ppoll(p, PAIRS + 1, &ts, NULL), EINVAL);
	ts = (struct timespec){ -1, 0 };
	CHECK_ERRNO(ppoll(p, PAIRS + 1, &ts, NULL), EINVAL);

	for (int i = 0; i < PAIRS; i++) {
		CHECK_OK(close(c[i]));
		CHECK_OK(close(s[i]));
	}
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	PASS();
}
