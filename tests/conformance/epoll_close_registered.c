/* epoll_close_registered: closing the only fd of an accelerated socket registered in an epoll
 * set removes it (the peer's data is not reported, DEL says EBADF); when the fd number is
 * reused by a new accelerated socket, that one is not in the set (not reported, DEL ENOENT)
 * until added (no EEXIST), and then reports its own events and data; the same with the
 * number reused by a pipe; a close while another thread sleeps in the set does not wake it
 * with a stale event. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/epoll.h>

static int ep, late_fd;

static void *late_writer(void *arg)
{
	(void)arg;
	sleep_ms(150);
	xwrite_all(late_fd, "w", 1);
	return NULL;
}

static void *sleeper(void *arg)
{
	struct epoll_event out[4];

	CHECK(epoll_wait(ep, out, 4, NET_WAIT_MS), ==, 1);
	CHECK(out[0].data.u64, ==, (uint64_t)(uintptr_t)arg);
	CHECK(out[0].events, ==, EPOLLIN);
	return NULL;
}

/* The file of fd, at number to (free) and nowhere else. */
static int move_fd(int fd, int to)
{
	if (fd == to)
		return fd;
	CHECK(fcntl(to, F_GETFD), ==, -1);
	CHECK(dup2(fd, to), ==, to);
	CHECK_OK(close(fd));
	return to;
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN }, out[4];
	int c, s, c2, s2, c3, s3, num, port, lfd, pp[2];
	pthread_t th, tw;
	char b;

	ep = CHECK_OK(epoll_create1(0));
	tcp_pair_checked(AF_INET, &c, &s);
	ev.data.u64 = 1;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	xwrite_all(c, "a", 1);
	CHECK(epoll_wait(ep, out, 4, NET_WAIT_MS), ==, 1);
	CHECK(out[0].data.u64, ==, 1);

	/* Closed with data queued: gone from the set. */
	num = s;
	CHECK_OK(close(s));
	CHECK(epoll_wait(ep, out, 4, 0), ==, 0);
	(void)send(c, "b", 1, MSG_NOSIGNAL);
	CHECK(epoll_wait(ep, out, 4, 50), ==, 0);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_DEL, num, NULL), EBADF);
	CHECK_OK(close(c));

	/* The number reused by a new accelerated socket (moved there: the only fd left). */
	lfd = tcp_listen(AF_INET, &port);
	c2 = tcp_connect(AF_INET, port);
	s2 = CHECK_OK(accept(lfd, NULL, NULL));
	expect_accelerated(c2);
	expect_accelerated(s2);
	s2 = move_fd(s2, num);
	expect_accelerated(s2);
	CHECK_OK(close(lfd));
	xwrite_all(c2, "n", 1);
	wait_queued(s2, 1);
	CHECK(epoll_wait(ep, out, 4, 0), ==, 0); /* not registered */
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_DEL, s2, NULL), ENOENT);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_MOD, s2, &ev), ENOENT);
	ev.data.u64 = 2;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s2, &ev));
	CHECK(epoll_wait(ep, out, 4, 0), ==, 1);
	CHECK(out[0].data.u64, ==, 2);
	CHECK(out[0].events, ==, EPOLLIN);
	xread_exact(s2, &b, 1);
	CHECK(b, ==, 'n');
	CHECK(epoll_wait(ep, out, 4, 0), ==, 0);
	late_fd = c2;
	CHECK(pthread_create(&tw, NULL, late_writer, NULL), ==, 0);
	CHECK(epoll_wait(ep, out, 4, NET_WAIT_MS), ==, 1);
	CHECK(out[0].data.u64, ==, 2);
	CHECK(pthread_join(tw, NULL), ==, 0);
	xread_exact(s2, &b, 1);

	/* Closed and the number reused by a pipe. */
	CHECK_OK(pipe(pp));
	num = s2;
	CHECK_OK(close(s2));
	pp[0] = move_fd(pp[0], num);
	ev.data.u64 = 3;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &ev));
	(void)send(c2, "x", 1, MSG_NOSIGNAL);
	CHECK(epoll_wait(ep, out, 4, 50), ==, 0);
	xwrite_all(pp[1], "p", 1);
	CHECK(epoll_wait(ep, out, 4, NET_WAIT_MS), ==, 1);
	CHECK(out[0].data.u64, ==, 3);
	xread_exact(pp[0], &b, 1);
	CHECK(epoll_wait(ep, out, 4, 0), ==, 0);
	CHECK_OK(close(c2));

	/* A registered socket closed while another thread sleeps in the set. */
	tcp_pair_checked(AF_INET, &c3, &s3);
	ev.data.u64 = 4;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s3, &ev));
	CHECK(pthread_create(&th, NULL, sleeper, (void *)(uintptr_t)3), ==, 0);
	sleep_ms(100);
	CHECK_OK(close(s3));
	(void)send(c3, "y", 1, MSG_NOSIGNAL);
	sleep_ms(100);
	xwrite_all(pp[1], "q", 1); /* what wakes the sleeper */
	CHECK(pthread_join(th, NULL), ==, 0);
	xread_exact(pp[0], &b, 1);
	CHECK(epoll_wait(ep, out, 4, 0), ==, 0);

	CHECK_OK(close(c3));
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	CHECK_OK(close(ep));
	PASS();
}
