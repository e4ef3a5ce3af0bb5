/* procs_shutdown_epoll: one process shuts a socket down while ANOTHER process holding the same
 * socket sleeps in epoll_wait (epoll_pwait, epoll_pwait2) on it, as Linux answers: the
 * shutdown wakes the wait at once, with the events the socket has then:
 *   - SHUT_RD: EPOLLIN | EPOLLRDHUP; SHUT_RDWR: EPOLLIN | EPOLLRDHUP | EPOLLHUP;
 *   - SHUT_WR on a socket whose buffer is full (the peer reads nothing): EPOLLOUT;
 * level-triggered and EPOLLET, through an epoll set nested in another and through poll on
 * the epoll fd, also after the waiting process closed every fd above its own (close_range,
 * closefrom); the holder got the socket by fork or by SCM_RIGHTS; and the set's member had
 * already been idle in a wait (cold) before the socket became shared by a fork, by sending it
 * or by posix_spawn of a program that inherits it, with the waiting process the one that made
 * it shared.
 * Accelerated: nothing comes from the peer, so only shunt's wake across processes can end
 * the wait. */
#include "check.h"
#include "net.h"
#include "scm.h"
#include "shutdown_wake.h"

#include <linux/close_range.h>
#include <spawn.h>

extern char **environ;

#define DATA_OF(fd) ((uint64_t)(fd) + 1000)

static void add(int epfd, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u64 = DATA_OF(fd) };

	CHECK_OK(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev));
}

/* One wait of the kind v: the shutdown must end it, with these events. */
static void wait_for(int epfd, enum variant v, uint32_t expect, uint64_t data)
{
	struct epoll_event ev;

	CHECK(epoll_wait_as(epfd, v, &ev), ==, 1);
	CHECK(ev.events, ==, expect);
	CHECK(ev.data.u64, ==, data);
}

/* A forked child makes a set, adds the socket and sleeps; the parent shuts it down. */
static void forked(int how, uint32_t et, enum variant v)
{
	int c, s, epfd;
	pid_t pid;

	tcp_pair_checked(AF_INET, &c, &s);
	if (how == SHUT_WR)
		xfill(c);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		alarm(20);
		epfd = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
		add(epfd, c, shutdown_wanted(how) | et);
		wait_for(epfd, v, v == V_POLL ? POLLIN : shutdown_events(how), v == V_POLL ? (uint64_t)epfd : DATA_OF(c));
		_exit(0);
	}
	shutdown_wakes_child(pid, c, how);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

/* The same, the child's set sitting in another set of the child. */
static void forked_nested(void)
{
	int c, s, inner, outer;
	pid_t pid;

	tcp_pair_checked(AF_INET, &c, &s);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		alarm(20);
		inner = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
		outer = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
		add(inner, c, EPOLLIN | EPOLLRDHUP);
		add(outer, inner, EPOLLIN);
		wait_for(outer, V_WAIT, EPOLLIN, DATA_OF(inner));
		_exit(0);
	}
	shutdown_wakes_child(pid, c, SHUT_RD);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

/* The same, the child having closed every fd above its own (close_range, closefrom) after
 * its set had the socket idle in a wait. */
static void forked_closefrom(int use_close_range)
{
	struct epoll_event ev;
	int c, s, epfd;
	pid_t pid;

	tcp_pair_checked(AF_INET, &c, &s);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		alarm(20);
		epfd = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
		add(epfd, c, EPOLLIN | EPOLLRDHUP);
		CHECK(epoll_wait(epfd, &ev, 1, 20), ==, 0);
		int above = (epfd > c ? epfd : c) + 1;

		if (use_close_range)
			CHECK_OK(close_range((unsigned)above, ~0U, 0));
		else
			closefrom(above);
		wait_for(epfd, V_WAIT, EPOLLIN | EPOLLRDHUP, DATA_OF(c));
		_exit(0);
	}
	shutdown_wakes_child(pid, c, SHUT_RD);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

/* The socket reaches a process that was forked before it existed, by SCM_RIGHTS. */
static void received(void)
{
	int u[2], c, s, got, epfd;
	pid_t pid;

	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, u));
	pid = CHECK_OK(fork());
	if (pid == 0) {
		alarm(20);
		CHECK_OK(close(u[0]));
		got = recv_fd_flags(u[1], 0);
		expect_accelerated(got);
		epfd = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
		add(epfd, got, EPOLLIN | EPOLLRDHUP | EPOLLET);
		wait_for(epfd, V_WAIT, EPOLLIN | EPOLLRDHUP, DATA_OF(got));
		_exit(0);
	}
	CHECK_OK(close(u[1]));
	tcp_pair_checked(AF_INET, &c, &s);
	send_fd(u[0], c);
	shutdown_wakes_child(pid, c, SHUT_RD);
	CHECK_OK(close(u[0]));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

/* The child of cold_then_shared: shuts the socket down once told to, then waits for the
 * parent to be done. */
static int shutter(int u, int fd)
{
	char go;

	CHECK(read(u, &go, 1), ==, 1);
	sleep_ms(300);   /* the parent sleeps in its wait by now */
	CHECK_OK(shutdown(fd, SHUT_RD));
	CHECK(read(u, &go, 1), ==, 0);
	return 0;
}

enum sharing { BY_FORK, BY_SCM, BY_SPAWN };

/* This process's set had the socket idle in a wait before the socket became shared (by a
 * fork, by sending it to a process forked before it existed, or by posix_spawn of a program
 * that inherits it): then this process waits, and the other one shuts it down. */
static void cold_then_shared(const char *self, enum sharing by)
{
	struct epoll_event ev;
	int u[2], c, s, epfd, status;
	pid_t pid = -1;
	char go = 'g';
	double t0;

	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, u));
	if (by == BY_SCM) {
		pid = CHECK_OK(fork());
		if (pid == 0) {
			alarm(20);
			CHECK_OK(close(u[0]));
			int got = recv_fd_flags(u[1], 0);

			expect_accelerated(got);
			_exit(shutter(u[1], got));
		}
	}
	tcp_pair_checked(AF_INET, &c, &s);
	epfd = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	add(epfd, c, EPOLLIN | EPOLLRDHUP);
	for (int i = 0; i < 3; i++)   /* nothing to report: the member goes idle */
		CHECK(epoll_wait(epfd, &ev, 1, 20), ==, 0);
	if (by == BY_FORK) {
		pid = CHECK_OK(fork());
		if (pid == 0) {
			alarm(20);
			CHECK_OK(close(u[0]));
			_exit(shutter(u[1], c));
		}
	} else if (by == BY_SCM) {
		send_fd(u[0], c);
	} else {
		char ufd[16], cfd[16];
		char *args[] = { (char *)self, "--shutter", ufd, cfd, NULL };

		CHECK_OK(fcntl(u[0], F_SETFD, FD_CLOEXEC));
		snprintf(ufd, sizeof(ufd), "%d", u[1]);
		snprintf(cfd, sizeof(cfd), "%d", c);
		CHECK(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ), ==, 0);
	}
	CHECK_OK(close(u[1]));
	CHECK(write(u[0], &go, 1), ==, 1);
	t0 = now_sec();
	CHECK(epoll_wait(epfd, &ev, 1, 10000), ==, 1);
	if (now_sec() - t0 > 3.0)
		FAIL("the epoll wait was not woken by shutdown in another process (sharing %d)", (int)by);
	CHECK(ev.events, ==, EPOLLIN | EPOLLRDHUP);
	CHECK(ev.data.u64, ==, DATA_OF(c));
	CHECK_OK(close(u[0]));
	CHECK(waitpid(pid, &status, 0), ==, pid);
	CHECK(WIFEXITED(status), ==, 1);
	CHECK(WEXITSTATUS(status), ==, 0);
	CHECK_OK(close(epfd));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--shutter") == 0) {   /* the spawned program */
		alarm(20);
		expect_accelerated(atoi(argv[3]));
		return shutter(atoi(argv[2]), atoi(argv[3]));
	}
	alarm(120);
	FOR_EACH_SHUTDOWN_CASE(forked);
	forked(SHUT_RD, 0, V_POLL);
	forked_nested();
	forked_closefrom(1);
	forked_closefrom(0);
	received();
	cold_then_shared(argv[0], BY_FORK);
	cold_then_shared(argv[0], BY_SCM);
	cold_then_shared(argv[0], BY_SPAWN);
	forked(SHUT_RD, 0, V_WAIT);   /* nothing left over from the wakes before */
	PASS();
}
