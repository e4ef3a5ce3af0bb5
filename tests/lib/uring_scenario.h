/*
 * uring_scenario.h: the connections the io_uring tests drive through a ring, and what they must
 * see. The process under test (P) uses io_uring; shunt cannot see that I/O, so every connection
 * of P must be on kernel TCP by the time the ring touches it: bytes exact, no hang, and the
 * reason recorded.
 *
 * Owns: connection A, accelerated before P's ring exists (and in an epoll set then), whose other
 * end is a child (Q) that never uses io_uring and keeps working through plain calls; connection B, made by P after its
 * ring exists (both ends in P); and the checks on both: IORING_OP_RECV, IORING_OP_SEND and
 * IORING_OP_EPOLL_CTL (then epoll_wait) on them, every byte checked against the pattern, every
 * wait bounded (uring.h), and, in accelerated mode, the fallback each end records (P's ends
 * "io_uring", Q's end "downgraded": it moved back because its peer did).
 */
#ifndef SHUNT_TESTS_URING_SCENARIO_H
#define SHUNT_TESTS_URING_SCENARIO_H

#include "handoff.h"
#include "net.h"
#include "uring.h"

#define URING_EARLY 3000            /* Q's bytes sent before P's ring: unread in P's ring then */
#define URING_ECHO (200 * 1024)     /* P to Q and back */
#define URING_LATE 5000             /* Q's bytes after P added its socket to an epoll set by the ring */
#define URING_EPOLL_DATA 0x0123456789abcdefULL

struct uring_conn_a {
	int fd;         /* P's end */
	pid_t peer;     /* Q */
	int ep;         /* an epoll set P added fd to through libc while it was accelerated */
};

/* Q: plain calls only, whatever shunt did to the connection under it. */
static inline void uring_peer_run(int fd)
{
	char *buf = malloc(URING_ECHO);
	char byte;

	CHECK(buf != NULL, ==, 1);
	pattern_fill(31, 0, buf, URING_EARLY);
	xwrite_all(fd, buf, URING_EARLY);
	xread_exact(fd, buf, URING_ECHO);
	CHECK_PATTERN(32, 0, buf, URING_ECHO);
	xwrite_all(fd, buf, URING_ECHO);
	xread_exact(fd, &byte, 1);
	CHECK(byte, ==, 'g');
	pattern_fill(33, 0, buf, URING_LATE);
	xwrite_all(fd, buf, URING_LATE);
	CHECK(read(fd, &byte, 1), ==, 0);   /* P closed: EOF, and nothing stray before it */
	expect_downgraded(fd);
	expect_fallback(fd, "downgraded");
	free(buf);
	PASS();
}

/* Connection A, accelerated, with Q's first bytes waiting unread at P's end. */
static inline struct uring_conn_a uring_conn_a_start(void)
{
	struct uring_conn_a a;
	int c;

	tcp_pair_checked(AF_INET, &c, &a.fd);
	a.peer = CHECK_OK(fork());
	if (a.peer == 0) {
		CHECK_OK(close(a.fd));
		uring_peer_run(c);
	}
	CHECK_OK(close(c));
	wait_queued(a.fd, URING_EARLY);
	a.ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = ~URING_EPOLL_DATA };
	CHECK_OK(epoll_ctl(a.ep, EPOLL_CTL_ADD, a.fd, &ev));
	return a;
}

/* Everything on A through the ring r: Q's early bytes first, then an echo both ways, then
 * epoll through the ring; A then ends and Q must have seen every byte. */
static inline void uring_conn_a_check(struct test_ring *r, struct uring_conn_a *a)
{
	char *buf = malloc(URING_ECHO);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = URING_EPOLL_DATA }, got[4];
	int ep;

	CHECK(buf != NULL, ==, 1);
	uring_recv_exact(r, a->fd, buf, URING_EARLY);
	CHECK_PATTERN(31, 0, buf, URING_EARLY);
	pattern_fill(32, 0, buf, URING_ECHO);
	uring_send_all(r, a->fd, buf, URING_ECHO);
	memset(buf, 0, URING_ECHO);
	uring_recv_exact(r, a->fd, buf, URING_ECHO);
	CHECK_PATTERN(32, 0, buf, URING_ECHO);

	/* libuv's way: the socket joins the set through the ring, and the set wakes for Q's bytes */
	ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	uring_epoll_ctl(r, ep, EPOLL_CTL_ADD, a->fd, &ev);
	uring_send_all(r, a->fd, "g", 1);
	CHECK(epoll_wait(ep, got, 4, NET_WAIT_MS), ==, 1);
	CHECK(got[0].data.u64 == URING_EPOLL_DATA, ==, 1);
	CHECK(got[0].events & EPOLLIN, ==, EPOLLIN);
	/* and the set it joined while accelerated reports it too, with its data */
	CHECK(epoll_wait(a->ep, got, 4, NET_WAIT_MS), ==, 1);
	CHECK(got[0].data.u64 == ~URING_EPOLL_DATA, ==, 1);
	CHECK(got[0].events & EPOLLIN, ==, EPOLLIN);
	uring_recv_exact(r, a->fd, buf, URING_LATE);
	CHECK_PATTERN(33, 0, buf, URING_LATE);
	CHECK_OK(close(ep));
	CHECK_OK(close(a->ep));

	expect_fallback(a->fd, "io_uring");
	CHECK_OK(close(a->fd));
	xwait_child_ok(a->peer);
	free(buf);
}

/* Connection B, made after P's ring exists: it must not be accelerated, whatever the ring
 * does (uring_conn_b_check says so after the ring's I/O on it). */
static inline void uring_conn_b_make(int *c, int *s)
{
	tcp_pair(AF_INET, c, s);
}

/* Both ways through the ring on B, and epoll through the ring; then B ends. */
static inline void uring_conn_b_check(struct test_ring *r, int c, int s)
{
	char *buf = malloc(URING_ECHO);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = URING_EPOLL_DATA }, got[4];
	int ep;

	CHECK(buf != NULL, ==, 1);
	pattern_fill(34, 0, buf, URING_ECHO);
	uring_send_all(r, c, buf, 4096);   /* what the kernel takes at once: one process sends and receives */
	memset(buf, 0, URING_ECHO);
	uring_recv_exact(r, s, buf, 4096);
	CHECK_PATTERN(34, 0, buf, 4096);
	pattern_fill(35, 0, buf, 4096);
	xwrite_all(s, buf, 4096);
	memset(buf, 0, 4096);
	uring_recv_exact(r, c, buf, 4096);
	CHECK_PATTERN(35, 0, buf, 4096);

	ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	uring_epoll_ctl(r, ep, EPOLL_CTL_ADD, s, &ev);
	xwrite_all(c, "late", 4);
	CHECK(epoll_wait(ep, got, 4, NET_WAIT_MS), ==, 1);
	CHECK(got[0].data.u64 == URING_EPOLL_DATA, ==, 1);
	xread_exact(s, buf, 4);
	CHECK(memcmp(buf, "late", 4), ==, 0);
	CHECK_OK(close(ep));
	expect_fallback(c, "io_uring");
	expect_fallback(s, "io_uring");
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	free(buf);
}

#endif
