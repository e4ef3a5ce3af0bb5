/* threads_reader_writer: on one socket, one thread blocks in recv first, then another thread
 * blocks in send on a full buffer; the peer answers only after it has read everything that was
 * sent. The kernel wakes the writer whenever the peer makes room, whoever else waits on the
 * socket: every byte arrives and the answer too. (Under shunt the reader sleeps in the kernel
 * and the writer behind it: the writer's want for space must still reach the peer.) */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/wait.h>

#define TOTAL (4u * 1024 * 1024)
#define SEED 33

static int fd;
static char out[TOTAL], in[TOTAL];

static void *reader(void *arg)
{
	char answer[6];

	(void)arg;
	xread_exact(fd, answer, sizeof(answer));   /* blocks until the peer has read it all */
	CHECK(memcmp(answer, "thanks", 6), ==, 0);
	return NULL;
}

int main(void)
{
	pthread_t th;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(c));
		sleep_ms(200);   /* the parent's threads are both asleep by now */
		xread_exact(s, in, TOTAL);
		CHECK_PATTERN(SEED, 0, in, TOTAL);
		xwrite_all(s, "thanks", 6);
		CHECK_OK(close(s));
		_exit(0);
	}
	CHECK_OK(close(s));
	fd = c;
	CHECK(pthread_create(&th, NULL, reader, NULL), ==, 0);
	sleep_ms(50);   /* the reader waits first */
	pattern_fill(SEED, 0, out, TOTAL);
	xwrite_all(c, out, TOTAL);   /* more than the buffers hold: waits for room */
	CHECK(pthread_join(th, NULL), ==, 0);
	xwait_child_ok(pid);
	expect_accelerated(c);
	CHECK_OK(close(c));
	PASS();
}
