/* large_transfer: 64 MiB from a forked child, written in chunks of varying size, arrive
 * byte for byte in order (read with varying sizes), followed by EOF; then 8 MiB back from
 * the parent, which the child checks before it exits 0. */
#include "check.h"
#include "net.h"

#define DOWN (64ULL * 1024 * 1024)
#define UP (8ULL * 1024 * 1024)
#define MAXCHUNK (1024 * 1024)

static char buf[MAXCHUNK];

static void send_stream(int fd, uint64_t seed, uint64_t total)
{
	uint64_t off = 0;

	while (off < total) {
		size_t n = 1 + (size_t)(pattern_word(seed + 1000, off) % MAXCHUNK);

		if (n > total - off)
			n = (size_t)(total - off);
		pattern_fill(seed, off, buf, n);
		xwrite_all(fd, buf, n);
		off += n;
	}
}

static void recv_stream(int fd, uint64_t seed, uint64_t total)
{
	uint64_t off = 0;

	for (;;) {
		size_t want = 1 + (size_t)(pattern_word(seed + 2000, off) % MAXCHUNK);
		ssize_t n = read(fd, buf, want);

		if (n == -1 && errno == EINTR)
			continue;
		CHECK_OK(n);
		if (n == 0)
			break;
		CHECK_PATTERN(seed, off, buf, (size_t)n);
		off += (uint64_t)n;
		CHECK(off, <=, total);
	}
	CHECK(off, ==, total);
}

int main(void)
{
	double t0 = now_sec();
	pid_t pid;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(s));
		send_stream(c, 5, DOWN);
		CHECK_OK(shutdown(c, SHUT_WR));
		recv_stream(c, 6, UP);
		CHECK_OK(close(c));
		_exit(0);
	}
	CHECK_OK(close(c));
	recv_stream(s, 5, DOWN);
	send_stream(s, 6, UP);
	CHECK_OK(shutdown(s, SHUT_WR));
	xwait_child_ok(pid);
	CHECK_OK(close(s));
	fprintf(stderr, "%llu MiB in %.2f s\n", (DOWN + UP) >> 20, now_sec() - t0);
	PASS();
}
