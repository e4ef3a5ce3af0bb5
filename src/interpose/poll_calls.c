/*
 * poll_calls.c: wrappers for poll, ppoll, select and pselect.  A set with an
 * accelerated socket in it is answered by readiness.c; any other set is the
 * kernel's, unchanged.
 */
#include "core/kinds/readiness.h"
#include "interpose/wrap.h"

SHUNT_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.poll(fds, nfds, timeout));
    struct timespec ts = { timeout / 1000, (long)(timeout % 1000) * 1000000 };
    return (int)wrap_finish(readiness_poll(fds, nfds, timeout < 0 ? NULL : &ts, NULL), saved);
}

SHUNT_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *tmo, const sigset_t *mask)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.ppoll(fds, nfds, tmo, mask));
    return (int)wrap_finish(readiness_poll(fds, nfds, tmo, mask), saved);
}

SHUNT_EXPORT int select(int nfds, fd_set *restrict r, fd_set *restrict w, fd_set *restrict e, struct timeval *restrict tmo)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.select(nfds, r, w, e, tmo));
    struct select_time st = { .tv = tmo };
    int res = readiness_select(nfds, r, w, e, &st, NULL);
    if (res == READINESS_KERNELS)
        return shunt_real.select(nfds, r, w, e, tmo);
    return (int)wrap_finish(res, saved);
}

SHUNT_EXPORT int pselect(int nfds, fd_set *restrict r, fd_set *restrict w, fd_set *restrict e,
                         const struct timespec *restrict tmo, const sigset_t *restrict mask)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.pselect(nfds, r, w, e, tmo, mask));
    struct select_time st = { .ts = tmo };
    int res = readiness_select(nfds, r, w, e, &st, mask);
    if (res == READINESS_KERNELS)
        return shunt_real.pselect(nfds, r, w, e, tmo, mask);
    return (int)wrap_finish(res, saved);
}
