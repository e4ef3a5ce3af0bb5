/* select_socket: select reports a connected socket writable, readable only once data arrives
 * and not after it is drained, readable at EOF; a timeout returns 0, clears the sets and
 * (Linux) leaves the timeval at 0; a closed fd is EBADF. */
#include "check.h"
#include "net.h"

#include <sys/select.h>

int main(void)
{
	fd_set rd, wr, ex;
	struct timeval tv;
	char buf[16];
	int c, s, nfds, dead;

	tcp_pair_checked(AF_INET, &c, &s);
	nfds = (c > s ? c : s) + 1;
	CHECK(nfds, <=, FD_SETSIZE);

	/* Idle: both writable, neither readable, no exceptions. */
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_ZERO(&ex);
	FD_SET(c, &rd);
	FD_SET(s, &rd);
	FD_SET(c, &wr);
	FD_SET(s, &wr);
	FD_SET(c, &ex);
	FD_SET(s, &ex);
	tv = (struct timeval){ 0, 0 };
	CHECK(select(nfds, &rd, &wr, &ex, &tv), ==, 2);
	CHECK(FD_ISSET(c, &rd) || FD_ISSET(s, &rd), ==, 0);
	CHECK(FD_ISSET(c, &wr) && FD_ISSET(s, &wr), ==, 1);
	CHECK(FD_ISSET(c, &ex) || FD_ISSET(s, &ex), ==, 0);

	/* Timeout: 0, sets cleared, remaining time written back as 0. */
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	tv = (struct timeval){ 0, 50000 };
	CHECK(select(nfds, &rd, NULL, NULL, &tv), ==, 0);
	CHECK(FD_ISSET(s, &rd), ==, 0);
	CHECK(tv.tv_sec, ==, 0);
	CHECK(tv.tv_usec, ==, 0);

	/* Data arrives. */
	xwrite_all(c, "abc", 3);
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	FD_SET(c, &rd);
	tv = (struct timeval){ NET_WAIT_MS / 1000, 0 };
	CHECK(select(nfds, &rd, NULL, NULL, &tv), ==, 1);
	CHECK(FD_ISSET(s, &rd), ==, 1);
	CHECK(FD_ISSET(c, &rd), ==, 0);
	/* Level: still readable; then drained. */
	tv = (struct timeval){ 0, 0 };
	CHECK(select(nfds, &rd, NULL, NULL, &tv), ==, 1);
	xread_exact(s, buf, 3);
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	tv = (struct timeval){ 0, 0 };
	CHECK(select(nfds, &rd, NULL, NULL, &tv), ==, 0);

	/* EOF is readable. */
	CHECK_OK(close(c));
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	tv = (struct timeval){ NET_WAIT_MS / 1000, 0 };
	CHECK(select(s + 1, &rd, NULL, NULL, &tv), ==, 1);
	CHECK(FD_ISSET(s, &rd), ==, 1);
	CHECK(read(s, buf, sizeof(buf)), ==, 0);

	/* A closed fd in a set. */
	dead = CHECK_OK(dup(s));
	CHECK_OK(close(dead));
	FD_ZERO(&rd);
	FD_SET(dead, &rd);
	tv = (struct timeval){ 0, 0 };
	CHECK_ERRNO(select(dead + 1, &rd, NULL, NULL, &tv), EBADF);

	CHECK_OK(close(s));
	PASS();
}
