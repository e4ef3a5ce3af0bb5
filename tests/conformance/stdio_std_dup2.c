/* stdio_std_dup2: an accelerated socket moved onto fd 1, 0 or 2 with dup2 (as bash does for
 * `printf ... >&3`), used through the standard streams, then the old fd put back:
 *   - stdout: output buffered before the dup2 goes to the socket (the next flush writes to
 *     whatever fd 1 is then), printf/puts/putchar/fwrite crossing the buffer, fflush; output
 *     left unflushed when fd 1 is put back goes to the old fd 1, not the socket; fileno(stdout)
 *     is 1 throughout;
 *   - stdin: fgets and fread of lines and a block crossing the buffer, then the old stdin;
 *   - stderr: fprintf and perror (which glibc writes through stderr), unbuffered;
 *   - close(1) while the socket is there, then dup2 of the old fd: stdout works on it;
 *   - freopen of stdout while the socket is there: flushed to it, then the file is on fd 1;
 *   - fclose(stdout) while the socket is there: flushed to it, fd 1 closed.
 * The old fd 1 is a pipe the test reads, so every byte of both destinations is checked. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define BLOCK 200000
#define LINES 1500

static char blk[BLOCK], got[BLOCK + 64];

/* The socket's reader: the ring holds less than what is written before the test reads it. */
struct reader { int fd; char *buf; size_t len; };

static void *read_side(void *arg)
{
	struct reader *r = arg;

	xread_exact(r->fd, r->buf, r->len);
	return NULL;
}

static void expect_bytes(int fd, const char *want, size_t len)
{
	char *buf = malloc(len + 1);

	CHECK(buf != NULL, ==, 1);
	xread_exact(fd, buf, len);
	buf[len] = '\0';
	if (memcmp(buf, want, len) != 0)
		FAIL("got \"%.80s\", want \"%.80s\"", buf, want);
	free(buf);
}

/* What the pipe (the old fd 1) holds now, at most cap bytes, without waiting. */
static size_t drain_pipe(int fd, char *out, size_t cap)
{
	size_t n = 0;
	ssize_t r;

	while (n < cap && (r = read(fd, out + n, cap - n)) > 0)
		n += (size_t)r;
	out[n] = '\0';
	return n;
}

int main(void)
{
	int c, s, pfd[2], saved;
	char line[128], want[128], piped[256];

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(pfd));
	set_nonblocking(pfd[0], 1);
	/* fd 1 is our pipe from now on, fully buffered as glibc makes it for a pipe */
	CHECK_OK(dup2(pfd[1], 1));
	CHECK_OK(close(pfd[1]));
	saved = CHECK_OK(fcntl(1, F_DUPFD_CLOEXEC, 10));

	/* ---- stdout: what the socket must get, read by a thread meanwhile ---- */
	size_t want_len = 7 + 11 + BLOCK;
	char *expect = malloc(want_len + LINES * 32), *seen;

	CHECK(expect != NULL, ==, 1);
	memcpy(expect, "before-", 7);
	size_t at = 7;
	for (int i = 0; i < LINES; i++)
		at += (size_t)sprintf(expect + at, "out %04d %s\n", i, (i % 3) ? "printf" : "-------");
	memcpy(expect + at, "puts line\n!", 11);
	at += 11;
	pattern_fill(5, 0, blk, BLOCK);
	memcpy(expect + at, blk, BLOCK);
	want_len = at + BLOCK;
	seen = malloc(want_len);
	CHECK(seen != NULL, ==, 1);
	struct reader rd = { s, seen, want_len };
	pthread_t th;
	CHECK(pthread_create(&th, NULL, read_side, &rd), ==, 0);

	CHECK(printf("before-") , ==, 7);            /* buffered for fd 1: the socket gets it */
	CHECK(dup2(c, 1), ==, 1);
	expect_accelerated(1);
	CHECK(fileno(stdout), ==, 1);
	for (int i = 0; i < LINES; i++)
		CHECK(printf("out %04d %s\n", i, (i % 3) ? "printf" : "-------"), >, 0);
	CHECK(puts("puts line"), >=, 0);
	CHECK(putchar('!'), ==, '!');
	CHECK(fwrite(blk, 1, BLOCK, stdout), ==, BLOCK);
	CHECK(fflush(stdout), ==, 0);
	CHECK(printf("after-unflushed"), ==, 15);     /* still buffered when fd 1 goes back */
	CHECK(dup2(saved, 1), ==, 1);
	CHECK(fileno(stdout), ==, 1);
	CHECK(printf(" on the pipe\n"), ==, 13);
	CHECK(fflush(stdout), ==, 0);

	CHECK(pthread_join(th, NULL), ==, 0);
	for (size_t i = 0; i < want_len; i++)
		if (seen[i] != expect[i])
			FAIL("stdout byte %zu of %zu: got 0x%02x, want 0x%02x", i, want_len,
			     (unsigned char)seen[i], (unsigned char)expect[i]);
	CHECK(drain_pipe(pfd[0], piped, sizeof(piped) - 1), ==, strlen("after-unflushed on the pipe\n"));
	CHECK(strcmp(piped, "after-unflushed on the pipe\n"), ==, 0);
	CHECK_ERRNO(recv(s, got, 1, MSG_DONTWAIT), EAGAIN);   /* nothing more reached the socket */

	/* ---- stdin ---- */
	int saved_in = CHECK_OK(fcntl(0, F_DUPFD_CLOEXEC, 10));

	pattern_fill(6, 0, blk, BLOCK);
	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		for (int i = 0; i < LINES; i++) {
			int n = snprintf(want, sizeof(want), "in %04d\n", i);

			xwrite_all(s, want, (size_t)n);
		}
		xwrite_all(s, blk, BLOCK);
		xwrite_all(s, "tail\n", 5);
		_exit(0);
	}
	CHECK(dup2(c, 0), ==, 0);
	expect_accelerated(0);
	for (int i = 0; i < LINES; i++) {
		snprintf(want, sizeof(want), "in %04d\n", i);
		CHECK(fgets(line, sizeof(line), stdin) != NULL, ==, 1);
		if (strcmp(line, want) != 0)
			FAIL("stdin line %d: \"%s\", want \"%s\"", i, line, want);
	}
	CHECK(fread(got, 1, BLOCK, stdin), ==, BLOCK);
	CHECK_PATTERN(6, 0, got, BLOCK);
	CHECK(fgets(line, sizeof(line), stdin) != NULL, ==, 1);
	CHECK(strcmp(line, "tail\n"), ==, 0);
	xwait_child_ok(pid);
	CHECK(dup2(saved_in, 0), ==, 0);
	CHECK_OK(close(saved_in));

	/* ---- stderr: unbuffered; perror writes through it ---- */
	int saved_err = CHECK_OK(fcntl(2, F_DUPFD_CLOEXEC, 10));

	CHECK(dup2(c, 2), ==, 2);
	expect_accelerated(2);
	CHECK(fprintf(stderr, "err %d\n", 42), ==, 7);
	expect_bytes(s, "err 42\n", 7);                /* no fflush: stderr is unbuffered */
	errno = ENOENT;
	perror("probe");
	snprintf(want, sizeof(want), "probe: %s\n", strerror(ENOENT));
	expect_bytes(s, want, strlen(want));
	CHECK(dup2(saved_err, 2), ==, 2);
	CHECK_OK(close(saved_err));

	/* ---- close(1) while the socket is there, then the old fd 1 back ---- */
	CHECK(dup2(c, 1), ==, 1);
	CHECK(printf("x"), ==, 1);
	CHECK(fflush(stdout), ==, 0);
	expect_bytes(s, "x", 1);
	CHECK_OK(close(1));
	CHECK(dup2(saved, 1), ==, 1);
	CHECK(printf("back on the pipe\n"), ==, 17);
	CHECK(fflush(stdout), ==, 0);
	CHECK(drain_pipe(pfd[0], piped, sizeof(piped) - 1), ==, 17);
	CHECK(strcmp(piped, "back on the pipe\n"), ==, 0);
	CHECK_ERRNO(recv(s, got, 1, MSG_DONTWAIT), EAGAIN);

	/* ---- freopen of stdout while the socket is there ---- */
	char fbuf[32] = "";

	CHECK(dup2(c, 1), ==, 1);
	CHECK(printf("to-socket"), ==, 9);
	CHECK(freopen("stdio_std_dup2.out", "w", stdout) != NULL, ==, 1);
	expect_bytes(s, "to-socket", 9);
	CHECK(fileno(stdout), ==, 1);
	CHECK(printf("to-file"), ==, 7);
	CHECK(fflush(stdout), ==, 0);
	FILE *check = fopen("stdio_std_dup2.out", "r");
	CHECK(check != NULL, ==, 1);
	CHECK(fread(fbuf, 1, sizeof(fbuf) - 1, check), ==, 7);
	CHECK(strcmp(fbuf, "to-file"), ==, 0);
	CHECK(fclose(check), ==, 0);
	CHECK_ERRNO(recv(s, got, 1, MSG_DONTWAIT), EAGAIN);

	/* ---- fclose(stdout) while the socket is there: the rest goes, fd 1 closes ---- */
	CHECK(dup2(c, 1), ==, 1);
	expect_accelerated(1);
	CHECK(printf("last"), ==, 4);
	CHECK(fclose(stdout), ==, 0);
	expect_bytes(s, "last", 4);
	CHECK_ERRNO(fcntl(1, F_GETFD), EBADF);

	expect_accelerated(c);
	expect_accelerated(s);
	CHECK_OK(close(c));
	CHECK(recv(s, got, 1, 0), ==, 0);
	CHECK_OK(close(s));
	CHECK_OK(close(saved));
	PASS();
}
