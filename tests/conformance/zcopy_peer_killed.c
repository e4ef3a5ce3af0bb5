/* zcopy_peer_killed: a peer killed in the middle of large (single-copy sized) transfers.
 * A sender killed while its send is in flight: the receiver gets every byte in order up to
 * some point, then EOF or ECONNRESET, never other bytes and never a hang. A receiver
 * killed while the sender is blocked in a large send: the send returns (a count, EPIPE or
 * ECONNRESET) and the next ones fail; nothing hangs. */
#include "check.h"
#include "settings.h"
#include "net.h"

#define BIG (8u * 1024 * 1024)
#define SEED 93

static char buf[BIG];

static void sender_killed(void)
{
	int c, s;
	pid_t pid;
	uint64_t off = 0;

	tcp_pair_checked(AF_INET, &c, &s);
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(s));
		for (uint64_t o = 0;; o += BIG) {
			pattern_fill(SEED, o, buf, BIG);
			CHECK(write_all(c, buf, BIG), ==, (ssize_t)BIG);
		}
	}
	CHECK_OK(close(c));
	while (off < 3ull * BIG) {
		ssize_t n = read(s, buf, BIG);

		CHECK(n, >, 0);
		CHECK_PATTERN(SEED, off, buf, (size_t)n);
		off += (uint64_t)n;
	}
	CHECK_OK(kill(pid, SIGKILL));
	CHECK(waitpid(pid, NULL, 0), ==, pid);
	for (;;) {
		ssize_t n = read(s, buf, BIG);

		if (n == 0)
			break;
		if (n < 0) {
			CHECK(errno, ==, ECONNRESET);
			break;
		}
		CHECK_PATTERN(SEED, off, buf, (size_t)n);
		off += (uint64_t)n;
	}
	CHECK_OK(close(s));
}

static void receiver_killed(void)
{
	int c, s, pp[2];
	pid_t pid;
	char go;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(pp));
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(c));
		/* read a little, tell the parent, then die without reading the rest */
		xread_exact(s, buf, 1000);
		CHECK(write(pp[1], "x", 1), ==, 1);
		sleep_ms(50);
		raise(SIGKILL);
	}
	CHECK_OK(close(s));
	CHECK_OK(close(pp[1]));
	signal(SIGPIPE, SIG_IGN);
	pattern_fill(SEED, 0, buf, BIG);
	int failures = 0;
	for (int i = 0; i < 64 && failures < 2; i++) {
		ssize_t n = send(c, buf, BIG, 0);

		if (n < 0) {
			CHECK(errno == EPIPE || errno == ECONNRESET, ==, 1);
			failures++;
		}
		if (i == 0)
			CHECK(read(pp[0], &go, 1), ==, 1);
	}
	CHECK(failures, ==, 2);
	CHECK(waitpid(pid, NULL, 0), ==, pid);
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(c));
}

int main(void)
{
	/* single copy is off by default (docs/benchmarks.md, the sweep): on at its old default */
	test_setting("SHUNT_ZCOPY_THRESHOLD", "256K");
	sender_killed();
	receiver_killed();
	PASS();
}
