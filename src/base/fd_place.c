/*
 * fd_place.c: private fds above the program's fd limit (fd_place.h).
 *
 * The room: RLIMIT_NOFILE's soft limit is raised by at most ROOM, never past
 * the hard limit, for the few system calls that make or move one fd, under
 * a lock of its own, and put back at once.  A thread of the program that
 * makes an fd in that instant while it has taken every number it may gets
 * one in the room instead of EMFILE: the only difference, and only at the
 * limit.  The soft limit is put back only if it is still the one set here:
 * a program's own setrlimit in between stands.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>

#include "base/fd_place.h"
#include "base/real.h"
#include "base/signals.h"

/* More than shunt ever keeps at once (PRIVATE_FDS_MAX, 160), with headroom. */
#define ROOM 256u

static pthread_mutex_t place_lock = PTHREAD_MUTEX_INITIALIZER;

struct room {
    rlim_t program;     /* the program's soft limit: where the room starts */
    rlim_t raised;      /* the soft limit set for the room, or 0 if none */
};

static void room_open(struct room *r)
{
    struct rlimit rl;
    r->program = 0;
    r->raised = 0;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    r->program = rl.rlim_cur;
    rlim_t top = rl.rlim_max == RLIM_INFINITY || rl.rlim_max - rl.rlim_cur > ROOM ? rl.rlim_cur + ROOM : rl.rlim_max;
    if (top <= rl.rlim_cur)
        return;   /* soft == hard: no room */
    struct rlimit up = { top, rl.rlim_max };
    if (setrlimit(RLIMIT_NOFILE, &up) == 0)
        r->raised = top;
}

static void room_close(const struct room *r)
{
    struct rlimit rl;
    if (!r->raised || getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur != r->raised)
        return;
    rl.rlim_cur = r->program;
    setrlimit(RLIMIT_NOFILE, &rl);
}

/* Without room: near the top of the program's range, away from the low
 * numbers a program expects its next socket or file to get. */
static int below_limit(int fd)
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

static int place_locked(int fd, const struct room *r)
{
    if (r->raised) {
        int hi = shunt_real.fcntl(fd, F_DUPFD_CLOEXEC, (int)r->program);
        if (hi >= 0)
            return hi;
    }
    return below_limit(fd);
}

int fd_place_high(int fd)
{
    struct room r;
    crit_lock(&place_lock);
    room_open(&r);
    int hi = place_locked(fd, &r);
    int saved = errno;
    room_close(&r);
    crit_unlock(&place_lock);
    errno = saved;
    return hi;
}

int fd_place_make(int (*make)(void *arg), void *arg, bool kept)
{
    struct room r;
    crit_lock(&place_lock);
    room_open(&r);
    int fd = make(arg);
    int saved = errno;
    if (fd >= 0 && kept && !(r.raised && (rlim_t)fd >= r.program)) {
        int hi = place_locked(fd, &r);
        saved = errno;
        shunt_real.close(fd);
        fd = hi;
    }
    room_close(&r);
    crit_unlock(&place_lock);
    errno = saved;
    return fd;
}

int fd_place_move(int fd)
{
    int saved = errno;
    int hi = fd_place_high(fd);
    if (hi < 0) {
        errno = saved;
        return fd;
    }
    shunt_real.close(fd);
    errno = saved;
    return hi;
}

bool fd_place_in_room(int fd)
{
    struct rlimit rl;
    return fd >= 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (rlim_t)fd >= rl.rlim_cur;
}
