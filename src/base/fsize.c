/*
 * fsize.c: shunt's own files grow without SIGXFSZ reaching the program
 * (fsize.h).  SIGXFSZ is blocked around the call; one the call raised
 * (EFBIG, and none was pending before: the program's own, pending and
 * blocked, is left alone) is taken off again before the mask comes back.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/fsize.h"
#include "base/real.h"

struct guard {
    sigset_t old;
    bool pending;    /* a SIGXFSZ was pending already */
};

static void guard_on(struct guard *g)
{
    sigset_t xfsz, now;
    sigemptyset(&xfsz);
    sigaddset(&xfsz, SIGXFSZ);
    pthread_sigmask(SIG_BLOCK, &xfsz, &g->old);
    g->pending = sigpending(&now) == 0 && sigismember(&now, SIGXFSZ);
}

static long guard_off(struct guard *g, long r)
{
    int err = errno;
    if (r < 0 && err == EFBIG && !g->pending) {
        sigset_t xfsz;
        struct timespec now = { 0, 0 };
        sigemptyset(&xfsz);
        sigaddset(&xfsz, SIGXFSZ);
        sigtimedwait(&xfsz, NULL, &now);
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
    errno = err;
    return r;
}

bool fsize_limited(void)
{
    struct rlimit rl;
    return getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
}

int fsize_ftruncate(int fd, off_t len)
{
    struct guard g;
    guard_on(&g);
    return (int)guard_off(&g, ftruncate(fd, len));
}

int fsize_fallocate(int fd, int mode, off_t off, off_t len)
{
    struct guard g;
    guard_on(&g);
    return (int)guard_off(&g, fallocate(fd, mode, off, len));
}

ssize_t fsize_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    struct guard g;
    guard_on(&g);
    return guard_off(&g, shunt_real.pwrite(fd, buf, n, off));
}

ssize_t fsize_write(int fd, const void *buf, size_t n)
{
    struct guard g;
    guard_on(&g);
    return guard_off(&g, shunt_real.write(fd, buf, n));
}
