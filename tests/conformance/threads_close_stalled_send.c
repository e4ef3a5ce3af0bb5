/* threads_close_stalled_send: a thread's blocking send of more than a ring holds (2.5 MiB) to
 * a peer that reads nothing until the sending process has exited, and another thread closes
 * the socket 300 ms into that send, then makes a pipe, which may take the closed fd's number.
 * Linux: the close frees the number at once and does not end the send, which goes on into
 * the kernel's buffers (loopback holds about 4 MB) and returns; the peer then reads every
 * byte, in order, and the end. Under shunt the send waits for room in a ring that cannot hold
 * it, the reader reading nothing for SHUNT_SEND_STALL_MS (1 s), and moves the connection to
 * kernel TCP (stalled_reader) with the program's fd already closed: it must go on with
 * shunt's own copy of the socket, never the number (the pipe gets nothing), and the peer
 * sees the end only once the send returned. Accelerated: the peer's end was accelerated and
 * says downgraded. Between namespaces (kernel TCP over the veth holds only about 500 KB) the
 * send is 400 KiB. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/ioctl.h>

#define BLOCK 65536   /* the reader's */
#define SEED 41

static uint64_t total;

struct sender {
	int fd;
	ssize_t sent;
	int err;
};

/* One blocking send of the whole: the close comes while it waits (a second call would be
 * the program's own use of a closed number). */
static void *send_thread(void *arg)
{
	struct sender *s = arg;
	unsigned char *buf = malloc(total);

	CHECK(buf != NULL, ==, 1);
	pattern_fill(SEED, 0, buf, total);
	s->sent = send(s->fd, buf, total, MSG_NOSIGNAL);
	s->err = s->sent < 0 ? errno : 0;
	free(buf);
	return NULL;
}

/* The client process: the send thread, the close, the pipe; exits 0 when the send sent
 * everything and the pipe stayed empty. */
static void client(int port, int go)
{
	char b;
	int c = tcp_connect(AF_INET, port);
	struct sender s = { .fd = c };
	pthread_t th;
	int p[2];

	CHECK(read(go, &b, 1), ==, 1);
	CHECK(pthread_create(&th, NULL, send_thread, &s), ==, 0);
	sleep_ms(300);
	CHECK_OK(close(c));
	CHECK_OK(pipe(p));
	CHECK(pthread_join(th, NULL), ==, 0);
	if (s.err)
		FAIL("the send failed: %s", strerror(s.err));
	CHECK(s.sent, ==, (ssize_t)total);
	int queued = -1;

	CHECK_OK(ioctl(p[0], FIONREAD, &queued));
	if (queued != 0)
		FAIL("the pipe made after the close (fds %d and %d, the socket was %d) holds %d bytes", p[0],
		     p[1], c, queued);
	_exit(0);
}

int main(void)
{
	int port, go[2];
	int lfd = tcp_listen(AF_INET, &port);

	total = test_crossns() ? 400u * 1024 : 2560u * 1024;
	CHECK_OK(pipe(go));
	pid_t pid = CHECK_OK(fork());

	if (pid == 0) {
		alarm(30);
		CHECK_OK(close(lfd));
		client(port, go[0]);
	}
	int s = CHECK_OK(accept(lfd, NULL, NULL));

	CHECK_OK(close(lfd));
	expect_accelerated(s);
	CHECK(write(go[1], "g", 1), ==, 1);
	alarm(30);   /* a sender that never finishes fails the test, not the runner's timeout */
	xwait_child_ok(pid);
	alarm(0);
	static unsigned char buf[BLOCK];
	uint64_t got = 0;

	while (got < total) {
		ssize_t n = read(s, buf, sizeof(buf));

		CHECK(n, >, 0);
		CHECK(got + (uint64_t)n <= total, ==, 1);
		CHECK_PATTERN(SEED, got, buf, (size_t)n);
		got += (uint64_t)n;
	}
	char b;

	CHECK(read(s, &b, 1), ==, 0);
	if (test_mode_accelerated() && !test_crossns())
		expect_fallback(s, "downgraded");
	CHECK_OK(close(s));
	puts("ok");
	return 0;
}
