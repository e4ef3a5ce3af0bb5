/*
 * downgrade_follow.c: the other end's part of a move back to kernel TCP
 * (steps a to d of downgrade.c's comment), a second leaver's, and the
 * calls that meet the move: recv, send, shutdown, poll.  Which call does
 * what, and why the re-send waits for step c, is in downgrade.c's comment.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/real.h"
#include "core/conn/downgrade.h"
#include "core/conn/downgrade_internal.h"
#include "core/conn/stream.h"
#include "core/fd/passthrough.h"
#include "core/wait/wait.h"

/* Who observes: a call that only looks or reads, one that sends (and may
 * wait, or may not), the last holder's close (nothing reads its socket
 * any more), or a second leaver (it reads nothing more, and its exec ends
 * its sleepers).  LOOKS and SENDS_NOW never wait for the re-send. */
enum observer { LOOKS, SENDS, SENDS_NOW, CLOSES, LEAVES };

static int observe(struct tcp_sock *t, int fd, enum observer who);

/* The move did not happen after all (a leaver killed in the middle of
 * it: dg_forget_dead_leaver): the ring is the connection's again. */
static bool back_on_ring(struct tcp_sock *t)
{
    return atomic_load(&t->path) == PATH_SHM && t->ch.hdr && !atomic_load(&t->broken) &&
           !atomic_load(&t->ch.hdr->down);
}

/* The other end re-sends the prefix handed back to it from offset at, what
 * the kernel takes now, through a fixed buffer: back_len comes from the
 * segment, and must be the file's size.  Adds what went to *sent. */
static int resend_prefix(struct tcp_sock *t, int fd, uint32_t back, uint64_t at, uint64_t *sent)
{
    char path[128];
    dg_back_path(t, path, sizeof path);
    int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    int err = in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
                      st.st_size != (off_t)back
                  ? -EIO
                  : 0;
    char buf[4096];
    while (!err && at + *sent < back) {
        uint64_t from = at + *sent, left = back - from;
        ssize_t n = shunt_real.pread64(in, buf, left < sizeof buf ? (size_t)left : sizeof buf, (off64_t)from);
        err = n <= 0 ? -EIO : dg_send_all(fd, buf, (size_t)n, false, sent);
    }
    if (in >= 0)
        shunt_real.close(in);
    return err;
}

/* A piece of the other end's step a, under the tx lock, for all holders:
 * what the kernel takes now of the prefix handed back, then of the ring's
 * bytes from down_tail to its head (it moves no more), then the FIN if the
 * ring holds one.  How far it got is in the segment (down_resent): checked.
 * True once it is all sent (DOWN_RESENT), or could not be. */
static bool resend_some(struct tcp_sock *t, int fd)
{
    int tx = dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
    if (tx < 0)
        return true;
    struct chan_hdr *h = t->ch.hdr;
    bool done = atomic_load(&h->down) & DOWN_RESENT;
    if (!done) {
        uint32_t back = atomic_load(&h->back_len);
        uint64_t at = atomic_load(&h->down_resent), from = atomic_load(&h->down_tail), head = 0, sent = 0, more = 0;
        int err = ring_head_mine(&t->ch.tx, &head);
        if (!err && (head - from > ring_size_now(&t->ch.tx) || at > back + (head - from)))
            err = -EIO;   /* a position the re-send never had: scribbled */
        if (!err && at < back)
            err = resend_prefix(t, fd, back, at, &sent);
        if (!err && at + sent >= back)
            err = dg_send_ring_span(fd, &t->ch.tx, from + (at + sent - back), head, false, &more);
        atomic_store(&h->down_resent, at + sent + more);
        if (err != -EAGAIN) {
            shunt_log(LOG_DEBUG, "fd %d: re-sent %llu bytes the leaver had not read (%u of prefix)", fd,
                      (unsigned long long)(at + sent + more), back);
            if (!err)
                dg_shut_on_tcp(t, fd);
            else {
                shunt_log(LOG_ERROR, "fd %d: downgrade: re-sending unread bytes failed: %s", fd, strerror(-err));
                if (err == -EIO)
                    atomic_store(&t->broken, true);   /* as in leave_first */
            }
            if (back) {
                char path[128];
                dg_back_path(t, path, sizeof path);
                unlink(path);
            }
            atomic_fetch_or(&h->down, DOWN_RESENT);
            done = true;
        }
    }
    dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, tx);
    return done;
}

static bool finish(struct tcp_sock *t, int fd, bool leaving);

/* The last holder closes: what its socket holds is never read (the
 * copies, doorbells, the new program's bytes), and the leaver's re-send
 * may be waiting for room in it. */
static void drop_queued(int fd)
{
    while (shunt_discard(fd, SHUNT_DISCARD_ALL) > 0)
        ;
}

/* The other end's step a: all of it, or for a call that must not wait
 * (LOOKS, SENDS_NOW) what the kernel takes now; true once it is done.  The
 * tx lock is let go while the kernel has no room: the leaver's re-send may
 * be waiting for room in our socket (then the leaver's program reads ours
 * only after it), so a wait takes the copies off our socket (step c) once
 * our program has read the ring, and another thread of ours may read the
 * ring and take them meanwhile.  Another sender of this end waits here
 * too: its bytes go after these. */
static bool resend(struct tcp_sock *t, int fd, enum observer who)
{
    for (;;) {
        if (resend_some(t, fd))
            return true;
        if (who == CLOSES)
            drop_queued(fd);
        else if (who != LEAVES && !downgrade_ring_done(t))
            finish(t, fd, false);
        if (who == LOOKS || who == SENDS_NOW)
            return false;
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        shunt_real.poll(&p, 1, 10);
    }
}

/* Step c's removal, under the rx and wait locks; sent: the leaver's
 * frozen count of doorbells. */
static void take_copies(struct tcp_sock *t, int fd, uint64_t sent)
{
    struct chan_hdr *h = t->ch.hdr;
    if (atomic_load(&h->down) & DOWN_DUPS)
        return;   /* another holder of this end did it */
    uint64_t eaten = atomic_load(&t->ch.self->bells_eaten);
    uint64_t due = sent > eaten ? sent - eaten : 0;
    uint64_t from = atomic_load(&h->down_txtail), tail = 0;
    int own = ring_tail_mine(&t->ch.rx, &tail);
    uint64_t dups = tail - from;
    if (own < 0 || dups > ring_size_now(&t->ch.rx)) {
        shunt_log(LOG_ERROR, "fd %d: downgrade: the peer's snapshot %llu is not in the ring (tail %llu)", fd,
                  (unsigned long long)from, (unsigned long long)tail);
        atomic_store(&t->broken, true);
        dups = 0;
    }
    uint64_t took = 0, dtook = 0;
    if (stream_prefix_left(t) > 0 && (due || dups)) {
        /* only a second leaver gets here: what is queued behind the prefix
         * cannot be taken out without it */
        shunt_log(LOG_ERROR, "fd %d: downgrade: %llu doorbells and %llu copies are queued behind the unread TCP prefix",
                  fd, (unsigned long long)due, (unsigned long long)dups);
    } else {
        took = dg_take_exact(fd, due, NULL);
        doorbell_ate(t, (size_t)took);
        dtook = took == due ? dg_take_exact(fd, dups, NULL) : 0;
        if (took != due || dtook != dups)
            shunt_log(LOG_WARN, "fd %d: downgrade: %llu of %llu doorbells and %llu of %llu copies arrived (the peer is gone?)",
                      fd, (unsigned long long)took, (unsigned long long)due, (unsigned long long)dtook,
                      (unsigned long long)dups);
    }
    atomic_fetch_or(&h->down, DOWN_DUPS);
    shunt_log(LOG_DEBUG, "fd %d: the peer left: its doorbells %llu, %llu eaten before, %llu now; copies %llu from %llu",
              fd, (unsigned long long)sent, (unsigned long long)eaten, (unsigned long long)took,
              (unsigned long long)dtook, (unsigned long long)from);
}

/* The other end's step c; false while it cannot happen yet (the program
 * has a server prefix or bytes of the ring to read, or a thread of this end
 * sleeps on the doorbells).  leaving: a second leaver, which reads nothing
 * more and whose sleepers its exec ends. */
static bool finish(struct tcp_sock *t, int fd, bool leaving)
{
    if (!leaving && !downgrade_ring_done(t) && (ring_readable(&t->ch.rx) > 0 || stream_prefix_left(t) > 0))
        return false;   /* the doorbells are queued behind the prefix; the ring goes first */
    int rx = dir_lock(t, &t->rx_lock, &t->ch.self->rx_lock);
    if (rx < 0)
        return false;
    uint64_t sent = dg_bells_freeze(&t->ch.peer->bells);
    int w = doorbell_lock(t);
    bool done = false;
    /* A sleeper must see the last doorbell before it goes: it wakes on it,
     * leaves its wait (draining then), and the next look finishes. */
    if (w >= 0 && (leaving || doorbell_waiters(t) == 0)) {
        take_copies(t, fd, sent);
        done = true;
    }
    if (w >= 0)
        doorbell_unlock(t, w);
    dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, rx);
    return done;
}

static int observe(struct tcp_sock *t, int fd, enum observer who)
{
    /* the word from the closed set of the protocol, or the segment is
     * corrupt: then nothing moves by TCP either (the socket may hold
     * doorbells), and every call fails (stream.c) */
    if (atomic_load(&t->path) == PATH_SHM && t->ch.hdr && !atomic_load(&t->broken) &&
        downgrade_word(t) == DOWN_CORRUPT)
        stream_corrupt(t, fd);
    if (atomic_load(&t->broken) && atomic_load(&t->path) == PATH_SHM)
        return PATH_SHM;
    bool ready = true, dead = false, other_end = false;
    if (atomic_load(&t->path) == PATH_SHM && t->ch.hdr && (atomic_load(&t->ch.hdr->down) & DOWN_SET) &&
        !downgrade_leaving_side(t)) {
        int r = dg_wait_ready(t, fd);
        ready = r == DG_READY;
        dead = r == DG_DEAD;
        other_end = true;
    }
    /* A call that sends re-sends first (step a), unless step c can come
     * before it (our program read the whole ring): the leaver's re-send may
     * wait for room in our socket, and its program reads the bytes ours
     * waits to re-send only once it is done.  Outside t->lock: our wait
     * for room may then last until the leaver's program reads, and another
     * thread of ours must go on reading the ring meanwhile, and taking the
     * copies off our socket (step c, under t->lock). */
    if (other_end && ready && (who == SENDS || who == SENDS_NOW || who == CLOSES) &&
        (ring_readable(&t->ch.rx) > 0 || stream_prefix_left(t) > 0))
        resend(t, fd, who);
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
            dg_settle_on_tcp(t, fd);
        } else if (!ready) {
            /* a leaver killed in the middle ends as a killed peer does */
            if (!(dead && dg_forget_dead_leaver(t, fd))) {
                shunt_log(LOG_ERROR, "fd %d: downgrade: the peer started to leave and never finished; connection reset",
                          fd);
                atomic_store(&t->broken, true);
                dg_settle_on_tcp(t, fd);
            }
        } else {
            /* A second leaver re-sends first, as the leaver did: its exec
             * must find both done.  Otherwise step a waits for step c:
             * once the copies are off our socket the leaver's re-send is
             * over, and its program reads ours. */
            if (who == LEAVES)
                resend(t, fd, who);
            bool done = finish(t, fd, who == LEAVES);
            /* nothing if done already; a piece for a call that must not
             * wait, which settles only once it is all sent */
            if ((done || who != LOOKS) && !resend(t, fd, who))
                done = false;
            if (done) {
                dg_settle_on_tcp(t, fd);
                shunt_log(LOG_INFO, "fd %d: the peer left for a program without shunt: kernel TCP", fd);
            }
        }
    }
    int path = atomic_load(&t->path);
    crit_unlock(&t->lock);
    return path;
}

int downgrade_observe(struct tcp_sock *t, int fd)
{
    return observe(t, fd, SENDS);
}

int downgrade_look(struct tcp_sock *t, int fd)
{
    return observe(t, fd, LOOKS);
}

bool downgrade_before_send(struct tcp_sock *t, int fd, bool wait)
{
    observe(t, fd, wait ? SENDS : SENDS_NOW);
    if (back_on_ring(t))
        return false;   /* nothing goes by TCP */
    return atomic_load(&t->path) != PATH_SHM || !t->ch.hdr || atomic_load(&t->broken) ||
           !channel_resend_pending(&t->ch);
}

int downgrade_closing(struct tcp_sock *t, int fd)
{
    return observe(t, fd, CLOSES);
}

int downgrade_until_tcp(struct tcp_sock *t, int fd)
{
    int path;
    while ((path = downgrade_look(t, fd)) == PATH_SHM && !atomic_load(&t->broken) && !back_on_ring(t))
        dg_pause_briefly();
    return path;
}

void dg_follow_as_leaver(struct tcp_sock *t, int fd)
{
    observe(t, fd, LEAVES);
}

void dg_resend_closing(struct tcp_sock *t, int fd)
{
    resend(t, fd, CLOSES);
}

ssize_t downgrade_recv(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    for (;;) {
        int path = downgrade_look(t, f->fd);
        if (atomic_load(&t->broken))
            return stream_broken_recv(t, f->fd);   /* never the socket: it may hold doorbells */
        if (path != PATH_SHM)
            return pt_recv(f, c);
        if (back_on_ring(t)) {
            ssize_t r = stream_recv(t, f, c);
            if (r != STREAM_DOWNGRADED)
                return r;
            continue;
        }
        if (downgrade_ring_done(t) && !downgrade_leaving_side(t)) {
            /* Steps b and c are done, only our re-send is not (the kernel
             * has no room for it yet): the next byte in the socket is the
             * first the program never read.  A blocking call must not wait
             * in the kernel, where the re-send would not go on (the new
             * program may answer only once it has it all): it waits here,
             * looking again, and MSG_WAITALL waits here for the settling. */
            struct pollfd p = { .fd = f->fd, .events = POLLIN };
            if (stream_nonblocking(t, f->fd, c->flags) ||
                (!(c->flags & MSG_WAITALL) && shunt_real.poll(&p, 1, 0) == 1))
                return pt_recv(f, c);
            dg_pause_briefly();
            continue;
        }
        if ((ring_readable(&t->ch.rx) > 0 && !downgrade_ring_done(t)) || stream_prefix_left(t) > 0) {
            /* the program reads a server's TCP prefix, then what is left
             * in the ring, first */
            ssize_t r = stream_recv(t, f, c);
            if (r != STREAM_DOWNGRADED)
                return r;
        }
        dg_pause_briefly();
    }
}

ssize_t downgrade_send(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    /* the unread bytes are re-sent first, our own sends follow; a call
     * that must not wait finds the kernel full until they are all in */
    bool ready = downgrade_before_send(t, f->fd, !stream_nonblocking(t, f->fd, c->flags));
    if (back_on_ring(t)) {
        ssize_t r = stream_send(t, f, c);
        return r == STREAM_DOWNGRADED ? downgrade_send(t, f, c) : r;   /* set again: a reset now */
    }
    if (atomic_load(&t->broken))
        return stream_broken_send(t, f->fd, c);
    if (!ready && (tcp_sock_own_state(t) & SIDE_SHUT_WR))
        return stream_send_failed(c->flags);   /* shut while the re-send is not in: the kernel's socket is not yet */
    return ready ? pt_send(f, c) : -EAGAIN;
}

int downgrade_shutdown(struct tcp_sock *t, struct fdref *f, int how)
{
    bool sent = how != SHUT_RD && downgrade_before_send(t, f->fd, false);
    if (how != SHUT_RD && back_on_ring(t)) {
        int r = stream_shutdown(t, f->fd, how);
        if (r != STREAM_DOWNGRADED)
            return r;
        sent = downgrade_before_send(t, f->fd, false);   /* set again: a reset now */
    }
    if (how == SHUT_RD || sent || atomic_load(&t->broken))
        return pt_shutdown(f, how);
    /* Under the tx lock, against the re-send's last piece (resend_some):
     * either it is in and the FIN goes now, or that piece sends it. */
    int tx = dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
    bool later = tx >= 0 && channel_resend_pending(&t->ch);
    if (later)
        tcp_sock_set_state(t, SIDE_SHUT_WR);
    if (tx >= 0)
        dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, tx);
    if (!later)
        return pt_shutdown(f, how);
    return how == SHUT_RDWR ? pt_shutdown(f, SHUT_RD) : 0;
}

short downgrade_poll(struct tcp_sock *t, int fd, short events)
{
    /* until step c the ring is what the program reads, then its socket;
     * the socket says when the kernel has room, for the re-send first */
    bool ring = !downgrade_ring_done(t);
    short rev = ring && ring_readable(&t->ch.rx) > 0 ? (short)(events & (POLLIN | POLLRDNORM)) : 0;
    struct pollfd p = { .fd = fd, .events = ring ? (short)(events & ~(POLLIN | POLLRDNORM)) : events };
    if (shunt_real.poll(&p, 1, 0) > 0)
        rev |= p.revents;
    return rev;
}
