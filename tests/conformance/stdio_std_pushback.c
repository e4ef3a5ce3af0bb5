/* stdio_std_pushback: bytes pushed back with ungetc on stdin, where an accelerated socket comes
 * onto fd 0 or leaves it, come first, in order, as without shunt, and the connection stays
 * accelerated (both ends). glibc keeps a pushed-back byte that is not the last one read in a
 * backup area, the read-ahead it pushed in front of waiting behind it. Three moments:
 *   - the socket leaves fd 0 while shunt's stream holds "Z" pushed back and "FG" read ahead:
 *     the program's FILE gives "ZFG", then the pipe now on fd 0 (before 2026-11-29 the "FG"
 *     was lost: only the backup area was carried over);
 *   - the socket comes onto fd 0 while the program's FILE holds "Q" pushed back and "yz" read
 *     ahead of a pipe: "Qyz", then the socket's bytes (before, the connection fell back to
 *     kernel TCP, reason stdio; in the fabric modes a client awaiting its hello then read the
 *     hello through libc's own read as the program's bytes);
 *   - the same with only pushed-back bytes ("AB"), the socket's bytes after them.
 * Each checked against the kernel's answer: the plain mode runs the same steps. */
#include "check.h"
#include "net.h"

#include <sys/ioctl.h>

/* A pipe holding text, its write end closed; returns the read end. */
static int pipe_with(const char *text)
{
	int p[2];

	CHECK_OK(pipe(p));
	xwrite_all(p[1], text, strlen(text));
	CHECK_OK(close(p[1]));
	return p[0];
}

static void stdin_from(int fd)
{
	CHECK(dup2(fd, 0), ==, 0);
	CHECK_OK(close(fd));
}

/* Waits until n bytes are there to read on fd (so that one read of stdio's takes them all,
 * as the kernel's own socket would give them once they arrived). */
static void wait_readable(int fd, int n)
{
	for (int i = 0; i < 5000; i++) {
		int have = 0;

		CHECK_OK(ioctl(fd, FIONREAD, &have));
		if (have >= n)
			return;
		usleep(1000);
	}
	FAIL("fd %d: %d bytes did not arrive in 5 s", fd, n);
}

static void expect_line(const char *want)
{
	char buf[64];

	CHECK(fgets(buf, sizeof(buf), stdin) != NULL, ==, 1);
	if (strcmp(buf, want) != 0)
		FAIL("stdin gave \"%s\", expected \"%s\"", buf, want);
}

static void still_one_connection(int c, int s)
{
	char buf[4];

	xwrite_all(c, "ok", 2);
	xread_exact(s, buf, 2);
	CHECK(memcmp(buf, "ok", 2), ==, 0);
	xwrite_all(s, "go", 2);
	xread_exact(c, buf, 2);
	CHECK(memcmp(buf, "go", 2), ==, 0);
	expect_stayed_accelerated(c);
	expect_stayed_accelerated(s);
	CHECK_OK(close(c));
	CHECK(recv(s, buf, 1, 0), ==, 0);
	CHECK_OK(close(s));
}

int main(void)
{
	int c, s, c0;
	int saved = CHECK_OK(fcntl(0, F_DUPFD_CLOEXEC, 10));

	/* ---- the socket leaves fd 0 with a byte pushed back in front of read-ahead ---- */
	tcp_pair_checked(AF_INET, &c, &s);
	c0 = CHECK_OK(dup(c));
	stdin_from(c0);
	xwrite_all(s, "EFG", 3);
	wait_readable(c, 3);
	CHECK(fgetc(stdin), ==, 'E');
	CHECK(ungetc('Z', stdin), ==, 'Z');
	stdin_from(pipe_with("hi\n"));
	expect_line("ZFGhi\n");
	still_one_connection(c, s);

	/* ---- the socket comes onto fd 0 under a byte pushed back in front of read-ahead ---- */
	tcp_pair_checked(AF_INET, &c, &s);
	stdin_from(pipe_with("xyz"));
	CHECK(fgetc(stdin), ==, 'x');
	CHECK(ungetc('Q', stdin), ==, 'Q');
	c0 = CHECK_OK(dup(c));
	stdin_from(c0);
	xwrite_all(s, "CD\n", 3);
	expect_line("QyzCD\n");
	stdin_from(pipe_with(""));
	still_one_connection(c, s);

	/* ---- the same with pushed-back bytes only ---- */
	tcp_pair_checked(AF_INET, &c, &s);
	CHECK(fgetc(stdin), ==, EOF);   /* the empty pipe of the round before */
	clearerr(stdin);
	CHECK(ungetc('B', stdin), ==, 'B');
	CHECK(ungetc('A', stdin), ==, 'A');
	c0 = CHECK_OK(dup(c));
	stdin_from(c0);
	xwrite_all(s, "CD\n", 3);
	expect_line("ABCD\n");
	CHECK(dup2(saved, 0), ==, 0);
	CHECK_OK(close(saved));
	still_one_connection(c, s);
	PASS();
}
