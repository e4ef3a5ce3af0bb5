/* fork_engine_busy: a process whose connection rides the fabric engine forks, and the child
 * makes a connection of its own to a server in another process: every byte of it arrives, both
 * ways, and the parent's connection goes on after the fork, as without shunt.
 *
 * In the fabric modes the parent's engine is in use at the fork (its connection's ring stays
 * mapped). Over UCX's TCP lanes a child forked then cannot have an engine a peer could reach
 * (UCX accepts those lanes' connections in a thread of its own, which the child does not have
 * while the memory it copied says it runs): its connection is kernel TCP by design, reason
 * fabric_fork_busy. Before, the child opened such an engine, its peer's puts timed out after 5 s
 * and its stream broke. On the shared-memory lanes the child's connection rides an engine of
 * its own. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/wait.h>

#define BYTES (96 * 1024)

/* Echoes one connection until its end. */
static void *echo(void *arg)
{
	int s = (int)(intptr_t)arg;
	char buf[8192];

	for (;;) {
		ssize_t n = recv(s, buf, sizeof(buf), 0);

		if (n <= 0)
			break;
		xwrite_all(s, buf, (size_t)n);
	}
	close(s);
	return NULL;
}

/* The server, in a process of its own: a thread per connection. */
static void serve(int lfd)
{
	for (;;) {
		int s = accept(lfd, NULL, NULL);
		pthread_t t;

		if (s < 0)
			_exit(2);
		CHECK(pthread_create(&t, NULL, echo, (void *)(intptr_t)s), ==, 0);
		CHECK(pthread_detach(t), ==, 0);
	}
}

/* Sends BYTES of the pattern seed and reads them back, checked, in pieces. */
static void round_trip(int fd, uint64_t seed)
{
	static char out[BYTES], in[BYTES];

	pattern_fill(seed, 0, out, sizeof(out));
	for (size_t off = 0; off < sizeof(out); off += 8192) {
		xwrite_all(fd, out + off, 8192);
		xread_exact(fd, in + off, 8192);
	}
	CHECK(pattern_mismatch(seed, 0, in, sizeof(in)), ==, -1);
}

static void child(int port)
{
	int fd = tcp_connect(AF_INET, port);
	const char *lanes = getenv("SHUNT_FABRIC_LANES");

	round_trip(fd, 2);
	if (test_mode() == TEST_MODE_FABRIC && lanes && strcmp(lanes, "tcp") == 0) {
		const char *r = fallback_of(fd);

		if (r == NULL || strcmp(r, "fabric_fork_busy") != 0)
			FAIL("the child's connection: reason %s, not fabric_fork_busy", r ? r : "(none)");
	} else {
		expect_accelerated(fd);
	}
	CHECK_OK(close(fd));
	exit(0);
}

int main(void)
{
	int port, lfd = tcp_listen(AF_INET, &port);
	pid_t server = CHECK_OK(fork());

	if (server == 0)
		serve(lfd);
	CHECK_OK(close(lfd));

	int fd = tcp_connect(AF_INET, port);

	round_trip(fd, 1);
	expect_accelerated(fd);

	pid_t pid = CHECK_OK(fork());

	if (pid == 0)
		child(port);
	xwait_child_ok(pid);
	round_trip(fd, 3);   /* the parent's connection after the fork */
	CHECK_OK(close(fd));
	kill(server, SIGKILL);
	waitpid(server, NULL, 0);
	PASS();
}
