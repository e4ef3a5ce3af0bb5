/*
 * pid_gone.c: a process's end, from /proc (pid_gone.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/pid_gone.h"
#include "base/real.h"

bool pid_gone(uint32_t pid)
{
    char path[32], st[256];
    snprintf(path, sizeof path, "/proc/%u/stat", (unsigned)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT && proc_mounted();
    ssize_t n = shunt_real.read(fd, st, sizeof st - 1);
    shunt_real.close(fd);
    if (n <= 0)
        return false;
    st[n] = 0;
    const char *p = strrchr(st, ')');   /* pid (comm) state ... */
    return p && (p[2] == 'Z' || p[2] == 'X');
}

bool proc_mounted(void)
{
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno != ENOENT;   /* another error: /proc is there, and says no */
    shunt_real.close(fd);
    return true;
}
