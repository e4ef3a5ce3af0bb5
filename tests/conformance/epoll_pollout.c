/* epoll_pollout: EPOLLOUT follows the space to write: once a non-blocking accelerated socket
 * is filled until EAGAIN (and stays unwritable) level-triggered EPOLLOUT is not reported (not
 * even beside EPOLLIN when data comes the other way); a sleeping epoll_wait for EPOLLOUT
 * wakes when the peer drains; with EPOLLET one edge comes per drain, not repeated. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/epoll.h>

#define CHUNK (64 * 1024)
#define SEED 83

static char chunk[CHUNK];
static unsigned long long sent, received;
static int reader_fd;

/* Write until EAGAIN, again until the socket stays unwritable for 100 ms. */
static void fill(int fd)
{
	int stable = 0;

	for (int round = 0; round < 100 && !stable; round++) {
		for (;;) {
			ssize_t n;

			pattern_fill(SEED, sent, chunk, CHUNK);
			n = write(fd, chunk, CHUNK);
			if (n == -1) {
				CHECK(errno, ==, EAGAIN);
				break;
			}
			sent += (unsigned long long)n;
			if (sent - received > 1024ULL * 1024 * 1024)
				FAIL("1 GiB accepted while the peer never reads");
		}
		stable = wait_fd(fd, POLLOUT, 100) == 0;
	}
	CHECK(stable, ==, 1);
}

static void *drain_later(void *arg)
{
	static char buf[CHUNK];

	(void)arg;
	sleep_ms(100);
	while (received < sent) {
		ssize_t n = read(reader_fd, buf, CHUNK);

		CHECK(n, >, 0);
		CHECK_PATTERN(SEED, received, buf, (size_t)n);
		received += (unsigned long long)n;
	}
	return NULL;
}

static int wait1(int ep, int timeout_ms, uint32_t *events)
{
	struct epoll_event out[2];
	int n = CHECK_OK(epoll_wait(ep, out, 2, timeout_ms));

	CHECK(n, <=, 1);
	if (n == 1) {
		CHECK(out[0].data.u32, ==, 5);
		*events = out[0].events;
	}
	return n;
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLOUT, .data.u32 = 5 };
	uint32_t events = 0;
	pthread_t th;
	char b;
	int c, s, ep, ep_et;

	tcp_pair_checked(AF_INET, &c, &s);
	reader_fd = s;
	set_nonblocking(c, 1);
	ep = CHECK_OK(epoll_create1(0));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	CHECK(wait1(ep, 0, &events), ==, 1);
	CHECK(events, ==, EPOLLOUT);

	/* Level-triggered: not writable once full. */
	fill(c);
	CHECK(wait1(ep, 0, &events), ==, 0);
	CHECK(wait1(ep, 100, &events), ==, 0);
	ev.events = EPOLLIN | EPOLLOUT;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev));
	xwrite_all(s, "r", 1);
	CHECK(wait1(ep, NET_WAIT_MS, &events), ==, 1);
	CHECK(events, ==, EPOLLIN);
	xread_exact(c, &b, 1);
	CHECK(wait1(ep, 0, &events), ==, 0);

	/* The peer drains while we sleep. */
	CHECK(pthread_create(&th, NULL, drain_later, NULL), ==, 0);
	CHECK(wait1(ep, NET_WAIT_MS, &events), ==, 1);
	CHECK(events, ==, EPOLLOUT);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(wait1(ep, 0, &events), ==, 1); /* level: stays */
	CHECK(events, ==, EPOLLOUT);
	CHECK_OK(close(ep));

	/* Edge-triggered. */
	ep_et = CHECK_OK(epoll_create1(0));
	ev.events = EPOLLOUT | EPOLLET;
	CHECK_OK(epoll_ctl(ep_et, EPOLL_CTL_ADD, c, &ev));
	CHECK(wait1(ep_et, 0, &events), ==, 1); /* the initial edge */
	CHECK(events, ==, EPOLLOUT);
	CHECK(wait1(ep_et, 0, &events), ==, 0);
	CHECK(wait1(ep_et, 50, &events), ==, 0);
	for (int round = 0; round < 2; round++) {
		fill(c);
		while (wait1(ep_et, 0, &events) == 1)
			; /* edges from the filling itself */
		CHECK(wait1(ep_et, 50, &events), ==, 0);
		CHECK(pthread_create(&th, NULL, drain_later, NULL), ==, 0);
		CHECK(wait1(ep_et, NET_WAIT_MS, &events), ==, 1);
		CHECK(events, ==, EPOLLOUT);
		CHECK(pthread_join(th, NULL), ==, 0);
		while (wait1(ep_et, 0, &events) == 1)
			; /* the drain may make several edges */
		CHECK(wait1(ep_et, 0, &events), ==, 0); /* none while nothing changes */
		CHECK(wait1(ep_et, 50, &events), ==, 0);
	}
	xexchange_both(c, s);

	CHECK_OK(close(ep_et));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
