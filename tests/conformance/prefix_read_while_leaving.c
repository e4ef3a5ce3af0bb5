/* prefix_read_while_leaving: a server reads a large TCP prefix (the bytes its client sent
 * before the accept) in small pieces in one thread, while another thread's raw clone moves
 * the connection back to kernel TCP. Every byte arrives once, in order, then the end; the
 * clone does not wait. Before the fix the reader took prefix bytes from the socket outside
 * the rx lock while the move, under it, took the count it expected to hand back to the
 * client: it came up short, waited 5 s, and reset the connection (tests/stress's raw clone
 * rounds: "could not hand back ... bytes of TCP prefix"). */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/syscall.h>

static int s;
static long long prefix, got;

static void *reader(void *arg)
{
	static char buf[4096];
	ssize_t n;

	(void)arg;
	while ((n = read(s, buf, sizeof(buf))) > 0) {
		CHECK_PATTERN(7, (uint64_t)got, buf, (size_t)n);
		got += n;
	}
	CHECK(n, ==, 0);
	return NULL;
}

int main(void)
{
	int lfd, port, c, up[2], go[2];
	char b = 0;

	lfd = CHECK_OK(tcp_listen(AF_INET, &port));
	CHECK_OK(pipe(up));
	CHECK_OK(pipe(go));
	pid_t child = CHECK_OK(fork());

	if (child == 0) {   /* the client: as much as its socket takes before the accept */
		static char buf[64 * 1024];
		ssize_t n;

		CHECK_OK(close(lfd));
		CHECK_OK(close(up[0]));
		CHECK_OK(close(go[1]));   /* the server's end: gone with it */
		c = CHECK_OK(tcp_connect(AF_INET, port));
		set_nonblocking(c, 1);
		do {
			pattern_fill(7, (uint64_t)prefix, buf, sizeof(buf));
			n = send(c, buf, sizeof(buf), MSG_NOSIGNAL);
			if (n > 0)
				prefix += n;
		} while (n > 0 && prefix < (16 << 20));
		set_nonblocking(c, 0);
		CHECK(write(up[1], &prefix, sizeof(prefix)), ==, (ssize_t)sizeof(prefix));
		CHECK(read(go[0], &b, 1), ==, 1);   /* accepted */
		CHECK_OK(shutdown(c, SHUT_WR));
		CHECK(wait_fd(c, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
		CHECK(read(c, &b, 1), ==, 0);
		_exit(0);
	}
	CHECK_OK(close(up[1]));
	CHECK_OK(close(go[0]));
	CHECK(read(up[0], &prefix, sizeof(prefix)), ==, (ssize_t)sizeof(prefix));
	s = CHECK_OK(accept(lfd, NULL, NULL));
	if (test_mode_accelerated())
		expect_accelerated(s);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, reader, NULL), ==, 0);
	sleep_ms(1);   /* the reader is taking the prefix */
	double t0 = now_sec();
	long pid = syscall(SYS_clone, SIGCHLD, 0L, 0L, 0L, 0L);
	if (pid == 0)
		_exit(0);
	double took = now_sec() - t0;
	CHECK(pid, >, 0);
	xwait_child_ok((pid_t)pid);
	CHECK(write(go[1], "g", 1), ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(got, ==, prefix);
	CHECK(took < 2.0, ==, 1);
	CHECK_OK(close(s));
	CHECK_OK(close(lfd));
	xwait_child_ok(child);
	printf("prefix %lld read whole across the move (clone %.3f s)\n", prefix, took);
	PASS();
}
