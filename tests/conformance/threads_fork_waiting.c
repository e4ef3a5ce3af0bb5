/* threads_fork_waiting: a process whose other threads keep waiting on accelerated sockets
 * (ping-pong with blocking recv, and poll on idle sockets with short timeouts) forks again and
 * again; each child at once waits on its own copy of an idle socket (poll with a timeout,
 * then a recv that must fail with EAGAIN) and exits. As with the kernel, the child has only
 * the forking thread and must never find a lock that one of the parent's other threads held
 * at the fork: every child must exit within the bound. Before the fix, a child that forked
 * while another thread was inside shunt's process-wide wait section (announcing a sleep,
 * draining doorbells) waited for that lock for ever. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define FORKS_MAX 400
#define FORKS_SEC 3.0
#define CHILD_MS 3000
#define POLLERS 2

static volatile int stop;
static int ping_c, ping_s, idle_c, idle_s;

/* One end of a ping-pong: every recv finds the ring empty at first and sleeps. */
static void *pong(void *arg)
{
	int fd = *(int *)arg;
	char b[8];

	for (;;) {
		ssize_t n = read_exact(fd, b, sizeof(b));

		if (n == 0)
			return NULL;
		CHECK(n, ==, sizeof(b));
		xwrite_all(fd, b, sizeof(b));
	}
}

static void *ping(void *arg)
{
	char b[8] = "12345678", r[8];

	(void)arg;
	while (!stop) {
		xwrite_all(ping_c, b, sizeof(b));
		xread_exact(ping_c, r, sizeof(r));
		CHECK(memcmp(b, r, sizeof(b)), ==, 0);
	}
	CHECK_OK(shutdown(ping_c, SHUT_WR));
	return NULL;
}

/* Sleeps a millisecond at a time on a socket nothing arrives on. */
static void *idle_poller(void *arg)
{
	(void)arg;
	while (!stop) {
		struct pollfd p = { .fd = idle_s, .events = POLLIN };

		CHECK(poll(&p, 1, 1), !=, -1);
	}
	return NULL;
}

static void child(void)
{
	struct pollfd p = { .fd = idle_c, .events = POLLIN };
	char b;

	if (poll(&p, 1, 2) != 0)
		_exit(1);
	if (recv(idle_c, &b, 1, MSG_DONTWAIT) != -1 || errno != EAGAIN)
		_exit(2);
	_exit(0);
}

/* Waits for pid at most CHILD_MS; kills it and fails if it is still there. */
static void wait_child_bounded(pid_t pid, unsigned forks)
{
	double end = now_sec() + CHILD_MS / 1000.0;
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			break;
		CHECK(r, ==, 0);
		if (now_sec() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			FAIL("child %u of the forks (pid %d) still waiting after %d ms", forks, (int)pid, CHILD_MS);
		}
		sleep_ms(1);
	}
	CHECK(WIFEXITED(status), ==, 1);
	CHECK(WEXITSTATUS(status), ==, 0);
}

int main(void)
{
	pthread_t tp, tq, tpoll[POLLERS];
	unsigned forks = 0;

	tcp_pair_checked(AF_INET, &ping_c, &ping_s);
	tcp_pair_checked(AF_INET, &idle_c, &idle_s);
	CHECK(pthread_create(&tq, NULL, pong, &ping_s), ==, 0);
	CHECK(pthread_create(&tp, NULL, ping, NULL), ==, 0);
	for (int i = 0; i < POLLERS; i++)
		CHECK(pthread_create(&tpoll[i], NULL, idle_poller, NULL), ==, 0);

	double end = now_sec() + FORKS_SEC;

	while (forks < FORKS_MAX && now_sec() < end) {
		pid_t pid = CHECK_OK(fork());

		if (pid == 0)
			child();
		wait_child_bounded(pid, forks);
		forks++;
	}
	stop = 1;
	CHECK(pthread_join(tp, NULL), ==, 0);
	CHECK(pthread_join(tq, NULL), ==, 0);
	for (int i = 0; i < POLLERS; i++)
		CHECK(pthread_join(tpoll[i], NULL), ==, 0);
	printf("%u forks while other threads waited\n", forks);
	CHECK_OK(close(ping_c));
	CHECK_OK(close(ping_s));
	CHECK_OK(close(idle_c));
	CHECK_OK(close(idle_s));
	PASS();
}
