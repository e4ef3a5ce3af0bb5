/*
 * downgrade.c: an accelerated connection goes back to kernel TCP because
 * one end (the leaver) is handed to a program that does not run shunt.
 *
 * The program will read the leaver's TCP socket directly, so two things
 * must be true before it can: no doorbell byte is left in that socket's
 * queue, and every byte the leaver's end never read from its ring arrives
 * there, in order.  Only the peer can put bytes into that queue, so:
 *
 * The leaver, holding its end's rx, tx and wait locks (no copy or drain of
 * any holder of its end is in progress):
 *   1. freezes the peer's doorbell count (chan_side.bells): from now on the
 *      peer sends no doorbell, and the count is exactly what it sent;
 *   2. records its rx ring's tail: the peer re-sends from there;
 *   3. a server whose client's TCP prefix is not all read takes it off the
 *      socket and hands it back in a file beside the segment (it must come
 *      before the ring's bytes);
 *   4. removes exactly (peer's frozen count - doorbells its end already
 *      removed) bytes from its socket: the doorbells, no more;
 *   5. publishes the downgrade word (DOWN_SET | its side), sends one last
 *      doorbell to wake a sleeping peer, and freezes its own count.
 * The peer, at its next call on the socket (or woken by that doorbell):
 *   a. under its tx lock, sends over TCP the handed-back prefix, then its
 *      ring's bytes from the recorded tail to its head (DOWN_RESENT); its
 *      sends from then on go to TCP, after them;
 *   b. reads what is left in its own rx ring (the leaver wrote it before
 *      leaving), then removes the leaver's frozen count of doorbells from
 *      its socket, minus those already drained;
 *   c. is on kernel TCP.
 * Doorbells before the freeze precede every byte the new program sends, so
 * the counts are the whole story.  A peer that makes no call on the socket
 * (and sleeps in no wait on it) delays step a: the new program waits for
 * those bytes as it would for a slow sender.
 */
#include <dirent.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/downgrade.h"
#include "core/sockstat.h"
#include "core/fdtable.h"
#include "core/init.h"
#include "core/log.h"
#include "core/negotiate.h"
#include "core/passthrough.h"
#include "core/stream.h"
#include "core/wait.h"
#include "interpose/real.h"
#include "registry/registry.h"

/* How long to wait for bytes known to be on their way over loopback (sent
 * already, counted) before deciding the connection is dead. */
#define ARRIVAL_MS 5000

bool downgrade_leaving_side(struct tcp_sock *t)
{
    unsigned d = atomic_load(&t->ch.hdr->down);
    return (d & DOWN_SET) && (int)(d & DOWN_SIDE) == t->ch.side;
}

uint64_t downgrade_bells_left(struct tcp_sock *t)
{
    uint64_t sent = atomic_load(&t->ch.peer->bells) & BELLS_COUNT_MASK;
    uint64_t eaten = atomic_load(&t->ch.self->bells_eaten);
    return sent > eaten ? sent - eaten : 0;
}

/* Stops an end's doorbells and returns how many it sent.  A sender that
 * died inside its send leaves it busy: after a while that one byte is
 * given up on (the peer's processes are dying anyway). */
static uint64_t bells_freeze(_Atomic uint64_t *w)
{
    for (int i = 0;; i++) {
        uint64_t v = atomic_load(w);
        if (v & BELLS_FROZEN)
            return v & BELLS_COUNT_MASK;
        if ((v & BELLS_BUSY_MASK) && i < 100000) {
            sched_yield();
            continue;
        }
        if (atomic_compare_exchange_weak(w, &v, v | BELLS_FROZEN))
            return v & BELLS_COUNT_MASK;
    }
}

/* Takes exactly n bytes off the socket (into buf if not NULL): bytes that
 * are known to be queued or on their way.  Returns what it took. */
static uint64_t take_exact(int fd, uint64_t n, char *buf)
{
    char scratch[256];
    uint64_t got = 0;
    int waited = 0;
    while (got < n) {
        size_t want = n - got;
        char *dst = buf ? buf + got : scratch;
        if (!buf && want > sizeof scratch)
            want = sizeof scratch;
        ssize_t r = shunt_real.recv(fd, dst, want, MSG_DONTWAIT);
        if (r > 0) {
            got += (uint64_t)r;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || waited >= ARRIVAL_MS / 10)
            break;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        shunt_real.poll(&p, 1, 10);
        waited++;
    }
    return got;
}

/* Writes all of buf to the kernel socket, whether or not it is O_NONBLOCK. */
static int send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t r = shunt_real.send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r > 0) {
            buf += r;
            len -= (size_t)r;
            continue;
        }
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -errno;
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        shunt_real.poll(&p, 1, 100);
    }
    return 0;
}

static void back_path(const struct tcp_sock *t, char *out, size_t len)
{
    snprintf(out, len, "/dev/shm/%s-back", t->ch.name);
}

/* The leaver hands a server's unread TCP prefix back to the client. */
static void hand_back_prefix(struct tcp_sock *t, int fd)
{
    uint64_t k = atomic_load(&t->ch.hdr->neg) & NEG_PREFIX_MASK;
    if (t->ch.side != 1 || k == 0)
        return;
    char *buf = k <= (64u << 20) ? malloc(k) : NULL;
    char path[128];
    back_path(t, path, sizeof path);
    int out = buf ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    uint64_t got = out >= 0 ? take_exact(fd, k, buf) : 0;
    if (out < 0 || got != k || shunt_real.write(out, buf, got) != (ssize_t)got) {
        shunt_log(LOG_ERROR, "fd %d: downgrade: could not hand back %llu bytes of TCP prefix", fd, (unsigned long long)k);
        atomic_store(&t->broken, true);
    } else {
        atomic_store(&t->ch.hdr->back_len, (uint32_t)got);
    }
    if (out >= 0)
        shunt_real.close(out);
    atomic_fetch_sub(&t->ch.hdr->neg, got);
    free(buf);
}

/* This object is on TCP from now on, and this process lets go of its hold
 * on the channel (the mapping stays until the object goes: another thread
 * may still be looking at it).  Under t->lock. */
static void settle_on_tcp(struct tcp_sock *t, int fd)
{
    if (atomic_load(&t->path) != PATH_SHM)
        return;
    if (!t->released) {
        /* a vfork child shares this object with its parent: the parent's
         * hold goes, and the one it took for the new program if it took one
         * (tcp_sockets_before_spawn counts channels with an fd surviving exec) */
        unsigned holds = shunt_in_vfork_child ? 1u + (t->survives_exec ? 1u : 0u) : 1u;
        t->released = true;
        if (atomic_fetch_sub(&t->ch.self->holders, holds) == holds)
            negotiate_forget(t);
    }
    atomic_store(&t->reason, FB_DOWNGRADED);
    atomic_store_explicit(&t->path, PATH_TCP, memory_order_release);
    sockstat_publish(t, fd, 0, 0, NULL, 0);   /* shunt stat: on TCP, and why */
}

void downgrade_leave(struct tcp_sock *t, int fd)
{
    if (negotiate_settle(t, fd) != PATH_SHM || !t->ch.hdr)
        return;   /* an offer not yet claimed was withdrawn: TCP already */
    crit_lock(&t->lock);
    int rx = dir_lock(t, &t->rx_lock, &t->ch.self->rx_lock);
    int tx = rx < 0 ? -1 : dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
    int w = tx < 0 ? -1 : doorbell_lock(t);
    unsigned expect = 0;
    bool first = w >= 0 && atomic_load(&t->path) == PATH_SHM && atomic_load(&t->ch.hdr->down) == 0;
    if (first) {
        uint64_t peer_bells = bells_freeze(&t->ch.peer->bells);
        atomic_store(&t->ch.hdr->down_tail, atomic_load(&t->ch.rx.hdr->tail));
        hand_back_prefix(t, fd);
        uint64_t eaten = atomic_load(&t->ch.self->bells_eaten);
        uint64_t due = peer_bells > eaten ? peer_bells - eaten : 0;
        uint64_t took = take_exact(fd, due, NULL);
        doorbell_ate(t, (size_t)took);
        shunt_log(LOG_DEBUG, "fd %d: leaving: rx tail %llu head %llu, peer's doorbells %llu, took %llu", fd,
                  (unsigned long long)atomic_load(&t->ch.rx.hdr->tail), (unsigned long long)atomic_load(&t->ch.rx.hdr->head),
                  (unsigned long long)peer_bells, (unsigned long long)took);
        if (took != due)
            shunt_log(LOG_WARN, "fd %d: downgrade: %llu of %llu doorbells arrived (the peer is gone?)", fd,
                      (unsigned long long)took, (unsigned long long)due);
        /* Both ends may leave at once: the first one wins, the other then
         * takes the peer's part below (what it had not read is lost then,
         * as nobody under shunt is left to re-send it; see compatibility.md). */
        first = atomic_compare_exchange_strong(&t->ch.hdr->down, &expect, DOWN_SET | (unsigned)t->ch.side);
        if (first) {
            doorbell_send(t, fd);   /* wakes a peer asleep on its socket */
            bells_freeze(&t->ch.self->bells);
        }
    }
    if (w >= 0)
        doorbell_unlock(t, w);
    if (tx >= 0)
        dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, tx);
    if (rx >= 0)
        dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, rx);
    if (first) {
        settle_on_tcp(t, fd);
        shunt_log(LOG_INFO, "fd %d: moved back to kernel TCP (handed to a program without shunt)", fd);
    }
    crit_unlock(&t->lock);
    if (!first && atomic_load(&t->path) == PATH_SHM)
        downgrade_observe(t, fd);
}

/* The peer's step a: under the tx lock, once for all holders of this end. */
static void resend(struct tcp_sock *t, int fd)
{
    int tx = dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
    if (tx < 0)
        return;
    struct chan_hdr *h = t->ch.hdr;
    if (!(atomic_load(&h->down) & DOWN_RESENT)) {
        int err = 0;
        uint32_t back = atomic_load(&h->back_len);
        if (back > 0) {
            char path[128];
            back_path(t, path, sizeof path);
            int in = open(path, O_RDONLY | O_CLOEXEC);
            char *buf = malloc(back);
            if (in < 0 || !buf || shunt_real.read(in, buf, back) != (ssize_t)back)
                err = -EIO;
            else
                err = send_all(fd, buf, back);
            free(buf);
            if (in >= 0)
                shunt_real.close(in);
            unlink(path);
        }
        uint64_t from = atomic_load(&h->down_tail), head = atomic_load(&t->ch.tx.hdr->head);
        uint64_t size = ring_size_now(&t->ch.tx);   /* rings grow: the size in use, not the capacity */
        if (size == 0 || head - from > size) {
            err = -EIO;   /* a tail the ring never had: the peer scribbled */
        } else {
            while (!err && from != head) {
                uint64_t at = from & (size - 1);
                uint64_t len = head - from < size - at ? head - from : size - at;
                err = send_all(fd, (const char *)t->ch.tx.data + at, (size_t)len);
                from += len;
            }
        }
        if (err) {
            shunt_log(LOG_ERROR, "fd %d: downgrade: re-sending unread bytes failed: %s", fd, strerror(-err));
            atomic_store(&t->broken, true);
        }
        atomic_fetch_or(&h->down, DOWN_RESENT);
    }
    dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, tx);
}

/* The peer's steps b and c; false while they cannot happen yet (its ring
 * still has bytes, or a thread of its end sleeps on the doorbells). */
static bool finish(struct tcp_sock *t, int fd)
{
    if (ring_readable(&t->ch.rx) > 0 || stream_prefix_left(t) > 0)
        return false;
    uint64_t sent = bells_freeze(&t->ch.peer->bells);
    int w = doorbell_lock(t);
    if (w < 0)
        return false;
    bool done = false;
    /* A sleeper must see the last doorbell before it goes: it wakes on it,
     * leaves its wait (draining then), and the next look finishes. */
    if (atomic_load(&t->ch.self->waiters) == 0) {
        uint64_t eaten = atomic_load(&t->ch.self->bells_eaten);
        uint64_t due = sent > eaten ? sent - eaten : 0;
        uint64_t took = take_exact(fd, due, NULL);
        doorbell_ate(t, (size_t)took);
        shunt_log(LOG_DEBUG, "fd %d: the peer left: its doorbells %llu, %llu eaten before, %llu now", fd,
                  (unsigned long long)sent, (unsigned long long)eaten, (unsigned long long)took);
        done = true;
    }
    doorbell_unlock(t, w);
    return done;
}

int downgrade_observe(struct tcp_sock *t, int fd)
{
    crit_lock(&t->lock);
    if (atomic_load(&t->path) == PATH_SHM && t->ch.hdr && (atomic_load(&t->ch.hdr->down) & DOWN_SET)) {
        if (downgrade_leaving_side(t)) {
            /* another holder of our end left: wait out copies in progress */
            int rx = dir_lock(t, &t->rx_lock, &t->ch.self->rx_lock);
            if (rx >= 0)
                dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, rx);
            int tx = dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
            if (tx >= 0)
                dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, tx);
            settle_on_tcp(t, fd);
        } else {
            resend(t, fd);
            if (finish(t, fd)) {
                settle_on_tcp(t, fd);
                shunt_log(LOG_INFO, "fd %d: the peer left for a program without shunt: kernel TCP", fd);
            }
        }
    }
    int path = atomic_load(&t->path);
    crit_unlock(&t->lock);
    return path;
}

/* Blocked behind another thread's sleep on the doorbells: a short pause. */
static void pause_briefly(void)
{
    struct timespec ts = { 0, 100000 };
    nanosleep(&ts, NULL);
}

ssize_t downgrade_recv(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    for (;;) {
        if (downgrade_observe(t, f->fd) != PATH_SHM)
            return pt_recv(f, c);
        if (ring_readable(&t->ch.rx) > 0 || stream_prefix_left(t) > 0) {
            ssize_t r = stream_recv(t, f, c);
            if (r != STREAM_DOWNGRADED)
                return r;
        }
        pause_briefly();
    }
}

ssize_t downgrade_send(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    /* observing re-sends the unread bytes first; our own sends follow */
    downgrade_observe(t, f->fd);
    return pt_send(f, c);
}

short downgrade_poll(struct tcp_sock *t, int fd, short events)
{
    short rev = ring_readable(&t->ch.rx) > 0 ? (short)(events & (POLLIN | POLLRDNORM)) : 0;
    struct pollfd p = { .fd = fd, .events = (short)(events & ~(POLLIN | POLLRDNORM)) };
    if (shunt_real.poll(&p, 1, 0) > 0)
        rev |= p.revents;
    return rev;
}

static void leave_if_survives(int fd, void *arg)
{
    (void)arg;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->ops == &tcp_ops) {
        struct tcp_sock *t = tcp_of(f.sock);
        int fl = shunt_real.fcntl(fd, F_GETFD);
        if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr && fl >= 0 && !(fl & FD_CLOEXEC))
            downgrade_leave(t, fd);
    }
    fdt_put(&f);
}

/* Calls fn for every fd open in this process, read from /proc/self/fd
 * with getdents64 and a buffer on the stack: no allocation, so that a vfork
 * child may do it too. */
static void for_each_open_fd(void (*fn)(int fd, void *ctx), void *ctx)
{
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return;
    char buf[4096];
    long n;
    while ((n = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct dirent64 *e = (struct dirent64 *)(buf + off);
            off += e->d_reclen;
            char *end;
            long fd = strtol(e->d_name, &end, 10);
            if (*end || end == e->d_name || fd == dir || fd < 0 || fd > INT_MAX)
                continue;
            if (tcp_private_fd((int)fd))
                continue;   /* shunt's own (a closed socket's private copy, the local wake) */
            fn((int)fd, ctx);
        }
    }
    shunt_real.close(dir);
}

/* Looking an fd up attaches an accelerated socket this image inherited
 * and never used (a shell's redirection, say), so that it moves back too. */
static void take_up(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    fdt_put(&f);
}

void downgrade_take_up_inherited(void)
{
    for_each_open_fd(take_up, NULL);
}

struct by_inode {
    uint64_t inode;
    struct tcp_sock *found;     /* with a reference */
};

static void match_inode(int fd, void *arg)
{
    struct by_inode *b = arg;
    struct fdref f = fdt_get(fd);
    if (!b->found && f.sock && f.sock->ops == &tcp_ops) {
        struct tcp_sock *t = tcp_of(f.sock);
        if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr && t->inode == b->inode) {
            sock_get(f.sock);
            b->found = t;
        }
    }
    fdt_put(&f);
}

/* A vfork child has fds of its own (it may have moved a socket onto its
 * stdin) but shares its parent's table, which it must not change: each of
 * its sockets that survives exec is found among the parent's objects by
 * inode. */
static void leave_in_vfork_child(int fd, void *ctx)
{
    (void)ctx;
    struct stat st;
    int fl = shunt_real.fcntl(fd, F_GETFD);
    if (fl < 0 || (fl & FD_CLOEXEC) || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return;
    struct by_inode b = { (uint64_t)st.st_ino, NULL };
    shunt_in_vfork_child = false;   /* read the parent's table, as any of its threads may, changing nothing */
    fdt_for_each_object(0, ~0U, match_inode, &b);
    shunt_in_vfork_child = true;
    if (b.found) {
        downgrade_leave(b.found, fd);
        sock_put(&b.found->base);
    }
}

/* Closes an fd this file opened (a peeked one), as the close wrapper would. */
static void close_own(int fd)
{
    struct shunt_sock *s = fdt_close_begin(fd);
    if (s && atomic_fetch_sub(&s->fds, 1) == 1) {
        struct fdref f = { .fd = fd, .sock = s, .ops = s->ops };
        s->ops->release_fd(&f);
    }
    shunt_real.close(fd);
    fdt_close_end(fd);
    if (s)
        sock_put(s);
}

/* A socket found in a message still queued for this process: taken up as
 * a received one (attached without counting: the sender counted its
 * receiver in), moved back if accelerated (that hold goes then), closed. */
static void leave_peeked(int fd)
{
    fdt_adopt_passed(fd);
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->ops == &tcp_ops) {
        struct tcp_sock *t = tcp_of(f.sock);
        if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
            shunt_log(LOG_INFO, "fd %d: an accelerated socket waits in a Unix socket's queue for the program without shunt", fd);
            downgrade_leave(t, fd);
        }
    }
    fdt_put(&f);
    close_own(fd);
}

#define PEEK_BYTES 65536
#define PEEKS_MAX 4096

/*
 * A Unix socket that the new program keeps may hold messages sent to this
 * process while it still ran shunt (the sender judged its receivers then):
 * an accelerated socket among them would reach a program that reads its
 * doorbells.  Every queued message is peeked (MSG_PEEK walks the queue with
 * SO_PEEK_OFF, restored afterwards; the fds it installs are close-on-exec)
 * and each accelerated socket found moves back first.  Nothing is taken
 * off the queue.
 */
static void leave_queued(int fd, void *ctx)
{
    char *data = ctx;
    int v = 0, fl = shunt_real.fcntl(fd, F_GETFD);
    socklen_t l = sizeof v;
    if (fl < 0 || (fl & FD_CLOEXEC) || shunt_real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || v != AF_UNIX)
        return;
    l = sizeof v;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 || v)
        return;
    int queued = 0;
    if (shunt_real.ioctl(fd, SIOCINQ, &queued) < 0 || queued <= 0)
        return;
    int old_off = -1, zero = 0;
    l = sizeof old_off;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &old_off, &l) < 0)
        old_off = -1;
    bool walk = shunt_real.setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof zero) == 0;
    union {
        char b[CMSG_SPACE(253 * sizeof(int))];   /* SCM_MAX_FD */
        struct cmsghdr align;
    } ctl;
    for (int i = 0; i < PEEKS_MAX; i++) {
        struct iovec iov = { data, PEEK_BYTES };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b };
        ssize_t r = shunt_real.recvmsg(fd, &m, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        bool fds = false;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
                continue;
            size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t k = 0; k < n; k++) {
                int got;
                memcpy(&got, CMSG_DATA(c) + k * sizeof(int), sizeof got);
                leave_peeked(got);
                fds = true;
            }
        }
        if (m.msg_flags & MSG_CTRUNC)
            shunt_log(LOG_WARN, "fd %d: a queued message carries fds this process could not take to look at", fd);
        if (!walk || (r == 0 && !fds))
            break;
    }
    if (walk)
        shunt_real.setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &old_off, sizeof old_off);
}

void downgrade_queued_before_exec(void)
{
    char *data = malloc(PEEK_BYTES);
    if (!data)
        return;
    for_each_open_fd(leave_queued, data);
    free(data);
}

#define VFORK_HOLDS_MAX 64

struct vfork_holds {
    struct tcp_sock *t[VFORK_HOLDS_MAX];    /* with a reference each */
    int n;
};

/* A vfork child about to exec a program under shunt: its parent counted
 * the new program in for every channel with an fd that is not
 * close-on-exec in the parent (vfork.c); one the child moved onto another
 * fd (a close-on-exec socket dup2'd onto its stdin) is counted here, once
 * per channel, so that it outlives the parent's close.  Should the exec
 * fail, the hold stays (a hold never attached only delays the FIN marker). */
static void hold_in_vfork_child(int fd, void *ctx)
{
    struct vfork_holds *h = ctx;
    struct stat st;
    int fl = shunt_real.fcntl(fd, F_GETFD);
    if (fl < 0 || (fl & FD_CLOEXEC) || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return;
    struct by_inode b = { (uint64_t)st.st_ino, NULL };
    shunt_in_vfork_child = false;   /* read the parent's table, changing nothing */
    fdt_for_each_object(0, ~0U, match_inode, &b);
    shunt_in_vfork_child = true;
    if (!b.found)
        return;
    bool counted = b.found->survives_exec;   /* by the parent, before vfork */
    for (int i = 0; i < h->n && !counted; i++)
        counted = h->t[i] == b.found;
    if (counted || h->n == VFORK_HOLDS_MAX) {
        sock_put(&b.found->base);
        return;
    }
    atomic_fetch_add(&b.found->ch.self->holders, 1u);
    h->t[h->n++] = b.found;
}

void downgrade_before_exec(const char *path, int fd, char *const envp[], bool search)
{
    if (downgrade_exec_runs_shunt(path, fd, envp, search)) {
        if (shunt_in_vfork_child) {
            struct vfork_holds h = { .n = 0 };
            for_each_open_fd(hold_in_vfork_child, &h);
            for (int i = 0; i < h.n; i++)
                sock_put(&h.t[i]->base);   /* the parent's object: no reference may leave with the exec */
        }
        return;
    }
    if (shunt_in_vfork_child) {
        for_each_open_fd(leave_in_vfork_child, NULL);
        return;
    }
    downgrade_queued_before_exec();
    for_each_open_fd(take_up, NULL);
    fdt_for_each_object(0, ~0U, leave_if_survives, NULL);
}

void downgrade_sending(const int *fds, size_t n, int unix_fd, bool named)
{
    int verdict = -1;
    for (size_t i = 0; i < n; i++) {
        struct fdref f = fdt_get(fds[i]);
        if (f.sock && f.sock->ops == &tcp_ops) {
            struct tcp_sock *t = tcp_of(f.sock);
            if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
                if (verdict < 0)
                    verdict = downgrade_receiver_runs_shunt(unix_fd, named);
                if (!verdict)
                    downgrade_leave(t, fds[i]);
            }
        }
        fdt_put(&f);
    }
}
