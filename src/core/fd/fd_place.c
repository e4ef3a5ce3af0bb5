/*
 * fd_place.c: private fds near the top of the fd limit (fd_place.h).
 */
#include <fcntl.h>
#include <sys/resource.h>

#include "base/real.h"
#include "core/fd/fd_place.h"

int fd_place_high(int fd)
{
    struct rlimit rl;
    long floor = 3;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        long cur = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1 << 20) ? (1 << 20) : (long)rl.rlim_cur;
        floor = cur > 256 ? cur - 64 : cur / 2;
    }
    int hi = shunt_real.fcntl(fd, F_DUPFD_CLOEXEC, floor > 3 ? floor : 3);
    if (hi < 0)
        hi = shunt_real.fcntl(fd, F_DUPFD_CLOEXEC, 3);
    return hi;
}
