/* so_sndtimeo: with SO_SNDTIMEO of 200 ms and a peer that does not read, blocking sends
 * eventually return a short count or fail with EAGAIN, each only after about 200 ms; every
 * byte they accepted arrives once the peer reads. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define CHUNK (256 * 1024)
#define SEED 13

static int s;
static unsigned long long received;

static void *reader(void *arg)
{
	static char buf[CHUNK];

	(void)arg;
	for (;;) {
		ssize_t n = CHECK_OK(read(s, buf, sizeof(buf)));

		if (n == 0)
			return NULL;
		CHECK_PATTERN(SEED, received, buf, (size_t)n);
		received += (unsigned long long)n;
	}
}

int main(void)
{
	static char chunk[CHUNK];
	struct timeval tv = { 0, 200000 }, got;
	socklen_t len = sizeof(got);
	unsigned long long total = 0;
	int c, shorts = 0, eagains = 0;
	pthread_t th;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)));
	CHECK_OK(getsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &got, &len));
	CHECK(got.tv_usec, >=, 199000);
	CHECK(got.tv_usec, <=, 210000);

	while (eagains == 0) {
		double t0 = now_sec(), el;
		ssize_t n;

		pattern_fill(SEED, total, chunk, CHUNK);
		n = send(c, chunk, CHUNK, 0);
		el = now_sec() - t0;
		if (n == -1) {
			CHECK(errno, ==, EAGAIN);
			eagains++;
		} else {
			CHECK(n, >, 0);
			CHECK(n, <=, CHUNK);
			total += (unsigned long long)n;
			if (n == CHUNK)
				continue;
			shorts++;
		}
		if (el < 0.150 || el >= 5.0)
			FAIL("send returned %zd after %.3f s, expected about 0.200 s", n, el);
		if (total > 1024ULL * 1024 * 1024)
			FAIL("1 GiB accepted while the peer never reads");
	}
	CHECK(total, >, 0);

	CHECK(pthread_create(&th, NULL, reader, NULL), ==, 0);
	CHECK_OK(shutdown(c, SHUT_WR));
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(received, ==, total);
	fprintf(stderr, "%llu bytes, %d short sends\n", total, shorts);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
