/* stdio_fdopen: stdio streams made with fdopen on an accelerated socket carry every byte both
 * ways (glibc's stdio writes with libc's internal write, which a preload does not see: under
 * shunt such a stream must go through shunt's calls). Lines with fprintf and fputs, blocks with
 * fwrite, all crossing the stdio buffer many times, read back with fgets and fread in odd sizes;
 * fileno answers the fd; fclose closes it (the peer sees EOF after the last byte); fdopen's own
 * rules: EINVAL for a bad mode, EBADF for a closed fd, "a" sets O_APPEND; freopen of such a stream
 * flushes it to the socket and puts the file on the same fd number. In accelerated mode
 * the channel's counters prove that the bytes went through the rings. */
#include "check.h"
#include "net.h"

#define LINES 3000
#define BLOCK 300000

static char blk[BLOCK], got[BLOCK];

static void line_of(char *out, size_t cap, int i, char tag)
{
	snprintf(out, cap, "%c line %05d %.*s\n", tag, i, (i * 7) % 90, "abcdefghijklmnopqrstuvwxyz"
		 "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ");
}

/* Writes lines (fprintf and fputs), a block (fwrite, in pieces around the buffer size), a last line. */
static void send_all_kinds(FILE *w, char tag, uint64_t seed)
{
	char line[160];

	for (int i = 0; i < LINES; i++) {
		line_of(line, sizeof(line), i, tag);
		if (i % 2)
			CHECK(fputs(line, w), >=, 0);
		else
			CHECK(fprintf(w, "%s", line), ==, (int)strlen(line));
	}
	pattern_fill(seed, 0, blk, BLOCK);
	for (size_t off = 0, k = 1; off < BLOCK; k = k * 3 + 1) {
		size_t n = (k % 9000) + 1;

		if (n > BLOCK - off)
			n = BLOCK - off;
		CHECK(fwrite(blk + off, 1, n, w), ==, n);
		off += n;
	}
	CHECK(fputs("end\n", w), >=, 0);
	CHECK(fflush(w), ==, 0);
}

static void recv_all_kinds(FILE *r, char tag, uint64_t seed)
{
	char line[160], want[160];

	for (int i = 0; i < LINES; i++) {
		line_of(want, sizeof(want), i, tag);
		if (!fgets(line, sizeof(line), r))
			FAIL("line %d: fgets: EOF %d error %d", i, feof(r), ferror(r));
		if (strcmp(line, want) != 0)
			FAIL("line %d: got \"%s\", want \"%s\"", i, line, want);
	}
	for (size_t off = 0, k = 5; off < BLOCK; k = k * 7 + 3) {
		size_t n = (k % 13000) + 1;

		if (n > BLOCK - off)
			n = BLOCK - off;
		CHECK(fread(got + off, 1, n, r), ==, n);
		off += n;
	}
	CHECK_PATTERN(seed, 0, got, BLOCK);
	CHECK(fgets(line, sizeof(line), r) != NULL, ==, 1);
	CHECK(strcmp(line, "end\n"), ==, 0);
}

int main(void)
{
	int c, s, cw, sw;
	char line[16];
	FILE *cr, *cwf, *sr, *swf;

	tcp_pair_checked(AF_INET, &c, &s);
	cw = CHECK_OK(dup(c));
	sw = CHECK_OK(dup(s));
	cwf = fdopen(cw, "w");
	cr = fdopen(c, "r");
	CHECK(cwf != NULL && cr != NULL, ==, 1);
	CHECK(fileno(cwf), ==, cw);
	CHECK(fileno(cr), ==, c);
	CHECK(fileno_unlocked(cr), ==, c);
	expect_accelerated(fileno(cwf));

	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(c));
		CHECK_OK(close(cw));
		swf = fdopen(sw, "a");   /* "a": O_APPEND set on the socket, as glibc does */
		sr = fdopen(s, "r+");
		CHECK(swf != NULL && sr != NULL, ==, 1);
		CHECK(CHECK_OK(fcntl(sw, F_GETFL)) & O_APPEND, ==, O_APPEND);
		CHECK(fileno(sr), ==, s);
		recv_all_kinds(sr, 'c', 11);
		send_all_kinds(swf, 's', 22);
		CHECK(fread(line, 1, 12, sr), ==, 12);
		CHECK(memcmp(line, "via-freopen-", 12), ==, 0);
		/* after the client's fclose of both its streams: EOF, nothing added */
		CHECK(fgets(line, sizeof(line), sr) == NULL, ==, 1);
		CHECK(feof(sr) != 0, ==, 1);
		CHECK(fclose(swf), ==, 0);
		CHECK(fclose(sr), ==, 0);
		CHECK_ERRNO(fcntl(s, F_GETFD), EBADF);
		CHECK_ERRNO(fcntl(sw, F_GETFD), EBADF);
		_exit(0);
	}
	CHECK_OK(close(s));
	CHECK_OK(close(sw));
	long long before = shunt_counter(c, "bytes_out");

	send_all_kinds(cwf, 'c', 11);
	recv_all_kinds(cr, 's', 22);
	if (test_mode_accelerated()) {
		/* the client's bytes went into the ring, none into the kernel socket as "doorbells" */
		CHECK(shunt_counter(c, "bytes_out") - before, >=, (long long)BLOCK);
		CHECK(shunt_counter(c, "bytes_in"), >=, (long long)BLOCK);
	}
	expect_accelerated(c);

	/* fdopen's rules */
	CHECK_ERRNO(fdopen(c, "x") == NULL ? -1 : 0, EINVAL);
	CHECK_ERRNO(fdopen(c, "") == NULL ? -1 : 0, EINVAL);
	CHECK_ERRNO(fdopen(999, "r") == NULL ? -1 : 0, EBADF);

	/* freopen: what the stream holds goes to the socket, then the file is on the same fd */
	int fz = CHECK_OK(dup(c));
	FILE *z = fdopen(fz, "w");
	char fbuf[16] = "";

	CHECK(z != NULL, ==, 1);
	CHECK(fputs("via-freopen-", z), >=, 0);
	CHECK(freopen("stdio_fdopen.out", "w", z) == z, ==, 1);
	CHECK(fileno(z), ==, fz);
	CHECK(fputs("file", z), >=, 0);
	CHECK(fclose(z), ==, 0);
	CHECK_ERRNO(fcntl(fz, F_GETFD), EBADF);
	FILE *check = fopen("stdio_fdopen.out", "r");
	CHECK(check != NULL, ==, 1);
	CHECK(fread(fbuf, 1, sizeof(fbuf) - 1, check), ==, 4);
	CHECK(strcmp(fbuf, "file"), ==, 0);
	CHECK(fclose(check), ==, 0);

	/* fclose closes the fd; with both streams closed the peer sees EOF */
	CHECK(fclose(cwf), ==, 0);
	CHECK_ERRNO(fcntl(cw, F_GETFD), EBADF);
	CHECK(fclose(cr), ==, 0);
	CHECK_ERRNO(fcntl(c, F_GETFD), EBADF);
	xwait_child_ok(pid);
	PASS();
}
