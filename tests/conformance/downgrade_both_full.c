/* downgrade_both_full: both ends of a connection have filled it with bytes the other has not
 * read (a megabyte each way, as much as each could send without blocking once the rings had
 * grown), then one end's process makes a raw clone, which under shunt moves the connection
 * back to kernel TCP: each end then re-sends over TCP what the other never read of its
 * ring. Both read everything the other sent, in order, and the end. Three rounds: the client
 * only reads; the client also sends half a megabyte more from a second thread while its
 * first thread reads (that send waits behind the client's re-send); the client closes
 * without reading, once the server is leaving (as the kernel, its unread bytes make that
 * close a reset, which may cut off what its kernel had not sent yet: the server reads a
 * correct part of the stream, then the end or the reset, and nothing waits for good).
 *
 * Across a veth pair (crossns) the kernel's buffers hold far less than a megabyte: the
 * leaver's re-send waits for room in the client's socket until the client has read its ring
 * and takes the copies off, and the client's re-send waits for the leaver's program to read.
 * Until the client's re-send waited for its ring to be read (and let go of its locks while
 * it waited), both waited for good there. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

/* Everything fd can take without blocking, in pattern seed's bytes. */
static long long fill(int fd, uint64_t seed)
{
	static char buf[64 * 1024];
	long long sent = 0;
	ssize_t n;

	set_nonblocking(fd, 1);
	do {
		pattern_fill(seed, (uint64_t)sent, buf, sizeof(buf));
		n = send(fd, buf, sizeof(buf), MSG_NOSIGNAL);
		if (n > 0)
			sent += n;
	} while (n > 0 && sent < (8 << 20));
	if (n < 0)
		CHECK(errno, ==, EAGAIN);
	set_nonblocking(fd, 0);
	return sent;
}

/* Reads exactly len bytes of pattern seed, then the end. */
static void read_all_of(int fd, uint64_t seed, long long len)
{
	static char buf[64 * 1024];
	long long got = 0;

	while (got < len) {
		CHECK(wait_fd(fd, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
		ssize_t n = read(fd, buf, len - got < (long long)sizeof(buf) ? (size_t)(len - got) : sizeof(buf));
		CHECK(n, >, 0);
		CHECK_PATTERN(seed, (uint64_t)got, buf, (size_t)n);
		got += n;
	}
}

/* Reads what comes of pattern seed, at most len bytes, until the end or a reset; returns
 * how much came. */
static long long read_part_of(int fd, uint64_t seed, long long len)
{
	static char buf[64 * 1024];
	long long got = 0;

	for (;;) {
		CHECK(wait_fd(fd, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n < 0) {
			CHECK(errno, ==, ECONNRESET);
			return got;
		}
		if (n == 0)
			return got;
		CHECK(got + n, <=, len);
		CHECK_PATTERN(seed, (uint64_t)got, buf, (size_t)n);
		got += n;
	}
}

/* A megabyte each way in one send, read by the other end (the server's first): under shunt
 * the rings grow to hold that much (an empty ring grows for a send bigger than itself), so
 * that what fill leaves unread is more than the kernel's socket buffers hold. */
#define GROW (1 << 20)
static void grow(int fd, int first)
{
	static char buf[GROW];

	if (first)
		xwrite_all(fd, buf, GROW);
	xread_exact(fd, buf, GROW);
	if (!first)
		xwrite_all(fd, buf, GROW);
}

/* The client's extra send, from a second thread, in the second round. */
#define EXTRA (512 * 1024)
struct extra {
	int fd;
	long long from;
};

static void *send_extra(void *arg)
{
	static char buf[EXTRA];
	struct extra *e = arg;

	pattern_fill(1, (uint64_t)e->from, buf, sizeof(buf));
	xwrite_all(e->fd, buf, sizeof(buf));
	return NULL;
}

enum client { READS, READS_AND_SENDS, CLOSES };

static void round_trip(enum client how)
{
	int c, s, up[2], down[2], read_it[2];
	long long c_sent, s_sent;
	char b;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(up));
	CHECK_OK(pipe(down));
	CHECK_OK(pipe(read_it));
	pid_t child = CHECK_OK(fork());

	if (child == 0) {   /* the client */
		CHECK_OK(close(s));
		grow(c, 0);
		CHECK(read(read_it[0], &b, 1), ==, 1);   /* the server has read it: the ring is empty */
		c_sent = fill(c, 1);
		CHECK(write(up[1], &c_sent, sizeof(c_sent)), ==, (ssize_t)sizeof(c_sent));
		CHECK(read(down[0], &s_sent, sizeof(s_sent)), ==, (ssize_t)sizeof(s_sent));
		if (how == CLOSES) {
			/* the server makes its raw clone now: under shunt its end is leaving
			 * by the time this close comes */
			CHECK(read(read_it[0], &b, 1), ==, 1);
			usleep(100 * 1000);
			CHECK_OK(close(c));
			_exit(0);
		}
		pthread_t th;
		struct extra e = { c, c_sent };
		if (how == READS_AND_SENDS)
			CHECK(pthread_create(&th, NULL, send_extra, &e), ==, 0);
		read_all_of(c, 2, s_sent);
		if (how == READS_AND_SENDS)
			CHECK(pthread_join(th, NULL), ==, 0);
		CHECK_OK(shutdown(c, SHUT_WR));
		CHECK(wait_fd(c, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
		CHECK(read(c, &b, 1), ==, 0);
		_exit(0);
	}
	CHECK_OK(close(c));
	grow(s, 1);
	CHECK(write(read_it[1], "r", 1), ==, 1);
	s_sent = fill(s, 2);
	CHECK(read(up[0], &c_sent, sizeof(c_sent)), ==, (ssize_t)sizeof(c_sent));
	CHECK(write(down[1], &s_sent, sizeof(s_sent)), ==, (ssize_t)sizeof(s_sent));   /* it reads now */
	if (how == CLOSES)
		CHECK(write(read_it[1], "c", 1), ==, 1);
	/* a raw clone: under shunt the server's end moves back to kernel TCP, with its unread bytes */
	long pid = syscall(SYS_clone, SIGCHLD, 0L, 0L, 0L, 0L);
	if (pid == 0)
		_exit(0);
	CHECK(pid, >, 0);
	xwait_child_ok((pid_t)pid);
	expect_downgraded(s);   /* it really moved */
	long long got = how == CLOSES ? read_part_of(s, 1, c_sent) : c_sent + (how == READS_AND_SENDS ? EXTRA : 0);
	if (how != CLOSES) {
		read_all_of(s, 1, got);
		CHECK(wait_fd(s, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
		CHECK(read(s, &b, 1), ==, 0);
	}
	CHECK_OK(close(s));
	xwait_child_ok(child);
	for (int i = 0; i < 2; i++) {
		close(up[i]);
		close(down[i]);
		close(read_it[i]);
	}
	printf("%s: client sent %lld, server %lld: ok\n",
	       how == READS ? "client reading" : how == READS_AND_SENDS ? "client sending too" : "client closing",
	       got, s_sent);
}

int main(void)
{
	round_trip(READS);
	round_trip(READS_AND_SENDS);
	round_trip(CLOSES);
	PASS();
}
