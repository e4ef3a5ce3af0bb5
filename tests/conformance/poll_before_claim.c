/* poll_before_claim: a client that waits in poll or select right after connect, before the
 * server has accepted, is woken only when there is something to read, as without shunt.
 *
 * Under shunt a client's connection is offered until the server claims it in accept, and the
 * server then sends one doorbell over TCP, so that a client already waiting in the kernel moves
 * to the channel. A poll or select whose set held no accelerated socket returned the kernel's
 * answer as it was: "readable" for that doorbell. A program that then read a blocking socket
 * (socat: select on stdin and the socket, then read) blocked in recv for data nobody had sent,
 * and never saw its stdin's EOF. Here the server accepts after ACCEPT_MS and sends after
 * SEND_MS; the client waits in poll (a pipe beside the socket, as socat has stdin), then in
 * select, and whatever they report readable must be readable: recv with MSG_DONTWAIT returns
 * the byte, never EAGAIN. */
#include "check.h"
#include "net.h"

#include <poll.h>
#include <sys/select.h>
#include <sys/wait.h>

#define ACCEPT_MS 150
#define SEND_MS 300
#define ROUNDS 4

/* The server side: accept after a while, send one byte later, wait for the client's answer. */
static void serve(int lfd)
{
	sleep_ms(ACCEPT_MS);
	int s = accept(lfd, NULL, NULL);
	if (s < 0)
		_exit(2);
	sleep_ms(SEND_MS - ACCEPT_MS);
	char b = 'x';
	if (send(s, &b, 1, 0) != 1)
		_exit(3);
	if (recv(s, &b, 1, 0) != 1 || b != 'y')   /* the client saw it */
		_exit(4);
	expect_accelerated(s);
	close(s);
	_exit(0);
}

static int connect_to(int port)
{
	struct sockaddr_storage ss;
	socklen_t len = loopback_addr(AF_INET, port, &ss);
	int fd = CHECK_OK(socket(AF_INET, SOCK_STREAM, 0));
	CHECK_OK(connect(fd, (struct sockaddr *)&ss, len));   /* queued in the backlog: no accept yet */
	return fd;
}

static void round_trip(int round)
{
	int port;
	int lfd = tcp_listen(AF_INET, &port);
	pid_t pid = fork();
	CHECK(pid, >=, 0);
	if (pid == 0)
		serve(lfd);
	close(lfd);
	int c = connect_to(port);
	int pipefd[2];
	CHECK_OK(pipe(pipefd));
	double t0 = now_sec();
	int ready;
	if (round % 2 == 0) {
		struct pollfd p[2] = { { .fd = pipefd[0], .events = POLLIN }, { .fd = c, .events = POLLIN } };
		ready = poll(p, 2, 5000);
		CHECK(ready, ==, 1);
		CHECK(p[0].revents, ==, 0);
		CHECK(p[1].revents & POLLIN, ==, POLLIN);
	} else {
		fd_set r;
		FD_ZERO(&r);
		FD_SET(pipefd[0], &r);
		FD_SET(c, &r);
		struct timeval tv = { 5, 0 };
		ready = select((c > pipefd[0] ? c : pipefd[0]) + 1, &r, NULL, NULL, &tv);
		CHECK(ready, ==, 1);
		CHECK(FD_ISSET(pipefd[0], &r), ==, 0);
		CHECK(FD_ISSET(c, &r), !=, 0);
	}
	/* what was reported readable is readable: the server's byte, not a doorbell */
	char b = 0;
	ssize_t r = recv(c, &b, 1, MSG_DONTWAIT);
	if (r != 1)
		fprintf(stderr, "round %d: woken after %.0f ms, recv gave %zd (errno %d), expected the byte sent at %d ms\n",
			round, (now_sec() - t0) * 1000, r, errno, SEND_MS);
	CHECK(r, ==, 1);
	CHECK(b, ==, 'x');
	CHECK(now_sec() - t0, >=, (SEND_MS - 50) / 1000.0);
	expect_accelerated(c);
	b = 'y';
	CHECK(send(c, &b, 1, 0), ==, 1);
	int st;
	CHECK(waitpid(pid, &st, 0), ==, pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, ==, 1);
	close(c);
	close(pipefd[0]);
	close(pipefd[1]);
}

int main(void)
{
	for (int i = 0; i < ROUNDS; i++)
		round_trip(i);
	return TEST_EXIT_PASS;
}
