/* epoll_before_connect: a socket added to epoll (edge-triggered, in and out) before its
 * non-blocking connect, as nginx does with its upstreams: the connect completes (EPOLLOUT),
 * and data the server sends afterwards, without closing, wakes epoll_wait each time it
 * arrives after the client drained the socket to EAGAIN; more than the first ring's worth
 * too. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/epoll.h>

#define BIG (200 * 1000)

static char buf[BIG];
static int srv, token[2];

/* the server: each answer is sent a little after the client asked for it, so that the
 * client is already asleep in epoll_wait when it comes */
static void *answers(void *arg)
{
	static char out[BIG];
	char t;

	(void)arg;
	for (int round = 0; round < 3; round++) {
		size_t n = round == 1 ? BIG : 100;

		CHECK(read(token[0], &t, 1), ==, 1);
		sleep_ms(50);
		pattern_fill(11 + round, 0, out, n);
		xwrite_all(srv, out, n);
	}
	return NULL;
}

static uint32_t wait_event(int ep)
{
	struct epoll_event out[4];
	int n = CHECK_OK(epoll_wait(ep, out, 4, NET_WAIT_MS));

	CHECK(n, ==, 1);
	CHECK(out[0].data.u32, ==, 55);
	return out[0].events;
}

/* reads until EAGAIN, waiting for edges, until len bytes of the pattern came */
static void drain(int ep, int fd, uint64_t seed, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, buf, sizeof buf);

		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			wait_event(ep);   /* EPOLLIN, or an EPOLLOUT edge the kernel adds: read again */
			continue;
		}
		CHECK(n, >, 0);
		CHECK_PATTERN(seed, got, buf, (size_t)n);
		got += (size_t)n;
	}
}

int main(void)
{
	struct sockaddr_storage ss;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.u32 = 55 };
	int port, lfd, c, s, ep;

	lfd = tcp_listen(AF_INET, &port);
	c = CHECK_OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	ep = CHECK_OK(epoll_create1(0));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	socklen_t len = loopback_addr(AF_INET, port, &ss);
	int r = connect(c, (struct sockaddr *)&ss, len);
	CHECK(r == 0 || errno == EINPROGRESS, ==, 1);
	s = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK(wait_event(ep) & EPOLLOUT, !=, 0);
	int err = -1;
	socklen_t elen = sizeof err;
	CHECK_OK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &elen));
	CHECK(err, ==, 0);
	/* a request, as nginx would send it */
	xwrite_all(c, "GET", 3);
	xread_exact(s, buf, 3);
	expect_accelerated(c);
	expect_accelerated(s);

	/* answers that do not end the connection */
	pthread_t th;

	srv = s;
	CHECK_OK(pipe(token));
	CHECK(pthread_create(&th, NULL, answers, NULL), ==, 0);
	for (int round = 0; round < 3; round++) {
		/* the client finds nothing first, then waits for the answer */
		CHECK_ERRNO(read(c, buf, 1), EAGAIN);
		CHECK(write(token[1], "t", 1), ==, 1);
		drain(ep, c, 11 + round, round == 1 ? BIG : 100);
	}
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK_OK(close(token[0]));
	CHECK_OK(close(token[1]));
	xexchange_both(c, s);
	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	CHECK_OK(close(lfd));
	PASS();
}
