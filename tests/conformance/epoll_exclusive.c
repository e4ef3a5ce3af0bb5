/* epoll_exclusive: EPOLLEXCLUSIVE follows the kernel's rules on accelerated sockets (EINVAL
 * with EPOLL_CTL_MOD, registered or not, with EPOLLONESHOT, EPOLLRDHUP or EPOLLPRI, on an
 * epoll fd, and for MOD of an exclusive entry; DEL works); an exclusive member reports
 * level-triggered EPOLLIN; two epoll sets waited on by two sleeping threads, both with
 * EPOLLEXCLUSIVE on one socket: data wakes at least one of them. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>

#define TAG_SOCK 11
#define TAG_STOP 22

static int eps[2], stop_pipe[2];
static atomic_int woken, asleep;

/* Wait until the stop pipe is readable; count a wake-up by the socket. */
static void *waiter(void *arg)
{
	int ep = eps[(long)arg], saw_sock = 0;

	for (;;) {
		struct epoll_event out[4];
		int n;

		atomic_fetch_add(&asleep, 1);
		n = epoll_wait(ep, out, 4, NET_WAIT_MS);
		if (n == -1 && errno == EINTR)
			continue;
		CHECK_OK(n);
		if (n == 0)
			FAIL("waiter %ld: no event in %d ms", (long)arg, NET_WAIT_MS);
		for (int i = 0; i < n; i++) {
			if (out[i].data.u64 == TAG_STOP)
				return NULL;
			CHECK(out[i].data.u64, ==, TAG_SOCK);
			CHECK(out[i].events, ==, EPOLLIN);
			if (!saw_sock)
				atomic_fetch_add(&woken, 1);
			saw_sock = 1;
		}
		if (saw_sock)
			sleep_ms(1); /* level-triggered: data stays until main reads it */
	}
}

int main(void)
{
	struct epoll_event ev = { .data.u64 = TAG_SOCK }, out[2];
	char buf[8];
	int c, s, ep, inner;
	pthread_t th[2];

	tcp_pair_checked(AF_INET, &c, &s);
	ep = CHECK_OK(epoll_create1(0));
	inner = CHECK_OK(epoll_create1(0));

	/* The rules. */
	ev.events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT;
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev), EINVAL);
	ev.events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLRDHUP;
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev), EINVAL);
	ev.events = EPOLLIN | EPOLLEXCLUSIVE | EPOLLPRI;
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev), EINVAL);
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, inner, &ev), EINVAL);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev), EINVAL); /* checked before lookup */

	/* A plain entry cannot be modified into an exclusive one. */
	ev.events = EPOLLIN;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev), EINVAL);
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));

	/* An exclusive entry cannot be modified at all, but can be deleted and added again. */
	ev.events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLEXCLUSIVE;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev), EEXIST);
	ev.events = EPOLLIN;
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev), EINVAL);
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev), EINVAL);
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL), ENOENT);

	/* An exclusive member reports like a level-triggered one. */
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	CHECK(epoll_wait(ep, out, 2, 0), ==, 0);
	xwrite_all(c, "abc", 3);
	CHECK(epoll_wait(ep, out, 2, NET_WAIT_MS), ==, 1);
	CHECK(out[0].data.u64, ==, TAG_SOCK);
	CHECK(out[0].events, ==, EPOLLIN);
	wait_queued(s, 3);
	CHECK(epoll_wait(ep, out, 2, 0), ==, 1);
	xread_exact(s, buf, 3);
	CHECK(epoll_wait(ep, out, 2, 0), ==, 0);
	CHECK_OK(close(ep));
	CHECK_OK(close(inner));

	/* Two sets, two sleeping threads, one exclusive socket. */
	CHECK_OK(pipe(stop_pipe));
	for (int i = 0; i < 2; i++) {
		struct epoll_event sv = { .events = EPOLLIN, .data.u64 = TAG_STOP };

		eps[i] = CHECK_OK(epoll_create1(0));
		ev.events = EPOLLIN | EPOLLEXCLUSIVE;
		ev.data.u64 = TAG_SOCK;
		CHECK_OK(epoll_ctl(eps[i], EPOLL_CTL_ADD, s, &ev));
		CHECK_OK(epoll_ctl(eps[i], EPOLL_CTL_ADD, stop_pipe[0], &sv));
	}
	for (long i = 0; i < 2; i++)
		CHECK(pthread_create(&th[i], NULL, waiter, (void *)i), ==, 0);
	while (atomic_load(&asleep) < 2)
		sleep_ms(1);
	sleep_ms(100); /* both surely asleep in epoll_wait */
	xwrite_all(c, "w", 1);
	for (int i = 0; i < NET_WAIT_MS && atomic_load(&woken) == 0; i++)
		sleep_ms(1);
	CHECK(atomic_load(&woken), >=, 1);
	xread_exact(s, buf, 1);
	xwrite_all(stop_pipe[1], "x", 1);
	for (int i = 0; i < 2; i++)
		CHECK(pthread_join(th[i], NULL), ==, 0);
	CHECK(atomic_load(&woken), <=, 2);

	for (int i = 0; i < 2; i++)
		CHECK_OK(close(eps[i]));
	CHECK_OK(close(stop_pipe[0]));
	CHECK_OK(close(stop_pipe[1]));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
