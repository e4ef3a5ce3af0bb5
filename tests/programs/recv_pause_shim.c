/*
 * recv_pause_shim.c: holds a program's first non-blocking recv at its door.
 *
 * Preloaded after libshunt.so (LD_PRELOAD=libshunt.so:recv_pause_shim.so),
 * it is what libshunt.so's own recv and ioctl reach (dlsym(RTLD_NEXT)): the
 * first recv with MSG_DONTWAIT and without MSG_PEEK, or the first
 * ioctl(FIONREAD), writes "paused" to stderr and waits (10 s at most) until
 * the file $RECV_PAUSE_FILE exists, then goes on to libc's.  So a test can
 * make the other end act between shunt's last look at a connection and the
 * kernel's answer (test_claim_race.py).
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static atomic_bool paused;

/* Once: says so, then waits for the file. */
static void pause_once(void)
{
    const char *file = getenv("RECV_PAUSE_FILE");
    if (!file || atomic_exchange(&paused, true))
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
        pause_once();
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
        pause_once();
    return real(fd, req, arg);
}
