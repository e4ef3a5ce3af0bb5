/* select_mixed: one select over a pipe and a socket reports each ready fd separately (pipe
 * only, socket only, both) in the read set, and both write ends in the write set. */
#include "check.h"
#include "net.h"

#include <sys/select.h>

static int sel(int nfds, int a, int b, fd_set *rd, int timeout_ms)
{
	struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };

	FD_ZERO(rd);
	FD_SET(a, rd);
	FD_SET(b, rd);
	return select(nfds, rd, NULL, NULL, &tv);
}

int main(void)
{
	fd_set rd, wr;
	struct timeval tv = { 0, 0 };
	char buf[4];
	int pp[2], c, s, nfds;

	CHECK_OK(pipe(pp));
	tcp_pair_checked(AF_INET, &c, &s);
	nfds = pp[0];
	if (pp[1] > nfds)
		nfds = pp[1];
	if (c > nfds)
		nfds = c;
	if (s > nfds)
		nfds = s;
	nfds++;

	CHECK(sel(nfds, pp[0], s, &rd, 0), ==, 0);

	xwrite_all(pp[1], "p", 1);
	CHECK(sel(nfds, pp[0], s, &rd, NET_WAIT_MS), ==, 1);
	CHECK(FD_ISSET(pp[0], &rd), ==, 1);
	CHECK(FD_ISSET(s, &rd), ==, 0);
	xread_exact(pp[0], buf, 1);

	xwrite_all(c, "s", 1);
	CHECK(sel(nfds, pp[0], s, &rd, NET_WAIT_MS), ==, 1);
	CHECK(FD_ISSET(pp[0], &rd), ==, 0);
	CHECK(FD_ISSET(s, &rd), ==, 1);

	xwrite_all(pp[1], "p", 1);
	CHECK(sel(nfds, pp[0], s, &rd, NET_WAIT_MS), ==, 2);
	CHECK(FD_ISSET(pp[0], &rd), ==, 1);
	CHECK(FD_ISSET(s, &rd), ==, 1);
	xread_exact(pp[0], buf, 1);
	xread_exact(s, buf, 1);
	CHECK(sel(nfds, pp[0], s, &rd, 0), ==, 0);

	FD_ZERO(&wr);
	FD_SET(pp[1], &wr);
	FD_SET(c, &wr);
	FD_SET(pp[0], &rd);
	FD_SET(s, &rd);
	CHECK(select(nfds, &rd, &wr, NULL, &tv), ==, 2);
	CHECK(FD_ISSET(pp[1], &wr) && FD_ISSET(c, &wr), ==, 1);
	CHECK(FD_ISSET(pp[0], &rd) || FD_ISSET(s, &rd), ==, 0);

	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
