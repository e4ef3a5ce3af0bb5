/* stdio_wscanf_late_hello: a client scans its connection as a wide-oriented stdin (wscanf,
 * fwscanf, vwscanf, vfwscanf: by the names a C99 to C17 program calls, glibc's __isoc99_ ones)
 * before anything came, and its server writes its first line only 300 ms later (a thread of
 * this process). The kernel: the scan waits, and reads that line's word and number. Under
 * shunt a wide stream cannot be carried (stdio_std_fallback), so the connection goes to kernel
 * TCP (reason stdio). On the fabric (modes fabric, fabric-tcp) the server's hello goes before
 * its first byte, and libc scans through its own internal read, which shunt does not see:
 * before 2026-11-30 the scan met the hello's bytes (no match, or a wrong word). Shunt now
 * takes the hello off before a scan of a stream whose buffers are empty
 * (src/interpose/wide_stdio_calls.c), as before fgetws (stdio_wide_late_hello). */
#include "check.h"
#include "net.h"
#include "late_stdin.h"

#include <stdarg.h>
#include <wchar.h>

enum scan { BY_WSCANF, BY_FWSCANF, BY_VWSCANF, BY_VFWSCANF, SCANS };
static const char *const scan_names[] = { "wscanf", "fwscanf", "vwscanf", "vfwscanf" };

static int scan_v(enum scan how, const wchar_t *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = how == BY_VWSCANF ? vwscanf(fmt, ap) : vfwscanf(stdin, fmt, ap);
	va_end(ap);
	return r;
}

static void round_on_stdin(enum scan how)
{
	int n = 0, got;
	wchar_t word[16] = L"";
	struct late_stdin l;

	late_stdin_begin(&l, "late 42\n");
	switch (how) {
	case BY_WSCANF:
		got = wscanf(L"%15ls %d", word, &n);
		break;
	case BY_FWSCANF:
		got = fwscanf(stdin, L"%15ls %d", word, &n);
		break;
	default:
		got = scan_v(how, L"%15ls %d", word, &n);
		break;
	}
	if (got != 2 || wcscmp(word, L"late") != 0 || n != 42)
		FAIL("%s matched %d items (word of %zu wide characters, the first %#x; number %d), not the "
		     "server's \"late 42\"", scan_names[how], got, wcslen(word), (unsigned)word[0], n);
	CHECK(fgetwc(stdin), ==, (wint_t)L'\n');   /* the line's end: nothing left buffered */
	late_stdin_end(&l);
}

int main(void)
{
	CHECK(fwide(stdin, 1), >, 0);
	for (int how = 0; how < SCANS; how++)
		round_on_stdin((enum scan)how);
	puts("ok");
	return 0;
}
