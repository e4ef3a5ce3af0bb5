/*
 * uring_watch.c: noticing io_uring in this process (uring_watch.h).
 *
 * The look at /proc/self/fd is gated: a ring made behind shunt's back is
 * an fd the table has no object for, so the look compares the process's
 * count of such fds (the kernel's count of open fds, the size of
 * /proc/self/fd since Linux 6.2, less the table's fds with an object) with
 * the count at the previous look, and walks the directory only when it
 * grew.  Measured on the 2-core test machine: the stat 2.4 us whatever the
 * number of fds; the walk 35 us with 10 fds, 0.6 ms with 1,000, 12 ms with
 * 10,000, plus an fstat (0.4 us) of each fd without an object and a
 * readlink (3 to 5 us) of each anonymous one (eventfd, timerfd, io_uring).
 * Before Linux 6.2 the count reads 0 and every look walks.  Once io_uring
 * is seen, a look is one load.
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/fd/fdtable.h"
#include "core/fd/uring_watch.h"

atomic_bool uring_seen_flag;

static void (*_Atomic hook)(void);

/* The count of fds without an object at the last look; -1: never looked,
 * or the kernel gives no count. */
static atomic_long last_others = -1;

void uring_set_hook(void (*want_fail_safe)(void))
{
    atomic_store(&hook, want_fail_safe);
}

void uring_request(void)
{
    void (*h)(void) = atomic_load(&hook);
    if (h)
        h();
}

void uring_note(const char *how)
{
    if (shunt_sandboxed()) {
        /* no log line, no fail-safe: the sandbox took every connection back */
        atomic_store(&uring_seen_flag, true);
        return;
    }
    if (!atomic_exchange(&uring_seen_flag, true))
        shunt_log(LOG_INFO, "io_uring in this process (%s): its connections move back to kernel TCP, and no new one "
                  "is accelerated", how);
    uring_request();
}

/* Whether fd is an io_uring instance: the kernel names its file so. */
static bool is_ring(int fd)
{
    static const char ring[] = "anon_inode:[io_uring]";
    char path[40], link[sizeof ring + 1];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    /* readlinkat, not readlink (a system call of its own on x86_64): the
     * one core/process/sandbox_calls.c lists */
    ssize_t n = readlinkat(AT_FDCWD, path, link, sizeof link);
    return n == (ssize_t)sizeof ring - 1 && memcmp(link, ring, sizeof ring - 1) == 0;
}

/* An io_uring fd is an anonymous inode: no file type in its mode. */
static bool maybe_ring(const struct stat *st)
{
    return (st->st_mode & S_IFMT) == 0;
}

void uring_check_fd(int fd, const struct stat *st)
{
    /* with acceleration off there is no channel to leave: no readlink */
    if (shunt_settings.accel && maybe_ring(st) && is_ring(fd))
        uring_note("an io_uring fd met");
}

/* The kernel's count of this process's open fds, or -1. */
static long open_fds(void)
{
    struct stat st;
    return stat("/proc/self/fd", &st) == 0 && st.st_size > 0 ? (long)st.st_size : -1;
}

/* Walks /proc/self/fd for an io_uring fd among those without an object. */
static bool walk(void)
{
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return false;
    char buf[4096];
    long n;
    bool found = false;
    while (!found && (n = shunt_syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n && !found;) {
            struct dirent64 *e = (struct dirent64 *)(buf + off);
            off += e->d_reclen;
            char *end;
            long fd = strtol(e->d_name, &end, 10);
            if (*end || end == e->d_name || fd == dir || fd < 0 || fd > INT_MAX || fdt_has_object((int)fd))
                continue;
            struct stat st;
            found = fstat((int)fd, &st) == 0 && maybe_ring(&st) && is_ring((int)fd);
        }
    }
    shunt_real.close(dir);
    return found;
}

bool uring_look(int fd)
{
    if (uring_seen())
        return true;
    long count = open_fds();
    long known = fdt_object_slots() + (fd >= 0 && !fdt_has_object(fd));
    /* a slot whose fd was closed behind the table's back counts as an object: never below 0 */
    long others = count < 0 ? -1 : count > known ? count - known : 0;
    long last = atomic_exchange(&last_others, others);
    if (others >= 0 && last >= 0 && others <= last)
        return false;
    if (walk())
        uring_note("found in /proc/self/fd");
    return uring_seen();
}
