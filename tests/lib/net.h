/*
 * net.h: socket helpers for shunt's tests, written against the socket API only.
 *
 * Owns: the test's server address (loopback, or in crossns mode the server namespace's) and the
 * sockets made where servers live, listeners on ephemeral ports, connected TCP pairs, I/O loops
 * that survive partial transfers, EINTR and EAGAIN, a deterministic byte pattern for checking
 * transfers byte by byte, and a monotonic clock. Header-only; include check.h's rules: a helper
 * whose name starts with x fails the test itself, the others return -1 with errno like the libc
 * calls.
 *
 * crossns mode (SHUNT_TEST_MODE=crossns, tests/run_programs.py): the test runs in the client's
 * network namespace; server_socket() makes its socket in the server's namespace (the file
 * SHUNT_TEST_SERVER_NS names: setns there for the one socket() call, then back; a socket stays
 * in the namespace it was made in), and loopback_addr() is the server namespace's address
 * (SHUNT_TEST_SERVER_ADDR4, SHUNT_TEST_SERVER_ADDR6). Every listener of net.h is made so, so a
 * test's connections cross from one namespace to the other over a veth pair.
 */
#ifndef SHUNT_TESTS_NET_H
#define SHUNT_TESTS_NET_H

#include "check.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A bound on every wait a test does for an event that must happen (the runner's timeout is
 * the real watchdog; this only turns a hang into a precise failure message). */
#define NET_WAIT_MS 5000

static inline double now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

/* An address of one end of the test's connections. */
enum test_end { TEST_SERVER, TEST_CLIENT };

/* A setting crossns mode cannot go without (tests/run_programs.py sets them all). */
static inline const char *crossns_setting(const char *name)
{
	const char *v = getenv(name);

	if (v == NULL || *v == '\0')
		FAIL("SHUNT_TEST_MODE=crossns needs %s (tests/run_programs.py sets it)", name);
	return v;
}

/* Fill *ss with the address of end (TEST_SERVER or TEST_CLIENT) of family (AF_INET or
 * AF_INET6) and port: loopback, or in crossns mode that end's namespace's address on the veth
 * pair (SHUNT_TEST_SERVER_ADDR4, SHUNT_TEST_CLIENT_ADDR6, ...). */
static inline socklen_t test_end_addr(enum test_end end, int family, int port,
				      struct sockaddr_storage *ss)
{
	char name[32];
	const char *text = NULL;

	memset(ss, 0, sizeof(*ss));
	if (test_crossns()) {
		snprintf(name, sizeof(name), "SHUNT_TEST_%s_ADDR%d",
			 end == TEST_SERVER ? "SERVER" : "CLIENT", family == AF_INET6 ? 6 : 4);
		text = crossns_setting(name);
	}
	if (family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		a->sin6_addr = in6addr_loopback;
		if (text != NULL && inet_pton(AF_INET6, text, &a->sin6_addr) != 1)
			FAIL("%s=%s: not an IPv6 address", name, text);
		return sizeof(*a);
	}
	struct sockaddr_in *a = (struct sockaddr_in *)ss;

	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)port);
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (text != NULL && inet_pton(AF_INET, text, &a->sin_addr) != 1)
		FAIL("%s=%s: not an IPv4 address", name, text);
	return sizeof(*a);
}

/* 1 if the address of *sa (a struct sockaddr_in or sockaddr_in6; the port is not compared) is
 * end's (test_end_addr), 0 otherwise. */
#define is_end_addr(sa, end) is_end_addr_of((sa), sizeof(*(sa)), (end))
static inline int is_end_addr_of(const void *sa, size_t len, enum test_end end)
{
	struct sockaddr_storage got, want;

	memset(&got, 0, sizeof(got));
	memcpy(&got, sa, len < sizeof(got) ? len : sizeof(got));
	test_end_addr(end, got.ss_family, 0, &want);
	if (got.ss_family == AF_INET6)
		return IN6_ARE_ADDR_EQUAL(&((struct sockaddr_in6 *)&got)->sin6_addr,
					  &((struct sockaddr_in6 *)&want)->sin6_addr);
	return got.ss_family == AF_INET && ((struct sockaddr_in *)&got)->sin_addr.s_addr ==
						   ((struct sockaddr_in *)&want)->sin_addr.s_addr;
}

/* Fill *ss with the address the test's servers listen at, of family and port: the loopback
 * address, or in crossns mode the server namespace's. */
static inline socklen_t loopback_addr(int family, int port, struct sockaddr_storage *ss)
{
	return test_end_addr(TEST_SERVER, family, port, ss);
}

/* socket(family, type, 0) where the test's servers live: in this network namespace, or in
 * crossns mode in the server's (this thread enters it for the one call and comes back).
 * Returns -1 with socket()'s errno like socket(). */
static inline int server_socket(int family, int type)
{
	int here, there, fd, err;

	if (!test_crossns())
		return socket(family, type, 0);
	here = CHECK_OK(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
	there = CHECK_OK(open(crossns_setting("SHUNT_TEST_SERVER_NS"), O_RDONLY | O_CLOEXEC));
	CHECK_OK(setns(there, CLONE_NEWNET));
	fd = socket(family, type, 0);
	err = errno;
	CHECK_OK(setns(here, CLONE_NEWNET));
	CHECK_OK(close(there));
	CHECK_OK(close(here));
	errno = err;
	return fd;
}

static inline int sockaddr_port(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
	return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

static inline int local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	CHECK_OK(getsockname(fd, (struct sockaddr *)&ss, &len));
	return sockaddr_port(&ss);
}

/* 1 if a TCP server socket can be bound to the IPv6 server address (::1, or in crossns the
 * server namespace's), 0 otherwise. */
static inline int ipv6_loopback_available(void)
{
	struct sockaddr_storage ss;
	socklen_t len = loopback_addr(AF_INET6, 0, &ss);
	int fd = server_socket(AF_INET6, SOCK_STREAM);
	int ok;

	if (fd == -1)
		return 0;
	ok = bind(fd, (struct sockaddr *)&ss, len) == 0;
	close(fd);
	return ok;
}

/* A listening TCP socket on the server address of family (loopback_addr), ephemeral port (in
 * *port), made by server_socket(). */
static inline int tcp_listen_backlog(int family, int backlog, int *port)
{
	struct sockaddr_storage ss;
	socklen_t len = loopback_addr(family, 0, &ss);
	int fd = CHECK_OK(server_socket(family, SOCK_STREAM));

	CHECK_OK(bind(fd, (struct sockaddr *)&ss, len));
	CHECK_OK(listen(fd, backlog));
	if (port != NULL)
		*port = local_port(fd);
	return fd;
}

static inline int tcp_listen(int family, int *port)
{
	return tcp_listen_backlog(family, 16, port);
}

/* A blocking client socket connected to the server address of family (loopback_addr), port. */
static inline int tcp_connect(int family, int port)
{
	struct sockaddr_storage ss;
	socklen_t len = loopback_addr(family, port, &ss);
	int fd = CHECK_OK(socket(family, SOCK_STREAM, 0));

	CHECK_OK(connect(fd, (struct sockaddr *)&ss, len));
	return fd;
}

/* listen + connect + accept on the server address; the listener is closed. Both ends are blocking. */
static inline void tcp_pair(int family, int *client, int *server)
{
	int port;
	int lfd = tcp_listen(family, &port);

	*client = tcp_connect(family, port);
	*server = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK_OK(close(lfd));
}

/* tcp_pair, then expect_accelerated on both ends. */
#define tcp_pair_checked(family, client, server)                                             \
	do {                                                                                 \
		tcp_pair((family), (client), (server));                                      \
		expect_accelerated(*(client));                                               \
		expect_accelerated(*(server));                                               \
	} while (0)

static inline void set_nonblocking(int fd, int on)
{
	int fl = CHECK_OK(fcntl(fd, F_GETFL));

	CHECK_OK(fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK)));
}

/* Wait for events on fd; returns revents, or 0 after timeout_ms. */
static inline short wait_fd(int fd, short events, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	double end = now_sec() + timeout_ms / 1000.0;

	for (;;) {
		int left = (int)((end - now_sec()) * 1000.0);
		int n = poll(&p, 1, left < 0 ? 0 : left);

		if (n == -1 && errno == EINTR)
			continue;
		CHECK_OK(n);
		return n == 0 ? 0 : p.revents;
	}
}

/* Sends zero bytes on fd (blocking) until its buffer is full: the peer reads nothing.
 * Returns how many went in. */
static inline long long xfill(int fd)
{
	static char zeros[64 * 1024];
	long long filled = 0;
	ssize_t n;
	int round = 0;

	set_nonblocking(fd, 1);
	/* The first EAGAIN is not full for good over a link that queues (a veth: kernel TCP
	 * without shunt took 160 KB, then 590 KB more 100 ms later, its bytes in flight
	 * delivered and acknowledged): fill again until a send 100 ms after the last EAGAIN
	 * takes nothing (not POLLOUT: the kernel reports it only once a third of the buffer is
	 * free, and takes less before). */
	for (;;) {
		long long before = filled;

		while ((n = send(fd, zeros, sizeof(zeros), MSG_NOSIGNAL)) > 0)
			filled += n;
		CHECK(errno, ==, EAGAIN);
		if (round > 0 && filled == before)
			break;
		CHECK(++round, <, 100);
		sleep_ms(100);
	}
	set_nonblocking(fd, 0);
	return filled;
}

/*
 * write_all: write len bytes, looping over partial writes, EINTR and (for non-blocking fds)
 * EAGAIN. Returns len, or -1 with errno on the first real error.
 */
static inline ssize_t write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	size_t done = 0;

	while (done < len) {
		ssize_t n = write(fd, p + done, len - done);

		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN) {
			wait_fd(fd, POLLOUT, NET_WAIT_MS);
			continue;
		}
		if (n == -1)
			return -1;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

/*
 * read_exact: read until len bytes or EOF. Returns the count read (short only at EOF), or -1
 * with errno on the first real error.
 */
static inline ssize_t read_exact(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t done = 0;

	while (done < len) {
		ssize_t n = read(fd, p + done, len - done);

		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN) {
			wait_fd(fd, POLLIN, NET_WAIT_MS);
			continue;
		}
		if (n == -1)
			return -1;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

/* read_all: read until EOF or cap bytes. Returns the count, or -1 with errno. */
static inline ssize_t read_all(int fd, void *buf, size_t cap)
{
	return read_exact(fd, buf, cap);
}

/* Fail the test unless len bytes are written / read exactly. */
#define xwrite_all(fd, buf, len) CHECK(write_all((fd), (buf), (len)), ==, (len))
#define xread_exact(fd, buf, len) CHECK(read_exact((fd), (buf), (len)), ==, (len))

/* Send a string and check the peer receives exactly it. */
static inline void xexchange(int from, int to, const char *msg)
{
	size_t len = strlen(msg);
	char buf[256];

	CHECK(len, <=, sizeof(buf));
	xwrite_all(from, msg, len);
	xread_exact(to, buf, len);
	CHECK(memcmp(buf, msg, len), ==, 0);
}

/* Both directions of a connection carry data. */
static inline void xexchange_both(int a, int b)
{
	xexchange(a, b, "ping from a");
	xexchange(b, a, "pong from b");
}

/* Wait (bounded) until the peer's recv-side sees exactly len bytes queued, using MSG_PEEK. */
static inline void wait_queued(int fd, size_t len)
{
	static char scratch[1 << 16];
	double end = now_sec() + NET_WAIT_MS / 1000.0;

	CHECK(len, <=, sizeof(scratch));
	for (;;) {
		ssize_t n = recv(fd, scratch, sizeof(scratch), MSG_PEEK | MSG_DONTWAIT);

		if (n == -1 && errno != EAGAIN && errno != EINTR)
			CHECK_OK(n);
		if (n >= 0 && (size_t)n >= len) {
			CHECK(n, ==, len);
			return;
		}
		if (now_sec() > end)
			FAIL("fd %d: %zd bytes queued after %d ms, expected %zu", fd, n,
			     NET_WAIT_MS, len);
		wait_fd(fd, POLLIN, 10);
		sleep_ms(1);
	}
}

/*
 * The pattern: byte at stream offset off of stream seed. Not periodic, so a lost, repeated or
 * reordered chunk is found at its first byte.
 */
static inline uint64_t pattern_word(uint64_t seed, uint64_t index)
{
	uint64_t z = seed * 0x9e3779b97f4a7c15ULL + index + 0x632be59bd9b4e019ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline void pattern_fill(uint64_t seed, uint64_t off, void *buf, size_t len)
{
	unsigned char *p = buf;
	size_t i = 0;

	while (i < len) {
		uint64_t w = pattern_word(seed, (off + i) / 8);

		for (unsigned b = (unsigned)((off + i) % 8); b < 8 && i < len; b++, i++)
			p[i] = (unsigned char)(w >> (8 * b));
	}
}

/* Index of the first byte of buf that differs from the pattern, or -1. */
static inline long long pattern_mismatch(uint64_t seed, uint64_t off, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	unsigned char expect[4096];

	for (size_t i = 0; i < len; i += sizeof(expect)) {
		size_t n = len - i < sizeof(expect) ? len - i : sizeof(expect);

		pattern_fill(seed, off + i, expect, n);
		if (memcmp(expect, p + i, n) != 0) {
			for (size_t j = 0; j < n; j++)
				if (expect[j] != p[i + j])
					return (long long)(i + j);
		}
	}
	return -1;
}

#define CHECK_PATTERN(seed, off, buf, len)                                                   \
	do {                                                                                 \
		long long bad_ = pattern_mismatch((seed), (off), (buf), (len));              \
		if (bad_ != -1)                                                              \
			FAIL("pattern mismatch at stream offset %llu",                       \
			     (unsigned long long)(off) + (unsigned long long)bad_);          \
	} while (0)

/* Blocking writes of stream seed's pattern from off to total, 64 KiB at a time. */
static inline void xsend_pattern(int fd, uint64_t seed, uint64_t off, uint64_t total)
{
	static unsigned char buf[65536];

	while (off < total) {
		size_t n = total - off < sizeof(buf) ? (size_t)(total - off) : sizeof(buf);

		pattern_fill(seed, off, buf, n);
		xwrite_all(fd, buf, n);
		off += n;
	}
}

/* Reads stream seed's pattern from off to total (never past it), checking every byte. */
static inline void xread_pattern(int fd, uint64_t seed, uint64_t off, uint64_t total)
{
	static unsigned char buf[65536];

	while (off < total) {
		size_t want = total - off < sizeof(buf) ? (size_t)(total - off) : sizeof(buf);
		ssize_t n = read(fd, buf, want);

		CHECK(n, >, 0);
		CHECK_PATTERN(seed, off, buf, (size_t)n);
		off += (uint64_t)n;
	}
}

/* Wait for a child and require a clean exit with status 0. */
static inline void xwait_child_ok(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) == -1) {
		if (errno != EINTR)
			CHECK_OK(-1);
	}
	if (WIFSIGNALED(status))
		FAIL("child %d killed by signal %d", (int)pid, WTERMSIG(status));
	CHECK(WEXITSTATUS(status), ==, 0);
}

#endif /* SHUNT_TESTS_NET_H */
