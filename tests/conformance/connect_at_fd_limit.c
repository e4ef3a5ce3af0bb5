/* connect_at_fd_limit: a fresh process makes one connection, then fills its fd numbers
 * until only one is free, which becomes a client socket that connects to a server that
 * speaks first; the client reads exactly the server's bytes each time, as without shunt. Under shunt the connect has no fd left to look anything up with (in the
 * fabric modes the boot's tag, read from a file the first time), so it may not be
 * accelerated, but it must never promise the server (on its SYN) that it will take off a
 * greeting it then cannot: the fabric's hello reached the program as bytes so (its first
 * byte, 0xFE, was what emfile_count's client read). Several rounds, each in a new image
 * (without SHUNT_STRICT: such a connection is kernel TCP by design, reason fabric_no_fd in
 * the fabric modes, where no fd is left to check the server's proof with). */
#include "check.h"
#include "net.h"

#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define ROUNDS 4
#define LIMIT 64

static const char greeting[] = "server speaks first";

/* The fresh image: every number below LIMIT taken but one, which the socket gets. */
static int client(int port)
{
	struct rlimit rl = { LIMIT, LIMIT };
	struct sockaddr_storage ss;
	socklen_t len = loopback_addr(AF_INET, port, &ss);
	char buf[sizeof greeting] = { 0 };
	int last = -1, fd;

	/* a first connection: whatever the process sets up once is set up */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK_OK(fd);
	CHECK_OK(connect(fd, (struct sockaddr *)&ss, len));
	CHECK(read_exact(fd, buf, sizeof greeting - 1), ==, (ssize_t)(sizeof greeting - 1));
	CHECK(memcmp(buf, greeting, sizeof greeting - 1), ==, 0);
	CHECK_OK(close(fd));

	CHECK_OK(setrlimit(RLIMIT_NOFILE, &rl));
	for (;;) {
		int d = open("/dev/null", O_RDONLY | O_CLOEXEC);

		if (d < 0) {
			CHECK(errno, ==, EMFILE);
			break;
		}
		last = d;
	}
	CHECK(last, >=, 0);
	CHECK_OK(close(last));
	fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd, ==, last);
	CHECK_OK(connect(fd, (struct sockaddr *)&ss, len));
	CHECK(read_exact(fd, buf, sizeof greeting - 1), ==, (ssize_t)(sizeof greeting - 1));
	CHECK(memcmp(buf, greeting, sizeof greeting - 1), ==, 0);
	CHECK(write(fd, "ok", 2), ==, 2);
	CHECK(read(fd, buf, 1), ==, 0);   /* the server's close: nothing more */
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--client") == 0)
		return client(atoi(argv[2]));
	for (int r = 0; r < ROUNDS; r++) {
		int port, lfd = tcp_listen(AF_INET, &port), s, st;
		char p[16], buf[2];
		pid_t pid;

		snprintf(p, sizeof p, "%d", port);
		fflush(NULL);
		pid = CHECK_OK(fork());
		if (pid == 0) {
			/* at the limit shunt may have no fd for its own part of a connection: kernel
			 * TCP by design, which SHUNT_STRICT would fail (as emfile_count's no-room case) */
			setenv("SHUNT_STRICT", "0", 1);
			execl("/proc/self/exe", argv[0], "--client", p, (char *)NULL);
			_exit(127);
		}
		s = CHECK_OK(accept(lfd, NULL, NULL));   /* the first */
		xwrite_all(s, greeting, sizeof greeting - 1);
		CHECK_OK(close(s));
		s = CHECK_OK(accept(lfd, NULL, NULL));   /* the one at the limit */
		xwrite_all(s, greeting, sizeof greeting - 1);
		xread_exact(s, buf, 2);
		CHECK(memcmp(buf, "ok", 2), ==, 0);
		CHECK_OK(close(s));
		CHECK_OK(close(lfd));
		CHECK(waitpid(pid, &st, 0), ==, pid);
		CHECK(WIFEXITED(st), ==, 1);
		CHECK(WEXITSTATUS(st), ==, 0);
	}
	PASS();
}
