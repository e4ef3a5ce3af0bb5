/* send_to_stalled_reader: a client sends more than a ring holds (2.5 MiB, in 64 KiB blocking
 * sends) to a server that reads nothing until the client has exited: the server waits for the
 * client's exit first. Kernel TCP over loopback takes about 4 MB from such a sender, so the
 * client finishes and exits, and the server then reads every byte, in order, and the end.
 * Under shunt the ring holds at most SHUNT_RING_SIZE (1 MiB): the client's send waits
 * SHUNT_SEND_STALL_MS (1 s) with the reader reading nothing, then moves the connection to
 * kernel TCP (reason stalled_reader; the server's end says downgraded) and goes on there.
 * Before 2026-11-29 the client waited for ever, and so did the server. Between namespaces
 * kernel TCP over the veth holds only about 500 KB, so there 400 KiB are sent (no stall: the
 * ring takes them). A second round (6 MiB, more than the kernel takes at once): non-blocking
 * sends until one is told the socket is full (EAGAIN), then blocking sends, which wait for the
 * reader as after the kernel's EAGAIN (the client has not exited after 1.5 s), and the
 * connection stays accelerated. A third round: the sender's process has a thread asleep in
 * recv on the same connection (under shunt the one that sleeps in the kernel for the end: the
 * sender waits on it, and grows its ring and looks for a stalled reader there too), its peer
 * reading only once told the send returned: 400 KiB (the ring grows in place; before
 * 2026-11-29 it stayed at 16 KiB and the send hung), then 2.5 MiB (stalled_reader). And one
 * whose ring wrapped before it filled (wrapped_round: 900 KiB, less than a whole ring). */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/wait.h>

#define BLOCK 65536
#define SEED 7

/* The child: connects, waits for the accept, sends total bytes (first filling the ring
 * without blocking, when told_full), writes its end's fallback reason to report and exits. */
static void client(int port, int go, int report, uint64_t total, int told_full)
{
	char b, why[64] = "";
	int c = tcp_connect(AF_INET, port);
	uint64_t sent = 0;

	CHECK(read(go, &b, 1), ==, 1);
	if (told_full) {
		unsigned char buf[BLOCK];

		set_nonblocking(c, 1);
		while (sent < total) {
			size_t n = total - sent < BLOCK ? (size_t)(total - sent) : BLOCK;

			pattern_fill(SEED, sent, buf, n);
			ssize_t r = send(c, buf, n, 0);

			if (r < 0) {
				CHECK(errno == EAGAIN || errno == EWOULDBLOCK, ==, 1);
				break;
			}
			sent += (uint64_t)r;
			if ((size_t)r < n)
				break;
		}
		set_nonblocking(c, 0);
	}
	xsend_pattern(c, SEED, sent, total);
	const char *r = fallback_of(c);

	if (r)
		snprintf(why, sizeof(why), "%s", r);
	xwrite_all(report, why, sizeof(why));
	CHECK_OK(close(c));
	_exit(0);
}

static void round_trip(uint64_t total, int told_full)
{
	int port, go[2], report[2], status;
	int lfd = tcp_listen(AF_INET, &port);
	char why[64];

	CHECK_OK(pipe(go));
	CHECK_OK(pipe(report));
	pid_t pid = CHECK_OK(fork());

	if (pid == 0) {
		alarm(30);
		CHECK_OK(close(lfd));
		client(port, go[0], report[1], total, told_full);
	}
	int s = CHECK_OK(accept(lfd, NULL, NULL));

	CHECK_OK(close(lfd));
	expect_accelerated(s);
	CHECK(write(go[1], "g", 1), ==, 1);
	if (told_full) {
		/* the client blocks in its send until this end reads */
		sleep_ms(1500);
		CHECK(waitpid(pid, &status, WNOHANG), ==, 0);
		xread_pattern(s, SEED, 0, total);
		CHECK(waitpid(pid, &status, 0), ==, pid);
	} else {
		alarm(30);   /* a client that never finishes fails the test, not the runner's timeout */
		CHECK(waitpid(pid, &status, 0), ==, pid);
		alarm(0);
	}
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, ==, 1);
	xread_exact(report[0], why, sizeof(why));
	if (!told_full)
		xread_pattern(s, SEED, 0, total);
	char b;

	CHECK(read(s, &b, 1), ==, 0);
	if (test_mode_accelerated() && !test_crossns()) {
		/* the client's ring held less than it sent: it moved, or (told full) waited */
		const char *want = told_full ? "" : "stalled_reader";

		if (strcmp(why, want) != 0)
			FAIL("the client's fallback reason is \"%s\", expected \"%s\"", why, want);
		if (!told_full)
			expect_fallback(s, "downgraded");
	}
	CHECK_OK(close(s));
	CHECK_OK(close(go[0]));
	CHECK_OK(close(go[1]));
	CHECK_OK(close(report[0]));
	CHECK_OK(close(report[1]));
}

/* The threads round's reader thread: asleep in recv on the connection before the sender
 * blocks (so under shunt it, not the sender, sleeps in the kernel for the end), woken at the
 * end by the peer's one byte. */
static void *reader_thread(void *arg)
{
	int fd = *(int *)arg;
	char b;

	CHECK(recv(fd, &b, 1, 0), ==, 1);
	CHECK(b, ==, 'z');
	return NULL;
}

/* A thread of this process reads the connection (nothing comes) while another sends total
 * bytes; the peer, a child, reads only once told the send returned, then sends one byte. */
static void threads_round(uint64_t total)
{
	int c, s, done[2], status;
	pthread_t th;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(done));
	pid_t pid = CHECK_OK(fork());

	if (pid == 0) {
		char b;

		alarm(30);
		CHECK_OK(close(c));
		CHECK(read(done[0], &b, 1), ==, 1);
		xread_pattern(s, SEED, 0, total);
		if (test_mode_accelerated() && !test_crossns() && total > (1u << 20))
			expect_fallback(s, "downgraded");
		else
			expect_accelerated(s);
		xwrite_all(s, "z", 1);
		CHECK(read(s, &b, 1), ==, 0);
		_exit(0);
	}
	CHECK_OK(close(s));
	CHECK(pthread_create(&th, NULL, reader_thread, &c), ==, 0);
	sleep_ms(50);
	alarm(30);
	xsend_pattern(c, SEED, 0, total);
	alarm(0);
	CHECK(write(done[1], "d", 1), ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	if (test_mode_accelerated() && !test_crossns() && total > (1u << 20))
		expect_fallback(c, "stalled_reader");
	else
		expect_accelerated(c);
	CHECK_OK(close(c));
	CHECK(waitpid(pid, &status, 0), ==, pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, ==, 1);
	CHECK_OK(close(done[0]));
	CHECK_OK(close(done[1]));
}

/* The sender's ring wrapped before the stall: 10 KiB sent and read (the reader's tail is past
 * the ring's start), then total more in 64 KiB sends and the sender's exit, read only after
 * it. The ring fills holding bytes that wrapped, so it cannot grow in place (its bytes would
 * move under the reader): before 2026-11-29 such a send waited for the reader for ever. */
static void wrapped_round(uint64_t total)
{
	int c, s, report[2], status;
	char why[64] = "", b;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(report));
	pid_t pid = CHECK_OK(fork());

	if (pid == 0) {
		alarm(30);
		CHECK_OK(close(s));
		xsend_pattern(c, SEED, 0, 10240);
		CHECK(read(c, &b, 1), ==, 1);
		xsend_pattern(c, SEED, 10240, 10240 + total);
		const char *r = fallback_of(c);

		if (r)
			snprintf(why, sizeof(why), "%s", r);
		xwrite_all(report[1], why, sizeof(why));
		_exit(0);
	}
	CHECK_OK(close(c));
	xread_pattern(s, SEED, 0, 10240);
	xwrite_all(s, "k", 1);
	alarm(30);
	CHECK(waitpid(pid, &status, 0), ==, pid);
	alarm(0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, ==, 1);
	xread_exact(report[0], why, sizeof(why));
	xread_pattern(s, SEED, 10240, 10240 + total);
	CHECK(read(s, &b, 1), ==, 0);
	if (test_mode_accelerated() && !test_crossns()) {
		if (strcmp(why, "stalled_reader") != 0)
			FAIL("the client's fallback reason is \"%s\", expected stalled_reader", why);
		expect_fallback(s, "downgraded");
	}
	CHECK_OK(close(s));
	CHECK_OK(close(report[0]));
	CHECK_OK(close(report[1]));
}

int main(void)
{
	round_trip(test_crossns() ? 400u << 10 : 5u << 19, 0);
	/* more than kernel TCP takes at once, so that its EAGAIN comes too */
	round_trip(6u << 20, 1);
	wrapped_round(test_crossns() ? 300u << 10 : 900u << 10);
	threads_round(400u << 10);   /* the ring grows to take it, the sender not the one asleep */
	if (!test_crossns())
		threads_round(5u << 19);
	PASS();
}
