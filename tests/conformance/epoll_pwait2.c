/* epoll_pwait2: the timespec timeout, on a set of idle accelerated sockets: {0, 0} returns
 * at once; a timeout with nanoseconds returns 0 no earlier than it; NULL waits until data
 * arrives; a timeout ends early when data arrives; an invalid tv_nsec is EINVAL. Skips where
 * the kernel has no epoll_pwait2 (ENOSYS). */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/epoll.h>

#define PAIRS 8

static int client;

static void *late_writer(void *arg)
{
	(void)arg;
	sleep_ms(100);
	xwrite_all(client, "w", 1);
	return NULL;
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN }, out[PAIRS];
	struct timespec zero = { 0, 0 }, t;
	pthread_t th;
	double start, took;
	char b;
	int c[PAIRS], s[PAIRS], ep, r;

	ep = CHECK_OK(epoll_create1(0));
	for (int i = 0; i < PAIRS; i++) {
		tcp_pair_checked(AF_INET, &c[i], &s[i]);
		ev.data.u32 = (uint32_t)i;
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s[i], &ev));
	}
	client = c[3];

	errno = 0;
	r = epoll_pwait2(ep, out, PAIRS, &zero, NULL);
	if (r == -1 && errno == ENOSYS)
		SKIP("epoll_pwait2: ENOSYS");
	CHECK(r, ==, 0);

	/* Nanosecond timeouts: never early (CLOCK_MONOTONIC, as the kernel's). */
	for (long ns = 1; ns <= 100000000L; ns *= 10) {
		t = (struct timespec){ 0, ns + 7 };
		start = now_sec();
		CHECK(epoll_pwait2(ep, out, PAIRS, &t, NULL), ==, 0);
		took = now_sec() - start;
		if (took * 1e9 < (double)(ns + 7))
			FAIL("timeout of %ld ns returned after %.0f ns", ns + 7, took * 1e9);
		CHECK(t.tv_sec, ==, 0); /* the timeout is not written back */
		CHECK(t.tv_nsec, ==, ns + 7);
	}
	t = (struct timespec){ 0, 250000001L };
	start = now_sec();
	CHECK(epoll_pwait2(ep, out, PAIRS, &t, NULL), ==, 0);
	CHECK(now_sec() - start, >=, 0.250000001);

	/* NULL: no timeout, ended by data that arrives while it sleeps. */
	CHECK(pthread_create(&th, NULL, late_writer, NULL), ==, 0);
	CHECK(epoll_pwait2(ep, out, PAIRS, NULL, NULL), ==, 1);
	CHECK(out[0].data.u32, ==, 3);
	CHECK(out[0].events, ==, EPOLLIN);
	CHECK(pthread_join(th, NULL), ==, 0);
	xread_exact(s[3], &b, 1);

	/* A long timeout ends early with the data. */
	CHECK(pthread_create(&th, NULL, late_writer, NULL), ==, 0);
	t = (struct timespec){ NET_WAIT_MS / 1000, 1 };
	CHECK(epoll_pwait2(ep, out, PAIRS, &t, NULL), ==, 1);
	CHECK(out[0].data.u32, ==, 3);
	CHECK(pthread_join(th, NULL), ==, 0);
	xread_exact(s[3], &b, 1);
	CHECK(epoll_pwait2(ep, out, PAIRS, &zero, NULL), ==, 0);

	/* Invalid timeouts. */
	t = (struct timespec){ 0, 1000000000L };
	CHECK_ERRNO(epoll_pwait2(ep, out, PAIRS, &t, NULL), EINVAL);
	t = (struct timespec){ -1, 0 };
	CHECK_ERRNO(epoll_pwait2(ep, out, PAIRS, &t, NULL), EINVAL);
	CHECK_ERRNO(epoll_pwait2(ep, out, 0, &zero, NULL), EINVAL);

	CHECK_OK(close(ep));
	for (int i = 0; i < PAIRS; i++) {
		CHECK_OK(close(c[i]));
		CHECK_OK(close(s[i]));
	}
	PASS();
}
