/* cork_more: TCP_CORK and MSG_MORE. Corked pieces and MSG_MORE pieces arrive whole and in
 * order once the cork is removed or a send without MSG_MORE follows; TCP_CORK reads back as
 * set; a request sent with MSG_MORE and followed only by a wait for the answer still gets
 * its answer (a cork never stalls request-response). Accelerated: while corked, small
 * writes ring no doorbell at all, and a stream of 64-byte writes rings at most one doorbell
 * per sleep of the reader. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define PIECES 100
#define PIECE 64
#define SMALL_WRITES 20000

static int srv;

static void *echo_once(void *arg)
{
	char req[3];

	(void)arg;
	xread_exact(srv, req, 3);
	CHECK(memcmp(req, "abc", 3), ==, 0);
	CHECK(write(srv, "ok", 2), ==, 2);
	return NULL;
}

static void *drain(void *arg)
{
	static char buf[PIECE * 16];
	size_t total = *(size_t *)arg, got = 0;

	while (got < total) {
		ssize_t n = read(srv, buf, sizeof buf);

		CHECK(n, >, 0);
		CHECK_PATTERN(7, got, buf, (size_t)n);
		got += (size_t)n;
	}
	return NULL;
}

int main(void)
{
	char buf[PIECES * PIECE];
	int c, s, one = 1, zero = 0, v = 0;
	socklen_t len = sizeof v;
	pthread_t th;

	tcp_pair_checked(AF_INET, &c, &s);
	srv = s;

	/* TCP_CORK: pieces held, then all of them in order */
	CHECK_OK(setsockopt(c, IPPROTO_TCP, TCP_CORK, &one, sizeof one));
	CHECK_OK(getsockopt(c, IPPROTO_TCP, TCP_CORK, &v, &len));
	CHECK(v, ==, 1);
	long long bells = shunt_counter(c, "doorbells");
	pattern_fill(3, 0, buf, sizeof buf);
	for (int i = 0; i < PIECES; i++)
		CHECK(write(c, buf + i * PIECE, PIECE), ==, PIECE);
	CHECK(shunt_counter(c, "doorbells"), ==, bells);   /* -1 == -1 outside accelerated mode */
	CHECK_OK(setsockopt(c, IPPROTO_TCP, TCP_CORK, &zero, sizeof zero));
	memset(buf, 0, sizeof buf);
	xread_exact(s, buf, sizeof buf);
	CHECK_PATTERN(3, 0, buf, sizeof buf);

	/* MSG_MORE pieces, then one without it */
	pattern_fill(5, 0, buf, sizeof buf);
	for (int i = 0; i < PIECES - 1; i++)
		CHECK(send(c, buf + i * PIECE, PIECE, MSG_MORE), ==, PIECE);
	CHECK(send(c, buf + (PIECES - 1) * PIECE, PIECE, 0), ==, PIECE);
	memset(buf, 0, sizeof buf);
	xread_exact(s, buf, sizeof buf);
	CHECK_PATTERN(5, 0, buf, sizeof buf);

	/* request with MSG_MORE, then only a wait for the answer */
	CHECK(pthread_create(&th, NULL, echo_once, NULL), ==, 0);
	CHECK(send(c, "abc", 3, MSG_MORE), ==, 3);
	xread_exact(c, buf, 2);
	CHECK(memcmp(buf, "ok", 2), ==, 0);
	CHECK(pthread_join(th, NULL), ==, 0);

	/* many 64-byte writes: a doorbell only for a reader that went to sleep */
	size_t total = (size_t)SMALL_WRITES * PIECE;
	long long bells0 = shunt_counter(c, "doorbells"), sleeps0 = shunt_counter(s, "sleeps");
	CHECK(pthread_create(&th, NULL, drain, &total), ==, 0);
	for (size_t off = 0; off < total; off += PIECE) {
		char piece[PIECE];

		pattern_fill(7, off, piece, PIECE);
		CHECK(write(c, piece, PIECE), ==, PIECE);
	}
	CHECK(pthread_join(th, NULL), ==, 0);
	if (test_mode_accelerated()) {
		long long bells1 = shunt_counter(c, "doorbells"), sleeps1 = shunt_counter(s, "sleeps");

		fprintf(stderr, "%d writes: %lld doorbells, reader slept %lld times\n", SMALL_WRITES,
			bells1 - bells0, sleeps1 - sleeps0);
		CHECK(bells1 - bells0, <=, sleeps1 - sleeps0);
	}
	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
