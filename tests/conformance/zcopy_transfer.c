/* zcopy_transfer: large blocking sends (at and above the single-copy threshold, from one
 * buffer and from an iovec) arrive exactly, with a receiver thread of the same process that
 * reads them with MSG_PEEK first and then in small pieces (partial reads); the sender's
 * buffer is reused at once after each send returns. A non-blocking large send never waits
 * for the receiver: it returns part (or EAGAIN) while nobody reads. Accelerated: most bytes
 * went by single copy (the counter says so). */
#include "check.h"
#include "settings.h"
#include "net.h"

#include <pthread.h>

#define BIG (4u * 1024 * 1024)
#define ROUNDS 6
#define SEED 91

static int rfd;
static uint64_t expected_total;

static void *reader(void *arg)
{
	static char buf[256 * 1024];
	uint64_t off = 0;
	size_t piece = 1;

	(void)arg;
	while (off < expected_total) {
		/* a peek shows the next bytes without taking them */
		ssize_t p = recv(rfd, buf, 100, MSG_PEEK);

		CHECK(p, >, 0);
		CHECK_PATTERN(SEED, off, buf, (size_t)p);
		/* partial reads of growing and shrinking sizes */
		piece = piece * 7 % (sizeof buf) + 1;
		ssize_t n = read(rfd, buf, piece);

		CHECK(n, >, 0);
		CHECK_PATTERN(SEED, off, buf, (size_t)n);
		off += (uint64_t)n;
	}
	CHECK(off, ==, expected_total);
	return NULL;
}

int main(void)
{
	/* single copy is off by default (docs/benchmarks.md, the sweep): on at its old default */
	test_setting("SHUNT_ZCOPY_THRESHOLD", "256K");
	static char out[BIG];
	pthread_t th;
	int c, s;
	uint64_t off = 0;

	tcp_pair_checked(AF_INET, &c, &s);
	rfd = s;
	expected_total = (uint64_t)ROUNDS * BIG;
	CHECK(pthread_create(&th, NULL, reader, NULL), ==, 0);
	for (int r = 0; r < ROUNDS; r++) {
		pattern_fill(SEED, off, out, BIG);
		if (r % 2 == 0) {
			CHECK(write_all(c, out, BIG), ==, (ssize_t)BIG);
		} else {
			/* three pieces in one writev */
			struct iovec iov[3] = { { out, 1000 }, { out + 1000, BIG / 2 }, { out + 1000 + BIG / 2, BIG / 2 - 1000 } };
			ssize_t n = writev(c, iov, 3);

			CHECK(n, >, 0);
			if ((size_t)n < BIG)
				CHECK(write_all(c, out + n, BIG - (size_t)n), ==, (ssize_t)(BIG - (size_t)n));
		}
		/* the buffer may be reused as soon as the send returned */
		memset(out, 0xee, BIG);
		off += BIG;
	}
	CHECK(pthread_join(th, NULL), ==, 0);
	if (test_mode_accelerated())
		CHECK(shunt_counter(c, "zc_bytes"), >=, (long long)BIG);

	/* Nobody reads now: a non-blocking large send must come back without the reader. */
	set_nonblocking(c, 1);
	pattern_fill(SEED + 1, 0, out, BIG);
	uint64_t queued = 0;
	for (int i = 0; i < 64; i++) {
		ssize_t n = send(c, out, BIG, 0);

		if (n < 0) {
			CHECK(errno == EAGAIN || errno == EWOULDBLOCK, ==, 1);
			break;
		}
		CHECK(n, <=, (ssize_t)BIG);
		CHECK(n, >, 0);
		/* keep the stream a pattern: resend the rest from where it stopped */
		queued += (uint64_t)n;
		pattern_fill(SEED + 1, queued, out, BIG);
	}
	CHECK(queued, <, 64ull * BIG);
	/* what was accepted arrives exactly */
	static char in[BIG];
	uint64_t got = 0;
	while (got < queued) {
		size_t want = queued - got < BIG ? (size_t)(queued - got) : BIG;
		ssize_t n = read(s, in, want);

		CHECK(n, >, 0);
		CHECK_PATTERN(SEED + 1, got, in, (size_t)n);
		got += (uint64_t)n;
	}
	set_nonblocking(c, 0);
	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
