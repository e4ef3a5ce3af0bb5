/* nonblock_read_bound: non-blocking reads of an empty socket fail with EAGAIN, as the kernel's
 * do, however many are made. Under shunt (accelerated) such a loop leaves the kernel out: the
 * look at the connection's TCP socket that notices a peer killed without a word is made at most
 * once in SHUNT_POLL_KERNEL_CALLS reads (8 here, with SHUNT_POLL_KERNEL_US at a second so that
 * the count is what bounds), so the "os_polls_skipped" counter grows (before, every such read
 * made a recv of the kernel's, twice the cost of the kernel's own EAGAIN, and this test failed).
 * What the bound must not delay: data the peer sent is read at the first read after it is
 * queued; the peer's shutdown or close is 0 at once (its ring says so); a peer killed with
 * SIGKILL (only its TCP socket says so) is 0 within 8 reads. */
#include <signal.h>
#include <sys/wait.h>

#include "check.h"
#include "net.h"
#include "settings.h"
#include "shunt_query.h"

#define CALLS 8
#define LOOP 2000

/* Reads of s until one does not fail with EAGAIN: how many it took (fails past limit). */
static int reads_until_done(int s, char *buf, size_t len, ssize_t *got, int limit)
{
	for (int i = 1; i <= limit; i++) {
		*got = i % 2 ? recv(s, buf, len, MSG_DONTWAIT) : read(s, buf, len);
		if (*got >= 0)
			return i;
		CHECK(errno, ==, EAGAIN);
	}
	FAIL("no answer but EAGAIN within %d non-blocking reads", limit);
}

/* A child holds the peer's end c: on each byte of `cmd` it writes one byte ('w'), shuts
 * down ('s') or waits to be killed ('k'), and says so on `done`. */
static pid_t peer(int c, int s, int cmd[2], int done[2])
{
	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		close(s);
		close(cmd[1]);
		close(done[0]);
		char op;
		while (read(cmd[0], &op, 1) == 1) {
			if (op == 'w')
				xwrite_all(c, "d", 1);
			else if (op == 's')
				CHECK_OK(shutdown(c, SHUT_WR));
			xwrite_all(done[1], "!", 1);
			if (op == 'k')
				for (;;)
					pause();
		}
		_exit(0);
	}
	close(c);
	close(cmd[0]);
	close(done[1]);
	return pid;
}

static void order(int cmd[2], int done[2], char op)
{
	char b;

	xwrite_all(cmd[1], &op, 1);
	xread_exact(done[0], &b, 1);
}

int main(void)
{
	int c, s, cmd[2], done[2];
	char buf[16];
	ssize_t got;

	test_setting("SHUNT_POLL_KERNEL_CALLS", "8");
	test_setting("SHUNT_POLL_KERNEL_US", "1000000");

	/* a peer that writes, then shuts down */
	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(cmd));
	CHECK_OK(pipe(done));
	pid_t pid = peer(c, s, cmd, done);
	expect_accelerated(s);
	long long before = shunt_counter(s, "os_polls_skipped");
	for (int i = 0; i < LOOP; i++)
		CHECK_ERRNO(recv(s, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
	if (test_mode_accelerated())
		CHECK(shunt_counter(s, "os_polls_skipped") - before, >=, LOOP - LOOP / CALLS - 1);
	order(cmd, done, 'w');
	wait_queued(s, 1);
	CHECK(reads_until_done(s, buf, sizeof(buf), &got, CALLS), ==, 1);
	CHECK(got, ==, 1);
	CHECK(buf[0], ==, 'd');
	CHECK_ERRNO(recv(s, buf, sizeof(buf), MSG_DONTWAIT), EAGAIN);
	order(cmd, done, 's');
	CHECK(reads_until_done(s, buf, sizeof(buf), &got, CALLS), ==, 1);
	CHECK(got, ==, 0);
	close(cmd[1]);
	CHECK(waitpid(pid, NULL, 0), ==, pid);
	CHECK_OK(close(s));
	close(done[0]);

	/* a peer killed while we read nothing, in a loop */
	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(cmd));
	CHECK_OK(pipe(done));
	pid = peer(c, s, cmd, done);
	expect_accelerated(s);
	set_nonblocking(s, 1);
	for (int i = 0; i < LOOP; i++)
		CHECK_ERRNO(read(s, buf, sizeof(buf)), EAGAIN);
	order(cmd, done, 'k');
	CHECK_OK(kill(pid, SIGKILL));
	CHECK(waitpid(pid, NULL, 0), ==, pid);
	CHECK(reads_until_done(s, buf, sizeof(buf), &got, CALLS), <=, CALLS);
	CHECK(got, ==, 0);
	CHECK(recv(s, buf, sizeof(buf), MSG_DONTWAIT), ==, 0);
	CHECK_OK(close(s));
	close(cmd[1]);
	close(done[0]);
	PASS();
}
