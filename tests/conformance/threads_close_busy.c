/* threads_close_busy: close() by one thread while another thread's call on the socket is under
 * way but not asleep, as Linux answers: the call goes on (close does not wake or end it), and
 * the peer sees the end of the connection only after that call has returned.
 *   - a recv waiting for data: it returns the bytes the peer sends after the close; the
 *     peer sees no EOF until then;
 *   - a send waiting for buffer space: it completes once the peer reads, every byte it
 *     sent arrives, then EOF;
 *   - the same for a sendfile (from a file) and a splice (from a pipe) waiting for buffer
 *     space, and for a splice from the socket into a pipe waiting for data.
 * Accelerated: the test runs again with SHUNT_SPIN_US at its maximum, so that the waiting
 * call is still spinning (not asleep in the kernel) when the close comes. */
#include "check.h"
#include "net.h"
#include "blocked.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/sendfile.h>

#define CHUNK (256 * 1024)

/* How the writing thread puts its bytes into the socket, in one call. */
enum how { BY_SEND, BY_SENDFILE, BY_SPLICE };
static enum how how;
static int source;   /* BY_SENDFILE: a file of CHUNK bytes; BY_SPLICE: a pipe holding PIPE_HELD */

#define PIPE_HELD (64 * 1024)   /* what a pipe holds by default: its write does not block */

static void *send_thread(void *arg)
{
	static char chunk[CHUNK];
	struct blocked *b = arg;

	memset(chunk, 'x', sizeof chunk);
	__atomic_store_n(&b->started, 1, __ATOMIC_RELEASE);
	if (how == BY_SEND)
		b->ret = send(b->fd, chunk, sizeof chunk, MSG_NOSIGNAL);
	else if (how == BY_SENDFILE)
		b->ret = sendfile(b->fd, source, NULL, CHUNK);
	else
		b->ret = splice(source, NULL, b->fd, NULL, PIPE_HELD, 0);
	b->err = errno;
	__atomic_store_n(&b->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void close_during_send(enum how by)
{
	static char buf[CHUNK];
	char path[] = "/tmp/shunt-conformance-close-busy-XXXXXX";
	struct blocked b = { 0 };
	pthread_t th;
	long long filled, got = 0, want = by == BY_SPLICE ? PIPE_HELD : CHUNK;
	ssize_t n;
	int c, s, pipefd[2];

	how = by;
	memset(buf, 'x', sizeof buf);
	if (by == BY_SENDFILE) {
		source = CHECK_OK(mkstemp(path));
		CHECK_OK(unlink(path));
		xwrite_all(source, buf, sizeof buf);
		CHECK_OK(lseek(source, 0, SEEK_SET));
	} else if (by == BY_SPLICE) {
		CHECK_OK(pipe(pipefd));
		source = pipefd[0];
		xwrite_all(pipefd[1], buf, PIPE_HELD);
		CHECK_OK(close(pipefd[1]));
	}
	tcp_pair_checked(AF_INET, &c, &s);
	filled = xfill(c);
	b.fd = c;
	CHECK(pthread_create(&th, NULL, send_thread, &b), ==, 0);
	wait_started(&b);
	sleep_ms(100);   /* accelerated: still in its spin, waiting for ring space */
	CHECK(finished(&b), ==, 0);
	CHECK_OK(close(c));
	sleep_ms(100);
	CHECK(finished(&b), ==, 0);
	while ((n = recv(s, buf, sizeof buf, 0)) > 0)
		got += n;
	CHECK(n, ==, 0);   /* EOF after every byte */
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(b.ret, ==, want);
	CHECK(got, ==, filled + want);
	CHECK_OK(close(s));
	if (by != BY_SEND)
		CHECK_OK(close(source));
}

struct splice_out {
	struct blocked b;   /* b.fd: the socket */
	int pipe;
};

static void *splice_out_thread(void *arg)
{
	struct splice_out *o = arg;

	__atomic_store_n(&o->b.started, 1, __ATOMIC_RELEASE);
	o->b.ret = splice(o->b.fd, NULL, o->pipe, NULL, 64, 0);
	__atomic_store_n(&o->b.done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* A splice from the socket into a pipe waits for data: close(c) does not end it, the peer
 * sees no EOF until it has moved the bytes the peer sends afterwards. */
static void close_during_splice_out(void)
{
	struct splice_out o = { 0 };
	struct pollfd p;
	pthread_t th;
	char buf[8];
	int c, s, pipefd[2];

	CHECK_OK(pipe(pipefd));
	tcp_pair_checked(AF_INET, &c, &s);
	o.b.fd = c;
	o.pipe = pipefd[1];
	CHECK(pthread_create(&th, NULL, splice_out_thread, &o), ==, 0);
	wait_started(&o.b);   /* on a busy machine: its splice after the close would be EBADF */
	sleep_ms(100);   /* accelerated: still in its spin, waiting for data */
	CHECK(finished(&o.b), ==, 0);
	CHECK_OK(close(c));
	sleep_ms(100);
	CHECK(finished(&o.b), ==, 0);
	p = (struct pollfd){ .fd = s, .events = POLLIN | POLLRDHUP };
	CHECK(poll(&p, 1, 0), ==, 0);   /* still open: no EOF at the peer */
	xwrite_all(s, "late", 4);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(o.b.ret, ==, 4);
	CHECK(read(pipefd[0], buf, sizeof buf), ==, 4);
	CHECK(memcmp(buf, "late", 4), ==, 0);
	p = (struct pollfd){ .fd = s, .events = POLLIN };
	CHECK(poll(&p, 1, NET_WAIT_MS), ==, 1);
	CHECK(recv(s, buf, sizeof buf, 0), ==, 0);   /* the splice was the last user: EOF */
	CHECK_OK(close(s));
	CHECK_OK(close(pipefd[0]));
	CHECK_OK(close(pipefd[1]));
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
	close_during_send(BY_SEND);
	close_leaves_recv_waiting();   /* accelerated: the recv is still in its spin */
	close_during_send(BY_SENDFILE);
	close_during_send(BY_SPLICE);
	close_during_splice_out();
	PASS();
}
