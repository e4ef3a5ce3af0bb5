/*
 * fortify_calls.c: glibc's _FORTIFY_SOURCE variants.  A program built with
 * fortification calls these instead of read, recv, poll...; each checks the
 * buffer size as glibc does, then behaves exactly as the plain call.
 */
#include "interpose/wrap.h"

extern void __chk_fail(void) __attribute__((noreturn));

SHUNT_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    if (n > buflen)
        __chk_fail();
    return read(fd, buf, n);
}

SHUNT_EXPORT ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
    if (n > buflen)
        __chk_fail();
    return pread(fd, buf, n, off);
}

SHUNT_EXPORT ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen)
{
    if (n > buflen)
        __chk_fail();
    return pread64(fd, buf, n, off);
}

SHUNT_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
    if (n > buflen)
        __chk_fail();
    return recv(fd, buf, n, flags);
}

SHUNT_EXPORT ssize_t __recvfrom_chk(int fd, void *restrict buf, size_t n, size_t buflen, int flags,
                                    __SOCKADDR_ARG addr, socklen_t *restrict len)
{
    if (n > buflen)
        __chk_fail();
    return recvfrom(fd, buf, n, flags, addr, len);
}

SHUNT_EXPORT int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen)
{
    if (fdslen / sizeof *fds < nfds)
        __chk_fail();
    return poll(fds, nfds, timeout);
}

SHUNT_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *tmo, const sigset_t *mask,
                             size_t fdslen)
{
    if (fdslen / sizeof *fds < nfds)
        __chk_fail();
    return ppoll(fds, nfds, tmo, mask);
}
