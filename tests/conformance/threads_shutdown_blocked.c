/* threads_shutdown_blocked: one thread shuts down or closes a socket while another thread of
 * the same process is blocked on it, as Linux answers:
 *   - shutdown(SHUT_RD) wakes a blocked recv, which returns 0; so does SHUT_RDWR;
 *   - shutdown(SHUT_WR) wakes a send blocked on a full buffer, which fails with EPIPE;
 *   - close() does not wake a blocked recv: it goes on waiting on the socket it holds and
 *     returns the bytes the peer sends afterwards; the peer sees EOF only after that recv
 *     has returned (the socket lives until its last user is done with it).
 * Accelerated: the wakes come from the ring's state, not from a kernel TCP event. */
#include "check.h"
#include "net.h"
#include "blocked.h"

#include <linux/close_range.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>

static void *poll_blocked(void *arg)
{
	struct blocked *b = arg;
	struct pollfd p = { .fd = b->fd, .events = POLLIN | POLLRDHUP };

	errno = 0;
	b->ret = poll(&p, 1, -1);
	b->err = p.revents;
	__atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Sends until a send blocks (nobody reads the other end), then reports how that send ended. */
static void *send_until_blocked(void *arg)
{
	static char chunk[64 * 1024];
	struct blocked *b = arg;

	memset(chunk, 'w', sizeof(chunk));
	for (;;) {
		errno = 0;
		ssize_t n = send(b->fd, chunk, sizeof(chunk), MSG_NOSIGNAL);
		if (n < 0) {
			b->ret = n;
			b->err = errno;
			break;
		}
	}
	__atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static double cpu_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void shutdown_wakes_recv(int how)
{
	struct blocked b = { 0 };
	pthread_t th;
	double cpu;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	b.fd = c;
	CHECK(pthread_create(&th, NULL, recv_blocked, &b), ==, 0);
	sleep_ms(20);
	cpu = cpu_sec();
	sleep_ms(200);
	CHECK(finished(&b), ==, 0);   /* it really blocks */
	CHECK(cpu_sec() - cpu < 0.1, ==, 1);   /* asleep, not spinning */
	CHECK_OK(shutdown(c, how));
	wait_finished(&b);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(b.ret, ==, 0);
	CHECK(recv(c, b.buf, sizeof(b.buf), MSG_DONTWAIT), ==, 0);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

static void shutdown_wr_wakes_send(void)
{
	struct blocked b = { 0 };
	pthread_t th;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	b.fd = c;
	CHECK(pthread_create(&th, NULL, send_until_blocked, &b), ==, 0);
	sleep_ms(300);
	CHECK(finished(&b), ==, 0);   /* blocked on a full buffer: s reads nothing */
	CHECK_OK(shutdown(c, SHUT_WR));
	wait_finished(&b);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(b.ret, ==, -1);
	CHECK(b.err, ==, EPIPE);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

static void shutdown_rd_wakes_poll(void)
{
	struct blocked b = { 0 };
	pthread_t th;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	b.fd = c;
	CHECK(pthread_create(&th, NULL, poll_blocked, &b), ==, 0);
	sleep_ms(100);
	CHECK(finished(&b), ==, 0);
	CHECK_OK(shutdown(c, SHUT_RD));
	wait_finished(&b);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(b.ret, ==, 1);
	CHECK(b.err & (POLLIN | POLLRDHUP), ==, POLLIN | POLLRDHUP);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

/* A program that closes every fd it does not know (as daemons do) takes nothing away
 * that the next wake needs. */
static void close_unknown_fds(void)
{
	struct rlimit rl;
	long top;

	CHECK_OK(getrlimit(RLIMIT_NOFILE, &rl));
	top = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 65536 ? 65536 : (long)rl.rlim_cur;
	for (long fd = 64; fd < top; fd++)
		close((int)fd);
	close_range(64, ~0U, 0);
}

int main(void)
{
	shutdown_wakes_recv(SHUT_RD);
	shutdown_wakes_recv(SHUT_RDWR);
	shutdown_wr_wakes_send();
	shutdown_rd_wakes_poll();
	close_leaves_recv_waiting();
	close_unknown_fds();
	shutdown_wakes_recv(SHUT_RD);
	close_leaves_recv_waiting();
	PASS();
}
