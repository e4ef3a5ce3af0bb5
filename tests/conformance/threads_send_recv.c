/* threads_send_recv: full duplex on one fd from two threads at once: on each end one thread
 * sends while another receives (four threads in all); both 8 MiB streams arrive intact, byte by
 * byte, followed by EOF. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define TOTAL (8 * 1024 * 1024)

struct job {
	int fd;
	uint64_t seed;
};

static void *send_stream(void *arg)
{
	static __thread char buf[64 * 1024];
	struct job *j = arg;
	uint64_t off = 0;

	while (off < TOTAL) {
		size_t n = 1 + (size_t)(pattern_word(j->seed + 99, off) % sizeof(buf));

		if (n > TOTAL - off)
			n = TOTAL - off;
		pattern_fill(j->seed, off, buf, n);
		xwrite_all(j->fd, buf, n);
		off += n;
	}
	CHECK_OK(shutdown(j->fd, SHUT_WR));
	return NULL;
}

static void *recv_stream(void *arg)
{
	static __thread char buf[100 * 1000];
	struct job *j = arg;
	uint64_t off = 0;

	for (;;) {
		ssize_t n = read(j->fd, buf, sizeof(buf));

		if (n == -1 && errno == EINTR)
			continue;
		CHECK_OK(n);
		if (n == 0)
			break;
		CHECK_PATTERN(j->seed, off, buf, (size_t)n);
		off += (uint64_t)n;
		CHECK(off, <=, TOTAL);
	}
	CHECK(off, ==, TOTAL);
	return NULL;
}

int main(void)
{
	pthread_t th[4];
	struct job jobs[4];
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	jobs[0] = (struct job){ c, 1 }; /* c sends stream 1 */
	jobs[1] = (struct job){ s, 1 }; /* s receives it */
	jobs[2] = (struct job){ s, 2 }; /* s sends stream 2 */
	jobs[3] = (struct job){ c, 2 }; /* c receives it */
	CHECK(pthread_create(&th[0], NULL, send_stream, &jobs[0]), ==, 0);
	CHECK(pthread_create(&th[1], NULL, recv_stream, &jobs[1]), ==, 0);
	CHECK(pthread_create(&th[2], NULL, send_stream, &jobs[2]), ==, 0);
	CHECK(pthread_create(&th[3], NULL, recv_stream, &jobs[3]), ==, 0);
	for (int i = 0; i < 4; i++)
		CHECK(pthread_join(th[i], NULL), ==, 0);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
