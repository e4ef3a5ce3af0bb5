/* stdio_wscanf_late_hello: a client scans its connection as a wide-oriented stdin (wscanf,
 * fwscanf, vwscanf, vfwscanf: by the names a C99 to C17 program calls, glibc's __isoc99_ ones,
 * then by their own names, which a C89 program built with _GNU_SOURCE calls: looked up as such
 * a program's references are, the first definition in the process's global scope)
 * before anything came, and its server writes its first line only 300 ms later (a thread of
 * this process). The kernel: the scan waits, and reads that line's word and number. Under
 * shunt a wide stream cannot be carried (stdio_std_fallback), so the connection goes to kernel
 * TCP (reason stdio). On the fabric (modes fabric, fabric-tcp) the server's hello goes before
 * its first byte, and libc scans through its own internal read, which shunt does not see:
 * before 2026-11-30 the scan met the hello's bytes (no match, or a wrong word). Shunt now
 * takes the hello off before a scan of a stream whose buffers are empty
 * (src/interpose/wide_stdio_calls.c), as before fgetws (stdio_wide_late_hello); by the old
 * names too since later that day (before, the old names were not wrapped: the same). */
#include "check.h"
#include "net.h"
#include "late_stdin.h"

#include <stdarg.h>
#include <wchar.h>

enum scan { BY_WSCANF, BY_FWSCANF, BY_VWSCANF, BY_VFWSCANF,
	    BY_OLD_WSCANF, BY_OLD_FWSCANF, BY_OLD_VWSCANF, BY_OLD_VFWSCANF, SCANS };
static const char *const scan_names[] = { "wscanf", "fwscanf", "vwscanf", "vfwscanf",
					  "wscanf (old name)", "fwscanf (old name)",
					  "vwscanf (old name)", "vfwscanf (old name)" };

/* The old names, as a C89 program's references bind them (these are glibc's, or shunt's). */
static int (*old_wscanf)(const wchar_t *, ...);
static int (*old_fwscanf)(FILE *, const wchar_t *, ...);
static int (*old_vwscanf)(const wchar_t *, va_list);
static int (*old_vfwscanf)(FILE *, const wchar_t *, va_list);

static void find_old_names(void)
{
	*(void **)&old_wscanf = dlsym(RTLD_DEFAULT, "wscanf");
	*(void **)&old_fwscanf = dlsym(RTLD_DEFAULT, "fwscanf");
	*(void **)&old_vwscanf = dlsym(RTLD_DEFAULT, "vwscanf");
	*(void **)&old_vfwscanf = dlsym(RTLD_DEFAULT, "vfwscanf");
	CHECK(old_wscanf != NULL && old_fwscanf != NULL && old_vwscanf != NULL && old_vfwscanf != NULL, ==, 1);
}

static int scan_v(enum scan how, const wchar_t *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	switch (how) {
	case BY_VWSCANF:
		r = vwscanf(fmt, ap);
		break;
	case BY_OLD_VWSCANF:
		r = old_vwscanf(fmt, ap);
		break;
	case BY_OLD_VFWSCANF:
		r = old_vfwscanf(stdin, fmt, ap);
		break;
	default:
		r = vfwscanf(stdin, fmt, ap);
		break;
	}
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
	case BY_OLD_WSCANF:
		got = old_wscanf(L"%15ls %d", word, &n);
		break;
	case BY_OLD_FWSCANF:
		got = old_fwscanf(stdin, L"%15ls %d", word, &n);
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
	find_old_names();
	CHECK(fwide(stdin, 1), >, 0);
	for (int how = 0; how < SCANS; how++)
		round_on_stdin((enum scan)how);
	puts("ok");
	return 0;
}
