/* poll_errors: one poll over accelerated sockets and pipes in different states reports each
 * condition exactly as the kernel does: POLLRDHUP after the peer's shutdown, POLLHUP once both
 * directions are shut, POLLERR|POLLHUP after a reset by the peer (SO_LINGER {1, 0}; POLLERR
 * gone once recv reported ECONNRESET), POLLHUP for a pipe without writers, POLLERR for a pipe
 * without readers, POLLNVAL for a closed fd number, nothing for an idle socket or fd -1;
 * POLLERR and POLLHUP also when not asked for; a poll sleeping on the set wakes on a reset
 * and on a hangup. */
#include "check.h"
#include "net.h"

#include <pthread.h>

enum { RDHUP, HUP, RESET, PIPE_HUP, PIPE_ERR, NVAL, IDLE, NEG, COUNT };

static int late_fd, late_kind;

static void reset_close(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	CHECK_OK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	CHECK_OK(close(fd));
}

static void *late(void *arg)
{
	(void)arg;
	sleep_ms(100);
	if (late_kind == 0)
		reset_close(late_fd);
	else
		CHECK_OK(close(late_fd));
	return NULL;
}

static int poll_all(struct pollfd *p, int n, int timeout_ms)
{
	for (int i = 0; i < n; i++)
		p[i].revents = (short)0x7fff;
	return CHECK_OK(poll(p, (nfds_t)n, timeout_ms));
}

int main(void)
{
	struct pollfd p[COUNT];
	int c[3], s[3], ci, si, in_pipe[2], out_pipe[2], dead, n;
	char buf[8];
	pthread_t th;

	for (int i = 0; i < 3; i++)
		tcp_pair_checked(AF_INET, &c[i], &s[i]);
	tcp_pair_checked(AF_INET, &ci, &si);
	CHECK_OK(pipe(in_pipe));
	CHECK_OK(pipe(out_pipe));
	dead = CHECK_OK(dup(si));
	CHECK_OK(close(dead));

	/* The states. */
	xwrite_all(c[RDHUP], "r", 1);
	CHECK_OK(shutdown(c[RDHUP], SHUT_WR));
	CHECK_OK(close(c[HUP]));
	CHECK_OK(shutdown(s[HUP], SHUT_WR));
	reset_close(c[RESET]);
	CHECK_OK(close(in_pipe[1]));
	CHECK_OK(close(out_pipe[0]));
	CHECK(wait_fd(s[RDHUP], POLLRDHUP, NET_WAIT_MS) & POLLRDHUP, ==, POLLRDHUP);
	CHECK(wait_fd(s[HUP], POLLRDHUP, NET_WAIT_MS) & POLLRDHUP, ==, POLLRDHUP);
	CHECK(wait_fd(s[RESET], POLLERR, NET_WAIT_MS) & POLLERR, ==, POLLERR);

	p[RDHUP] = (struct pollfd){ .fd = s[RDHUP], .events = POLLIN | POLLRDHUP };
	p[HUP] = (struct pollfd){ .fd = s[HUP], .events = POLLIN | POLLRDHUP };
	p[RESET] = (struct pollfd){ .fd = s[RESET], .events = POLLIN | POLLRDHUP };
	p[PIPE_HUP] = (struct pollfd){ .fd = in_pipe[0], .events = POLLIN };
	p[PIPE_ERR] = (struct pollfd){ .fd = out_pipe[1], .events = POLLOUT };
	p[NVAL] = (struct pollfd){ .fd = dead, .events = POLLIN };
	p[IDLE] = (struct pollfd){ .fd = si, .events = POLLIN | POLLRDHUP };
	p[NEG] = (struct pollfd){ .fd = -1, .events = POLLIN };
	CHECK(poll_all(p, COUNT, 0), ==, NVAL + 1);
	CHECK(p[RDHUP].revents, ==, POLLIN | POLLRDHUP);
	CHECK(p[HUP].revents, ==, POLLIN | POLLRDHUP | POLLHUP);
	CHECK(p[RESET].revents, ==, POLLIN | POLLRDHUP | POLLHUP | POLLERR);
	CHECK(p[PIPE_HUP].revents, ==, POLLHUP);
	CHECK(p[PIPE_ERR].revents, ==, POLLOUT | POLLERR);
	CHECK(p[NVAL].revents, ==, POLLNVAL);
	CHECK(p[IDLE].revents, ==, 0);
	CHECK(p[NEG].revents, ==, 0);

	/* Nothing asked for: the error conditions only. */
	for (int i = 0; i < COUNT; i++)
		p[i].events = 0;
	CHECK(poll_all(p, COUNT, 0), ==, NVAL + 1 - 1);
	CHECK(p[RDHUP].revents, ==, 0);
	CHECK(p[HUP].revents, ==, POLLHUP);
	CHECK(p[RESET].revents, ==, POLLHUP | POLLERR);
	CHECK(p[PIPE_HUP].revents, ==, POLLHUP);
	CHECK(p[PIPE_ERR].revents, ==, POLLERR);
	CHECK(p[NVAL].revents, ==, POLLNVAL);
	CHECK(p[IDLE].revents, ==, 0);

	/* The reset is reported once by recv; POLLERR goes with it. */
	CHECK_ERRNO(recv(s[RESET], buf, sizeof(buf), 0), ECONNRESET);
	p[RESET].events = POLLIN | POLLOUT | POLLRDHUP;
	CHECK(poll_all(&p[RESET], 1, 0), ==, 1);
	CHECK(p[RESET].revents, ==, POLLIN | POLLOUT | POLLRDHUP | POLLHUP);
	CHECK(recv(s[RESET], buf, sizeof(buf), 0), ==, 0);

	/* The data and EOF of the half-closed one. */
	xread_exact(s[RDHUP], buf, 1);
	p[RDHUP].events = POLLIN | POLLRDHUP;
	CHECK(poll_all(&p[RDHUP], 1, 0), ==, 1);
	CHECK(p[RDHUP].revents, ==, POLLIN | POLLRDHUP);
	CHECK(read(s[RDHUP], buf, sizeof(buf)), ==, 0);

	/* Sleeping on an idle socket and a pipe: a reset wakes it. */
	{
		int c2, s2, pp[2];
		struct pollfd q[2];

		CHECK_OK(pipe(pp));
		tcp_pair_checked(AF_INET, &c2, &s2);
		q[0] = (struct pollfd){ .fd = pp[0], .events = POLLIN };
		q[1] = (struct pollfd){ .fd = s2, .events = POLLIN };
		late_fd = c2;
		late_kind = 0;
		CHECK(pthread_create(&th, NULL, late, NULL), ==, 0);
		n = poll_all(q, 2, NET_WAIT_MS);
		CHECK(pthread_join(th, NULL), ==, 0);
		CHECK(n, ==, 1);
		CHECK(q[0].revents, ==, 0);
		CHECK(q[1].revents & (POLLERR | POLLHUP), ==, POLLERR | POLLHUP);
		CHECK_OK(close(s2));

		/* ...and a hangup (our side already shut). */
		tcp_pair_checked(AF_INET, &c2, &s2);
		CHECK_OK(shutdown(s2, SHUT_WR));
		q[1] = (struct pollfd){ .fd = s2, .events = POLLRDHUP };
		late_fd = c2;
		late_kind = 1;
		CHECK(pthread_create(&th, NULL, late, NULL), ==, 0);
		n = poll_all(q, 2, NET_WAIT_MS);
		CHECK(pthread_join(th, NULL), ==, 0);
		CHECK(n, ==, 1);
		CHECK(q[0].revents, ==, 0);
		CHECK(q[1].revents, ==, POLLRDHUP | POLLHUP);
		CHECK_OK(close(s2));
		CHECK_OK(close(pp[0]));
		CHECK_OK(close(pp[1]));
	}

	for (int i = 0; i < 3; i++)
		CHECK_OK(close(s[i]));
	CHECK_OK(close(c[RDHUP]));
	CHECK_OK(close(ci));
	CHECK_OK(close(si));
	CHECK_OK(close(in_pipe[0]));
	CHECK_OK(close(out_pipe[1]));
	PASS();
}
