/* fork_concurrent_send: after fork, parent and child both write on the same
 * connected socket at the same time (64-byte records, each one write), while
 * a thread of the parent reads the other end: each writer's bytes arrive
 * all, in the order written, and every record arrives whole.  Every byte
 * says whose it is and where in its writer's stream it stands (the high bit
 * the writer, the low seven its place, mod 128), so the reader checks the
 * order byte by byte, and that the writer changes only between records.
 *
 * In the fabric modes these bytes go by kernel TCP over the veth (the client
 * awaits a hello its server, which writes nothing, never sends; a fork would
 * take a connection off the engine as well), and there the kernel itself
 * splits records: a blocked writer sleeps for room in the middle of its
 * write, and the other's bytes go first (seen without shunt over the same
 * veth; on loopback the kernel's buffers rarely fill).  So there only the
 * order of each writer's bytes is the kernel's promise, and checked. */
#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>

#include "check.h"
#include "net.h"

#define RECORDS 20000
#define RECORD 64
#define TOTAL ((uint64_t)RECORDS * RECORD)

static unsigned char byte_of(int writer, uint64_t place)
{
	return (unsigned char)((writer << 7) | (place & 0x7f));
}

static void write_records(int fd, int writer)
{
	unsigned char r[RECORD];

	for (uint64_t i = 0; i < RECORDS; i++) {
		for (int k = 0; k < RECORD; k++)
			r[k] = byte_of(writer, i * RECORD + (uint64_t)k);
		CHECK(write(fd, r, sizeof(r)), ==, (ssize_t)sizeof(r));
	}
}

struct reader {
	int fd;
	int whole;		/* records must arrive whole */
	uint64_t got[2];	/* each writer's bytes so far */
	uint64_t splits;	/* writer changes inside a record (allowed when !whole) */
};

static void *read_records(void *arg)
{
	struct reader *rd = arg;
	unsigned char buf[4096];
	int cur = -1;

	while (rd->got[0] + rd->got[1] < 2 * TOTAL) {
		ssize_t n = read(rd->fd, buf, sizeof(buf));

		CHECK(n, >, 0);
		for (ssize_t i = 0; i < n; i++) {
			int w = buf[i] >> 7;

			if (buf[i] != byte_of(w, rd->got[w]))
				FAIL("writer %d's byte %llu is 0x%02x, expected 0x%02x", w,
				     (unsigned long long)rd->got[w], buf[i], byte_of(w, rd->got[w]));
			if (w != cur && cur >= 0 && (rd->got[cur] % RECORD || rd->got[w] % RECORD)) {
				if (rd->whole)
					FAIL("a record split: writer %d at its byte %llu, then writer %d at %llu",
					     cur, (unsigned long long)rd->got[cur], w,
					     (unsigned long long)rd->got[w]);
				rd->splits++;
			}
			cur = w;
			rd->got[w]++;
		}
		CHECK(rd->got[0] <= TOTAL && rd->got[1] <= TOTAL, ==, 1);
	}
	return NULL;
}

int main(void)
{
	struct reader rd = { 0 };
	pthread_t th;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	rd.fd = s;
	rd.whole = test_mode() != TEST_MODE_FABRIC;
	CHECK(pthread_create(&th, NULL, read_records, &rd), ==, 0);
	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		write_records(c, 1);
		_exit(0);
	}
	write_records(c, 0);
	int status;
	CHECK(waitpid(pid, &status, 0), ==, pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(rd.got[0], ==, TOTAL);
	CHECK(rd.got[1], ==, TOTAL);
	expect_accelerated(c);
	if (test_mode() == TEST_MODE_FABRIC) {
		/* the kernel's rules, because the bytes went by kernel TCP: the client,
		 * awaiting a hello the server never sent (it wrote nothing), sends by TCP */
		int (*accelerated)(int);

		*(void **)&accelerated = dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
		CHECK(accelerated != NULL && accelerated(c) == 0, ==, 1);
		if (rd.splits)
			printf("%llu records split by kernel TCP over the veth\n", (unsigned long long)rd.splits);
	}
	CHECK_OK(close(c));
	char b;
	CHECK(read(s, &b, 1), ==, 0);   /* the child's copy is gone too: EOF */
	CHECK_OK(close(s));
	PASS();
}
