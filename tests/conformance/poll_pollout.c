/* poll_pollout: writability follows the send path: once non-blocking writes hit EAGAIN and
 * the peer does not read, poll/select eventually report the socket not writable; when the
 * peer drains everything, POLLOUT comes back (poll, select) and an edge-triggered EPOLLOUT
 * event is delivered. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>
#include <sys/select.h>

#define CHUNK (64 * 1024)
#define SEED 61

int main(void)
{
	static char chunk[CHUNK];
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLET }, out;
	unsigned long long total = 0, got = 0;
	int c, s, ep, stable = 0;
	fd_set wr;
	struct timeval tv;

	tcp_pair_checked(AF_INET, &c, &s);
	set_nonblocking(c, 1);
	ep = CHECK_OK(epoll_create1(0));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	CHECK(epoll_wait(ep, &out, 1, 0), ==, 1); /* the initial edge: writable */
	CHECK(out.events, ==, EPOLLOUT);
	CHECK(epoll_wait(ep, &out, 1, 0), ==, 0);

	/* Fill until not writable for 100 ms while the peer never reads. */
	for (int round = 0; round < 100 && !stable; round++) {
		for (;;) {
			ssize_t n;

			pattern_fill(SEED, total, chunk, CHUNK);
			n = write(c, chunk, CHUNK);
			if (n == -1) {
				CHECK(errno, ==, EAGAIN);
				break;
			}
			total += (unsigned long long)n;
			if (total > 1024ULL * 1024 * 1024)
				FAIL("1 GiB accepted while the peer never reads");
		}
		stable = wait_fd(c, POLLOUT, 100) == 0;
	}
	CHECK(stable, ==, 1);
	FD_ZERO(&wr);
	FD_SET(c, &wr);
	tv = (struct timeval){ 0, 0 };
	CHECK(select(c + 1, NULL, &wr, NULL, &tv), ==, 0);
	while (epoll_wait(ep, &out, 1, 0) == 1)
		; /* consume edges from the filling */
	CHECK(epoll_wait(ep, &out, 1, 0), ==, 0);

	/* The peer drains everything. */
	while (got < total) {
		ssize_t n = read(s, chunk, CHUNK);

		CHECK(n, >, 0);
		CHECK_PATTERN(SEED, got, chunk, (size_t)n);
		got += (unsigned long long)n;
	}
	CHECK(wait_fd(c, POLLOUT, NET_WAIT_MS), ==, POLLOUT);
	FD_ZERO(&wr);
	FD_SET(c, &wr);
	tv = (struct timeval){ 0, 0 };
	CHECK(select(c + 1, NULL, &wr, NULL, &tv), ==, 1);
	CHECK(epoll_wait(ep, &out, 1, NET_WAIT_MS), ==, 1);
	CHECK(out.events & EPOLLOUT, ==, EPOLLOUT);
	xexchange_both(c, s);

	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
