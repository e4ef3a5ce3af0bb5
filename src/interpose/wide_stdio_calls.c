/*
 * wide_stdio_calls.c: wide-oriented reads of a FILE (fgetwc, getwc,
 * getwchar, fgetws and their _unlocked forms; the wscanf family by the
 * names C99 and later programs call, __isoc99_ and __isoc23_, and by its
 * own, which C89 programs built with _GNU_SOURCE call).
 *
 * A wide stream is not one shunt's cookie streams can stand in for
 * (stdio_calls.c moves such a connection to kernel TCP), and libc reads its
 * fd through its own internal read, which shunt never sees.  On the fabric a
 * client may still await its server's hello then, which comes before the
 * server's first byte however late that is: libc would read it as the
 * program's bytes (stdio_wide_late_hello).  So before a wide read that finds
 * the stream's buffers empty, and whose next step is therefore the kernel's
 * read, the hello is taken off (fabric_conn_before_kernel_read, as a splice
 * out of the socket does).  Anything else goes to libc as it is.
 *
 * wscanf, fwscanf, vwscanf and vfwscanf by their own names: glibc's
 * headers give this file, built as C11, the __isoc99_ functions under
 * those names, so their definitions here take the names by asm labels.
 */
#include <wchar.h>

#include "core/conn/deferred_close.h"
#include "core/conn/fabric_conn.h"
#include "core/fd/tcp_sock.h"
#include "interpose/stdio_calls.h"
#include "interpose/wrap.h"

/* glibc's struct _IO_wide_data (opaque in its public headers) begins, as
 * FILE does, with its read pointers (libio.h, unchanged since glibc 2.2). */
struct wide_head {
    wchar_t *read_ptr;
    wchar_t *read_end;
};

/* libc's next read of fp goes to the kernel: nothing buffered, wide or not. */
static bool buffers_empty(const FILE *fp)
{
    const struct wide_head *w = (const struct wide_head *)(const void *)fp->_wide_data;
    return fp->_IO_read_ptr >= fp->_IO_read_end && (!w || w->read_ptr >= w->read_end) &&
           !(fp->_flags & IO_IN_BACKUP);   /* pushed-back bytes first */
}

/* Before a wide read of fp: a hello still to come on its socket is taken off
 * first (a wait as long as the read's own would be: a non-blocking socket
 * does not wait, and the read then says what the kernel says). */
static void before_wide_read(FILE *fp)
{
    shunt_ensure_init();
    if (!fp || __builtin_expect(shunt_sandboxed(), 0) || fp->_fileno < 0 || !buffers_empty(fp))
        return;
    int saved_errno = errno;
    struct fdref f = fdt_get(fp->_fileno);
    struct tcp_sock *t = fabric_conn_on(&f);
    if (t) {
        (void)fabric_conn_before_kernel_read(t, &f);
        if (f.blocked)
            deferred_close_call_done(t, &f);
    }
    fdt_put(&f);
    errno = saved_errno;
}

#define WIDE_GET(name)                         \
    wint_t name(FILE *stream)                  \
    {                                          \
        before_wide_read(stream);              \
        return shunt_real.name(stream);        \
    }
WIDE_GET(fgetwc)
WIDE_GET(getwc)
WIDE_GET(fgetwc_unlocked)
WIDE_GET(getwc_unlocked)

wint_t getwchar(void)
{
    before_wide_read(stdin);
    return shunt_real.getwchar();
}

wint_t getwchar_unlocked(void)
{
    before_wide_read(stdin);
    return shunt_real.getwchar_unlocked();
}

wchar_t *fgetws(wchar_t *restrict ws, int n, FILE *restrict stream)
{
    before_wide_read(stream);
    return shunt_real.fgetws(ws, n, stream);
}

wchar_t *fgetws_unlocked(wchar_t *restrict ws, int n, FILE *restrict stream)
{
    before_wide_read(stream);
    return shunt_real.fgetws_unlocked(ws, n, stream);
}

/* The wscanf family: one look before the scan (the hello comes before the
 * server's first byte, so a scan that starts past it never meets it). */
#define WIDE_SCAN(prefix, real)                                                              \
    int prefix##vfwscanf(FILE *restrict stream, const wchar_t *restrict format, va_list ap)   \
    {                                                                                        \
        before_wide_read(stream);                                                            \
        return shunt_real.real##vfwscanf(stream, format, ap);                                \
    }                                                                                        \
    int prefix##vwscanf(const wchar_t *restrict format, va_list ap)                          \
    {                                                                                        \
        before_wide_read(stdin);                                                             \
        return shunt_real.real##vfwscanf(stdin, format, ap);                                 \
    }                                                                                        \
    int prefix##fwscanf(FILE *restrict stream, const wchar_t *restrict format, ...)          \
    {                                                                                        \
        va_list ap;                                                                          \
        va_start(ap, format);                                                                \
        int r = prefix##vfwscanf(stream, format, ap);                                        \
        va_end(ap);                                                                          \
        return r;                                                                            \
    }                                                                                        \
    int prefix##wscanf(const wchar_t *restrict format, ...)                                  \
    {                                                                                        \
        va_list ap;                                                                          \
        va_start(ap, format);                                                                \
        int r = prefix##vfwscanf(stdin, format, ap);                                         \
        va_end(ap);                                                                          \
        return r;                                                                            \
    }
WIDE_SCAN(__isoc99_, __isoc99_)
WIDE_SCAN(__isoc23_, __isoc23_)

/* The old names: each definition of old_ below is exported as its name. */
SHUNT_EXPORT int old_vfwscanf(FILE *restrict stream, const wchar_t *restrict format, va_list ap) __asm__("vfwscanf");
SHUNT_EXPORT int old_vwscanf(const wchar_t *restrict format, va_list ap) __asm__("vwscanf");
SHUNT_EXPORT int old_fwscanf(FILE *restrict stream, const wchar_t *restrict format, ...) __asm__("fwscanf");
SHUNT_EXPORT int old_wscanf(const wchar_t *restrict format, ...) __asm__("wscanf");
WIDE_SCAN(old_, )
