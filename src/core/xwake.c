/*
 * xwake.c: the wake FIFO of an end, for its holders in other processes.
 *
 * A thread of another process asleep on the end's socket wakes for the
 * peer's doorbells, and a local wake (wait.c) is an eventfd of its own
 * process.  Nothing a process can do to the shared TCP socket wakes a poll
 * on it without writing into the stream, so the holders of an end meet at
 * a FIFO beside the channel's segment ("<segment>-w<side>", 0600, made by
 * the first sleeper that needs it, removed with the segment).  The bytes in
 * it never reach the TCP stream.
 *
 * While another process holds the end, a kernel sleeper opens the FIFO
 * (before the end's wait lock: a path lookup), and under the lock
 * registers (xsleepers) before its last look at the rings.  A waker, having
 * changed the state, writes one byte under the lock if someone is
 * registered and none is written yet (xdirty); every registered sleeper
 * then wakes and looks again.  The last registered sleeper to leave empties
 * the FIFO; until then nobody registers anew (it would wake at once, again
 * and again): such a sleeper sleeps a millisecond at a time.  The protocol
 * of the local wake, across processes, under the end's shared lock.  Its
 * cost, three system calls around each sleep, is paid only while the
 * socket is shared.
 */
#include <fcntl.h>
#include <sys/stat.h>

#include "core/log.h"
#include "core/wait.h"
#include "core/xwake.h"
#include "interpose/real.h"

static bool shared(struct tcp_sock *t)
{
    return atomic_load_explicit(&t->ch.self->holders, memory_order_relaxed) > 1;
}

int xwake_open(struct tcp_sock *t)
{
    if (!t->ch.hdr || !shared(t))
        return -1;
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

/* xdirty holds when the byte was written (ms, never 0): one that stays
 * unemptied for long was left by a holder killed while registered. */
static unsigned now_ms(void)
{
    return (unsigned)(wait_now_ns() / 1000000u) | 1u;
}

static void empty(struct tcp_sock *t, int xfd)
{
    char buf[64];
    while (shunt_real.read(xfd, buf, sizeof buf) > 0)
        ;
    atomic_store(&t->ch.self->xdirty, 0);
}

int xwake_register(struct tcp_sock *t, int lk, int xfd)
{
    if (xfd < 0)
        return -1;
    struct chan_side *s = t->ch.self;
    if (lk <= 0) {   /* nobody else holds the end after all */
        xwake_close(xfd);
        return -1;
    }
    unsigned dirty = atomic_load(&s->xdirty);
    if (dirty && (atomic_load(&s->xsleepers) == 0 || now_ms() - dirty > 200)) {
        atomic_store(&s->xsleepers, 0);
        empty(t, xfd);
    }
    if (atomic_load(&s->xdirty)) {
        xwake_close(xfd);
        return XWAKE_BUSY;
    }
    atomic_fetch_add(&s->xsleepers, 1);
    return xfd;
}

void xwake_unregister(struct tcp_sock *t, int lk, int xfd)
{
    if (xfd < 0 || lk < 0)
        return;
    struct chan_side *s = t->ch.self;
    unsigned n = atomic_load(&s->xsleepers);
    if (n > 0)
        atomic_store(&s->xsleepers, n - 1);
    if (n <= 1 && atomic_load(&s->xdirty))
        empty(t, xfd);
}

void xwake_close(int xfd)
{
    if (xfd >= 0)
        shunt_real.close(xfd);
}

void xwake_send(struct tcp_sock *t)
{
    if (!t->ch.hdr || !shared(t))
        return;
    int lk = doorbell_lock(t);
    if (lk < 0)
        return;
    struct chan_side *s = t->ch.self;
    if (lk > 0 && atomic_load(&s->xsleepers) > 0 && !atomic_load(&s->xdirty)) {
        char path[128];
        channel_wake_path(&t->ch, t->ch.side, path, sizeof path);
        /* ENXIO: nobody has it open for reading, so nobody sleeps on it */
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0) {
            if (shunt_real.write(fd, "", 1) == 1)
                atomic_store(&s->xdirty, now_ms());
            shunt_real.close(fd);
        }
    }
    doorbell_unlock(t, lk);
}
