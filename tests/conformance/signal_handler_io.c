/* signal_handler_io: a signal handler that sends on the socket its thread is sending on, peeks
 * at the socket its thread is receiving from and asks FIONREAD, while signals arrive every few
 * microseconds: nothing deadlocks, no record is torn (every 8-byte record, the thread's and the
 * handler's, arrives whole and in each writer's order) and the received stream is intact. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/ioctl.h>

#define RECORDS 20000
#define STREAM (4 << 20)

static int xa, xb, ya, yb;
static pthread_t main_thread;
static atomic_int done;
static uint64_t handler_sent;
static volatile sig_atomic_t handled;

static void record(unsigned char *r, char kind, uint64_t n)
{
	r[0] = (unsigned char)kind;
	for (int i = 1; i < 8; i++)
		r[i] = (unsigned char)(n >> (8 * (i - 1)));
}

static void on_signal(int sig)
{
	int saved = errno, v;
	unsigned char r[8], peek[16];

	(void)sig;
	record(r, 'H', handler_sent);
	if (send(xa, r, 8, MSG_DONTWAIT) == 8)
		handler_sent++;
	recv(ya, peek, sizeof(peek), MSG_PEEK | MSG_DONTWAIT);
	ioctl(xa, FIONREAD, &v);
	handled++;
	errno = saved;
}

static void *pester(void *arg)
{
	struct timespec ts = { 0, 20000 };

	(void)arg;
	while (!atomic_load(&done)) {
		pthread_kill(main_thread, SIGUSR1);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void *check_records(void *arg)
{
	unsigned char r[8];
	uint64_t want_m = 0, want_h = 0;

	(void)arg;
	for (;;) {
		xread_exact(xb, r, 8);
		uint64_t n = 0;
		for (int i = 1; i < 8; i++)
			n |= (uint64_t)r[i] << (8 * (i - 1));
		if (r[0] == 'E')
			break;
		if (r[0] == 'M')
			CHECK(n, ==, want_m++);
		else if (r[0] == 'H')
			CHECK(n, ==, want_h++);
		else
			FAIL("torn or foreign record (kind byte %d)", r[0]);
	}
	CHECK(want_m, ==, RECORDS);
	return NULL;
}

static void *write_stream(void *arg)
{
	static char chunk[65536];

	(void)arg;
	for (size_t off = 0; off < STREAM; off += sizeof(chunk)) {
		pattern_fill(6, off, chunk, sizeof(chunk));
		xwrite_all(yb, chunk, sizeof(chunk));
	}
	return NULL;
}

int main(void)
{
	static char buf[65536];
	struct sigaction act = { .sa_handler = on_signal, .sa_flags = SA_RESTART };
	pthread_t pt, ct, wt;
	unsigned char r[8];
	size_t got = 0;

	tcp_pair_checked(AF_INET, &xa, &xb);
	tcp_pair_checked(AF_INET, &ya, &yb);
	main_thread = pthread_self();
	CHECK_OK(sigaction(SIGUSR1, &act, NULL));
	CHECK(pthread_create(&ct, NULL, check_records, NULL), ==, 0);
	CHECK(pthread_create(&wt, NULL, write_stream, NULL), ==, 0);
	CHECK(pthread_create(&pt, NULL, pester, NULL), ==, 0);

	for (uint64_t i = 0; i < RECORDS; i++) {
		record(r, 'M', i);
		xwrite_all(xa, r, 8);
		ssize_t n = recv(ya, buf, 1 + i % 200, MSG_DONTWAIT);
		if (n > 0) {
			CHECK_PATTERN(6, got, buf, (size_t)n);
			got += (size_t)n;
		} else {
			CHECK(errno == EAGAIN || errno == EINTR, ==, 1);
		}
	}
	while (got < STREAM) {
		ssize_t n = recv(ya, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n, >, 0);
		CHECK_PATTERN(6, got, buf, (size_t)n);
		got += (size_t)n;
	}
	atomic_store(&done, 1);
	CHECK(pthread_join(pt, NULL), ==, 0);
	act.sa_handler = SIG_IGN;
	CHECK_OK(sigaction(SIGUSR1, &act, NULL));
	record(r, 'E', 0);
	xwrite_all(xa, r, 8);
	CHECK(pthread_join(ct, NULL), ==, 0);
	CHECK(pthread_join(wt, NULL), ==, 0);
	CHECK(handled, >, 0);
	CHECK_OK(close(xa));
	CHECK_OK(close(xb));
	CHECK_OK(close(ya));
	CHECK_OK(close(yb));
	PASS();
}
