/* threads_close_busy: close() by one thread while another thread's call on the socket is under
 * way but not asleep, as Linux answers: the call goes on (close does not wake or end it), and
 * the peer sees the end of the connection only after that call has returned.
 *   - a recv waiting for data: it returns the bytes the peer sends after the close; the
 *     peer sees no EOF until then;
 *   - a send waiting for buffer space: it completes once the peer reads, every byte it
 *     sent arrives, then EOF.
 * Accelerated: the test runs again with SHUNT_SPIN_US at its maximum, so that the waiting
 * call is still spinning (not asleep in the kernel) when the close comes. */
#include "check.h"
#include "net.h"
#include "blocked.h"

#include <pthread.h>

#define CHUNK (256 * 1024)

static void *send_thread(void *arg)
{
	static char chunk[CHUNK];
	struct blocked *b = arg;

	memset(chunk, 'x', sizeof chunk);
	b->ret = send(b->fd, chunk, sizeof chunk, MSG_NOSIGNAL);
	b->err = errno;
	__atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void close_during_send(void)
{
	static char buf[CHUNK];
	struct blocked b = { 0 };
	pthread_t th;
	long long filled, got = 0;
	ssize_t n;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	filled = xfill(c);
	b.fd = c;
	CHECK(pthread_create(&th, NULL, send_thread, &b), ==, 0);
	sleep_ms(100);   /* accelerated: still in its spin, waiting for ring space */
	CHECK(finished(&b), ==, 0);
	CHECK_OK(close(c));
	sleep_ms(100);
	CHECK(finished(&b), ==, 0);
	while ((n = recv(s, buf, sizeof buf, 0)) > 0)
		got += n;
	CHECK(n, ==, 0);   /* EOF after every byte */
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(b.ret, ==, CHUNK);
	CHECK(got, ==, filled + CHUNK);
	CHECK_OK(close(s));
}

int main(int argc, char **argv)
{
	(void)argc;
	if (test_mode() != TEST_MODE_PLAIN && !getenv("SHUNT_SPIN_US")) {
		setenv("SHUNT_SPIN_US", "1000000", 1);
		execv("/proc/self/exe", argv);
		FAIL("exec /proc/self/exe: %s", strerror(errno));
	}
	alarm(60);
	close_leaves_recv_waiting();   /* accelerated: the recv is still in its spin */
	close_during_send();
	close_leaves_recv_waiting();   /* accelerated: the recv is still in its spin */
	PASS();
}
