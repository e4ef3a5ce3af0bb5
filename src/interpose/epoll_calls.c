/*
 * epoll_calls.c: wrappers for the epoll family.  The epoll fd becomes an
 * object in the fd table (core/kinds/epoll.c) that answers for accelerated
 * members; everything else in the set is the kernel's.
 */
#include "base/fd_place.h"
#include "core/kinds/epoll.h"
#include "interpose/wrap.h"

static int created(int fd, int saved)
{
    if (fd < 0)
        return -1;
    if (shunt_in_engine) {
        fd = fd_place_move(fd);   /* the engine's: above the program's range, never the program's */
        fdt_install_own(fd);
    } else {
        fdt_install(fd, epoll_object_new());
    }
    errno = saved;
    return fd;
}

SHUNT_EXPORT int epoll_create(int size)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.epoll_create(size));
    int fd = shunt_real.epoll_create(size);
    if (emfile_retry(fd))
        fd = shunt_real.epoll_create(size);
    return created(fd, saved);
}

SHUNT_EXPORT int epoll_create1(int flags)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.epoll_create1(flags));
    int fd = shunt_real.epoll_create1(flags);
    if (emfile_retry(fd))
        fd = shunt_real.epoll_create1(flags);
    return created(fd, saved);
}

SHUNT_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.epoll_ctl(epfd, op, fd, ev));
    int r = epoll_control(epfd, op, fd, ev);
    shunt_run_pending();   /* fd was an io_uring shunt had not seen: the fail-safe, now */
    return (int)wrap_finish(r, saved);
}

/* A wait on a set the engine made: the kernel's.  Outside shunt's calls
 * into the engine (whose progress waits so too) it is the engine's own
 * thread's (UCX's async thread): marked so, its closes of the engine's fds
 * are let through. */
static bool engine_wait(int epfd)
{
    if (__builtin_expect(!fdt_is_own(epfd), 1))
        return false;
    if (!shunt_in_engine)
        shunt_engine_thread = true;
    return true;
}

static int wait_ms(int epfd, struct epoll_event *evs, int maxevents, int timeout, const sigset_t *mask)
{
    int saved = errno;
    shunt_ensure_init();
    struct timespec ts = { timeout / 1000, (long)(timeout % 1000) * 1000000 };
    return (int)wrap_finish(epoll_wait_ready(epfd, evs, maxevents, timeout < 0 ? NULL : &ts, mask), saved);
}

SHUNT_EXPORT int epoll_wait(int epfd, struct epoll_event *evs, int maxevents, int timeout)
{
    SANDBOX_PASS(shunt_real.epoll_wait(epfd, evs, maxevents, timeout));
    if (engine_wait(epfd))
        return shunt_real.epoll_wait(epfd, evs, maxevents, timeout);
    return wait_ms(epfd, evs, maxevents, timeout, NULL);
}

SHUNT_EXPORT int epoll_pwait(int epfd, struct epoll_event *evs, int maxevents, int timeout, const sigset_t *mask)
{
    SANDBOX_PASS(shunt_real.epoll_pwait(epfd, evs, maxevents, timeout, mask));
    if (engine_wait(epfd))
        return shunt_real.epoll_pwait(epfd, evs, maxevents, timeout, mask);
    return wait_ms(epfd, evs, maxevents, timeout, mask);
}

SHUNT_EXPORT int epoll_pwait2(int epfd, struct epoll_event *evs, int maxevents, const struct timespec *tmo,
                              const sigset_t *mask)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.epoll_pwait2(epfd, evs, maxevents, tmo, mask));
    if (!epoll_kernel_has_pwait2())   /* the kernel's answer: ENOSYS */
        return shunt_real.epoll_pwait2(epfd, evs, maxevents, tmo, mask);
    return (int)wrap_finish(epoll_wait_ready(epfd, evs, maxevents, tmo, mask), saved);
}
