/*
 * stream.c: recv, send, shutdown and close of an accelerated connection.
 *
 * The rings carry the bytes; the companion TCP socket carries only
 * doorbells and tells us when the peer process is gone.  Semantics follow
 * the kernel's TCP: partial reads, MSG_PEEK, MSG_WAITALL, MSG_DONTWAIT and
 * O_NONBLOCK, timeouts and EINTR (the blocking itself happens in the
 * kernel on the program's own socket, so SO_RCVTIMEO and SA_RESTART apply
 * as they would), in-order EOF, half-close, EPIPE/SIGPIPE and resets.
 */
#include <limits.h>
#include <signal.h>
#include <string.h>

#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/conn/downgrade.h"
#include "core/conn/stream.h"
#include "core/conn/zcopy.h"
#include "core/fd/passthrough.h"
#include "core/wait/kernel_looks.h"
#include "core/wait/wait.h"
#include "core/wait/xwake.h"

/* A large send is published to the ring in pieces of SHUNT_CHUNK_SIZE, so
 * the reader copies one piece out while the writer copies the next one in
 * (as the kernel's 64 KiB segments pipeline), instead of waiting for all. */

/* The program's buffers as one iovec list. */

int iobuf_from_call(struct iobuf *b, struct io_call *c)
{
    switch (c->kind) {
    case IO_READ: case IO_RECV: case IO_RECVFROM: case IO_WRITE: case IO_SEND: case IO_SENDTO:
        b->one.iov_base = c->buf;
        b->one.iov_len = c->len;
        b->iov = &b->one;
        b->iovcnt = 1;
        break;
    case IO_READV: case IO_WRITEV:
        b->iov = c->iov;
        b->iovcnt = c->iovcnt;
        break;
    case IO_RECVMSG: case IO_SENDMSG:
        if (c->msg->msg_iovlen > INT_MAX)
            return -EMSGSIZE;
        b->iov = c->msg->msg_iov;
        b->iovcnt = (int)c->msg->msg_iovlen;
        break;
    }
    if (b->iovcnt < 0 || b->iovcnt > IOV_MAX)
        return -EINVAL;
    if (b->iovcnt > 0 && !b->iov)
        return -EFAULT;
    b->total = 0;
    for (int i = 0; i < b->iovcnt; i++) {
        if (b->iov[i].iov_len > SSIZE_MAX - b->total)
            return -EINVAL;
        b->total += b->iov[i].iov_len;
    }
    return 0;
}

bool stream_nonblocking(struct tcp_sock *t, int fd, int flags)
{
    if (flags & MSG_DONTWAIT)
        return true;
    if (atomic_load_explicit(&t->nonblock, memory_order_relaxed) == 0)
        return false;
    int fl = shunt_real.fcntl(fd, F_GETFL);
    bool nb = fl >= 0 && (fl & O_NONBLOCK);
    atomic_store_explicit(&t->nonblock, nb, memory_order_relaxed);
    return nb;
}

static bool peer_finished(struct tcp_sock *t)
{
    return stream_peer_finished(t);
}

static bool rx_ready(struct tcp_sock *t)
{
    int64_t n = ring_readable(&t->ch.rx);
    return n != 0 || zc_pending(t) || ring_fin_stored(&t->ch.rx) || peer_finished(t) ||
           (tcp_sock_own_state(t) & SIDE_SHUT_RD) || atomic_load(&t->broken);
}

static bool tx_ready(struct tcp_sock *t)
{
    return (ring_writable(&t->ch.tx) != 0 && !zc_tx_busy(t)) || peer_finished(t) ||
           (tcp_sock_own_state(t) & SIDE_SHUT_WR) || atomic_load(&t->broken);
}

/* The connection was found corrupt here, or by a lock of the end that
 * failed (core/fd/tcp_sock.h): the peer is told once (tcp_sock_corrupt). */
static void tell_peer(struct tcp_sock *t, int fd)
{
    tcp_sock_corrupt(t, fd, NULL);
}

int stream_corrupt(struct tcp_sock *t, int fd)
{
    tcp_sock_corrupt(t, fd, "the shared channel was corrupted");
    return -ECONNRESET;
}

ssize_t stream_broken_recv(struct tcp_sock *t, int fd)
{
    tell_peer(t, fd);
    /* every time, not once then EOF: another thread's call may have seen
     * it first, and a clean EOF would pass for the end of the stream */
    return -ECONNRESET;
}

/* What an empty ring means once nothing more can come. */
static ssize_t end_of_stream(struct tcp_sock *t)
{
    int eof = ring_at_eof(&t->ch.rx);
    if (eof < 0)
        return -EIO;
    if (eof == 1)
        return 0;
    unsigned peer = tcp_sock_peer_state(t);
    if ((peer & SIDE_RESET) || (atomic_load(&t->peer_gone) && ring_readable(&t->ch.tx) != 0 && !(peer & SIDE_CLOSED))) {
        /* TCP reports a reset once; after it the socket reads as closed. */
        return atomic_exchange(&t->reset_reported, true) ? 0 : -ECONNRESET;
    }
    return 0;
}

/* The prefix went while we waited (another thread read its last bytes): the
 * ring comes next. */
#define PREFIX_GONE (-4097)

/* Server side: the client's bytes sent before the claim come first, by TCP.
 * They are taken under the rx lock, without waiting there: a move back to
 * TCP hands what is left of them back to the client (downgrade.c, step 4)
 * and takes exactly that count off the socket under the same lock; a read
 * of them outside it (asleep in the kernel, as before) took some of those
 * bytes under it, and the move waited 5 s for them, then reset the
 * connection (tests/stress's raw clone rounds; prefix_read_while_leaving).
 * A call that may wait waits first for a byte with MSG_PEEK, unlocked. */
static ssize_t recv_prefix(struct tcp_sock *t, int fd, struct iobuf *b, size_t done, int flags)
{
    for (;;) {
        if (!(flags & MSG_DONTWAIT)) {
            char c;
            if (shunt_real.recv(fd, &c, 1, MSG_PEEK) < 0)
                return -errno;   /* the socket's timeout, a signal, a reset */
        }
        int lk = dir_lock(t, &t->rx_lock, &t->ch.self->rx_lock);
        if (lk < 0) {
            stream_corrupt(t, fd);
            return stream_broken_recv(t, fd);
        }
        if (atomic_load_explicit(&t->ch.hdr->down, memory_order_acquire)) {
            dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, lk);
            return STREAM_DOWNGRADED;
        }
        uint64_t left = stream_prefix_left(t);
        if (left == 0) {
            dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, lk);
            return PREFIX_GONE;
        }
        struct iovec part[IOV_MAX];
        int n = 0;
        size_t want = b->total - done, skip = done;
        if (want > left)
            want = (size_t)left;
        for (int i = 0; i < b->iovcnt && want > 0; i++) {
            size_t len = b->iov[i].iov_len;
            if (skip >= len) {
                skip -= len;
                continue;
            }
            size_t take = len - skip < want ? len - skip : want;
            part[n].iov_base = (char *)b->iov[i].iov_base + skip;
            part[n].iov_len = take;
            n++;
            want -= take;
            skip = 0;
        }
        struct msghdr m = { .msg_iov = part, .msg_iovlen = (size_t)n };
        ssize_t r = shunt_real.recvmsg(fd, &m, (flags & MSG_PEEK) | MSG_DONTWAIT);
        int err = errno;
        if (r > 0 && !(flags & MSG_PEEK))
            tcp_sock_prefix_read(t, (uint64_t)r);
        dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, lk);
        if (r >= 0)
            return r;
        if ((err != EAGAIN && err != EWOULDBLOCK) || (flags & MSG_DONTWAIT))
            return -err;
        /* another thread took what the peek saw: wait again */
    }
}

int iobuf_rest(const struct iobuf *b, size_t skip, struct iovec *part)
{
    int n = 0;
    for (int i = 0; i < b->iovcnt; i++) {
        if (skip >= b->iov[i].iov_len) {
            skip -= b->iov[i].iov_len;
            continue;
        }
        part[n].iov_base = (char *)b->iov[i].iov_base + skip;
        part[n].iov_len = b->iov[i].iov_len - skip;
        n++;
        skip = 0;
    }
    return n;
}

/* MSG_WAITALL met the downgrade after some bytes came from the ring: the
 * call goes on by TCP, where the rest of the stream is, as the kernel's
 * would (it returns short only for a signal, an error or EOF). */
static ssize_t recv_rest_by_tcp(struct tcp_sock *t, int fd, const struct iobuf *b, size_t got, int flags)
{
    if (downgrade_until_tcp(t, fd) != PATH_TCP)
        return (ssize_t)got;
    return iobuf_recv_rest_kernel(fd, b, got, flags);
}

ssize_t iobuf_recv_rest_kernel(int fd, const struct iobuf *b, size_t got, int flags)
{
    struct iovec part[IOV_MAX];
    struct msghdr m = { .msg_iov = part, .msg_iovlen = (size_t)iobuf_rest(b, got, part) };
    ssize_t r = shunt_real.recvmsg(fd, &m, flags & (MSG_WAITALL | MSG_DONTWAIT));
    return r > 0 ? (ssize_t)got + r : (ssize_t)got;
}

/* A socket's key among the bounds of its thread (kernel_looks.h): its
 * object and its inode, so that an object used again for another
 * connection starts with a question. */
static uint64_t peer_looks_key(const struct tcp_sock *t)
{
    return ((uint64_t)(uintptr_t)t ^ t->inode) * KERNEL_LOOKS_KEY0;
}

ssize_t stream_recv(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    struct iobuf b;
    int r = iobuf_from_call(&b, c);
    if (r < 0)
        return r;
    int flags = c->flags;
    if (c->kind == IO_READ || c->kind == IO_READV)
        flags = 0;
    if (flags & (MSG_OOB | MSG_ERRQUEUE))
        return flags & MSG_ERRQUEUE ? -EAGAIN : -EINVAL;
    if (c->kind == IO_RECVFROM && c->addrlen)
        *c->addrlen = 0;   /* TCP reports no source address */
    if (c->kind == IO_RECVMSG) {
        c->msg->msg_flags = 0;
        c->msg->msg_controllen = 0;
        c->msg->msg_namelen = 0;
    }
    if (atomic_load(&t->broken))
        return stream_broken_recv(t, f->fd);
    if (b.total == 0 && (c->kind == IO_READ || c->kind == IO_READV))
        return 0;   /* read(2) of nothing returns at once; recv(2) of nothing waits for data */

    size_t got = 0;
    for (;;) {
        if (stream_prefix_left(t) > 0) {
            ssize_t n = recv_prefix(t, f->fd, &b, got, got ? flags | MSG_DONTWAIT : flags);
            if (n == PREFIX_GONE)
                continue;
            if (n < 0)
                return got ? (ssize_t)got : n;
            if (n == 0)
                return (ssize_t)got;   /* the client closed before the claim */
            got += (size_t)n;
            if (got == b.total || (flags & MSG_PEEK) || !(flags & MSG_WAITALL))
                return (ssize_t)got;
            continue;
        }
        if (b.total == 0) {
            int64_t avail = ring_readable(&t->ch.rx);
            if (avail < 0) {
                stream_corrupt(t, f->fd);
                return stream_broken_recv(t, f->fd);
            }
            if (avail != 0 || zc_pending(t))
                return 0;
        }
        int lk = dir_lock(t, &t->rx_lock, &t->ch.self->rx_lock);
        if (lk >= 0 && atomic_load_explicit(&t->ch.hdr->down, memory_order_acquire) &&
            (downgrade_ring_done(t) || ring_readable(&t->ch.rx) == 0)) {
            /* the connection went back to TCP: the rest of it is there
             * (what is left in the ring is read first: the program may
             * have peeked at it; downgrade.c) */
            dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, lk);
            if (got && (flags & MSG_WAITALL) && !(flags & MSG_PEEK))
                return recv_rest_by_tcp(t, f->fd, &b, got, flags);
            return got ? (ssize_t)got : STREAM_DOWNGRADED;
        }
        ssize_t n = lk < 0 ? lk : ring_read(&t->ch.rx, b.iov, b.iovcnt, got, b.total - got, flags & MSG_PEEK);
        if (n == 0) {
            /* an empty ring may be followed by a single-copy send */
            n = zc_recv(t, f->fd, b.iov, b.iovcnt, got, b.total - got, flags & MSG_PEEK);
            if (n == -EAGAIN) {
                dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, lk);
                continue;
            }
            if (n == -EFAULT) {
                dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, lk);
                return got ? (ssize_t)got : n;
            }
        }
        if (n > 0 && !(flags & MSG_PEEK)) {
            counter_add(&t->ch.self->bytes_in, (uint64_t)n);
            counter_add(&t->ch.self->recvs, 1);
        }
        if (lk >= 0)
            dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, lk);
        if (n < 0) {
            stream_corrupt(t, f->fd);
            return got ? (ssize_t)got : stream_broken_recv(t, f->fd);
        }
        if (n > 0) {
            got += (size_t)n;
            if (!(flags & MSG_PEEK))
                doorbell_wake_peer(t, f->fd, WANT_SPACE);
            if (got == b.total || !(flags & MSG_WAITALL) || (flags & MSG_PEEK))
                return (ssize_t)got;
            continue;
        }
        /* The ring was empty a moment ago, but the peer may have written
         * its last bytes and then its end (FIN, close, reset, exit) since:
         * an end seen now says nothing about the ring as we saw it.  Its
         * loads come first, so a look at the ring after them sees every
         * byte written before it; those are read before the end counts. */
        bool ended = ring_fin_stored(&t->ch.rx) || peer_finished(t);
        if (ended && ring_readable(&t->ch.rx) != 0)
            continue;
        unsigned ps = tcp_sock_peer_state(t);
        if (ps & SIDE_SCRIBBLED)
            stream_corrupt(t, f->fd);   /* the peer's state is no state: a reset, for it too */
        if (atomic_load(&t->broken))
            return got ? (ssize_t)got : stream_broken_recv(t, f->fd);   /* found corrupt (by another call, maybe) */
        if ((ps & SIDE_RESET) && !got && !atomic_exchange(&t->reset_reported, true))
            return -ECONNRESET;   /* a reset is reported even after our SHUT_RD */
        if ((tcp_sock_own_state(t) & SIDE_SHUT_RD))
            return (ssize_t)got;
        if (ended) {
            ssize_t end = end_of_stream(t);
            shunt_log_sock(LOG_DEBUG, t, f->fd,
                           "end of stream (fin %llu head %llu tail %llu gone %d peer state %u): %zd",
                           (unsigned long long)atomic_load(&t->ch.rx.hdr->fin),
                           (unsigned long long)atomic_load(&t->ch.rx.hdr->head),
                           (unsigned long long)atomic_load(&t->ch.rx.hdr->tail), (int)atomic_load(&t->peer_gone),
                           tcp_sock_peer_state(t), end);
            return got ? (ssize_t)got : end;
        }
        if (got && !(flags & MSG_WAITALL))
            return (ssize_t)got;
        stream_flush_held(t, f->fd);   /* about to wait for an answer */
        if (stream_nonblocking(t, f->fd, flags)) {
            /* An empty ring on a non-blocking socket: a look at the
             * companion notices a peer that died without a word.  A
             * question to the kernel, so within the bound of zero-timeout
             * waits (kernel_looks.c): such a death is seen at most
             * SHUNT_POLL_KERNEL_CALLS reads or SHUNT_POLL_KERNEL_US late,
             * and a read loop costs less than the kernel's own EAGAIN. */
            struct kernel_looks *looks = kernel_looks_of_socket(peer_looks_key(t));
            if (!kernel_look_skip(looks)) {
                struct look_stamp at = kernel_look_stamp();
                doorbell_check_peer(t, f->fd);
                kernel_look_asked(looks, at, peer_finished(t));
            }
            if (peer_finished(t))
                continue;
            return got ? (ssize_t)got : -EAGAIN;
        }
        int w = wait_channel(t, f->fd, rx_ready, false, &f->blocked, &f->wait_until, &f->sig);
        f->fd = tcp_call_fd(t, f->fd);   /* closed meanwhile: go on with shunt's copy */
        if (w < 0)
            return got ? (ssize_t)got : w;
    }
}

/*
 * Corked sends (TCP_CORK, MSG_MORE).  The bytes go into the ring at once
 * (a reader that is awake may take them, as it may take a full segment
 * from a corked kernel socket), but a reader asleep is not woken for them:
 * the doorbell is owed until a send without MSG_MORE, uncorking, a full
 * ring, shutdown or close, or until this end itself waits or looks at its
 * readiness, which is what a program does when it expects an answer.  So a
 * request in pieces costs one wake-up, and a request-response exchange
 * never waits for a cork.
 */
static void hold_doorbell(struct tcp_sock *t)
{
    if (!atomic_exchange(&t->ch.self->doorbell_owed, 1))
        atomic_fetch_add_explicit(&t->ch.self->doorbells_held, 1, memory_order_relaxed);
}

void stream_flush_held(struct tcp_sock *t, int fd)
{
    if (atomic_load_explicit(&t->ch.self->doorbell_owed, memory_order_relaxed) &&
        atomic_exchange(&t->ch.self->doorbell_owed, 0))
        doorbell_wake_peer(t, fd, WANT_DATA);
}

ssize_t stream_send_failed(int flags)
{
    if (!(flags & MSG_NOSIGNAL))
        raise(SIGPIPE);
    return -EPIPE;
}

ssize_t stream_broken_send(struct tcp_sock *t, int fd, const struct io_call *c)
{
    tell_peer(t, fd);
    if (!atomic_exchange(&t->reset_reported, true))
        return -ECONNRESET;   /* the kernel's sk_err, reported once, without SIGPIPE */
    return stream_send_failed(c->kind == IO_WRITE || c->kind == IO_WRITEV ? 0 : c->flags);
}

/* The connection went back to TCP in the middle of a send: what went into
 * the ring is re-sent by the downgrade, and the rest follows it by TCP, so
 * that a blocking send still takes everything at once. */
static ssize_t send_rest_by_tcp(struct tcp_sock *t, int fd, const struct iobuf *b, size_t sent, int flags)
{
    /* a call that must not wait stops where the re-send is not done */
    if (!downgrade_before_send(t, fd, !stream_nonblocking(t, fd, flags)) || atomic_load(&t->broken))
        return (ssize_t)sent;   /* (broken: the word was scribbled: nothing goes by TCP) */
    struct iovec part[IOV_MAX];
    struct msghdr m = { .msg_iov = part, .msg_iovlen = (size_t)iobuf_rest(b, sent, part) };
    ssize_t r = shunt_real.sendmsg(fd, &m, (flags & (MSG_DONTWAIT | MSG_MORE)) | MSG_NOSIGNAL);
    return r > 0 ? (ssize_t)sent + r : (ssize_t)sent;
}

ssize_t stream_send(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    struct iobuf b;
    int r = iobuf_from_call(&b, c);
    if (r < 0)
        return r;
    int flags = c->flags;
    if (c->kind == IO_WRITE || c->kind == IO_WRITEV)
        flags = 0;
    if (flags & MSG_OOB)
        return -EOPNOTSUPP;
    if (atomic_load(&t->broken))
        return t->ch.hdr ? stream_broken_send(t, f->fd, c) : -ECONNRESET;
    unsigned own = tcp_sock_own_state(t);
    if ((own & SIDE_SHUT_WR))
        return stream_send_failed(flags);
    if (tcp_sock_peer_state(t) & SIDE_SCRIBBLED) {
        stream_corrupt(t, f->fd);   /* no state: a reset, for the peer too */
        return stream_broken_send(t, f->fd, c);
    }
    if (peer_finished(t) || (own & SIDE_RESET))
        return stream_send_failed(flags);
    if (b.total == 0)
        return 0;
    unsigned ps = tcp_sock_peer_state(t);
    if ((ps & (SIDE_SHUT_RD | SIDE_SHUT_WR)) == (SIDE_SHUT_RD | SIDE_SHUT_WR)) {
        /* Data for a socket shut down both ways: TCP accepts the send and
         * the peer answers with a reset, which both ends then see. */
        tcp_sock_set_state(t, SIDE_RESET);
        doorbell_wake_peer(t, f->fd, WANT_ANY);
        return (ssize_t)b.total;
    }

    size_t sent = zc_send(t, f->fd, b.iov, b.iovcnt, b.total, !stream_nonblocking(t, f->fd, flags));
    if (sent == b.total)
        return (ssize_t)sent;
    for (;;) {
        int lk = dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
        if (lk >= 0 && atomic_load_explicit(&t->ch.hdr->down, memory_order_acquire)) {
            dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, lk);
            return sent ? send_rest_by_tcp(t, f->fd, &b, sent, flags) : STREAM_DOWNGRADED;
        }
        /* after FIN nothing more may enter the ring, even from a send that
         * raced with shutdown in another thread or process */
        size_t chunk = b.total - sent < shunt_settings.chunk_size ? b.total - sent : shunt_settings.chunk_size;
        if (lk >= 0)
            channel_tx_grow(&t->ch, b.total - sent, shunt_settings.shm_limit);
        ssize_t n = lk < 0 ? lk
                    : (tcp_sock_own_state(t) & SIDE_SHUT_WR) ? -EPIPE
                    : zc_tx_busy(t) ? 0   /* another thread's single copy goes first */
                    : ring_write(&t->ch.tx, b.iov, b.iovcnt, sent, chunk);
        if (n > 0) {
            counter_add(&t->ch.self->bytes_out, (uint64_t)n);
            if (sent == 0)
                counter_add(&t->ch.self->sends, 1);
        }
        if (lk >= 0)
            dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, lk);
        if (n == -EPIPE)
            return sent ? (ssize_t)sent : stream_send_failed(flags);
        if (n < 0) {
            stream_corrupt(t, f->fd);
            return sent ? (ssize_t)sent : stream_broken_send(t, f->fd, c);
        }
        if (n > 0) {
            sent += (size_t)n;
            /* A spinning reader follows the pieces as they land; a sleeping
             * one is woken once, when the send is done or the ring is full,
             * not for every piece (on a shared CPU that would be a context
             * switch each). */
            if (sent == b.total) {
                if ((flags & MSG_MORE) || atomic_load_explicit(&t->ch.self->corked, memory_order_relaxed)) {
                    hold_doorbell(t);
                } else {
                    atomic_store_explicit(&t->ch.self->doorbell_owed, 0, memory_order_relaxed);
                    doorbell_wake_peer(t, f->fd, WANT_DATA);
                }
                return (ssize_t)sent;
            }
            continue;
        }
        t->ch.tx_was_full = true;         /* grow it once it is empty again */
        atomic_store_explicit(&t->ch.self->doorbell_owed, 0, memory_order_relaxed);
        doorbell_wake_peer(t, f->fd, WANT_DATA);   /* full: the reader must make room */
        if (atomic_load(&t->broken))
            return sent ? (ssize_t)sent : stream_broken_send(t, f->fd, c);
        if (peer_finished(t))
            return sent ? (ssize_t)sent : stream_send_failed(flags);
        if (stream_nonblocking(t, f->fd, flags)) {
            atomic_store_explicit(&t->ch.tx_told_full, true, memory_order_relaxed);
            return sent ? (ssize_t)sent : -EAGAIN;
        }
        int w = stream_wait_writable(t, f);
        if (w == STREAM_DOWNGRADED)
            return sent ? send_rest_by_tcp(t, f->fd, &b, sent, flags) : STREAM_DOWNGRADED;
        if (w < 0)
            return sent ? (ssize_t)sent : w;
    }
}

int stream_wait_writable(struct tcp_sock *t, struct fdref *f)
{
    int w = wait_channel(t, f->fd, tx_ready, true, &f->blocked, &f->wait_until, &f->sig);
    f->fd = tcp_call_fd(t, f->fd);
    if (w == WAIT_GROW) {
        /* the reader has not caught up: more room, as the kernel's buffer
         * would take more (not while the connection leaves the ring) */
        int lk = dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
        if (lk >= 0 && !atomic_load_explicit(&t->ch.hdr->down, memory_order_acquire) &&
            channel_tx_grow_in_place(&t->ch, shunt_settings.shm_limit))
            shunt_log_sock(LOG_DEBUG, t, f->fd, "ring grown in place to %llu (its reader behind)",
                           (unsigned long long)ring_size_now(&t->ch.tx));
        if (lk >= 0)
            dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, lk);
        return 0;
    }
    if (w == WAIT_BOTH_FULL || w == WAIT_STALLED) {
        /* each end waits for the other to read, or the reader reads nothing
         * at all: kernel TCP's buffers hold more */
        shunt_log_sock(LOG_INFO, t, f->fd, "%s: moving to kernel TCP",
                       w == WAIT_BOTH_FULL ? "both ends wait to send into full rings"
                                           : "the reader read nothing while a send waited for room");
        downgrade_leave_because(t, f->fd, w == WAIT_BOTH_FULL ? FB_BOTH_FULL : FB_STALLED_READER);
        return STREAM_DOWNGRADED;
    }
    return w;
}

static _Atomic(shutdown_hook_fn) shutdown_hook;

void stream_set_shutdown_hook(shutdown_hook_fn fn)
{
    atomic_store_explicit(&shutdown_hook, fn, memory_order_release);
}

/* FIN goes into the ring once, after whatever a send in progress (in any
 * holder of this end) still copies in: the state bit stops further sends.
 * False when the connection left the channel meanwhile (the downgrade word,
 * looked at under the tx lock as a send does): nobody reads the ring any
 * more, so the FIN is the kernel's to send, after the re-sent bytes (the
 * caller's), unless the downgrade saw the state bit first and sent it. */
static bool write_fin(struct tcp_sock *t)
{
    atomic_store(&t->ch.self->doorbell_owed, 0);   /* the caller wakes the peer anyway */
    if (tcp_sock_set_state(t, SIDE_SHUT_WR) & SIDE_SHUT_WR)
        return true;
    int lk = dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
    if (lk < 0)
        return true;
    bool left = atomic_load_explicit(&t->ch.hdr->down, memory_order_acquire) != 0;
    if (!left)
        ring_set_fin(&t->ch.tx);
    dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, lk);
    return !left;
}

int stream_shutdown(struct tcp_sock *t, int fd, int how)
{
    if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
        return -EINVAL;
    if (how != SHUT_WR)
        tcp_sock_set_state(t, SIDE_SHUT_RD);
    if (how != SHUT_RD && !write_fin(t))
        return STREAM_DOWNGRADED;
    doorbell_wake_peer(t, fd, WANT_ANY);
    /* as the kernel's shutdown, it wakes whatever waits on the socket: our
     * own threads blocked on it (a reader returns 0 after SHUT_RD, a writer
     * EPIPE after SHUT_WR), our epoll sets, and the sleepers of other
     * processes holding the same end */
    wait_wake_local(t);
    shutdown_hook_fn hook = atomic_load_explicit(&shutdown_hook, memory_order_acquire);
    if (hook)
        hook(t, fd);
    xwake_send(t);
    return 0;
}

void stream_close(struct tcp_sock *t, int fd)
{
    struct linger lg = { 0, 0 };
    socklen_t len = sizeof lg;
    shunt_real.getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &len);
    bool unread = ring_readable(&t->ch.rx) != 0 || zc_pending(t);
    if ((lg.l_onoff && lg.l_linger == 0) || unread)
        tcp_sock_set_state(t, SIDE_RESET);
    else
        write_fin(t);
    tcp_sock_set_state(t, SIDE_CLOSED);
    doorbell_wake_peer(t, fd, WANT_ANY);
    shunt_log_sock(LOG_DEBUG, t, fd, "closed (%s)", (lg.l_onoff && lg.l_linger == 0) || unread ? "reset" : "fin");
}

long stream_readable(struct tcp_sock *t)
{
    int64_t n = ring_readable(&t->ch.rx);
    return (long)stream_prefix_left(t) + (n > 0 ? (long)n : 0) + (long)zc_pending(t);
}

long stream_unread_by_peer(struct tcp_sock *t)
{
    int64_t n = ring_readable(&t->ch.tx);
    return n > 0 ? (long)n : 0;
}

short stream_poll(struct tcp_sock *t, int fd, short events)
{
    short rev = 0;
    stream_flush_held(t, fd);   /* a program looking at readiness may wait next */
    if (atomic_load_explicit(&t->ch.hdr->down, memory_order_relaxed))
        return downgrade_poll(t, fd, events);
    if (atomic_load(&t->broken))
        return (short)(POLLERR | POLLHUP | (events & (POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM)));
    int64_t readable = ring_readable(&t->ch.rx);
    int64_t writable = ring_writable(&t->ch.tx);
    if (readable < 0 || writable < 0)
        return (short)(POLLERR | POLLHUP | (events & (POLLIN | POLLRDNORM)));
    unsigned peer = tcp_sock_peer_state(t);
    unsigned own = tcp_sock_own_state(t);
    bool peer_fin = ring_fin_stored(&t->ch.rx) || peer_finished(t);
    bool rd_shut = peer_fin || (own & SIDE_SHUT_RD);
    if (readable > 0 || rd_shut || zc_pending(t))
        rev |= POLLIN | POLLRDNORM;
    if (rd_shut)
        rev |= POLLRDHUP;
    bool wr_shut = (own & SIDE_SHUT_WR);
    if (writable > 0 || wr_shut || peer_finished(t))
        rev |= POLLOUT | POLLWRNORM;
    if (peer & SIDE_RESET)   /* the error is reported once (recv, send, SO_ERROR), as the kernel clears it */
        rev |= (atomic_load(&t->reset_reported) ? 0 : POLLERR) | POLLHUP;
    else if (rd_shut && wr_shut)
        rev |= POLLHUP;   /* both directions shut, as the kernel reports it */
    return (short)(rev & (events | POLLERR | POLLHUP));
}
