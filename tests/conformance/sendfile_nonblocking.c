/* sendfile_nonblocking: sendfile of a large file onto a non-blocking socket nobody reads:
 * each call moves part of it (never blocks), the offset advances by exactly what the call
 * returned and the file position not at all, and once nothing fits the call fails with
 * EAGAIN leaving the offset alone. Then a reader gets exactly the file's bytes up to the
 * final offset. A count of 0 returns 0. Accelerated: the bytes went through the ring. */
#include "check.h"
#include "net.h"

#include <sys/sendfile.h>

#define FILE_SIZE (64 * 1024 * 1024)
#define SEED 43

int main(void)
{
	static char buf[1024 * 1024];
	char path[] = "/tmp/shunt-conformance-sendfile-nb-XXXXXX";
	int c, s, file;
	off_t off = 0;

	file = CHECK_OK(mkstemp(path));
	CHECK_OK(unlink(path));
	for (off_t o = 0; o < FILE_SIZE; o += sizeof buf) {
		pattern_fill(SEED, (uint64_t)o, buf, sizeof buf);
		xwrite_all(file, buf, sizeof buf);
	}
	CHECK_OK(lseek(file, 0, SEEK_SET));
	tcp_pair_checked(AF_INET, &c, &s);
	set_nonblocking(c, 1);

	CHECK(sendfile(c, file, &off, 0), ==, 0);
	int calls = 0;
	for (;;) {
		off_t before = off;
		ssize_t n = sendfile(c, file, &off, FILE_SIZE - (size_t)off);

		if (n == -1) {
			CHECK(errno == EAGAIN || errno == EWOULDBLOCK, ==, 1);
			CHECK(off, ==, before);
			break;
		}
		CHECK(n, >, 0);
		CHECK(off, ==, before + n);
		CHECK(off, <, FILE_SIZE);   /* a socket nobody reads cannot take 64 MiB */
		calls++;
	}
	CHECK(calls, >, 0);
	CHECK(lseek(file, 0, SEEK_CUR), ==, 0);

	uint64_t got = 0;
	while (got < (uint64_t)off) {
		size_t want = (uint64_t)off - got < sizeof buf ? (size_t)((uint64_t)off - got) : sizeof buf;
		ssize_t n = read(s, buf, want);

		CHECK(n, >, 0);
		CHECK_PATTERN(SEED, got, buf, (size_t)n);
		got += (uint64_t)n;
	}
	CHECK_ERRNO(recv(s, buf, 1, MSG_DONTWAIT), EAGAIN);
	if (test_mode_accelerated())
		CHECK(shunt_counter(c, "bytes_out"), >=, (long long)off);
	set_nonblocking(c, 0);
	xexchange_both(c, s);
	CHECK_OK(close(file));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
