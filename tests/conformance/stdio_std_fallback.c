/* stdio_std_fallback: what shunt's stdio streams cannot carry falls back to kernel TCP, byte for
 * byte: an accelerated socket moved onto fd 1 under a wide-oriented stdout (wprintf: a cookie
 * stream is byte-oriented only), and onto fd 0 under a wide-oriented stdin (fgetws). The bytes
 * arrive as without shunt, and in accelerated mode those connections are on kernel TCP
 * afterwards, both ends, with the reasons recorded: "stdio" for the end stdio was on,
 * "downgraded" for the other. (Bytes pushed back with ungetc are carried: stdio_std_pushback.) */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <wchar.h>

int main(void)
{
	int c, s, saved;
	char buf[64];

	/* ---- wide stdout ---- */
	tcp_pair_checked(AF_INET, &c, &s);
	saved = CHECK_OK(fcntl(1, F_DUPFD_CLOEXEC, 10));
	CHECK(fwide(stdout, 1), >, 0);
	CHECK(dup2(c, 1), ==, 1);
	CHECK(wprintf(L"wide %d\n", 42), ==, 8);
	CHECK(fflush(stdout), ==, 0);
	CHECK(dup2(saved, 1), ==, 1);
	CHECK_OK(close(saved));
	xread_exact(s, buf, 8);
	CHECK(memcmp(buf, "wide 42\n", 8), ==, 0);
	xwrite_all(s, "back", 4);
	xread_exact(c, buf, 4);
	CHECK(memcmp(buf, "back", 4), ==, 0);
	expect_downgraded(c);
	expect_downgraded(s);
	expect_fallback(c, "stdio");
	expect_fallback(s, "downgraded");
	CHECK_OK(close(c));
	CHECK(recv(s, buf, 1, 0), ==, 0);
	CHECK_OK(close(s));

	/* ---- wide stdin, the hello (fabric modes) taken off before by a read ---- */
	tcp_pair_checked(AF_INET, &c, &s);
	xwrite_all(s, "x", 1);
	xread_exact(c, buf, 1);
	saved = CHECK_OK(fcntl(0, F_DUPFD_CLOEXEC, 10));
	CHECK(fwide(stdin, 1), >, 0);
	CHECK(dup2(c, 0), ==, 0);
	xwrite_all(s, "CD\n", 3);
	wchar_t line[16];
	CHECK(fgetws(line, 16, stdin) != NULL, ==, 1);
	CHECK(wcscmp(line, L"CD\n"), ==, 0);
	CHECK(dup2(saved, 0), ==, 0);
	CHECK_OK(close(saved));
	xwrite_all(c, "more", 4);
	xread_exact(s, buf, 4);
	CHECK(memcmp(buf, "more", 4), ==, 0);
	expect_downgraded(c);
	expect_downgraded(s);
	expect_fallback(c, "stdio");
	expect_fallback(s, "downgraded");
	CHECK_OK(close(c));
	CHECK(recv(s, buf, 1, 0), ==, 0);
	CHECK_OK(close(s));
	PASS();
}
