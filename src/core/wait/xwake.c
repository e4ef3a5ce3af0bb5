/*
 * xwake.c: the wake FIFO of an end, for its holders in other processes.
 *
 * A thread of another process asleep on the end's socket wakes for the
 * peer's doorbells, and a local wake (local_wake.c) is an eventfd of its own
 * process.  Nothing a process can do to the shared TCP socket wakes a poll
 * on it without writing into the stream, so the holders of an end meet at
 * a FIFO beside the channel's segment ("<segment>-w<side>", 0600, made by
 * the first sleeper that needs it, removed with the segment).
 *
 * No byte is ever written into it.  A sleeper opens it for reading (not
 * blocking) before its last look at the end's state and watches it; a
 * waker, having changed the state, opens it for writing and closes it.  The
 * kernel reports POLLHUP on a FIFO's read end once the last writer that
 * opened after it closed, and never before (fs/pipe.c: a reader opened
 * without a writer ignores the writers that came before it), for as long
 * as that read end is open.  So every sleeper that opened before the wake
 * sees it, one that opens after it looks at the state after the change
 * (the FIFO's lock orders the two opens), and there is nothing to empty,
 * to count, or to clean up after a holder killed while asleep.  A waker
 * whose open fails with ENXIO (no reader) has nobody to wake.  The cost,
 * an open, fstat and close around each sleep and an open and close per
 * wake, is paid only while the socket is shared.
 *
 * An epoll set keeps such a read end registered in its kernel set while a
 * member waits idle (epoll_set.c), so those fds are kept here, near the top
 * of the fd limit, out of the program's close and dup2.
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/real.h"
#include "base/signals.h"
#include "base/fd_place.h"
#include "core/wait/wait_shared.h"
#include "core/wait/xwake.h"

bool xwake_shared(struct tcp_sock *t)
{
    return t->ch.hdr && tcp_sock_end_shared(t);
}

static int open_fifo(struct tcp_sock *t)
{
    char path[128];
    channel_wake_path(&t->ch, t->ch.side, path, sizeof path);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT && (mknod(path, S_IFIFO | 0600, 0) == 0 || errno == EEXIST))
        fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISFIFO(st.st_mode) || st.st_uid != geteuid())) {
        shunt_log_sock(LOG_WARN, t, -1, "wake FIFO %s is not ours: other processes cannot wake our sleepers", path);
        shunt_real.close(fd);
        fd = -1;
    }
    return fd;
}

int xwake_open(struct tcp_sock *t)
{
    return xwake_shared(t) ? open_fifo(t) : -1;
}

void xwake_close(int xfd)
{
    if (xfd >= 0)
        shunt_real.close(xfd);
}

void xwake_send(struct tcp_sock *t)
{
    futex_wake_end(t);   /* a sleeper on the end's futex (sleep.c), in whichever process */
    if (!xwake_shared(t))
        return;
    char path[128];
    channel_wake_path(&t->ch, t->ch.side, path, sizeof path);
    /* ENXIO: nobody has it open for reading, so nobody sleeps on it */
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
    if (fd >= 0)
        shunt_real.close(fd);
}

/* ---- the read ends epoll sets keep ---- */

static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int kept[XWAKE_KEPT_MAX];   /* fd + 1; 0: free */
static atomic_int nkept;

int xwake_keep(struct tcp_sock *t)
{
    if (!t->ch.hdr || atomic_load_explicit(&nkept, memory_order_relaxed) >= XWAKE_KEPT_MAX)
        return -1;
    int fd = open_fifo(t);
    int hi = fd >= 0 ? fd_place_high(fd) : -1;
    xwake_close(fd);
    if (hi < 0)
        return -1;
    int h = -1;
    crit_lock(&kept_lock);
    for (int i = 0; i < XWAKE_KEPT_MAX && h < 0; i++)
        if (!atomic_load(&kept[i]))
            h = i;
    if (h >= 0) {
        atomic_store(&kept[h], hi + 1);
        atomic_fetch_add(&nkept, 1);
    }
    crit_unlock(&kept_lock);
    if (h < 0)
        shunt_real.close(hi);
    return h;
}

int xwake_kept_fd(int h)
{
    return h >= 0 && h < XWAKE_KEPT_MAX ? atomic_load(&kept[h]) - 1 : -1;
}

void xwake_drop(int h)
{
    if (h < 0 || h >= XWAKE_KEPT_MAX)
        return;
    crit_lock(&kept_lock);
    int fd = atomic_exchange(&kept[h], 0) - 1;
    if (fd >= 0)
        atomic_fetch_sub(&nkept, 1);
    crit_unlock(&kept_lock);
    /* the last reference to that open FIFO: the kernel takes it out of
     * every epoll set it was registered in */
    xwake_close(fd);
}

int xwake_kept_fds(int *out, int max)
{
    int n = 0;
    if (atomic_load_explicit(&nkept, memory_order_relaxed) == 0)
        return 0;
    crit_lock(&kept_lock);
    for (int i = 0; i < XWAKE_KEPT_MAX && n < max; i++)
        if (atomic_load(&kept[i]))
            out[n++] = atomic_load(&kept[i]) - 1;
    crit_unlock(&kept_lock);
    return n;
}

bool xwake_kept_is(int fd)
{
    if (fd < 0 || atomic_load_explicit(&nkept, memory_order_relaxed) == 0)
        return false;
    for (int i = 0; i < XWAKE_KEPT_MAX; i++)
        if (atomic_load_explicit(&kept[i], memory_order_relaxed) == fd + 1)
            return true;
    return false;
}

bool xwake_kept_relocate(int fd)
{
    bool moved = false;
    crit_lock(&kept_lock);
    for (int i = 0; i < XWAKE_KEPT_MAX && !moved; i++) {
        if (atomic_load(&kept[i]) == fd + 1) {
            /* the same open FIFO under another number: its registration
             * in the epoll set (made under the old one) stays, and goes
             * when this one closes */
            int hi = fd_place_high(fd);
            if (hi >= 0) {
                atomic_store(&kept[i], hi + 1);
                moved = true;
            }
        }
    }
    crit_unlock(&kept_lock);
    return moved;
}

void xwake_after_fork_child(void)
{
    pthread_mutex_init(&kept_lock, NULL);
    for (int i = 0; i < XWAKE_KEPT_MAX; i++)
        xwake_close(atomic_exchange(&kept[i], 0) - 1);
    atomic_store(&nkept, 0);
}
