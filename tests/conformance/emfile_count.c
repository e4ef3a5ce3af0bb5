/* emfile_count: a program gets EMFILE at the same count of fds as without shunt, whatever its
 * limit, with waits that sleep.
 *
 * shunt keeps fds of its own (the local wake, an eventfd made at a thread's first sleep in the
 * kernel; wake FIFOs; copies of sockets closed while calls wait). Placed near the top of the
 * program's range they took numbers the program would have had: a blocking client under
 * `ulimit -n 64` got EMFILE one connection early. Each case, in a child of its own: the
 * soft limit is LIMIT (with the hard limit left above it, and then equal to it, as `ulimit -n`
 * sets both); the child counts the numbers free below it, then connects until socket() fails
 * with EMFILE, each connection waiting in a blocking recv for a byte the server sends only
 * 20 ms after its accept (so the wait sleeps). It must make exactly as many connections as
 * numbers were free, and every byte must arrive. When the hard limit leaves shunt no room, a
 * connection made with the last number may fall back to kernel TCP (its segment needs an fd
 * for a moment): so that case runs without SHUNT_STRICT. On the fabric engine (whose fds, UCX's,
 * go above the limit too) with no room, and so small a limit, the connections are kernel TCP by
 * design (reason fabric_no_room); before, EMFILE came 11 connections early there (44 over UCX's
 * TCP lanes, a socket per peer), and with room too. */
#include "check.h"
#include "net.h"

#include <stdbool.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define LIMIT 64
#define SERVE_MAX 256

static void serve(int lfd)
{
	int kept[SERVE_MAX];
	int n = 0;
	for (;;) {
		int s = accept(lfd, NULL, NULL);
		if (s < 0)
			_exit(errno == EINVAL ? 0 : 2);   /* shut down: done */
		sleep_ms(20);
		char b = 'x';
		if (send(s, &b, 1, MSG_NOSIGNAL) != 1)
			_exit(3);
		if (n < SERVE_MAX)
			kept[n++] = s;
		else
			close(s);
	}
	(void)kept;
}

static int free_below(int limit)
{
	int n = 0;
	for (int fd = 0; fd < limit; fd++)
		if (fcntl(fd, F_GETFD) == -1 && errno == EBADF)
			n++;
	return n;
}

/* On the fabric with no room above the limit: the engine's fds would take the program's
 * numbers, so the connection is kernel TCP by design, and says why. */
static void expect_no_room(int fd)
{
	const char *r = fallback_of(fd);
	if (r == NULL || strcmp(r, "fabric_no_room") != 0)
		FAIL("no room: fd %d's reason is %s, not fabric_no_room", fd, r ? r : "(none)");
}

/* The client, in a child: returns through its exit status (0 pass). */
static void client(int port, bool room)
{
	struct rlimit rl;
	CHECK_OK(getrlimit(RLIMIT_NOFILE, &rl));
	if (room && rl.rlim_max != RLIM_INFINITY && rl.rlim_max <= LIMIT)
		MISSING("a hard fd limit above %d", LIMIT);
	rl.rlim_cur = LIMIT;
	if (!room)
		rl.rlim_max = LIMIT;
	CHECK_OK(setrlimit(RLIMIT_NOFILE, &rl));
	int want = free_below(LIMIT);
	int made = 0;
	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0) {
			CHECK(errno, ==, EMFILE);
			break;
		}
		struct sockaddr_storage ss;
		socklen_t len = loopback_addr(AF_INET, port, &ss);
		CHECK_OK(connect(fd, (struct sockaddr *)&ss, len));
		char b = 0;
		CHECK(recv(fd, &b, 1, 0), ==, 1);   /* sleeps: the byte comes 20 ms after the accept */
		CHECK(b, ==, 'x');
		if (made == 0 && room)
			expect_accelerated(fd);
		if (made == 0 && !room && test_mode() == TEST_MODE_FABRIC)
			expect_no_room(fd);
		made++;
		CHECK(made, <=, LIMIT);
	}
	if (made != want)
		FAIL("%s: %d connections before EMFILE, %d numbers were free below %d",
		     room ? "hard limit above" : "hard limit equal", made, want, LIMIT);
	printf("%s: %d connections, as many as free numbers\n", room ? "room above" : "no room", made);
	exit(0);
}

int main(int argc, char **argv)
{
	bool room = argc < 2 || strcmp(argv[1], "no-room") != 0;
	if (argc < 2) {
		/* the case without room runs without SHUNT_STRICT, in a program of its own */
		pid_t pid = fork();
		CHECK(pid, >=, 0);
		if (pid == 0) {
			unsetenv("SHUNT_STRICT");
			setenv("SHUNT_STRICT", "0", 1);
			execl("/proc/self/exe", argv[0], "no-room", (char *)NULL);
			_exit(127);
		}
		int st;
		CHECK(waitpid(pid, &st, 0), ==, pid);
		CHECK(WIFEXITED(st), ==, 1);
		if (WEXITSTATUS(st) == TEST_EXIT_SKIP)
			return TEST_EXIT_SKIP;
		CHECK(WEXITSTATUS(st), ==, 0);
	}
	int port;
	int lfd = tcp_listen_backlog(AF_INET, 128, &port);
	pid_t server = fork();
	CHECK(server, >=, 0);
	if (server == 0)
		serve(lfd);
	close(lfd);
	pid_t c = fork();
	CHECK(c, >=, 0);
	if (c == 0)
		client(port, room);
	int st;
	CHECK(waitpid(c, &st, 0), ==, c);
	kill(server, SIGKILL);
	waitpid(server, NULL, 0);
	CHECK(WIFEXITED(st), ==, 1);
	return WEXITSTATUS(st);
}
