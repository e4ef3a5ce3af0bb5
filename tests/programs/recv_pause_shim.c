/*
 * recv_pause_shim.c: holds a program's first non-blocking recv at its door.
 *
 * Preloaded after libshunt.so (LD_PRELOAD=libshunt.so:recv_pause_shim.so),
 * it is what libshunt.so's own recv reaches (dlsym(RTLD_NEXT)): the first
 * recv with MSG_DONTWAIT and without MSG_PEEK writes "paused" to stderr and
 * waits (10 s at most) until the file $RECV_PAUSE_FILE exists, then goes on
 * to libc's.  So a test can make the other end act between shunt's last
 * look at a connection and the kernel's read (test_claim_race.py).
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static atomic_bool paused;

ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    static ssize_t (*real)(int, void *, size_t, int);
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "recv");
    const char *file = getenv("RECV_PAUSE_FILE");
    if (file && (flags & MSG_DONTWAIT) && !(flags & MSG_PEEK) && !atomic_exchange(&paused, true)) {
        fputs("paused\n", stderr);
        fflush(stderr);
        for (int i = 0; i < 10000 && access(file, F_OK) != 0; i++) {
            struct timespec ms = { 0, 1000000 };
            nanosleep(&ms, NULL);
        }
    }
    return real(fd, buf, len, flags);
}
