/* partial_write: non-blocking writes into a socket whose peer does not read end in EAGAIN (or
 * a short count first); once the peer reads, all bytes ever accepted arrive in order, none
 * lost or repeated. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define CHUNK (64 * 1024)
#define MORE (8 * 1024 * 1024)
#define SEED 7

static int s;
static unsigned long long received;

static void *reader(void *arg)
{
	static char buf[CHUNK];

	(void)arg;
	for (;;) {
		ssize_t n = read(s, buf, sizeof(buf));

		if (n == -1 && errno == EINTR)
			continue;
		CHECK_OK(n);
		if (n == 0)
			return NULL;
		CHECK_PATTERN(SEED, received, buf, (size_t)n);
		received += (unsigned long long)n;
	}
}

int main(void)
{
	static char chunk[CHUNK];
	unsigned long long total = 0, first_full;
	int c, shorts = 0, eagains = 0;
	pthread_t th;

	tcp_pair_checked(AF_INET, &c, &s);
	set_nonblocking(c, 1);

	/* Phase 1: nobody reads; the send path must fill up. */
	for (;;) {
		ssize_t n;

		pattern_fill(SEED, total, chunk, CHUNK);
		n = write(c, chunk, CHUNK);
		if (n == -1) {
			CHECK(errno, ==, EAGAIN);
			eagains++;
			break;
		}
		CHECK(n, >, 0);
		CHECK(n, <=, CHUNK);
		if (n < CHUNK)
			shorts++;
		total += (unsigned long long)n;
		if (total > 1024ULL * 1024 * 1024)
			FAIL("1 GiB accepted by a non-blocking socket whose peer never reads");
	}
	CHECK(total, >, 0);
	first_full = total;

	/* Phase 2: the peer reads; keep writing through EAGAIN and short writes. */
	CHECK(pthread_create(&th, NULL, reader, NULL), ==, 0);
	while (total < first_full + MORE) {
		ssize_t n;

		pattern_fill(SEED, total, chunk, CHUNK);
		n = write(c, chunk, CHUNK);
		if (n == -1) {
			CHECK(errno, ==, EAGAIN);
			eagains++;
			CHECK(wait_fd(c, POLLOUT, NET_WAIT_MS) & POLLOUT, ==, POLLOUT);
			continue;
		}
		CHECK(n, >, 0);
		if (n < CHUNK)
			shorts++;
		total += (unsigned long long)n;
	}
	CHECK_OK(shutdown(c, SHUT_WR));
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(received, ==, total);
	CHECK(eagains + shorts, >=, 1);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
