/* close_after_read_eof: a socket that had to wait for its data (in recv, poll, select or
 * epoll_wait), read all of it and then closed gives its peer an orderly EOF: the peer's recv
 * returns 0 (not ECONNRESET) and getpeername still works there. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/select.h>

enum wait_kind { BY_RECV, BY_POLL, BY_SELECT, BY_EPOLL, KINDS };

static int peer;

static void *send_later(void *arg)
{
	(void)arg;
	sleep_ms(100); /* the reader is asleep by now */
	xwrite_all(peer, "wake", 4);
	return NULL;
}

static void wait_readable(int fd, enum wait_kind kind)
{
	fd_set rd;
	struct timeval tv = { NET_WAIT_MS / 1000, 0 };
	struct epoll_event ev = { .events = EPOLLIN }, out;
	int ep;

	switch (kind) {
	case BY_POLL:
		CHECK(wait_fd(fd, POLLIN, NET_WAIT_MS), ==, POLLIN);
		break;
	case BY_SELECT:
		FD_ZERO(&rd);
		FD_SET(fd, &rd);
		CHECK(select(fd + 1, &rd, NULL, NULL, &tv), ==, 1);
		break;
	case BY_EPOLL:
		ep = CHECK_OK(epoll_create1(0));
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
		CHECK(epoll_wait(ep, &out, 1, NET_WAIT_MS), ==, 1);
		CHECK_OK(close(ep));
		break;
	default:
		break;
	}
}

int main(void)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char buf[8];
	pthread_t th;

	for (int kind = 0; kind < KINDS; kind++) {
		int c, s;

		tcp_pair_checked(AF_INET, &c, &s);
		fprintf(stderr, "wait kind %d\n", kind);
		peer = s;
		CHECK(pthread_create(&th, NULL, send_later, NULL), ==, 0);
		wait_readable(c, (enum wait_kind)kind);
		xread_exact(c, buf, 4);
		CHECK(memcmp(buf, "wake", 4), ==, 0);
		CHECK(pthread_join(th, NULL), ==, 0);
		CHECK_ERRNO(recv(c, buf, 1, MSG_DONTWAIT), EAGAIN);

		CHECK_OK(close(c));
		CHECK(recv(s, buf, sizeof(buf), 0), ==, 0);
		len = sizeof(ss);
		CHECK_OK(getpeername(s, (struct sockaddr *)&ss, &len));
		CHECK_OK(close(s));
	}
	PASS();
}
