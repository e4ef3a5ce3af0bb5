/* uring_blocked_recv: one thread is asleep in recv on an accelerated connection when another
 * thread of the process sets up an io_uring (through syscall()): the connection moves back to
 * kernel TCP under the sleeper, which must still wake for the peer's next bytes (no lost
 * wake-up: nothing rings its doorbell any more) and get them exactly; the ring then reads the
 * rest. The peer is another process that never uses io_uring. */
#include "uring.h"

#include <pthread.h>

static int fd;
static char got[5];
static ssize_t got_n = -1;

static void *sleeper(void *arg)
{
	(void)arg;
	got_n = read_exact(fd, got, 4);
	return NULL;
}

int main(void)
{
	struct test_ring r;
	pthread_t th;
	char buf[8];
	int c, sv[2];
	pid_t peer;

	tcp_pair_checked(AF_INET, &c, &fd);
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	peer = CHECK_OK(fork());
	if (peer == 0) {
		CHECK_OK(close(fd));
		xread_exact(sv[1], buf, 1);   /* P's ring exists now */
		sleep_ms(100);
		xwrite_all(c, "late", 4);
		xwrite_all(c, "rest", 4);
		CHECK(read(c, buf, 1), ==, 0);
		expect_fallback(c, "downgraded");
		PASS();
	}
	CHECK_OK(close(c));
	CHECK(pthread_create(&th, NULL, sleeper, NULL), ==, 0);
	sleep_ms(100);   /* the sleeper is asleep in the kernel, waiting for a doorbell */
	uring_setup(&r, URING_LIBC);
	xwrite_all(sv[0], "r", 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(got_n, ==, 4);
	CHECK(memcmp(got, "late", 4), ==, 0);
	uring_recv_exact(&r, fd, buf, 4);
	CHECK(memcmp(buf, "rest", 4), ==, 0);
	expect_fallback(fd, "io_uring");
	CHECK_OK(close(fd));
	xwait_child_ok(peer);
	uring_close(&r);
	PASS();
}
