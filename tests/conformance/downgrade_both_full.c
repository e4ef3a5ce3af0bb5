/* downgrade_both_full: both ends of a connection have filled it with bytes the other has not
 * read (a megabyte each way, as much as each could send without blocking once the rings had
 * grown), then one end's process makes a raw clone, which under shunt moves the connection
 * back to kernel TCP: each end then re-sends over TCP what the other never read of its
 * ring. Both read everything the other sent, in order, and the end. The client starts its
 * part once the server is leaving (50 ms after the server says it makes the clone), in five
 * rounds: it only reads; it also sends half a megabyte more from a second thread while its
 * first thread reads (that send waits behind the client's re-send); it sends that half
 * megabyte and reads from one thread, non-blocking, driven by poll, then by epoll (a send
 * answers EAGAIN until the re-send is in, and the waits look again while it is not); it
 * reads, then waits with MSG_WAITALL for an answer whose second half the server sends only
 * once it has read all the client sent (that wait must not sit in the kernel while the
 * client's re-send is not in); it shuts down its write side before it reads (the shutdown
 * returns at once, a send after it fails with EPIPE, the server reads everything, then the
 * end); it closes without reading (as the kernel, its unread bytes make that close a reset, which
 * may cut off what its kernel had not sent yet: the server reads a correct part of the
 * stream, then the end or the reset, and nothing waits for good).
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
#include <sys/epoll.h>
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

enum client { READS, READS_AND_SENDS, POLL_LOOP, EPOLL_LOOP, WAITALL, SHUTS, CLOSES };

/* The server's answer in round WAITALL, in two halves, pattern 3. */
#define ANSWER 200

/* One thread sends EXTRA bytes (pattern 1 from offset from) and reads len bytes (pattern 2),
 * non-blocking, sending first whenever both are possible, waiting in poll or epoll_wait. */
static void pump(int fd, long long from, long long len, int use_epoll)
{
	static char out[EXTRA], in[64 * 1024];
	long long sent = 0, got = 0;
	int ep = -1;

	pattern_fill(1, (uint64_t)from, out, sizeof(out));
	set_nonblocking(fd, 1);
	if (use_epoll) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT, .data.fd = fd };
		ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
	}
	while (sent < EXTRA || got < len) {
		int rev;
		if (use_epoll) {
			struct epoll_event ev;
			CHECK(epoll_wait(ep, &ev, 1, NET_WAIT_MS), ==, 1);
			rev = (int)ev.events;
		} else {
			struct pollfd p = { .fd = fd, .events = POLLIN | (sent < EXTRA ? POLLOUT : 0) };
			CHECK(poll(&p, 1, NET_WAIT_MS), ==, 1);
			rev = p.revents;
		}
		CHECK(rev & (POLLERR | POLLHUP), ==, 0);
		if ((rev & POLLOUT) && sent < EXTRA) {
			ssize_t n = send(fd, out + sent, (size_t)(EXTRA - sent), MSG_NOSIGNAL);
			if (n < 0)
				CHECK(errno, ==, EAGAIN);
			else
				sent += n;
			if (use_epoll && sent == EXTRA) {
				struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
				CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev));
			}
		}
		if (rev & POLLIN) {
			ssize_t n = recv(fd, in, sizeof(in), 0);
			if (n < 0) {
				CHECK(errno, ==, EAGAIN);
				continue;
			}
			CHECK(n, >, 0);
			CHECK(got + n, <=, len);
			CHECK_PATTERN(2, (uint64_t)got, in, (size_t)n);
			got += n;
		}
	}
	if (ep >= 0)
		CHECK_OK(close(ep));
	set_nonblocking(fd, 0);
}

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
		/* the server makes its raw clone now: under shunt its end is leaving by
		 * the time this end goes on */
		CHECK(read(read_it[0], &b, 1), ==, 1);
		usleep(50 * 1000);
		if (how == CLOSES) {
			CHECK_OK(close(c));
			_exit(0);
		}
		if (how == SHUTS) {
			CHECK_OK(shutdown(c, SHUT_WR));
			CHECK(send(c, "x", 1, MSG_NOSIGNAL), ==, -1);
			CHECK(errno, ==, EPIPE);
			read_all_of(c, 2, s_sent);
			CHECK(wait_fd(c, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
			CHECK(read(c, &b, 1), ==, 0);
			_exit(0);
		}
		pthread_t th;
		struct extra e = { c, c_sent };
		if (how == READS_AND_SENDS)
			CHECK(pthread_create(&th, NULL, send_extra, &e), ==, 0);
		if (how == POLL_LOOP || how == EPOLL_LOOP)
			pump(c, c_sent, s_sent, how == EPOLL_LOOP);
		else
			read_all_of(c, 2, s_sent);
		if (how == READS_AND_SENDS)
			CHECK(pthread_join(th, NULL), ==, 0);
		if (how == WAITALL) {
			char answer[ANSWER];
			CHECK(recv(c, answer, sizeof(answer), MSG_WAITALL), ==, (ssize_t)sizeof(answer));
			CHECK_PATTERN(3, 0, answer, sizeof(answer));
		}
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
	CHECK(write(read_it[1], "c", 1), ==, 1);
	/* a raw clone: under shunt the server's end moves back to kernel TCP, with its unread bytes */
	long pid = syscall(SYS_clone, SIGCHLD, 0L, 0L, 0L, 0L);
	if (pid == 0)
		_exit(0);
	CHECK(pid, >, 0);
	xwait_child_ok((pid_t)pid);
	expect_downgraded(s);   /* it really moved */
	long long got = how == CLOSES ? read_part_of(s, 1, c_sent) : c_sent + (how == READS || how == WAITALL || how == SHUTS ? 0 : EXTRA);
	char answer[ANSWER];
	pattern_fill(3, 0, answer, sizeof(answer));
	if (how == WAITALL)
		xwrite_all(s, answer, ANSWER / 2);
	if (how != CLOSES) {
		read_all_of(s, 1, got);
		if (how == WAITALL)
			xwrite_all(s, answer + ANSWER / 2, ANSWER / 2);
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
	static const char *const names[] = { "client reading", "client sending too", "client in a poll loop",
					     "client in an epoll loop", "client waiting for all of an answer",
					     "client shutting down first", "client closing" };
	printf("%s: client sent %lld, server %lld: ok\n", names[how], got, s_sent);
}

int main(void)
{
	round_trip(READS);
	round_trip(READS_AND_SENDS);
	round_trip(POLL_LOOP);
	round_trip(EPOLL_LOOP);
	round_trip(WAITALL);
	round_trip(SHUTS);
	round_trip(CLOSES);
	PASS();
}
