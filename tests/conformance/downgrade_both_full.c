/* downgrade_both_full: both ends of a connection have filled it with bytes the other has not
 * read (a megabyte each way, as much as each could send without blocking once the rings had
 * grown), then one end's process makes a raw clone, which under shunt moves the connection
 * back to kernel TCP: each end then re-sends over TCP what the other never read of its
 * ring. Both read everything the other sent, in order, and the end.
 *
 * Not in crossns mode: across a veth pair the kernel's send buffers hold far less than a
 * megabyte, and the two re-sends wait for each other for good (each waits for room under
 * its end's locks, and each end reads again only after its own re-send): a known limit,
 * docs/compatibility.md ("Known limits"). On loopback the buffers grow to megabytes, and
 * on the fabric a connection leaves by another path: both pass. */
#include "check.h"
#include "net.h"

#include <stdlib.h>
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

int main(void)
{
	int c, s, up[2], down[2], read_it[2];

	if (test_crossns() && !test_fabric())
		SKIP("a move back to TCP with more unread each way than a veth's buffers hold waits for good "
		     "(docs/compatibility.md, known limits)");
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
		read_all_of(c, 2, s_sent);
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
	/* a raw clone: under shunt the server's end moves back to kernel TCP, with its unread bytes */
	long pid = syscall(SYS_clone, SIGCHLD, 0L, 0L, 0L, 0L);
	if (pid == 0)
		_exit(0);
	CHECK(pid, >, 0);
	xwait_child_ok((pid_t)pid);
	read_all_of(s, 1, c_sent);
	CHECK(wait_fd(s, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	CHECK(read(s, &b, 1), ==, 0);
	CHECK_OK(close(s));
	xwait_child_ok(child);
	printf("client sent %lld, server %lld: ok\n", c_sent, s_sent);
	PASS();
}
