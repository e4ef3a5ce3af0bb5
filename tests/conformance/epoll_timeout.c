/* epoll_timeout: epoll_wait's timeout on sets of idle accelerated sockets (alone and with a
 * pipe): 0 returns 0 at once, a small timeout returns 0 no earlier than it, -1 sleeps until
 * data arrives (from a thread, 100 ms later) and a long timeout ends early with it. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/epoll.h>

#define PAIRS 4

static int writer_fd;

static void *late_writer(void *arg)
{
	(void)arg;
	sleep_ms(100);
	xwrite_all(writer_fd, "w", 1);
	return NULL;
}

static void wait_for_late(int ep, int timeout_ms, int writer, int reader, uint32_t tag)
{
	struct epoll_event out[PAIRS + 1];
	pthread_t th;
	char b;

	writer_fd = writer;
	CHECK(pthread_create(&th, NULL, late_writer, NULL), ==, 0);
	CHECK(epoll_wait(ep, out, PAIRS + 1, timeout_ms), ==, 1);
	CHECK(out[0].data.u32, ==, tag);
	CHECK(out[0].events, ==, EPOLLIN);
	CHECK(pthread_join(th, NULL), ==, 0);
	xread_exact(reader, &b, 1);
	CHECK(epoll_wait(ep, out, PAIRS + 1, 0), ==, 0);
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN }, out[PAIRS + 1];
	int c[PAIRS], s[PAIRS], pp[2], ep;

	ep = CHECK_OK(epoll_create1(0));
	for (int i = 0; i < PAIRS; i++) {
		tcp_pair_checked(AF_INET, &c[i], &s[i]);
		ev.data.u32 = (uint32_t)i;
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s[i], &ev));
	}
	CHECK_OK(pipe(pp));

	for (int mixed = 0; mixed < 2; mixed++) {
		if (mixed) {
			ev.data.u32 = PAIRS;
			CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &ev));
		}
		CHECK(epoll_wait(ep, out, PAIRS + 1, 0), ==, 0);
		for (int ms = 1; ms <= 64; ms *= 4) {
			double start = now_sec();

			CHECK(epoll_wait(ep, out, PAIRS + 1, ms), ==, 0);
			if ((now_sec() - start) * 1000.0 < ms)
				FAIL("timeout of %d ms returned after %.3f ms", ms,
				     (now_sec() - start) * 1000.0);
		}
		wait_for_late(ep, -1, c[1], s[1], 1);
		wait_for_late(ep, NET_WAIT_MS, c[2], s[2], 2);
		if (mixed) {
			wait_for_late(ep, -1, pp[1], pp[0], PAIRS);
			wait_for_late(ep, NET_WAIT_MS, pp[1], pp[0], PAIRS);
		}
	}

	CHECK_OK(close(ep));
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	for (int i = 0; i < PAIRS; i++) {
		CHECK_OK(close(c[i]));
		CHECK_OK(close(s[i]));
	}
	PASS();
}
