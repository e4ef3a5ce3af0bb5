/* exec_downgrade_both_prefix: both ends of an accelerated connection are handed to programs
 * without shunt, the client first, then the server before it ever read the bytes the client
 * sent before the accept (its TCP prefix, still queued in its socket). Before that, the
 * server made a large blocking send that went by single copy while the client read it slowly,
 * so the server waited for the client's progress with a doorbell asked for: a doorbell sent
 * then would sit behind the unread prefix, where no shunt can take it out without taking the
 * prefix too. Each new program must read exactly the application's bytes, in order, from where
 * its old image stopped (the server's: the prefix first), send the rest of its own stream, and
 * see EOF right after the other's last byte. */
#include "check.h"
#include "handoff.h"
#include "net.h"
#include "settings.h"

#include <stdlib.h>

#define ROUNDS 6
#define PREFIX 3000
#define BIG 300000          /* above the single-copy threshold set below */
#define PIECE 2048
#define AFTER 5000          /* sent by each new program */

static char buf[BIG];

/* The new program: sends out_total - out of its stream, reads in_total - in of the other's. */
static int plain_child(char **argv)
{
	int fd = atoi(argv[2]), notify = atoi(argv[9]);
	uint64_t seed_out = strtoull(argv[3], NULL, 10), seed_in = strtoull(argv[6], NULL, 10);
	size_t out = strtoull(argv[4], NULL, 10), total_out = strtoull(argv[5], NULL, 10);
	size_t in = strtoull(argv[7], NULL, 10), total_in = strtoull(argv[8], NULL, 10);

	expect_no_shunt();
	if (notify >= 0) {
		CHECK(write(notify, "r", 1), ==, 1);
		CHECK_OK(close(notify));
	}
	pattern_fill(seed_out, out, buf, total_out - out);
	xwrite_all(fd, buf, total_out - out);   /* small: the kernel's buffers hold it */
	CHECK_OK(shutdown(fd, SHUT_WR));
	xread_exact(fd, buf, total_in - in);
	CHECK_PATTERN(seed_in, in, buf, total_in - in);
	CHECK(read(fd, buf, 1), ==, 0);   /* nothing after the other's last byte */
	CHECK_OK(close(fd));
	return 0;
}

static void exec_plain(char *self, int fd, uint64_t seed_out, size_t out, size_t total_out,
		       uint64_t seed_in, size_t in, size_t total_in, int notify)
{
	char a[8][24];

	snprintf(a[0], sizeof(a[0]), "%d", fd);
	snprintf(a[1], sizeof(a[1]), "%llu", (unsigned long long)seed_out);
	snprintf(a[2], sizeof(a[2]), "%zu", out);
	snprintf(a[3], sizeof(a[3]), "%zu", total_out);
	snprintf(a[4], sizeof(a[4]), "%llu", (unsigned long long)seed_in);
	snprintf(a[5], sizeof(a[5]), "%zu", in);
	snprintf(a[6], sizeof(a[6]), "%zu", total_in);
	snprintf(a[7], sizeof(a[7]), "%d", notify);
	exec_self_without_shunt((char *[]){ self, "--plain-child", a[0], a[1], a[2], a[3], a[4], a[5],
					    a[6], a[7], NULL });
}

static void one_round(char *self, int round)
{
	uint64_t seed_c = 700 + 2 * (uint64_t)round, seed_s = seed_c + 1;
	size_t half = BIG / 2 + (size_t)round * 1000;
	int lfd, port, c, s, sent[2], ran[2];
	pid_t server, client;
	char x;

	lfd = tcp_listen(AF_INET, &port);
	c = tcp_connect(AF_INET, port);
	pattern_fill(seed_c, 0, buf, PREFIX);
	xwrite_all(c, buf, PREFIX);   /* before the accept: by TCP, the server's prefix */
	s = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK_OK(close(lfd));
	expect_accelerated(c);
	expect_accelerated(s);
	CHECK_OK(pipe2(sent, O_CLOEXEC));
	CHECK_OK(pipe2(ran, O_CLOEXEC));

	server = CHECK_OK(fork());
	if (server == 0) {
		CHECK_OK(close(c));
		pattern_fill(seed_s, 0, buf, BIG);
		xwrite_all(s, buf, BIG);   /* one blocking send: single copy, waiting on the reader */
		CHECK(write(sent[1], "s", 1), ==, 1);
		/* no call on s until the client's new program runs: then this end goes second */
		CHECK(read(ran[0], &x, 1), ==, 1);
		exec_plain(self, s, seed_s, BIG, BIG + AFTER, seed_c, 0, PREFIX + AFTER, -1);
	}
	client = CHECK_OK(fork());
	if (client == 0) {
		int fl;

		CHECK_OK(close(s));
		for (size_t in = 0; in < half;) {
			size_t n = half - in < PIECE ? half - in : PIECE;

			xread_exact(c, buf, n);
			CHECK_PATTERN(seed_s, in, buf, n);
			in += n;
			sleep_ms(1);   /* slow: the sender waits for us, a doorbell asked for */
		}
		CHECK(read(sent[0], &x, 1), ==, 1);
		fl = CHECK_OK(fcntl(ran[1], F_GETFD));
		CHECK_OK(fcntl(ran[1], F_SETFD, fl & ~FD_CLOEXEC));
		exec_plain(self, c, seed_c, PREFIX, PREFIX + AFTER, seed_s, half, BIG + AFTER, ran[1]);
	}
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	CHECK_OK(close(sent[0]));
	CHECK_OK(close(sent[1]));
	CHECK_OK(close(ran[0]));
	CHECK_OK(close(ran[1]));
	xwait_child_ok(client);
	xwait_child_ok(server);
}

int main(int argc, char **argv)
{
	if (argc == 10 && strcmp(argv[1], "--plain-child") == 0)
		return plain_child(argv);
	test_setting("SHUNT_ZCOPY_THRESHOLD", "65536");
	test_setting("SHUNT_SPIN_US", "0");   /* the sender asks for a doorbell at once */
	alarm(60);   /* inherited by the new programs: a stuck one ends too */
	for (int round = 0; round < ROUNDS; round++)
		one_round(argv[0], round);
	PASS();
}
