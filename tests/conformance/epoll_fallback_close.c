/* epoll_fallback_close: a socket registered while its connection was being negotiated, which
 * then stays on kernel TCP (its sending side shut down before the server accepts: shunt
 * withdraws the offer), and before the next epoll_wait the program closes another socket: the
 * server's answer and its close, arriving afterwards, are reported, read byte for byte, then
 * EOF (level- and edge-triggered). Under shunt a close makes the next wait look for members
 * whose fd went away; a socket settled on kernel TCP answers lookups as the kernel's, so it
 * looked gone, left the set's table with its tagged registration still in the kernel, and
 * its events were thrown away as a stale member's: the reader waited for ever. Found by the
 * chaos run (tests/stress/) under ASan's timing. */
#include "check.h"
#include "net.h"
#include "settings.h"

#include <sys/epoll.h>

#define MSG 300

static void one(int edge)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | (edge ? EPOLLET : 0), .data.u64 = 5 }, out;
	char buf[MSG + 1];
	size_t got = 0;
	int port, l, c, s, ep, other;

	l = tcp_listen(AF_INET, &port);
	c = tcp_connect(AF_INET, port);   /* not accepted yet: under shunt, offered */
	ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	CHECK_OK(shutdown(c, SHUT_WR));   /* before the accept: the offer is withdrawn */
	other = CHECK_OK(socket(AF_INET, SOCK_STREAM, 0));
	CHECK_OK(close(other));
	s = CHECK_OK(accept(l, NULL, NULL));
	pattern_fill(31, 0, buf, MSG);
	xwrite_all(s, buf, MSG);
	CHECK_OK(close(s));

	double end = now_sec() + NET_WAIT_MS / 1000.0;

	for (;;) {
		int n = epoll_wait(ep, &out, 1, 100);

		CHECK(n >= 0 || errno == EINTR, ==, 1);
		if (now_sec() > end)
			FAIL("%s: %zu of %d bytes after %d ms", edge ? "edge" : "level", got, MSG, NET_WAIT_MS);
		if (n <= 0)
			continue;
		CHECK(out.data.u64, ==, 5);
		ssize_t r;

		/* until EAGAIN: an edge-triggered set says nothing more about what is left */
		while ((r = recv(c, buf + got, sizeof(buf) - got, MSG_DONTWAIT)) > 0)
			got += (size_t)r;
		if (r < 0 && errno == EAGAIN)
			continue;
		CHECK_OK(r);
		break;   /* EOF */
	}
	CHECK(got, ==, MSG);
	CHECK_PATTERN(31, 0, buf, MSG);
	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	CHECK_OK(close(l));
}

int main(void)
{
	int c, s;

	test_setting("SHUNT_STRICT", "0");   /* the connection under test falls back by design */
	tcp_pair_checked(AF_INET, &c, &s);   /* one accepted in time is accelerated */
	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	one(0);
	one(1);
	PASS();
}
