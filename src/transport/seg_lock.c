/*
 * seg_lock.c: the lock of an end's holders in a channel's segment (see
 * seg_lock.h).
 *
 * The word is 0 (free) or the owner's pid, with SEG_LOCK_WAITERS while a
 * taker sleeps on it (a futex on the shared page: FUTEX_WAIT without the
 * private flag, so the kernel keys it by the file's page and the processes
 * meet).  Anything else (a pid of 0 with the waiters bit, bit 31, a pid
 * beyond the kernel's limit, our own pid) is garbage.  A taker that finds the
 * lock held spins a little, then sleeps on the word 10 ms at a time at most;
 * after its first sleep it asks the kernel about the owner, and again every
 * OWNER_CHECK_NS: a pid the kernel does not know, or a zombie, is a holder
 * that died inside (the lock is taken over, as a robust mutex's EOWNERDEAD
 * did); a live process that does not map this segment cannot hold its lock,
 * so the word was scribbled (-EIO at once, not after the timeout), and so
 * is one of another user (the segment is ours, 0600).  Only a live process
 * that maps the segment is waited for up to the caller's bound; one whose
 * maps the kernel will not show (not dumpable, ptrace rules) for a second;
 * seen from a chroot without /proc (vsftpd's sessions), a live owner is
 * taken for a holder (before, its missing maps read as a death, and the
 * lock was taken from it).  Holders of one end in different pid namespaces are not told apart:
 * such a pid may be taken for garbage (a reset of that connection) or for a
 * dead holder (two of them inside: what the lock guards is checked anyway).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/pid_gone.h"
#include "base/real.h"
#include "transport/seg_lock.h"

#define SPINS 64
#define SLEEP_NS (10u * 1000u * 1000u)
#define OWNER_CHECK_NS (100u * 1000u * 1000u)
/* An owner the kernel will not show us (its maps unreadable: not dumpable,
 * or ptrace rules) is waited for this long at most, not the caller's bound:
 * a live holder of ours is readable, so this is most likely a scribble. */
#define UNKNOWN_OWNER_NS (1000u * 1000u * 1000u)

enum owner_state { OWNER_UNKNOWN, OWNER_HOLDS, OWNER_DEAD, OWNER_NOT_HOLDER };

/* Whether /proc/PID/maps lists the segment: a process can hold the lock of
 * a segment only while it maps it. */
static enum owner_state maps_segment(pid_t pid, const char *file)
{
    char path[64], want[PATH_MAX + 2], buf[8192];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    int n = snprintf(want, sizeof want, "%s\n", file);
    if (n <= 0 || (size_t)n >= sizeof want)
        return OWNER_UNKNOWN;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && !proc_mounted())
        return OWNER_HOLDS;   /* no /proc here (a chroot): kill found it, and that is all there is to know */
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? OWNER_DEAD : OWNER_UNKNOWN;
    /* the name may straddle two reads: keep the last len - 1 bytes */
    size_t keep = 0, len = (size_t)n;
    enum owner_state st = OWNER_NOT_HOLDER;
    bool any = false;
    for (;;) {
        ssize_t r = shunt_real.read(fd, buf + keep, sizeof buf - keep - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            st = OWNER_UNKNOWN;
            break;
        }
        if (r == 0)
            break;
        any = true;
        size_t have = keep + (size_t)r;
        buf[have] = '\0';
        if (memmem(buf, have, want, len)) {
            st = OWNER_HOLDS;
            break;
        }
        keep = have < len - 1 ? have : len - 1;
        memmove(buf, buf + have - keep, keep);
    }
    shunt_real.close(fd);
    /* a zombie (or a process on its way out) has no maps left */
    return st == OWNER_NOT_HOLDER && !any ? OWNER_DEAD : st;
}

static enum owner_state owner_state(pid_t pid, const char *file)
{
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return OWNER_DEAD;
    /* the segment is ours, mode 0600: only a process of our user (or root)
     * can have mapped it */
    char dir[32];
    struct stat sb;
    snprintf(dir, sizeof dir, "/proc/%d", (int)pid);
    if (stat(dir, &sb) == 0 && sb.st_uid != geteuid() && sb.st_uid != 0)
        return OWNER_NOT_HOLDER;
    char path[64], stat[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = shunt_real.read(fd, stat, sizeof stat - 1);
        shunt_real.close(fd);
        stat[r > 0 ? r : 0] = '\0';
        const char *p = strrchr(stat, ')');
        if (p && (p[2] == 'Z' || p[2] == 'X'))
            return OWNER_DEAD;
    }
    return maps_segment(pid, file);
}

static void futex_wait_shared(_Atomic uint32_t *word, uint32_t expected, uint64_t ns)
{
    struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
    shunt_syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

int seg_lock_take(struct seg_lock *l, const char *seg_name, uint64_t timeout_ns)
{
    char file[PATH_MAX];
    int n = snprintf(file, sizeof file, "/dev/shm/%s", seg_name);
    if (n < 0 || (size_t)n >= sizeof file)
        return -EIO;
    return seg_lock_take_file(l, file, timeout_ns, NULL);
}

int seg_lock_take_file(struct seg_lock *l, const char *file, uint64_t timeout_ns, bool *took_over)
{
    if (took_over)
        *took_over = false;
    uint32_t self = (uint32_t)getpid();
    uint32_t w = 0;
    if (atomic_compare_exchange_strong(&l->word, &w, self))
        return 0;
    int saved = errno;
    uint64_t start = clock_now_ns(), next_check = 0;
    uint32_t mine = self;   /* what a take puts in: with the waiters bit once we slept */
    int r = -ETIMEDOUT;
    for (unsigned i = 0;; i++) {
        w = atomic_load(&l->word);
        if (w == 0) {
            if (atomic_compare_exchange_strong(&l->word, &w, mine)) {
                r = 0;
                break;
            }
            continue;
        }
        uint32_t pid = w & SEG_LOCK_PID_MASK;
        if (pid == 0 || pid >= SEG_LOCK_PID_LIMIT || (w & ~(SEG_LOCK_PID_MASK | SEG_LOCK_WAITERS)) || pid == self) {
            r = -EIO;
            break;
        }
        uint64_t now = clock_now_ns();
        if (next_check && now >= next_check) {
            enum owner_state st = owner_state((pid_t)pid, file);
            next_check = now + OWNER_CHECK_NS;
            if (atomic_load(&l->word) != w)
                continue;   /* it moved on meanwhile: the verdict is stale */
            if (st == OWNER_NOT_HOLDER) {
                r = -EIO;
                break;
            }
            if (st == OWNER_DEAD) {
                if (atomic_compare_exchange_strong(&l->word, &w, self | SEG_LOCK_WAITERS)) {
                    if (took_over)
                        *took_over = true;
                    r = 0;
                    break;
                }
                continue;
            }
            if (st == OWNER_UNKNOWN && timeout_ns > UNKNOWN_OWNER_NS)
                timeout_ns = UNKNOWN_OWNER_NS;
        }
        if (now - start >= timeout_ns)
            break;
        if (i < SPINS) {
            sched_yield();
            continue;
        }
        if (!(w & SEG_LOCK_WAITERS) && !atomic_compare_exchange_strong(&l->word, &w, w | SEG_LOCK_WAITERS))
            continue;
        uint64_t left = timeout_ns - (now - start);
        futex_wait_shared(&l->word, w | SEG_LOCK_WAITERS, left < SLEEP_NS ? left : SLEEP_NS);
        mine = self | SEG_LOCK_WAITERS;   /* others may sleep too: whoever gives it back wakes one */
        if (!next_check)
            next_check = clock_now_ns();
    }
    errno = saved;
    return r;
}

int seg_lock_give(struct seg_lock *l)
{
    uint32_t w = atomic_exchange(&l->word, 0);
    if (w & SEG_LOCK_WAITERS) {
        int saved = errno;
        shunt_syscall(SYS_futex, &l->word, FUTEX_WAKE, 1, NULL, NULL, 0);
        errno = saved;
    }
    return (w & SEG_LOCK_PID_MASK) == (uint32_t)getpid() ? 0 : -EIO;
}
