/* splice_large: splice with an accelerated socket at one end, beyond what one call moves:
 * 8 MiB socket -> pipe and 8 MiB pipe -> socket, read and written concurrently by a child,
 * arrive exactly; SPLICE_F_NONBLOCK on an empty pipe is EAGAIN; an offset on the pipe is
 * ESPIPE, on the socket EINVAL; without
 * a pipe at either end splice is EINVAL. */
#include "check.h"
#include "net.h"

#define TOTAL (8u * 1024 * 1024)
#define SEED 73

static char buf[1024 * 1024];

int main(void)
{
	int c, s, pp[2], file;
	char path[] = "/tmp/shunt-conformance-splice-XXXXXX";
	loff_t off = 0;
	pid_t pid;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(pp));
	file = CHECK_OK(mkstemp(path));
	CHECK_OK(unlink(path));

	/* errors first, with the kernel's answers */
	CHECK_ERRNO(splice(pp[0], NULL, c, NULL, 100, SPLICE_F_NONBLOCK), EAGAIN);
	CHECK_ERRNO(splice(pp[0], &off, c, NULL, 100, 0), ESPIPE);
	CHECK_ERRNO(splice(s, &off, pp[1], NULL, 100, 0), EINVAL);
	CHECK_ERRNO(splice(s, NULL, pp[1], &off, 100, 0), ESPIPE);
	CHECK_ERRNO(splice(file, NULL, c, NULL, 100, 0), EINVAL);

	/* socket -> pipe: one child writes into the socket, we splice into the pipe, another
	 * child reads the pipe's other end and checks the bytes */
	fflush(NULL);
	pid_t sender = CHECK_OK(fork());
	if (sender == 0) {
		for (uint64_t o = 0; o < TOTAL; o += sizeof buf) {
			pattern_fill(SEED, o, buf, sizeof buf);
			xwrite_all(c, buf, sizeof buf);
		}
		_exit(0);
	}
	pid = CHECK_OK(fork());
	if (pid == 0) {
		uint64_t got = 0;

		while (got < TOTAL) {
			ssize_t n = read(pp[0], buf, sizeof buf);

			CHECK(n, >, 0);
			CHECK_PATTERN(SEED, got, buf, (size_t)n);
			got += (uint64_t)n;
		}
		_exit(0);
	}
	for (uint64_t moved = 0; moved < TOTAL;) {
		ssize_t n = CHECK_OK(splice(s, NULL, pp[1], NULL, TOTAL - moved, 0));

		CHECK(n, >, 0);
		moved += (uint64_t)n;
	}
	xwait_child_ok(sender);
	xwait_child_ok(pid);

	/* pipe -> socket: one child fills the pipe, we splice from it into the socket, another
	 * child reads the socket's peer and checks the bytes */
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		uint64_t got = 0;

		while (got < TOTAL) {
			ssize_t n = read(s, buf, sizeof buf);

			CHECK(n, >, 0);
			CHECK_PATTERN(SEED + 1, got, buf, (size_t)n);
			got += (uint64_t)n;
		}
		_exit(0);
	}
	pid_t writer = CHECK_OK(fork());
	if (writer == 0) {
		for (uint64_t o = 0; o < TOTAL; o += sizeof buf) {
			pattern_fill(SEED + 1, o, buf, sizeof buf);
			xwrite_all(pp[1], buf, sizeof buf);
		}
		_exit(0);
	}
	for (uint64_t moved = 0; moved < TOTAL;) {
		ssize_t n = CHECK_OK(splice(pp[0], NULL, c, NULL, TOTAL - moved, 0));

		CHECK(n, >, 0);
		moved += (uint64_t)n;
	}
	xwait_child_ok(writer);
	xwait_child_ok(pid);
	if (test_mode_accelerated())
		CHECK(shunt_counter(c, "bytes_out"), >=, (long long)TOTAL);

	xexchange_both(c, s);
	CHECK_OK(close(file));
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
