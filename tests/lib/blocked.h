/*
 * blocked.h: a thread blocked in recv on a socket while the test's main thread acts on it
 * (shutdown, close), for the threads_* conformance tests.
 *
 * Owns: the record of the blocked call (struct blocked), the recv thread, and the check of
 * the kernel's answer to a close while that recv is under way (close_leaves_recv_waiting). Header-only; needs check.h
 * and net.h first, link with -pthread.
 */
#ifndef SHUNT_TESTS_BLOCKED_H
#define SHUNT_TESTS_BLOCKED_H

#include <pthread.h>

struct blocked {
	int fd;
	ssize_t ret;
	int err;
	char buf[64];
	int started;   /* the thread is about to make its call */
	int done;
};

static inline void *recv_blocked(void *arg)
{
	struct blocked *b = arg;

	errno = 0;
	__atomic_store_n(&b->started, 1, __ATOMIC_RELEASE);
	b->ret = recv(b->fd, b->buf, sizeof(b->buf), 0);
	b->err = errno;
	__atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static inline int finished(struct blocked *b)
{
	return __atomic_load_n(&b->done, __ATOMIC_ACQUIRE);
}

/* Waits until the thread is about to make its call, at most NET_WAIT_MS: on
 * a machine busy with other work a thread may not run for the 100 ms a test
 * then gives it to block (its recv came after the close: EBADF). */
static inline void wait_started(struct blocked *b)
{
	double end = now_sec() + NET_WAIT_MS / 1000.0;

	while (!__atomic_load_n(&b->started, __ATOMIC_ACQUIRE) && now_sec() < end)
		sleep_ms(1);
	CHECK(__atomic_load_n(&b->started, __ATOMIC_ACQUIRE), ==, 1);
}

/* Waits until the thread has ended, at most NET_WAIT_MS. */
static inline void wait_finished(struct blocked *b)
{
	double end = now_sec() + NET_WAIT_MS / 1000.0;

	while (!finished(b) && now_sec() < end)
		sleep_ms(5);
	CHECK(finished(b), ==, 1);
}

/* A thread blocks in recv(c) for 100 ms; close(c) does not wake it, the socket stays open
 * (no EOF at the peer s) until that recv returned the bytes s sends afterwards; then the
 * peer sees EOF. */
static inline void close_leaves_recv_waiting(void)
{
	struct blocked blk = { 0 }, *b = &blk;
	struct pollfd p;
	pthread_t th;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	b->fd = c;
	CHECK(pthread_create(&th, NULL, recv_blocked, b), ==, 0);
	wait_started(b);
	sleep_ms(100);
	CHECK(finished(b), ==, 0);
	CHECK_OK(close(c));
	sleep_ms(100);
	CHECK(finished(b), ==, 0);   /* close did not wake it */
	p = (struct pollfd){ .fd = s, .events = POLLIN | POLLRDHUP };
	CHECK(poll(&p, 1, 0), ==, 0);   /* the socket is still open: no EOF at the peer yet */
	xwrite_all(s, "late", 4);
	wait_finished(b);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(b->ret, ==, 4);
	CHECK(memcmp(b->buf, "late", 4), ==, 0);
	/* that recv was the socket's last user: now the peer sees EOF */
	p = (struct pollfd){ .fd = s, .events = POLLIN };
	CHECK(poll(&p, 1, NET_WAIT_MS), ==, 1);
	CHECK(recv(s, b->buf, sizeof(b->buf), 0), ==, 0);
	CHECK_OK(close(s));
}

#endif
