/*
 * shunt_query.h: what a measuring or test program asks about shunt in its
 * own process, shared by bench/pingpong.c, bench/busyserv.c and
 * tests/programs/static_peer.c: whether libshunt.so is mapped, and what the
 * query API (include/shunt.h, found by dlsym, so that the program runs
 * without shunt too) says about an fd.
 */
#ifndef SHUNT_TESTS_SHUNT_QUERY_H
#define SHUNT_TESTS_SHUNT_QUERY_H

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

/* -1 without libshunt in the process, else what it says about fd. */
static inline int shunt_query_accelerated(int fd)
{
    static int (*query)(int);
    static int looked;
    if (!looked) {
        *(void **)&query = dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
        looked = 1;
    }
    return query ? query(fd) : -1;
}

static inline int libshunt_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "libshunt.so"))
            found = 1;
    fclose(f);
    return found;
}

#endif
