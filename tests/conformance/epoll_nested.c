/* epoll_nested: an epoll fd whose member is an accelerated socket, watched by another epoll
 * fd (two and three levels), by poll and by select: the watcher reports the inner fd readable
 * (level: again and again) while the member has data, and not once it is read; also when the
 * data arrives while the watcher sleeps, sent by a thread or by a child process. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/select.h>

#define TAG_SOCK 7
#define TAG_INNER 8
#define TAG_MID 9

static int client;

static void *late_writer(void *arg)
{
	(void)arg;
	sleep_ms(100);
	xwrite_all(client, "t", 1);
	return NULL;
}

/* Data for the member 100 ms from now, from a thread (kind 0) or a child process (kind 1). */
static void send_later(int kind, pthread_t *th, pid_t *pid)
{
	if (kind == 0) {
		CHECK(pthread_create(th, NULL, late_writer, NULL), ==, 0);
		return;
	}
	*pid = CHECK_OK(fork());
	if (*pid == 0) {
		late_writer(NULL);
		_exit(0);
	}
}

static void sent(int kind, pthread_t th, pid_t pid)
{
	if (kind == 0)
		CHECK(pthread_join(th, NULL), ==, 0);
	else
		xwait_child_ok(pid);
}

static int outer_wait(int ep, uint64_t tag, int timeout_ms)
{
	struct epoll_event out[2];
	int n = CHECK_OK(epoll_wait(ep, out, 2, timeout_ms));

	CHECK(n, <=, 1);
	if (n == 1) {
		CHECK(out[0].data.u64, ==, tag);
		CHECK(out[0].events, ==, EPOLLIN);
	}
	return n;
}

static int poll_in(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT };
	int n = CHECK_OK(poll(&p, 1, timeout_ms));

	if (n == 1)
		CHECK(p.revents, ==, POLLIN);
	return n;
}

static int select_in(int fd, int timeout_ms)
{
	struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
	fd_set rd;
	int n;

	CHECK(fd, <, FD_SETSIZE);
	FD_ZERO(&rd);
	FD_SET(fd, &rd);
	n = CHECK_OK(select(fd + 1, &rd, NULL, NULL, &tv));
	CHECK(FD_ISSET(fd, &rd), ==, n);
	return n;
}

static void read_one(int s)
{
	char b;

	xread_exact(s, &b, 1);
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN }, out[2];
	pthread_t th = 0;
	pid_t pid = 0;
	int c, s, inner, outer, top;

	tcp_pair_checked(AF_INET, &c, &s);
	client = c;
	inner = CHECK_OK(epoll_create1(0));
	outer = CHECK_OK(epoll_create1(0));
	top = CHECK_OK(epoll_create1(0));
	ev.data.u64 = TAG_SOCK;
	CHECK_OK(epoll_ctl(inner, EPOLL_CTL_ADD, s, &ev));
	ev.data.u64 = TAG_INNER;
	CHECK_OK(epoll_ctl(outer, EPOLL_CTL_ADD, inner, &ev));

	/* Data already there: level-triggered, reported until read. */
	CHECK(outer_wait(outer, TAG_INNER, 0), ==, 0);
	CHECK(outer_wait(outer, TAG_INNER, 50), ==, 0);
	xwrite_all(c, "a", 1);
	CHECK(outer_wait(outer, TAG_INNER, NET_WAIT_MS), ==, 1);
	for (int i = 0; i < 3; i++)
		CHECK(outer_wait(outer, TAG_INNER, 0), ==, 1);
	CHECK(epoll_wait(inner, out, 2, 0), ==, 1);
	CHECK(out[0].data.u64, ==, TAG_SOCK);
	CHECK(out[0].events, ==, EPOLLIN);
	CHECK(outer_wait(outer, TAG_INNER, 0), ==, 1);
	read_one(s);
	CHECK(outer_wait(outer, TAG_INNER, 0), ==, 0);
	CHECK(epoll_wait(inner, out, 2, 0), ==, 0);

	/* The outer set sleeps when the data arrives. */
	for (int kind = 0; kind < 2; kind++) {
		send_later(kind, &th, &pid);
		CHECK(outer_wait(outer, TAG_INNER, NET_WAIT_MS), ==, 1);
		sent(kind, th, pid);
		CHECK(outer_wait(outer, TAG_INNER, 0), ==, 1);
		read_one(s);
		CHECK(outer_wait(outer, TAG_INNER, 0), ==, 0);
	}

	/* Three levels. */
	ev.data.u64 = TAG_MID;
	CHECK_OK(epoll_ctl(top, EPOLL_CTL_ADD, outer, &ev));
	CHECK(outer_wait(top, TAG_MID, 0), ==, 0);
	for (int kind = 0; kind < 2; kind++) {
		send_later(kind, &th, &pid);
		CHECK(outer_wait(top, TAG_MID, NET_WAIT_MS), ==, 1);
		sent(kind, th, pid);
		CHECK(outer_wait(top, TAG_MID, 0), ==, 1);
		CHECK(outer_wait(outer, TAG_INNER, 0), ==, 1);
		read_one(s);
		CHECK(outer_wait(top, TAG_MID, 0), ==, 0);
		CHECK(outer_wait(outer, TAG_INNER, 0), ==, 0);
	}

	/* poll on the inner epoll fd. */
	CHECK(poll_in(inner, 0), ==, 0);
	xwrite_all(c, "p", 1);
	CHECK(poll_in(inner, NET_WAIT_MS), ==, 1);
	CHECK(poll_in(inner, 0), ==, 1);
	read_one(s);
	CHECK(poll_in(inner, 0), ==, 0);
	for (int kind = 0; kind < 2; kind++) {
		send_later(kind, &th, &pid);
		CHECK(poll_in(inner, NET_WAIT_MS), ==, 1);
		sent(kind, th, pid);
		read_one(s);
		CHECK(poll_in(inner, 0), ==, 0);
	}

	/* select on the inner epoll fd. */
	CHECK(select_in(inner, 0), ==, 0);
	xwrite_all(c, "s", 1);
	CHECK(select_in(inner, NET_WAIT_MS), ==, 1);
	CHECK(select_in(inner, 0), ==, 1);
	read_one(s);
	CHECK(select_in(inner, 0), ==, 0);
	for (int kind = 0; kind < 2; kind++) {
		send_later(kind, &th, &pid);
		CHECK(select_in(inner, NET_WAIT_MS), ==, 1);
		sent(kind, th, pid);
		read_one(s);
		CHECK(select_in(inner, 0), ==, 0);
	}

	/* The inner set itself still works after all that. */
	xwrite_all(c, "i", 1);
	CHECK(epoll_wait(inner, out, 2, NET_WAIT_MS), ==, 1);
	CHECK(out[0].data.u64, ==, TAG_SOCK);
	read_one(s);
	CHECK(epoll_wait(inner, out, 2, 0), ==, 0);

	CHECK_OK(close(top));
	CHECK_OK(close(outer));
	CHECK_OK(close(inner));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
