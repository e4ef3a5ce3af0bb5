/* fork_child_leaves_offer: a client that connects and forks before the server has accepted;
 * the child lets go of its copy of the socket (a close, or an exit without one) while the
 * offer is still pending. The parent's connection is the one the server accepts, and it is
 * accelerated: a copy's close is not the connection's. (Under shunt the last holder's close
 * of a pending offer settles it, and withdraws it if unclaimed; a child's close that did so
 * too took the acceleration from the parent.) */
#include "check.h"
#include "net.h"

static void one(int child_closes)
{
	int lfd, port, c, s;

	lfd = CHECK_OK(tcp_listen(AF_INET, &port));
	c = CHECK_OK(tcp_connect(AF_INET, port));
	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		if (child_closes)
			close(c);
		exit(0);
	}
	xwait_child_ok(pid);
	s = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK_OK(close(lfd));
	xexchange_both(c, s);
	expect_accelerated(c);
	expect_accelerated(s);
	CHECK_OK(close(c));
	CHECK(wait_fd(s, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	char b;
	CHECK(read(s, &b, 1), ==, 0);
	CHECK_OK(close(s));
	printf("child %s: ok\n", child_closes ? "closes" : "exits");
}

int main(void)
{
	one(1);
	one(0);
	PASS();
}
