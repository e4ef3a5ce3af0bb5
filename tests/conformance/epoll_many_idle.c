/* epoll_many_idle: 1,000 idle accelerated connections and one busy one in a level-triggered
 * and an edge-triggered epoll set: request/response rounds on the busy one report only it;
 * data on a random sample of idle ones, in random order (alone, several at once, and while
 * the waiter sleeps), is reported for exactly those (level: until read; edge: once per
 * arrival); idle ones closed while registered leave both sets and are never reported. Raises
 * RLIMIT_NOFILE if needed; skips if the hard limit is too low. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>

#define N 1000
#define BUSY N
#define ROUNDS 2000
#define SAMPLE 60
#define BATCH 12
#define CLOSED 25
#define MAXEV 64

static int clients[N + 1], servers[N + 1];
static int late_fd;

static void *late_writer(void *arg)
{
	(void)arg;
	sleep_ms(50);
	xwrite_all(late_fd, "L", 1);
	return NULL;
}

/* One wait: a bitmask would be too large, so the events are checked against want[] (the
 * indexes expected, each exactly once, all with EPOLLIN). */
static void expect_exactly(int ep, int timeout_ms, const int *want, int nwant)
{
	struct epoll_event out[MAXEV];
	int seen[MAXEV] = { 0 };
	int n = CHECK_OK(epoll_wait(ep, out, MAXEV, timeout_ms));

	if (n != nwant)
		FAIL("epoll fd %d: %d events, expected %d (first data %u)", ep, n, nwant,
		     n > 0 ? out[0].data.u32 : 0);
	for (int i = 0; i < n; i++) {
		int k;

		CHECK(out[i].events, ==, EPOLLIN);
		for (k = 0; k < nwant; k++)
			if ((int)out[i].data.u32 == want[k])
				break;
		if (k == nwant)
			FAIL("epoll fd %d reported connection %u, not expected", ep,
			     out[i].data.u32);
		CHECK(seen[k], ==, 0);
		seen[k] = 1;
	}
}

static void shuffle(int *v, int n)
{
	for (int i = n - 1; i > 0; i--) {
		int j = rand() % (i + 1), t = v[i];

		v[i] = v[j];
		v[j] = t;
	}
}

int main(void)
{
	static int order[N];
	struct rlimit rl;
	struct epoll_event ev;
	int lfd, port, ep_lt, ep_et, busy[1] = { BUSY };
	char buf[16];

	CHECK_OK(getrlimit(RLIMIT_NOFILE, &rl));
	if (rl.rlim_cur < 2 * N + 64) {
		if (rl.rlim_max < 2 * N + 64)
			MISSING("RLIMIT_NOFILE hard limit %llu is below %d",
			     (unsigned long long)rl.rlim_max, 2 * N + 64);
		rl.rlim_cur = 2 * N + 64;
		CHECK_OK(setrlimit(RLIMIT_NOFILE, &rl));
	}
	srand(4242);

	lfd = tcp_listen_backlog(AF_INET, 64, &port);
	ep_lt = CHECK_OK(epoll_create1(0));
	ep_et = CHECK_OK(epoll_create1(0));
	for (int i = 0; i <= N; i++) {
		clients[i] = tcp_connect(AF_INET, port);
		servers[i] = CHECK_OK(accept(lfd, NULL, NULL));
		expect_accelerated(clients[i]);
		expect_accelerated(servers[i]);
		ev = (struct epoll_event){ .events = EPOLLIN, .data.u32 = (uint32_t)i };
		CHECK_OK(epoll_ctl(ep_lt, EPOLL_CTL_ADD, servers[i], &ev));
		ev.events = EPOLLIN | EPOLLET;
		CHECK_OK(epoll_ctl(ep_et, EPOLL_CTL_ADD, servers[i], &ev));
	}
	CHECK_OK(close(lfd));
	expect_exactly(ep_lt, 0, NULL, 0);
	expect_exactly(ep_et, 0, NULL, 0);

	/* The busy connection alone. */
	for (int r = 0; r < ROUNDS; r++) {
		xwrite_all(clients[BUSY], "request", 7);
		expect_exactly(ep_lt, NET_WAIT_MS, busy, 1);
		if (r % 2 == 0) {
			expect_exactly(ep_et, NET_WAIT_MS, busy, 1);
			expect_exactly(ep_et, 0, NULL, 0);
		}
		xread_exact(servers[BUSY], buf, 7);
		xwrite_all(servers[BUSY], "reply", 5);
		xread_exact(clients[BUSY], buf, 5);
	}
	/* (edges of the odd rounds were never collected: one is pending at most) */
	expect_exactly(ep_lt, 0, NULL, 0);
	(void)epoll_wait(ep_et, &ev, 1, 0);
	expect_exactly(ep_et, 0, NULL, 0);

	/* Idle ones wake up one by one, in random order; the last third while we sleep. */
	for (int i = 0; i < N; i++)
		order[i] = i;
	shuffle(order, N);
	for (int k = 0; k < SAMPLE; k++) {
		int i = order[k];
		pthread_t th;

		if (k < 2 * SAMPLE / 3) {
			xwrite_all(clients[i], "I", 1);
			wait_queued(servers[i], 1);
		} else {
			late_fd = clients[i];
			CHECK(pthread_create(&th, NULL, late_writer, NULL), ==, 0);
			expect_exactly(ep_lt, NET_WAIT_MS, &i, 1);
			CHECK(pthread_join(th, NULL), ==, 0);
		}
		expect_exactly(ep_lt, NET_WAIT_MS, &i, 1);
		expect_exactly(ep_lt, 0, &i, 1);
		expect_exactly(ep_et, NET_WAIT_MS, &i, 1);
		expect_exactly(ep_et, 0, NULL, 0);
		xwrite_all(clients[i], "J", 1); /* a second arrival: a second edge */
		wait_queued(servers[i], 2);
		expect_exactly(ep_et, NET_WAIT_MS, &i, 1);
		expect_exactly(ep_et, 0, NULL, 0);
		expect_exactly(ep_lt, 0, &i, 1);
		xread_exact(servers[i], buf, 2);
		expect_exactly(ep_lt, 0, NULL, 0);
		expect_exactly(ep_et, 0, NULL, 0);
	}

	/* Several at once. */
	for (int k = 0; k < BATCH; k++) {
		xwrite_all(clients[order[SAMPLE + k]], "B", 1);
		wait_queued(servers[order[SAMPLE + k]], 1);
	}
	expect_exactly(ep_lt, NET_WAIT_MS, order + SAMPLE, BATCH);
	expect_exactly(ep_lt, 0, order + SAMPLE, BATCH);
	expect_exactly(ep_et, NET_WAIT_MS, order + SAMPLE, BATCH);
	expect_exactly(ep_et, 0, NULL, 0);
	for (int k = 0; k < BATCH; k++)
		xread_exact(servers[order[SAMPLE + k]], buf, 1);
	expect_exactly(ep_lt, 0, NULL, 0);

	/* Idle ones closed while registered leave both sets; their clients then send. */
	for (int k = 0; k < CLOSED; k++)
		CHECK_OK(close(servers[order[SAMPLE + BATCH + k]]));
	for (int k = 0; k < CLOSED; k++)
		(void)send(clients[order[SAMPLE + BATCH + k]], "C", 1, MSG_NOSIGNAL);
	expect_exactly(ep_lt, 100, NULL, 0);
	expect_exactly(ep_et, 0, NULL, 0);
	for (int r = 0; r < 100; r++) {
		xwrite_all(clients[BUSY], "request", 7);
		expect_exactly(ep_lt, NET_WAIT_MS, busy, 1);
		expect_exactly(ep_et, NET_WAIT_MS, busy, 1);
		xread_exact(servers[BUSY], buf, 7);
	}
	expect_exactly(ep_lt, 0, NULL, 0);
	expect_exactly(ep_et, 0, NULL, 0);

	CHECK_OK(close(ep_lt));
	CHECK_OK(close(ep_et));
	for (int i = 0; i <= N; i++) {
		int closed = 0;

		for (int k = 0; k < CLOSED; k++)
			closed |= order[SAMPLE + BATCH + k] == i;
		if (!closed)
			CHECK_OK(close(servers[i]));
		CHECK_OK(close(clients[i]));
	}
	PASS();
}
