/* procs_shutdown_blocked: one process shuts down a socket while ANOTHER process holding the
 * same socket (forked) is blocked on it, as Linux answers: the shutdown wakes it at once.
 *   - shutdown(SHUT_RD) (or SHUT_RDWR) wakes a blocked recv, which returns 0;
 *   - shutdown(SHUT_WR) wakes a send blocked on a full buffer, which fails with EPIPE;
 *   - shutdown(SHUT_RD) wakes a poll, with POLLIN | POLLRDHUP.
 * Accelerated: nothing comes from the peer, so only shunt's wake across processes can end
 * the child's wait. */
#include "check.h"
#include "net.h"
#include "shutdown_wake.h"

enum blocked_in { IN_RECV, IN_SEND, IN_POLL };

static int child(int fd, enum blocked_in in)
{
	static char buf[64 * 1024];
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };

	switch (in) {
	case IN_RECV:
		CHECK(recv(fd, buf, sizeof buf, 0), ==, 0);
		break;
	case IN_SEND:
		CHECK_ERRNO(send(fd, buf, sizeof buf, MSG_NOSIGNAL), EPIPE);
		break;
	case IN_POLL:
		CHECK(poll(&p, 1, 10000), ==, 1);
		CHECK(p.revents, ==, POLLIN | POLLRDHUP);
		break;
	}
	return 0;
}

static void one(enum blocked_in in, int how)
{
	int c, s;
	pid_t pid;

	tcp_pair_checked(AF_INET, &c, &s);
	if (in == IN_SEND)
		xfill(c);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		alarm(20);
		_exit(child(c, in));
	}
	shutdown_wakes_child(pid, c, how);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

int main(void)
{
	alarm(60);
	one(IN_RECV, SHUT_RD);
	one(IN_RECV, SHUT_RDWR);
	one(IN_SEND, SHUT_WR);
	one(IN_POLL, SHUT_RD);
	one(IN_RECV, SHUT_RD);   /* the wake was emptied: it works again */
	PASS();
}
