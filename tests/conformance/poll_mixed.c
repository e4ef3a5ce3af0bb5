/* poll_mixed: one poll over a pipe, a socket and a negative fd reports each ready fd
 * separately and exactly (pipe only, socket only, both), ignores the negative fd, reports
 * POLLNVAL for a closed fd, and POLLHUP / POLLRDHUP when the writers go away. */
#include "check.h"
#include "net.h"

static void poll_set(struct pollfd *p, int n, int timeout_ms, int expect_n)
{
	for (int i = 0; i < n; i++)
		p[i].revents = (short)0x7fff;
	CHECK(poll(p, (nfds_t)n, timeout_ms), ==, expect_n);
}

int main(void)
{
	struct pollfd p[3];
	char buf[16];
	int pp[2], c, s, dead;

	CHECK_OK(pipe(pp));
	tcp_pair_checked(AF_INET, &c, &s);
	p[0] = (struct pollfd){ .fd = pp[0], .events = POLLIN };
	p[1] = (struct pollfd){ .fd = s, .events = POLLIN };
	p[2] = (struct pollfd){ .fd = -1, .events = POLLIN };

	poll_set(p, 3, 0, 0);
	CHECK(p[0].revents | p[1].revents | p[2].revents, ==, 0);

	/* Pipe only. */
	xwrite_all(pp[1], "p", 1);
	poll_set(p, 3, NET_WAIT_MS, 1);
	CHECK(p[0].revents, ==, POLLIN);
	CHECK(p[1].revents, ==, 0);
	CHECK(p[2].revents, ==, 0);
	xread_exact(pp[0], buf, 1);

	/* Socket only. */
	xwrite_all(c, "s", 1);
	poll_set(p, 3, NET_WAIT_MS, 1);
	CHECK(p[0].revents, ==, 0);
	CHECK(p[1].revents, ==, POLLIN);
	CHECK(p[2].revents, ==, 0);

	/* Both (the socket's data is already there). */
	xwrite_all(pp[1], "p", 1);
	poll_set(p, 3, NET_WAIT_MS, 2);
	CHECK(p[0].revents, ==, POLLIN);
	CHECK(p[1].revents, ==, POLLIN);
	xread_exact(pp[0], buf, 1);
	xread_exact(s, buf, 1);
	poll_set(p, 3, 0, 0);

	/* Writable ends. */
	struct pollfd w[2] = { { .fd = pp[1], .events = POLLOUT }, { .fd = c, .events = POLLOUT } };
	poll_set(w, 2, 0, 2);
	CHECK(w[0].revents, ==, POLLOUT);
	CHECK(w[1].revents, ==, POLLOUT);

	/* A closed fd number is POLLNVAL and counts. */
	dead = CHECK_OK(dup(pp[0]));
	CHECK_OK(close(dead));
	struct pollfd d[2] = { { .fd = dead, .events = POLLIN }, { .fd = s, .events = POLLIN } };
	poll_set(d, 2, 0, 1);
	CHECK(d[0].revents, ==, POLLNVAL);
	CHECK(d[1].revents, ==, 0);

	/* The writers go away. */
	p[1].events = POLLIN | POLLRDHUP;
	CHECK_OK(close(pp[1]));
	CHECK_OK(close(c));
	CHECK(wait_fd(s, POLLRDHUP, NET_WAIT_MS) & POLLRDHUP, ==, POLLRDHUP);
	poll_set(p, 3, 0, 2);
	CHECK(p[0].revents, ==, POLLHUP);
	CHECK(p[1].revents, ==, POLLIN | POLLRDHUP);

	CHECK_OK(close(pp[0]));
	CHECK_OK(close(s));
	PASS();
}
