/*
 * recv_pause_shim.c: holds a program's first non-blocking recv, or its
 * first epoll sleep, at the kernel's door.
 *
 * Preloaded after libshunt.so (LD_PRELOAD=libshunt.so:recv_pause_shim.so),
 * it is what libshunt.so's own calls reach (dlsym(RTLD_NEXT)).  By default
 * the first recv with MSG_DONTWAIT and without MSG_PEEK, or the first
 * ioctl(FIONREAD); with RECV_PAUSE_AT=epoll, the first epoll_wait,
 * epoll_pwait or epoll_pwait2 with a timeout other than zero (shunt's sleep
 * on the set, after its last look at the members).  That call writes
 * "paused" to stderr and waits (10 s at most) until the file
 * $RECV_PAUSE_FILE exists, then goes on to libc's.  So a test can make the
 * other end act between shunt's last look at a connection and the kernel's
 * answer (test_claim_race.py).
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static atomic_bool paused;

/* Once, at the calls chosen (at: "recv" or "epoll"): says so, then waits
 * for the file. */
static void pause_once(const char *at)
{
    const char *file = getenv("RECV_PAUSE_FILE");
    const char *chosen = getenv("RECV_PAUSE_AT");
    if (!file || strcmp(chosen ? chosen : "recv", at) || atomic_exchange(&paused, true))
        return;
    fputs("paused\n", stderr);
    fflush(stderr);
    for (int i = 0; i < 10000 && access(file, F_OK) != 0; i++) {
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
    }
}

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    static ssize_t (*real)(int, void *, size_t, int);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "recv");
    if ((flags & MSG_DONTWAIT) && !(flags & MSG_PEEK))
        pause_once("recv");
    return real(fd, buf, len, flags);
}

int ioctl(int fd, unsigned long req, ...)
{
    static int (*real)(int, unsigned long, ...);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "ioctl");
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (req == FIONREAD)
        pause_once("recv");
    return real(fd, req, arg);
}

int epoll_wait(int epfd, struct epoll_event *evs, int max, int ms)
{
    static int (*real)(int, struct epoll_event *, int, int);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "epoll_wait");
    if (ms != 0)
        pause_once("epoll");
    return real(epfd, evs, max, ms);
}

int epoll_pwait(int epfd, struct epoll_event *evs, int max, int ms, const sigset_t *mask)
{
    static int (*real)(int, struct epoll_event *, int, int, const sigset_t *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "epoll_pwait");
    if (ms != 0)
        pause_once("epoll");
    return real(epfd, evs, max, ms, mask);
}

int epoll_pwait2(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask)
{
    static int (*real)(int, struct epoll_event *, int, const struct timespec *, const sigset_t *);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "epoll_pwait2");
    /* shunt's probe for the call passes epfd -1 */
    if (epfd >= 0 && (!tmo || tmo->tv_sec || tmo->tv_nsec))
        pause_once("epoll");
    return real(epfd, evs, max, tmo, mask);
}
