/* epoll_pri: EPOLLPRI in a mixed set: a pseudo-terminal master in packet mode (a kernel fd
 * that raises POLLPRI on a status change of its slave: a flush) is reported with
 * EPOLLIN|EPOLLPRI, also to a sleeping wait and edge-triggered; an accelerated socket
 * registered with EPOLLPRI reports data as EPOLLIN only, and with EPOLLPRI alone reports
 * nothing; poll (POLLPRI) and select (exceptfds) say the same. Skips without ptys. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <termios.h>

#define TAG_SOCK 1
#define TAG_PTY 2
#define TAG_PIPE 3

static int slave;

static void *flush_later(void *arg)
{
	(void)arg;
	sleep_ms(100);
	CHECK_OK(tcflush(slave, TCIFLUSH));
	return NULL;
}

/* One wait; the events per tag (index TAG_*), 0 when not reported. */
static int wait_tags(int ep, int timeout_ms, uint32_t got[4])
{
	struct epoll_event out[4];
	int n = CHECK_OK(epoll_wait(ep, out, 4, timeout_ms));

	memset(got, 0, 4 * sizeof(got[0]));
	for (int i = 0; i < n; i++) {
		CHECK(out[i].data.u32, >=, TAG_SOCK);
		CHECK(out[i].data.u32, <=, TAG_PIPE);
		CHECK(got[out[i].data.u32], ==, 0);
		got[out[i].data.u32] = out[i].events;
	}
	return n;
}

/* Read the pty master's status byte (packet mode), ending POLLPRI. */
static void read_status(int master)
{
	char buf[16];

	CHECK(read(master, buf, sizeof(buf)), ==, 1);
	CHECK(buf[0] & TIOCPKT_FLUSHREAD, ==, TIOCPKT_FLUSHREAD);
}

int main(void)
{
	struct epoll_event ev;
	uint32_t got[4];
	struct pollfd p[2];
	fd_set rd, ex;
	struct timeval tv;
	pthread_t th;
	char b;
	int c, s, master, pp[2], ep, one = 1;

	master = posix_openpt(O_RDWR | O_NOCTTY);
	if (master == -1)
		MISSING("posix_openpt: %s (no pty device)", strerror(errno));
	CHECK_OK(grantpt(master));
	CHECK_OK(unlockpt(master));
	slave = open(ptsname(master), O_RDWR | O_NOCTTY);
	if (slave == -1)
		MISSING("open %s: %s", ptsname(master), strerror(errno));
	CHECK_OK(ioctl(master, TIOCPKT, &one));

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(pp));
	ep = CHECK_OK(epoll_create1(0));
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLPRI, .data.u32 = TAG_SOCK };
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLPRI, .data.u32 = TAG_PTY };
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, master, &ev));
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLPRI, .data.u32 = TAG_PIPE };
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &ev));
	CHECK(wait_tags(ep, 0, got), ==, 0);

	/* Socket data: EPOLLIN, never EPOLLPRI. */
	xwrite_all(c, "d", 1);
	CHECK(wait_tags(ep, NET_WAIT_MS, got), ==, 1);
	CHECK(got[TAG_SOCK], ==, EPOLLIN);

	/* The pty's status change, with the socket's data still there. */
	CHECK_OK(tcflush(slave, TCIFLUSH));
	CHECK(wait_tags(ep, NET_WAIT_MS, got), ==, 2);
	CHECK(got[TAG_SOCK], ==, EPOLLIN);
	CHECK(got[TAG_PTY], ==, EPOLLIN | EPOLLPRI);
	xwrite_all(pp[1], "p", 1);
	CHECK(wait_tags(ep, 0, got), ==, 3);
	CHECK(got[TAG_PIPE], ==, EPOLLIN);

	/* poll and select agree. */
	p[0] = (struct pollfd){ .fd = s, .events = POLLIN | POLLPRI };
	p[1] = (struct pollfd){ .fd = master, .events = POLLIN | POLLPRI };
	CHECK(poll(p, 2, 0), ==, 2);
	CHECK(p[0].revents, ==, POLLIN);
	CHECK(p[1].revents, ==, POLLIN | POLLPRI);
	p[0].events = p[1].events = POLLPRI;
	CHECK(poll(p, 2, 0), ==, 1);
	CHECK(p[0].revents, ==, 0);
	CHECK(p[1].revents, ==, POLLPRI);
	CHECK(s, <, FD_SETSIZE);
	CHECK(master, <, FD_SETSIZE);
	FD_ZERO(&rd);
	FD_ZERO(&ex);
	FD_SET(s, &rd);
	FD_SET(s, &ex);
	FD_SET(master, &ex);
	tv = (struct timeval){ 0, 0 };
	CHECK(select((s > master ? s : master) + 1, &rd, NULL, &ex, &tv), ==, 2);
	CHECK(FD_ISSET(s, &rd), ==, 1);
	CHECK(FD_ISSET(s, &ex), ==, 0);
	CHECK(FD_ISSET(master, &ex), ==, 1);

	read_status(master);
	xread_exact(pp[0], &b, 1);
	CHECK(wait_tags(ep, 0, got), ==, 1);
	CHECK(got[TAG_SOCK], ==, EPOLLIN);

	/* EPOLLPRI alone on the socket: its data is not reported. */
	ev = (struct epoll_event){ .events = EPOLLPRI, .data.u32 = TAG_SOCK };
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	CHECK(wait_tags(ep, 0, got), ==, 0);
	xwrite_all(c, "e", 1);
	wait_queued(s, 2);
	CHECK(wait_tags(ep, 50, got), ==, 0);

	/* A sleeping wait is woken by the pty's EPOLLPRI. */
	CHECK(pthread_create(&th, NULL, flush_later, NULL), ==, 0);
	CHECK(wait_tags(ep, NET_WAIT_MS, got), ==, 1);
	CHECK(got[TAG_PTY], ==, EPOLLIN | EPOLLPRI);
	CHECK(pthread_join(th, NULL), ==, 0);
	read_status(master);
	CHECK(wait_tags(ep, 0, got), ==, 0);

	/* Edge-triggered: one event per status change. */
	ev = (struct epoll_event){ .events = EPOLLPRI | EPOLLET, .data.u32 = TAG_PTY };
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, master, &ev));
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLPRI | EPOLLET, .data.u32 = TAG_SOCK };
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	CHECK(wait_tags(ep, 0, got), ==, 1); /* the socket's queued data, once */
	CHECK(got[TAG_SOCK], ==, EPOLLIN);
	CHECK(wait_tags(ep, 0, got), ==, 0);
	CHECK_OK(tcflush(slave, TCIFLUSH));
	CHECK(wait_tags(ep, NET_WAIT_MS, got), ==, 1);
	CHECK(got[TAG_PTY], ==, EPOLLPRI);
	CHECK(wait_tags(ep, 0, got), ==, 0);
	read_status(master);
	xread_exact(s, &b, 1);
	xread_exact(s, &b, 1);
	CHECK(wait_tags(ep, 0, got), ==, 0);

	CHECK_OK(close(ep));
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	CHECK_OK(close(slave));
	CHECK_OK(close(master));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
