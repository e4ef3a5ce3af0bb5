/* sockname_peername: on an established loopback connection the client's local address is
 * the server's peer address and the other way round, the server's local port is the listening
 * port, both are 127.0.0.1 (in crossns mode the client's and the server's namespace addresses,
 * net.h) with length sizeof(sockaddr_in); a too-small buffer is truncated but reports the full
 * length; an unconnected socket's getpeername is ENOTCONN. */
#include "check.h"
#include "net.h"

/* fd's local (peer 0) or peer address, which must be end's */
static void get_name(int fd, int peer, enum test_end end, struct sockaddr_in *sa)
{
	socklen_t len = sizeof(*sa);

	memset(sa, 0xee, sizeof(*sa));
	if (peer)
		CHECK_OK(getpeername(fd, (struct sockaddr *)sa, &len));
	else
		CHECK_OK(getsockname(fd, (struct sockaddr *)sa, &len));
	CHECK(len, ==, sizeof(*sa));
	CHECK(sa->sin_family, ==, AF_INET);
	CHECK(is_end_addr(sa, end), ==, 1);
}

static int same(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
}

int main(void)
{
	struct sockaddr_in c_local, c_peer, s_local, s_peer, acc;
	socklen_t len = sizeof(acc);
	unsigned char small[4];
	int lfd, port, c, s, u;

	lfd = tcp_listen(AF_INET, &port);
	c = tcp_connect(AF_INET, port);
	s = CHECK_OK(accept(lfd, (struct sockaddr *)&acc, &len));
	expect_accelerated(c);
	expect_accelerated(s);

	get_name(c, 0, TEST_CLIENT, &c_local);
	get_name(c, 1, TEST_SERVER, &c_peer);
	get_name(s, 0, TEST_SERVER, &s_local);
	get_name(s, 1, TEST_CLIENT, &s_peer);
	CHECK(same(&c_local, &s_peer), ==, 1);
	CHECK(same(&c_peer, &s_local), ==, 1);
	CHECK(same(&acc, &s_peer), ==, 1);
	CHECK(ntohs(s_local.sin_port), ==, port);
	CHECK(ntohs(c_local.sin_port), !=, port);
	CHECK(ntohs(c_local.sin_port), !=, 0);

	/* Truncated to the buffer, full length reported. */
	len = sizeof(small);
	CHECK_OK(getpeername(s, (struct sockaddr *)small, &len));
	CHECK(len, ==, sizeof(struct sockaddr_in));
	CHECK(memcmp(small, &c_local, sizeof(small)), ==, 0);

	/* Still the same after traffic and a half-close by the peer. */
	xexchange_both(c, s);
	CHECK_OK(shutdown(s, SHUT_WR));
	get_name(c, 1, TEST_SERVER, &c_peer);
	CHECK(same(&c_peer, &s_local), ==, 1);

	u = CHECK_OK(socket(AF_INET, SOCK_STREAM, 0));
	len = sizeof(acc);
	CHECK_ERRNO(getpeername(u, (struct sockaddr *)&acc, &len), ENOTCONN);
	len = sizeof(acc);
	CHECK_OK(getsockname(u, (struct sockaddr *)&acc, &len));
	CHECK(acc.sin_port, ==, 0);

	CHECK_OK(close(u));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	CHECK_OK(close(lfd));
	PASS();
}
