/* sockopt_basic: a connected socket looks like the kernel TCP socket it is: fstat says
 * S_ISSOCK, SO_TYPE/SO_DOMAIN/SO_PROTOCOL are SOCK_STREAM/AF_INET/IPPROTO_TCP, SO_ACCEPTCONN
 * is 0 (1 on the listener), TCP_INFO says ESTABLISHED, SO_ERROR 0; TCP_NODELAY and
 * SO_KEEPALIVE read back what was set; SO_RCVBUF/SO_SNDBUF read back doubled (Linux). */
#include "check.h"
#include "net.h"

#include <sys/stat.h>

static int getint(int fd, int level, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);

	CHECK_OK(getsockopt(fd, level, name, &v, &len));
	CHECK(len, ==, sizeof(v));
	return v;
}

static void setint(int fd, int level, int name, int v)
{
	CHECK_OK(setsockopt(fd, level, name, &v, sizeof(v)));
}

int main(void)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	struct stat st;
	int lfd, port, c, s;

	lfd = tcp_listen(AF_INET, &port);
	c = tcp_connect(AF_INET, port);
	s = CHECK_OK(accept(lfd, NULL, NULL));
	expect_accelerated(c);
	expect_accelerated(s);

	CHECK_OK(fstat(s, &st));
	CHECK(S_ISSOCK(st.st_mode), ==, 1);
	CHECK(getint(lfd, SOL_SOCKET, SO_ACCEPTCONN), ==, 1);
	for (int i = 0; i < 2; i++) {
		int fd = i ? s : c;

		CHECK(getint(fd, SOL_SOCKET, SO_TYPE), ==, SOCK_STREAM);
		CHECK(getint(fd, SOL_SOCKET, SO_DOMAIN), ==, AF_INET);
		CHECK(getint(fd, SOL_SOCKET, SO_PROTOCOL), ==, IPPROTO_TCP);
		CHECK(getint(fd, SOL_SOCKET, SO_ACCEPTCONN), ==, 0);
		CHECK(getint(fd, SOL_SOCKET, SO_ERROR), ==, 0);
		memset(&ti, 0, sizeof(ti));
		len = sizeof(ti);
		CHECK_OK(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len));
		CHECK(ti.tcpi_state, ==, 1 /* TCP_ESTABLISHED */);
	}

	CHECK(getint(c, IPPROTO_TCP, TCP_NODELAY), ==, 0);
	setint(c, IPPROTO_TCP, TCP_NODELAY, 1);
	CHECK(getint(c, IPPROTO_TCP, TCP_NODELAY), !=, 0);
	setint(s, SOL_SOCKET, SO_KEEPALIVE, 1);
	CHECK(getint(s, SOL_SOCKET, SO_KEEPALIVE), ==, 1);
	setint(s, SOL_SOCKET, SO_RCVBUF, 65536);
	CHECK(getint(s, SOL_SOCKET, SO_RCVBUF), ==, 2 * 65536);
	setint(c, SOL_SOCKET, SO_SNDBUF, 65536);
	CHECK(getint(c, SOL_SOCKET, SO_SNDBUF), ==, 2 * 65536);

	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	CHECK_OK(close(lfd));
	PASS();
}
