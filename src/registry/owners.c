/*
 * owners.c: who a pid recorded in the registry is, and whether it still
 * lives: a process's start time (field 22 of /proc/<pid>/stat, which a
 * reused pid does not share) and pid namespace beside the pid, this
 * process's own identity computed once per thread and pid, and the network
 * namespace the registry is for.  Everything here reads /proc, so callers
 * ask before they take the registry's lock (registry_impl.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/pid_gone.h"
#include "base/real.h"
#include "registry/registry.h"
#include "registry/registry_impl.h"

static uint64_t ns_inode(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return 0;
    return (uint64_t)st.st_ino;
}

uint64_t reg_netns(void)
{
    int saved = errno;
    uint64_t ns = ns_inode("/proc/self/ns/net");
    errno = saved;
    return ns;
}

/* Field 22 of /proc/<pid>/stat: when the process started, in clock ticks
 * after boot.  A pid reused by another process has another start time.
 * -ENOENT: gone or a zombie; -ENODEV: no /proc here to tell (a chroot). */
static int proc_start_time(int32_t pid, uint64_t *out)
{
    char path[48];
    char buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT && !proc_mounted() ? -ENODEV : -errno;
    ssize_t n = shunt_real.read(fd, buf, sizeof buf - 1);
    int err = errno;
    shunt_real.close(fd);
    if (n < 0)
        return err == ESRCH ? -ENOENT : -err;
    buf[n] = 0;
    /* The command name (field 2) is in parentheses and may hold anything,
     * spaces and ')' included; the fields after the last ')' are plain. */
    char *p = strrchr(buf, ')');
    if (!p)
        return -EIO;
    p++;
    /* field 3, the state: a zombie has exited, whatever kill(pid, 0) says */
    while (*p == ' ')
        p++;
    if (*p == 'Z' || *p == 'X')
        return -ENOENT;
    for (int field = 3; field < 22; field++) {
        while (*p == ' ')
            p++;
        while (*p && *p != ' ')
            p++;
    }
    while (*p == ' ')
        p++;
    if (*p < '0' || *p > '9')
        return -EIO;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (*end != ' ' && *end != '\n' && *end != 0)
        return -EIO;
    *out = v;
    return 0;
}

/* This process: computed once per thread and pid (fork changes the pid). */
static _Thread_local int32_t self_pid;
static _Thread_local struct reg_owner self_owner;

const struct reg_owner *reg_self_identity(int32_t *pid)
{
    int32_t now = (int32_t)getpid();
    if (self_pid != now) {
        uint64_t start = 0;
        if (proc_start_time(now, &start) < 0)
            start = 0;
        self_owner.start = start;
        self_owner.pidns = ns_inode("/proc/self/ns/pid");
        self_pid = now;
    }
    if (pid)
        *pid = self_pid;
    return &self_owner;
}

/* What to record beside a pid: for our own pid our identity, for another
 * (a caller may name one) its start time as /proc tells it now. */
struct reg_owner reg_owner_of(int32_t pid)
{
    int32_t me;
    struct reg_owner o = *reg_self_identity(&me);
    if (pid == me)
        return o;
    uint64_t start = 0;
    if (pid <= 0 || proc_start_time(pid, &start) < 0)
        start = 0;
    o.start = start;
    return o;
}


void reg_live_cache_init(struct reg_live_cache *lc)
{
    memset(lc, 0, sizeof *lc);
}

/* Alive: kill(pid, 0) finds the process (EPERM: it exists but is another
 * user's) and, when a start time was recorded, /proc still gives that one. */
bool reg_owner_alive(int32_t pid, const struct reg_owner *o, struct reg_live_cache *lc)
{
    if (pid <= 0)
        return false;
    int32_t me;
    const struct reg_owner *self = reg_self_identity(&me);
    /* A pid of another pid namespace means nothing here: assume it lives. */
    if (o->pidns && self->pidns && o->pidns != self->pidns)
        return true;
    if (pid == me)
        return o->start == 0 || self->start == 0 || o->start == self->start;

    unsigned h = (unsigned)pid % LIVE_SLOTS;
    if (lc->slot[h].pid == pid && lc->slot[h].start == o->start)
        return lc->slot[h].alive;

    bool alive = kill(pid, 0) == 0 || errno == EPERM;
    if (alive && o->start) {
        uint64_t now = 0;
        int r = proc_start_time(pid, &now);
        if (r == 0)
            alive = now == o->start;
        else if (r == -ENOENT)
            alive = false;
        /* other errors (no /proc in a chroot, hidepid): trust kill.  Before,
         * a chrooted process's sweep took every live owner for dead */
    }
    lc->slot[h].pid = pid;
    lc->slot[h].start = o->start;
    lc->slot[h].alive = alive;
    return alive;
}
