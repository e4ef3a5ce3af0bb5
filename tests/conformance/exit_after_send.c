/* exit_after_send: bytes a send accepted are delivered even when the sending process exits
 * right after (its exit closes the connection): the peer, reading only once the sender is
 * gone, gets every byte in order, then EOF. */
#include "check.h"
#include "net.h"

#define LIMIT (1024 * 1024)
#define SEED 51

int main(void)
{
	static char buf[LIMIT + 1];
	long long sent = 0;
	int c, s, pp[2];
	pid_t pid;

	CHECK_OK(pipe(pp));
	tcp_pair_checked(AF_INET, &c, &s);
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(s));
		expect_accelerated(c);
		set_nonblocking(c, 1);
		pattern_fill(SEED, 0, buf, LIMIT);
		while (sent < LIMIT) {
			ssize_t n = write(c, buf + sent, (size_t)(LIMIT - sent));

			if (n == -1 && errno == EAGAIN)
				break;
			CHECK_OK(n);
			sent += n;
		}
		CHECK(write(pp[1], &sent, sizeof(sent)), ==, sizeof(sent));
		_exit(0); /* no close, no shutdown, no flush of anything */
	}
	CHECK_OK(close(c));
	CHECK_OK(close(pp[1]));
	CHECK(read(pp[0], &sent, sizeof(sent)), ==, sizeof(sent));
	xwait_child_ok(pid);
	CHECK(sent, >, 0);

	CHECK(read_exact(s, buf, LIMIT + 1), ==, sent);
	CHECK_PATTERN(SEED, 0, buf, (size_t)sent);
	CHECK(read(s, buf, 1), ==, 0);
	CHECK_OK(close(s));
	CHECK_OK(close(pp[0]));
	PASS();
}
