/* ring_growth: a connection starts with small rings and grows them under load without
 * losing or reordering a byte; and at SHUNT_SHM_LIMIT a new connection stays on kernel TCP
 * and still works. Accelerated: the outgoing ring starts at SHUNT_RING_START (16 KiB by
 * default) and is larger after 128 KiB writes; the segment then holds more memory. The
 * limit part re-executes this test with SHUNT_SHM_LIMIT=4K (less than any connection
 * needs): there the connection must not be accelerated, in every mode. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define WRITE (128 * 1024)
#define TOTAL (16u * 1024 * 1024)
#define SEED 97

static int srv;

static void *reader(void *arg)
{
	static char buf[300 * 1000];
	uint64_t got = 0;

	(void)arg;
	while (got < TOTAL) {
		ssize_t n = read(srv, buf, sizeof buf);

		CHECK(n, >, 0);
		CHECK_PATTERN(SEED, got, buf, (size_t)n);
		got += (uint64_t)n;
	}
	return NULL;
}

static void limited(void)
{
	int (*accelerated)(int);
	int c, s;

	tcp_pair(AF_INET, &c, &s);
	*(void **)&accelerated = dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
	if (accelerated) {
		CHECK(accelerated(c), ==, 0);
		CHECK(accelerated(s), ==, 0);
	}
	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

int main(int argc, char **argv)
{
	static char buf[WRITE];
	pthread_t th;
	int c, s;

	if (argc > 1 && !strcmp(argv[1], "limited")) {
		limited();
		PASS();
	}
	tcp_pair_checked(AF_INET, &c, &s);
	srv = s;
	long long start = shunt_counter(c, "ring_size"), mem0 = shunt_counter(c, "shm_bytes");

	if (test_mode_accelerated() && !getenv("SHUNT_RING_START"))
		CHECK(start, ==, 16384);
	CHECK(pthread_create(&th, NULL, reader, NULL), ==, 0);
	for (uint64_t off = 0; off < TOTAL; off += WRITE) {
		pattern_fill(SEED, off, buf, WRITE);
		CHECK(write_all(c, buf, WRITE), ==, WRITE);
	}
	CHECK(pthread_join(th, NULL), ==, 0);
	if (test_mode_accelerated()) {
		CHECK(shunt_counter(c, "ring_size"), >, start);
		CHECK(shunt_counter(c, "shm_bytes"), >, mem0);
		fprintf(stderr, "ring %lld -> %lld bytes, segment %lld -> %lld bytes\n", start,
			shunt_counter(c, "ring_size"), mem0, shunt_counter(c, "shm_bytes"));
	}
	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));

	/* the same program under a bound that no connection fits in */
	fflush(NULL);
	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		setenv("SHUNT_SHM_LIMIT", "4K", 1);
		execl("/proc/self/exe", argv[0], "limited", (char *)NULL);
		_exit(127);
	}
	xwait_child_ok(pid);
	PASS();
}
