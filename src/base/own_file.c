/*
 * own_file.c: opening files that must be this user's own (own_file.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/own_file.h"
#include "base/real.h"

uint64_t own_file_random(void)
{
    int saved = errno;
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        r = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec << 32 ^ (uint64_t)(uintptr_t)&ts;
    }
    errno = saved;
    return r;
}

static const char *kind_of(mode_t m)
{
    switch (m & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a FIFO";
    case S_IFDIR: return "a directory";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "a file of unknown kind";
    }
}

void own_file_describe(const struct stat *st, char *out, size_t len)
{
    snprintf(out, len, "%s of uid %u, mode %04o", kind_of(st->st_mode), (unsigned)st->st_uid,
             (unsigned)(st->st_mode & 07777));
}

/* Says why path is refused, as lstat sees it (the open itself may have
 * failed without telling: ELOOP for a symlink, ENXIO for a FIFO). */
static int refuse(const char *what, const char *path, const struct stat *seen)
{
    struct stat st;
    char desc[96];
    if (seen)
        own_file_describe(seen, desc, sizeof desc);
    else if (lstat(path, &st) == 0)
        own_file_describe(&st, desc, sizeof desc);
    else
        snprintf(desc, sizeof desc, "something this user cannot open");
    shunt_log(LOG_WARN, "%s: refusing %s: it is %s, not a file of uid %u with mode 0600 (another user made it "
                        "first?): not mapped, not written", what, path, desc, (unsigned)geteuid());
    return -EPERM;
}

int own_file_open(const char *what, const char *path, int flags, mode_t mode, struct stat *st)
{
    int saved = errno;
    /* O_NOFOLLOW: never through a symlink planted under the name;
     * O_NONBLOCK: never stuck opening a FIFO planted there. */
    int fd = open(path, (flags & ~O_CREAT) | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        errno = saved;
        if (e == ELOOP || e == ENXIO || e == EACCES || e == EPERM || e == EWOULDBLOCK)
            return refuse(what, path, NULL);
        return -e;
    }
    int r = 0;
    if (fstat(fd, st) < 0)
        r = -errno;
    else if (!S_ISREG(st->st_mode) || st->st_uid != geteuid() || (st->st_mode & 07777) != mode)
        r = refuse(what, path, st);
    if (r < 0) {
        shunt_real.close(fd);
        errno = saved;
        return r;
    }
    errno = saved;
    return fd;
}
