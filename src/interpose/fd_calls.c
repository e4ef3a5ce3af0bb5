/*
 * fd_calls.c: wrappers for the calls that close, duplicate and configure
 * descriptors.  They keep the fd table in step with the kernel's: a
 * duplicate refers to the same socket object, and a closed fd forgets it.
 */
#include <stdarg.h>
#include <linux/close_range.h>

#include "core/conn/private_fds.h"
#include "core/conn/sockstat.h"
#include "core/kinds/tcp_socket.h"
#include "interpose/stdio_calls.h"
#include "interpose/wrap.h"

SHUNT_EXPORT int close(int fd)
{
    int saved = errno;
    shunt_ensure_init();
    if (__builtin_expect(private_fd_is(fd), 0)) {
        errno = EBADF;   /* not an fd the program opened: as without shunt */
        return -1;
    }
    SANDBOX_PASS(shunt_real.close(fd));
    struct shunt_sock *s = closing_begin(fd);
    int r = shunt_real.close(fd);
    int err = errno;
    closing_end(fd, s);
    stdio_std_changed(fd);
    errno = r < 0 ? err : saved;
    return r;
}

SHUNT_EXPORT int fclose(FILE *stream)
{
    int saved = errno;
    shunt_ensure_init();
    int r;
    if (stdio_fclose(stream, &r))   /* one of shunt's streams: it closes its fd itself, after the flush */
        return r;
    SANDBOX_PASS(shunt_real.fclose(stream));
    int fd = stream ? fileno(stream) : -1;
    struct shunt_sock *s = closing_begin(fd);
    r = shunt_real.fclose(stream);
    int err = errno;
    closing_end(fd, s);
    stdio_std_changed(fd);
    errno = r != 0 ? err : saved;
    return r;
}

static void release_cb(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock)
        release_fd(fd, f.sock);
    fdt_put(&f);
}

/* The next fd at or above from that close_range must leave open: one of
 * shunt's private fds (priv, sorted, n of them; *i the first not passed
 * yet) or of its own (FDT_OWN: the engine's, the fabric's); -1 none. */
static int next_kept(unsigned from, unsigned last, const int *priv, int n, int *i)
{
    while (*i < n && (unsigned)priv[*i] < from)
        (*i)++;
    int p = *i < n && (unsigned)priv[*i] <= last ? priv[*i] : -1;
    int o = fdt_next_own(from, p >= 0 ? (unsigned)p : last);
    return o >= 0 ? o : p;
}

/* close_range over [first, last] except shunt's private and own fds. */
static int close_range_around_private(unsigned first, unsigned last, int flags)
{
    int priv[PRIVATE_FDS_MAX];
    int n = private_fds_list(priv, (int)(sizeof priv / sizeof priv[0]));
    unsigned from = first;
    int i = 0;
    for (int k; from <= last && (k = next_kept(from, last, priv, n, &i)) >= 0;) {
        unsigned p = (unsigned)k;
        if (p > from && shunt_real.close_range(from, p - 1, flags) < 0)
            return -1;
        from = p + 1;
        if (from == 0)
            return 0;
    }
    return from <= last ? shunt_real.close_range(from, last, flags) : 0;
}

SHUNT_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
    int saved = errno;
    shunt_ensure_init();
    if (flags & CLOSE_RANGE_CLOEXEC)
        return shunt_real.close_range(first, last, flags);   /* nothing closes before exec */
    SANDBOX_PASS(close_range_around_private(first, last, flags));
    fdt_for_each_object(first, last, release_cb, NULL);
    int r = close_range_around_private(first, last, flags);
    if (r < 0)
        return -1;
    fdt_forget_range(first, last);
    stdio_std_changed_range(first, last);
    errno = saved;
    return r;
}

SHUNT_EXPORT void closefrom(int lowfd)
{
    int saved = errno;
    shunt_ensure_init();
    if (lowfd < 0)
        lowfd = 0;
    if (shunt_sandboxed()) {
        if (close_range_around_private((unsigned)lowfd, ~0U, 0) < 0)
            shunt_real.closefrom(lowfd);
        errno = saved;
        return;
    }
    fdt_for_each_object((unsigned)lowfd, ~0U, release_cb, NULL);
    if (close_range_around_private((unsigned)lowfd, ~0U, 0) < 0)
        shunt_real.closefrom(lowfd);   /* a kernel without close_range: ours go too */
    fdt_forget_range((unsigned)lowfd, ~0U);
    stdio_std_changed_range((unsigned)lowfd, ~0U);
    errno = saved;
}

/* newfd (just made by the kernel) refers to what f refers to. */
static void install_duplicate(int newfd, struct fdref *f)
{
    if (f->sock)
        sock_get(f->sock);
    fdt_install(newfd, f->sock);
    sockstat_dup(f->fd, newfd);
}

SHUNT_EXPORT int dup(int fd)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.dup(fd));
    struct fdref f = fdt_get(fd);
    int r = shunt_real.dup(fd);
    if (emfile_retry(r))
        r = shunt_real.dup(fd);
    int err = errno;
    if (r >= 0)
        install_duplicate(r, &f);
    fdt_put(&f);
    stdio_std_changed(r);
    errno = r < 0 ? err : saved;
    return r;
}

/* dup2 and dup3: the fd that was at fd2 is closed by the kernel, if the call works. */
static int dup_onto(int fd, int fd2, int flags, bool is_dup3)
{
    int saved = errno;
    shunt_ensure_init();
    if (fd == fd2)   /* dup2: nothing changes; dup3: EINVAL.  The kernel says which. */
        return is_dup3 ? shunt_real.dup3(fd, fd2, flags) : shunt_real.dup2(fd, fd2);
    if (__builtin_expect(private_fd_is(fd2), 0))
        private_fd_relocate(fd2);   /* fd2 is free as far as the program knows */
    SANDBOX_PASS(is_dup3 ? shunt_real.dup3(fd, fd2, flags) : shunt_real.dup2(fd, fd2));
    struct fdref f = fdt_get(fd);
    struct shunt_sock *old = fdt_close_begin(fd2);
    int r = is_dup3 ? shunt_real.dup3(fd, fd2, flags) : shunt_real.dup2(fd, fd2);
    int err = errno;
    if (r < 0) {
        if (old) {
            atomic_fetch_sub(&old->fds, 1);   /* fdt_install counts it again */
            fdt_install(fd2, old);            /* fd2 is untouched: give its object back */
        }
        else
            fdt_close_end(fd2);
    } else {
        if (old) {
            release_fd(fd2, old);
            sock_put(old);
        }
        install_duplicate(fd2, &f);
    }
    fdt_put(&f);
    if (r >= 0)
        stdio_std_changed(fd2);   /* stdout may be a socket now, or no longer one */
    errno = r < 0 ? err : saved;
    return r;
}

SHUNT_EXPORT int dup2(int fd, int fd2)
{
    return dup_onto(fd, fd2, 0, false);
}

SHUNT_EXPORT int dup3(int fd, int fd2, int flags)
{
    return dup_onto(fd, fd2, flags, true);
}

/* A new socket's O_NONBLOCK change (F_SETFL, FIONBIO), kept in its LAZY
 * entry once the kernel took it: a hint, as the object's is (tcp_fcntl),
 * so an object made meanwhile may miss it. */
static long lazy_nonblock(int fd, long r, bool on)
{
    if (r == 0)
        fdt_lazy_set(fd, FDT_LAZY_NONBLOCK, on);
    return r;
}

static int do_fcntl(int fd, int cmd, void *arg)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.fcntl(fd, cmd, arg));
    /* Only O_NONBLOCK's change (a TCP socket of ours keeps it) and a
     * duplicate (it shares the object) concern shunt; F_GETFL, which an
     * event loop asks before every F_SETFL, and the rest are the kernel's */
    bool dups = cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC;
    if (!dups && (cmd != F_SETFL || fdt_kernel_only(fd)))
        return (int)wrap_finish(sysret(shunt_real.fcntl(fd, cmd, arg)), saved);
    if (cmd == F_SETFL && fdt_lazy(fd))
        return (int)wrap_finish(lazy_nonblock(fd, sysret(shunt_real.fcntl(fd, cmd, arg)),
                                              ((long)(intptr_t)arg & O_NONBLOCK) != 0), saved);
    struct fdref f = fdt_get(fd);
    int r = f.ops->fcntl(&f, cmd, arg);
    if (r == -EMFILE && dups && private_fds_yield())
        r = f.ops->fcntl(&f, cmd, arg);
    if (r >= 0 && dups)
        install_duplicate(r, &f);
    fdt_put(&f);
    if (r >= 0 && dups)
        stdio_std_changed(r);
    return (int)wrap_finish(r, saved);
}

/* Like glibc, read the optional argument as a pointer-sized word: every
 * command takes an int, a long or a pointer, and the kernel decides which. */
SHUNT_EXPORT int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return do_fcntl(fd, cmd, arg);
}

SHUNT_EXPORT int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return do_fcntl(fd, cmd, arg);
}

SHUNT_EXPORT int ioctl(int fd, unsigned long request, ...)
{
    va_list ap;
    va_start(ap, request);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (request == FIONBIO && arg && fdt_lazy(fd)) {   /* Python's setblocking */
        int saved = errno;
        SANDBOX_PASS(shunt_real.ioctl(fd, request, arg));
        return (int)wrap_finish(lazy_nonblock(fd, sysret(shunt_real.ioctl(fd, request, arg)), *(int *)arg != 0), saved);
    }
    DISPATCH(int, fd, ioctl, request, arg);
}
