/*
 * epoll_calls.c: wrappers for the epoll family.  An epoll fd is an fd shunt
 * leaves to the kernel; readiness of managed sockets is the kernel's while
 * no transport is attached.
 */
#include "interpose/wrap.h"

SHUNT_EXPORT int epoll_create(int size)
{
    int saved = errno;
    shunt_ensure_init();
    int fd = shunt_real.epoll_create(size);
    if (fd < 0)
        return -1;
    fdt_install(fd, NULL);
    errno = saved;
    return fd;
}

SHUNT_EXPORT int epoll_create1(int flags)
{
    int saved = errno;
    shunt_ensure_init();
    int fd = shunt_real.epoll_create1(flags);
    if (fd < 0)
        return -1;
    fdt_install(fd, NULL);
    errno = saved;
    return fd;
}

SHUNT_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    shunt_ensure_init();
    return shunt_real.epoll_ctl(epfd, op, fd, ev);
}

SHUNT_EXPORT int epoll_wait(int epfd, struct epoll_event *evs, int maxevents, int timeout)
{
    shunt_ensure_init();
    return shunt_real.epoll_wait(epfd, evs, maxevents, timeout);
}

SHUNT_EXPORT int epoll_pwait(int epfd, struct epoll_event *evs, int maxevents, int timeout, const sigset_t *mask)
{
    shunt_ensure_init();
    return shunt_real.epoll_pwait(epfd, evs, maxevents, timeout, mask);
}

SHUNT_EXPORT int epoll_pwait2(int epfd, struct epoll_event *evs, int maxevents, const struct timespec *tmo,
                              const sigset_t *mask)
{
    shunt_ensure_init();
    return shunt_real.epoll_pwait2(epfd, evs, maxevents, tmo, mask);
}
