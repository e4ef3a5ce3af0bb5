/* threads_epoll_withdrawn: a client socket is in an epoll set, and a thread sleeps in
 * epoll_wait on it while another thread shuts the socket's sending side down before the server
 * has accepted, then the server accepts, sends 300 bytes and closes. The sleeper wakes, and
 * the 300 bytes, then EOF, are read, byte for byte, as with the kernel.
 * Under shunt the shutdown withdraws the client's offer (kernel TCP from then on) while epoll
 * still watches the socket as a member of its own, for doorbells: the event for the server's
 * bytes and close must not be taken for the end of a channel, whose doorbells a look may
 * drain (it drained the 300 bytes: EOF at once). */
#include "check.h"
#include "net.h"
#include "settings.h"

#include <pthread.h>
#include <sys/epoll.h>

#define MSG 300

static int lfd, cfd;

static void *withdraw_then_serve(void *arg)
{
	char buf[MSG];
	int s;

	(void)arg;
	sleep_ms(100);   /* the other thread sleeps in epoll_wait by now */
	CHECK_OK(shutdown(cfd, SHUT_WR));
	s = CHECK_OK(accept(lfd, NULL, NULL));
	pattern_fill(9, 0, buf, MSG);
	xwrite_all(s, buf, MSG);
	CHECK_OK(close(s));
	return NULL;
}

static void one(int edge)
{
	struct sockaddr_storage ss;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | (edge ? EPOLLET : 0) }, out;
	char buf[MSG + 1];
	size_t got = 0;
	int port, ep;
	pthread_t th;
	socklen_t len;

	lfd = tcp_listen(AF_INET, &port);
	len = loopback_addr(AF_INET, port, &ss);
	cfd = CHECK_OK(socket(AF_INET, SOCK_STREAM, 0));
	ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev));
	CHECK_OK(connect(cfd, (struct sockaddr *)&ss, len));   /* the server accepts later */
	CHECK(epoll_wait(ep, &out, 1, 0), ==, 0);
	CHECK(pthread_create(&th, NULL, withdraw_then_serve, NULL), ==, 0);

	double end = now_sec() + NET_WAIT_MS / 1000.0;

	for (;;) {
		int n = epoll_wait(ep, &out, 1, NET_WAIT_MS);

		CHECK(n >= 0 || errno == EINTR, ==, 1);
		if (now_sec() > end)
			FAIL("%s: %zu of %d bytes after %d ms", edge ? "edge" : "level", got, MSG, NET_WAIT_MS);
		if (n <= 0)
			continue;
		ssize_t r;

		/* until EAGAIN: an edge-triggered set says nothing more about what is left */
		while ((r = recv(cfd, buf + got, sizeof(buf) - got, MSG_DONTWAIT)) > 0)
			got += (size_t)r;
		if (r < 0 && errno == EAGAIN)
			continue;
		CHECK_OK(r);
		break;   /* EOF */
	}
	CHECK(got, ==, MSG);
	CHECK_PATTERN(9, 0, buf, MSG);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK_OK(close(ep));
	CHECK_OK(close(cfd));
	CHECK_OK(close(lfd));
}

int main(void)
{
	int c, s;

	test_setting("SHUNT_STRICT", "0");   /* the connection under test falls back by design */
	/* what a connection accepted in time is: accelerated */
	tcp_pair_checked(AF_INET, &c, &s);
	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	one(0);
	one(1);
	PASS();
}
