/* kill_peer: a peer killed with SIGKILL.  Everything it sent before it died
 * is delivered, then EOF when it had read everything it was sent, or
 * ECONNRESET (once, then EOF) when data we sent was still unread in it. */
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

#include "check.h"
#include "net.h"

/* The child sends `n` bytes, says so with one byte on `note`, then waits
 * to be killed; if `unread`, we send it data it never reads. */
static void run(bool unread)
{
	int c, s, note[2];
	char buf[4096];

	CHECK_OK(pipe(note));
	tcp_pair_checked(AF_INET, &c, &s);
	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		close(s);
		close(note[0]);
		char data[3000];
		pattern_fill(7, 0, data, sizeof(data));
		xwrite_all(c, data, sizeof(data));
		xwrite_all(note[1], "k", 1);
		for (;;)
			pause();
	}
	close(c);
	close(note[1]);
	expect_accelerated(s);
	xread_exact(note[0], buf, 1);
	if (unread)
		xwrite_all(s, "never read", 10);
	CHECK_OK(kill(pid, SIGKILL));
	CHECK(waitpid(pid, NULL, 0), ==, pid);

	/* what arrived before the death comes first, whole */
	size_t got = 0;
	while (got < 3000) {
		ssize_t n = recv(s, buf + 0, sizeof(buf), 0);
		if (n <= 0)
			FAIL("data lost: %zd after %zu bytes (errno %d)", n, got, errno);
		CHECK_PATTERN(7, got, buf, (size_t)n);
		got += (size_t)n;
	}
	CHECK(got, ==, 3000);
	if (unread) {
		CHECK_ERRNO(recv(s, buf, sizeof(buf), 0), ECONNRESET);
		CHECK(recv(s, buf, sizeof(buf), 0), ==, 0);
	} else {
		CHECK(recv(s, buf, sizeof(buf), 0), ==, 0);
		CHECK(recv(s, buf, sizeof(buf), 0), ==, 0);
	}
	CHECK_OK(close(s));
	close(note[0]);
}

int main(void)
{
	run(false);
	run(true);
	PASS();
}
