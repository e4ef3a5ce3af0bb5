/* stdio_wide_late_hello: a client reads its connection as a wide-oriented stdin (fgetws) before
 * anything came, and its server writes its first line only 300 ms later (a thread of this
 * process). The kernel: fgetws waits, and returns that line; the same read with getwchar, one
 * character at a time. Under shunt a wide stream cannot
 * be carried (stdio_std_fallback), so the connection goes to kernel TCP (reason stdio) and the
 * line arrives as sent. On the fabric (modes fabric, fabric-tcp) the server's hello goes
 * before its first byte, and the client, whose reads now go to the kernel through libc's
 * internal read: before 2026-11-30 the hello reached the program as bytes (fgetws failed,
 * EILSEQ). Shunt now takes it off before a wide read whose buffers are empty
 * (src/interpose/wide_stdio_calls.c). */
#include "check.h"
#include "net.h"
#include "late_stdin.h"

#include <wchar.h>

/* One connection on stdin, read as a line (fgetws) or character by character (getwchar). */
static void round_on_stdin(int by_char)
{
	wchar_t line[32];
	struct late_stdin l;

	late_stdin_begin(&l, "late line\n");
	if (by_char) {
		size_t n = 0;
		wint_t w;

		while (n < 31 && (w = getwchar()) != WEOF) {
			line[n++] = (wchar_t)w;
			if (w == L'\n')
				break;
		}
		line[n] = 0;
	} else {
		CHECK(fgetws(line, 32, stdin) != NULL, ==, 1);
	}
	if (wcscmp(line, L"late line\n") != 0)
		FAIL("%s read %zu wide characters that are not the server's line (its first: %#x)",
		     by_char ? "getwchar" : "fgetws", wcslen(line), (unsigned)line[0]);
	late_stdin_end(&l);
}

int main(void)
{
	CHECK(fwide(stdin, 1), >, 0);
	round_on_stdin(0);
	round_on_stdin(1);
	puts("ok");
	return 0;
}
