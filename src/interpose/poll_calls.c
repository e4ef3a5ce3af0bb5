/*
 * poll_calls.c: wrappers for poll, ppoll, select and pselect.  Readiness of
 * the fds shunt manages is the kernel's while no transport is attached.
 */
#include "interpose/wrap.h"

SHUNT_EXPORT int poll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    shunt_ensure_init();
    return shunt_real.poll(fds, nfds, timeout);
}

SHUNT_EXPORT int ppoll(struct pollfd *fds, nfds_t nfds, const struct timespec *tmo, const sigset_t *mask)
{
    shunt_ensure_init();
    return shunt_real.ppoll(fds, nfds, tmo, mask);
}

SHUNT_EXPORT int select(int nfds, fd_set *restrict r, fd_set *restrict w, fd_set *restrict e, struct timeval *restrict tmo)
{
    shunt_ensure_init();
    return shunt_real.select(nfds, r, w, e, tmo);
}

SHUNT_EXPORT int pselect(int nfds, fd_set *restrict r, fd_set *restrict w, fd_set *restrict e,
                         const struct timespec *restrict tmo, const sigset_t *restrict mask)
{
    shunt_ensure_init();
    return shunt_real.pselect(nfds, r, w, e, tmo, mask);
}
