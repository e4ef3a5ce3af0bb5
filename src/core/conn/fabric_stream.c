/*
 * fabric_stream.c: a connection's bytes over the fabric ring, after the
 * bytes each end sent by TCP before it moved (the protocol is in
 * fabric_stream.h; why it looks as it does in docs/architecture.md, "Built:
 * the fabric stream").
 *
 * The TCP stream carries the program's bytes and nothing else: an end's
 * bytes before its move, counted in the header it puts first in its ring.
 * Doorbells are the engine's active messages, so a reader never has to
 * tell a doorbell from a byte, and an end that moves back to TCP later has
 * nothing to take out of the stream.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <linux/sockios.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/real.h"
#include "core/conn/fabric_stream.h"
#include "registry/hello.h"
#include "transport/fabric_engine.h"
#include "transport/fabric_ring.h"

#define MAX_IOV IOV_MAX   /* a call's every buffer in one kernel call, as the kernel's own call would take them */
#define WAIT_MS 100          /* a sleep on the socket is re-checked this often */

void fabric_stream_init(struct fabric_stream *s, int fd, struct fabric_ring *ring, struct fabric_engine *engine)
{
    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->ring = ring;
    s->engine = engine;
}

static size_t iov_total(const struct iovec *iov, int n)
{
    size_t t = 0;
    for (int i = 0; i < n; i++)
        t += iov[i].iov_len;
    return t;
}

/* iov cut to at most max bytes, into out (MAX_IOV entries): its count. */
static int iov_cut(const struct iovec *iov, int n, size_t max, struct iovec *out)
{
    int k = 0;
    for (int i = 0; i < n && k < MAX_IOV && max > 0; i++) {
        size_t len = iov[i].iov_len < max ? iov[i].iov_len : max;
        out[k].iov_base = iov[i].iov_base;
        out[k++].iov_len = len;
        max -= len;
    }
    return k;
}

/* iov from its byte skip on, into out (MAX_IOV entries): its count. */
static int iov_skip(const struct iovec *iov, int n, size_t skip, struct iovec *out)
{
    int k = 0;
    for (int i = 0; i < n && k < MAX_IOV; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        out[k].iov_base = (char *)iov[i].iov_base + skip;
        out[k++].iov_len = iov[i].iov_len - skip;
        skip = 0;
    }
    return k;
}

static int settle_hello(struct fabric_stream *s);
static void push_owed(struct fabric_stream *s);
static void look_owner_left(struct fabric_stream *s);

/* The peer's process is gone: its TCP end came with a reset, or came and
 * the caller says the process is no more (a FIN alone may be a
 * half-close). */
/* The socket's error, reported once (the kernel clears it as it reports
 * it: the next recv answers 0, a send EPIPE). */
static int take_error(struct fabric_stream *s)
{
    int e = s->tcp_error;
    s->tcp_error = 0;
    return e;
}

static bool peer_dead(struct fabric_stream *s)
{
    return s->tcp_eof && (s->tcp_reset || (s->peer_gone && s->peer_gone(s->ctx)));
}

/* The stream is broken for good; the line that found it, for the log. */
#define broken(s) broken_at((s), __LINE__)
static int broken_at(struct fabric_stream *s, int line)
{
    if (!s->broken)
        s->broken_line = line;
    s->broken = true;
    return -EIO;
}

/* A doorbell: the engine's active message, which wakes the peer's wait on
 * its worker's fd; never a byte in the TCP stream, which carries only the
 * program's bytes.  A doorbell that cannot go is a hint lost: every wait
 * is bounded, and the ring is the truth. */
static void bell(struct fabric_stream *s)
{
    if (s->ring && fabric_ring_bell(s->ring) == 0)
        s->bells_sent++;
    if (s->on_bell)
        s->on_bell(s->ctx);
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static short socket_ready(const struct fabric_stream *s, short events);

bool fabric_stream_held(struct fabric_stream *s)
{
    if (s->tcp_full && (socket_ready(s, POLLOUT) & (POLLOUT | POLLERR | POLLHUP)))
        s->tcp_full = false;   /* the peer read enough of them: the ring's room counts */
    return s->tcp_full;
}

int fabric_stream_move(struct fabric_stream *s)
{
    if (s->moved || s->back)
        return 0;   /* (back before it moved: it never will) */
    if (s->broken)
        return -EIO;
    if (!s->ring)
        return -ENOTCONN;   /* a client before its hello: no ring yet */
    /* a peer that left reads no ring: this end stays on TCP (should it
     * leave just after this look, what goes into the ring is sent again) */
    if (fabric_ring_writable(s->ring) >= 0 && fabric_ring_peer_left(s->ring)) {
        s->back = true;
        return 0;
    }
    const void *blob = s->hand_blob;
    size_t len = s->hand_len;
    if (len > FABRIC_STREAM_BLOB_MAX)
        return -EMSGSIZE;
    fabric_ring_watch(s->ring, s->fd, 0);   /* (attached in this very call, maybe; its pid: conn_of's) */
    uint8_t h[FABRIC_STREAM_HEADER];
    put_le64(h, s->tcp_sent);
    put_le64(h + 8, len);
    struct iovec v[2] = { { h, sizeof h }, { (void *)blob, len } };
    /* the first bytes of a ring of at least 4 KiB, one put that publishes
     * both: they always fit, and land together */
    ssize_t w = fabric_ring_write(s->ring, v, 2, 0, NULL);
    if (w == -ENOTCONN)
        return -ENOTCONN;   /* the peer's blob has not come yet: nothing to move onto */
    if (w == -EPIPE && fabric_ring_peer_left(s->ring)) {
        s->back = true;     /* it left after the look above: this end stays on TCP */
        return 0;
    }
    if (w != (ssize_t)(sizeof h + len) || fabric_ring_flush(s->ring) < 0)
        return broken(s);
    s->moved = true;
    s->header_len = sizeof h + len;
    s->tcp_full = s->tcp_sent > 0 && !(socket_ready(s, POLLOUT) & POLLOUT);
    /* the header has landed: did the peer leave before it attached (then
     * it will never read it)?  Read after our put, as it looked at its ring
     * after saying so: one of the two sees the other */
    bool gone;
    int g = fabric_ring_peer_owner_left(s->ring, &gone);
    if (gone) {
        /* nothing of the program's is in the ring: nothing to send again,
         * nothing to wait for; the word unreadable, a peer still there
         * must find the way back after the header; read, the peer (which
         * may have refused this end rather than left) learns that this end
         * saw it before any TCP byte of ours after the header's count */
        if (g < 0 && fabric_ring_go_back(s->ring) == 0)
            fabric_ring_flush(s->ring);
        if (g == 0 && fabric_ring_ack_owner_left(s->ring) < 0)
            return broken(s);
        s->back = true;
        s->peer_left = g == 0;
        s->peer_refused = g == 0;
        return 0;
    }
    /* a reader asleep must come and read the header: the next write may
     * find the ring not empty (the header) and ring none */
    bell(s);
    return 0;
}

/* The peer's header, if it has landed: read once, checked. */
static int look_header(struct fabric_stream *s)
{
    if (s->peer_moved || s->refused || !s->ring || s->left)
        return 0;   /* (an end that left: its ring holds nothing of the stream's) */
    int64_t n = fabric_ring_readable(s->ring);
    if (n < 0)
        return broken(s);
    if (n < FABRIC_STREAM_HEADER)
        return 0;   /* a header lands whole, with its blob: written is published after them */
    uint8_t h[FABRIC_STREAM_HEADER];
    struct iovec v = { h, sizeof h };
    if (fabric_ring_read(s->ring, &v, 1, true, NULL) != (ssize_t)sizeof h)
        return broken(s);
    uint64_t p = get_le64(h), len = get_le64(h + 8);
    if (p < s->tcp_read || len > FABRIC_STREAM_BLOB_MAX || (uint64_t)n < sizeof h + len)
        return broken(s);   /* fewer bytes than this end already read of them, or no such blob */
    uint8_t blob[FABRIC_STREAM_BLOB_MAX];
    struct iovec w[2] = { { h, sizeof h }, { blob, (size_t)len } };
    if (fabric_ring_read(s->ring, w, 2, false, NULL) != (ssize_t)(sizeof h + len))
        return broken(s);
    /* a blob nobody expects, none where one is awaited, or one the caller
     * cannot take */
    int verdict = 0;
    if (!len != !s->on_peer_blob || (len && (verdict = s->on_peer_blob(s->ctx, blob, (size_t)len)) < 0))
        return broken(s);
    if (verdict > 0) {
        /* refused (its process not proven): nothing is attached, and the
         * peer learns it from our word (owner_left), says it saw it, and
         * sends again by TCP what it put here; until then its bytes are
         * TCP's, and only if its TCP ends without that word is the ring
         * read after all (refused_end) */
        bool header;
        if (fabric_ring_leave_unattached(s->ring, &header) < 0)
            return broken(s);
        s->refused = true;
        s->refused_tcp = p;
        return 0;
    }
    s->peer_tcp = p;
    s->peer_moved = true;
    if (len)
        bell(s);   /* attached just now: the space read before went back, the peer may wait for it */
    return 0;
}

/* The peer's bytes come from the ring now: it moved, every byte it sent
 * by TCP before was read, and the ring was not read to its way back.  The
 * socket has nothing more to say then but the peer's end, or the bytes
 * the peer sends once it went back (after the mark in the ring). */
static bool ring_phase(const struct fabric_stream *s)
{
    return s->peer_moved && s->tcp_read == s->peer_tcp && !s->peer_back;
}

/* Notes the socket's end once the peer's TCP bytes are all read.  A byte
 * or the end there belongs to the peer's way back if its ring says so
 * (looked at after the socket: the mark lands before the peer sends a byte
 * or its FIN by TCP); otherwise a byte is not this protocol's. */
static void look_socket_end(struct fabric_stream *s)
{
    if (!ring_phase(s) || s->tcp_eof || s->broken)
        return;
    char c;
    ssize_t n = shunt_real.recv(s->fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    if (n >= 0 && fabric_ring_peer_went_back(s->ring))
        return;   /* the reader meets them after the ring's last byte */
    if (n > 0) {
        broken(s);
    } else if (n == 0) {
        s->tcp_eof = true;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        s->tcp_eof = true;
        s->tcp_error = errno;
        s->tcp_reset = true;
    }
}

/* Sleeps until the socket or the engine has news (a doorbell wakes the
 * engine's fd), or WAIT_MS.  A socket that may still hold the program's
 * bytes says nothing about the ring (it would be readable at once,
 * forever): then the engine alone, and a short sleep. */
static void wait_news(struct fabric_stream *s, bool socket_news)
{
    struct pollfd p[2];
    int n = 0;
    int tmo = WAIT_MS;
    if (socket_news)
        p[n++] = (struct pollfd){ .fd = s->fd, .events = POLLIN };
    else
        tmo = 1;
    if (s->engine) {
        if (!fabric_engine_arm(s->engine)) {
            fabric_engine_progress(s->engine);
            return;
        }
        p[n++] = (struct pollfd){ .fd = fabric_engine_efd(s->engine), .events = POLLIN };
    }
    s->sleeps++;
    if (shunt_real.poll(p, (nfds_t)n, tmo) == 0 && socket_news)
        s->sleeps_timed_out++;   /* nobody rang: a doorbell lost would show here */
    if (s->engine)
        fabric_engine_progress(s->engine);
}

/* Polls the ring for up to spin_ns before a sleep (a peer on another CPU
 * usually answers sooner than a doorbell and a wake-up would take): true
 * as soon as it has bytes to read (read) or room (!read), or an error. */
static bool spin_for(struct fabric_stream *s, bool read)
{
    if (s->spin_ns == 0)
        return false;
    uint64_t until = clock_now_ns() + s->spin_ns;
    do {
        for (int k = 0; k < 16; k++) {
            int64_t n = read ? fabric_ring_readable(s->ring) : fabric_ring_writable(s->ring);
            if (n != 0)
                return true;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
    } while (clock_now_ns() < until);
    return false;
}

int fabric_stream_return(struct fabric_stream *s)
{
    if (s->broken)
        return -EIO;
    if (s->back || s->fin)
        return 0;   /* (after its FIN an end sends nothing more) */
    if (!s->moved) {
        s->back = true;   /* on TCP already: it never moves now */
        return 0;
    }
    int r = fabric_ring_go_back(s->ring);
    if (r < 0 || fabric_ring_flush(s->ring) < 0)
        return broken(s);
    s->back = true;
    bell(s);   /* a reader asleep must come and find the mark */
    return 0;
}

/* Once this end left, its ring is read no more (its count is final) and
 * the peer sends what follows it by TCP, after its own TCP bytes: the
 * socket alone is the stream, as after the peer's way back (peer_back).  A
 * call that was asleep in the stream when another thread left (a fork)
 * comes back to it, and reads the socket. */
int fabric_stream_leave(struct fabric_stream *s)
{
    if (s->broken)
        return -EIO;
    if (s->left)
        return 0;
    /* a hello not settled yet (nothing come, or a prefix held): the socket's
     * next reader could not tell it from the program's bytes.  Bounded: a
     * server that says nothing first may never send one */
    uint64_t until = clock_now_ns() + HELLO_HOLD_NS;
    while (s->await_hello && settle_hello(s) == -EAGAIN) {
        if (clock_now_ns() > until)
            return -EAGAIN;   /* nothing changed: the caller decides */
        struct pollfd p = { .fd = s->fd, .events = POLLIN };
        shunt_real.poll(&p, 1, 1);
    }
    if (s->broken)
        return -EIO;
    int r = fabric_ring_leave(s->ring);
    if (r == -ENOTCONN) {
        /* not attached: the peer cannot be told, but it looks before it
         * writes anything of its program's into the ring */
        bool header;
        r = fabric_ring_leave_unattached(s->ring, &header);
        if (r < 0)
            return broken(s);
        if (!header) {
            s->back = true;   /* (never moved: it cannot, unattached) */
            s->left = true;
            s->peer_back = true;
            return 0;
        }
        /* it moved already: its header and blob attach this end */
        if (look_header(s) < 0 || !s->peer_moved)
            return broken(s);
        r = fabric_ring_leave(s->ring);
    }
    if (r < 0 && r != -EPIPE)
        return broken(s);
    /* the sending side: a mark for a peer that still reads its ring */
    if (fabric_stream_return(s) < 0)
        return -EIO;
    bell(s);   /* a peer asleep must come and send again what this end leaves */
    s->left = true;
    s->peer_back = true;   /* (below) */
    return 0;
}

int fabric_stream_ask(struct fabric_stream *s)
{
    if (s->broken)
        return -EIO;
    if (s->asked)
        return 0;
    int r = fabric_ring_ask(s->ring);
    if (r == -ENOTCONN || r == -EPIPE)
        return r;
    if (r < 0)
        return broken(s);
    s->asked = true;
    bell(s);   /* a peer asleep must come and see it */
    return 0;
}

/* Goes back if the peer asked, by its count as last looked at (fresh when
 * `look` asks for a look first).  If it left: no mark (nobody reads the
 * ring), and what it had not read is owed by TCP, first. */
static void serve_peer(struct fabric_stream *s, bool look)
{
    if (!s->moved || s->broken || s->peer_left)
        return;
    if (look && fabric_ring_writable(s->ring) < 0) {
        broken(s);
        return;
    }
    if (fabric_ring_peer_left(s->ring)) {
        s->peer_left = true;
        uint64_t from = fabric_ring_peer_consumed(s->ring);
        s->resend_pos = from > s->header_len ? from : s->header_len;   /* the header is not the program's */
        s->resend_end = fabric_ring_written(s->ring);
        if (s->resend_end < s->resend_pos)
            s->resend_end = s->resend_pos;
        if (s->fin && !s->back)
            s->fin_owed = true;   /* the ring's FIN, which it will not read: TCP's, after the bytes */
        s->back = true;
        return;
    }
    if (!s->back && !s->fin && fabric_ring_peer_asked(s->ring))
        fabric_stream_return(s);
}

/* What an end that went back owes before its first byte or FIN by TCP:
 * its ring read to the mark (else a peer that leaves later would get the
 * bytes it sends again behind these), or, if the peer left, what it had
 * not read, sent again; then a FIN owed.  0 once clear, -EAGAIN while not
 * (nonblock; a blocking call waits), or -errno. */
static int clear_tcp(struct fabric_stream *s, bool nonblock)
{
    while (s->moved && s->back) {
        serve_peer(s, true);
        if (s->broken)
            return -EIO;
        if (s->peer_left) {
            if (s->resend_pos == s->resend_end)
                break;
            uint8_t chunk[16384];
            size_t want = s->resend_end - s->resend_pos < sizeof chunk ? (size_t)(s->resend_end - s->resend_pos)
                                                                        : sizeof chunk;
            ssize_t got = fabric_ring_unread(s->ring, s->resend_pos, chunk, want);
            if (got <= 0)
                return broken(s);   /* the bytes the peer left cannot be had: EIO, never a gap */
            ssize_t n = shunt_real.send(s->fd, chunk, (size_t)got, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                s->resend_pos += (uint64_t)n;
                continue;
            }
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                return -errno;
        } else if (fabric_ring_peer_consumed(s->ring) == fabric_ring_written(s->ring) ||
                   fabric_ring_written(s->ring) == s->header_len) {
            break;   /* read to the mark, or nothing of the program's before it */
        }
        if (nonblock)
            return -EAGAIN;
        wait_news(s, false);   /* the peer's read, or its leave, comes with a doorbell */
    }
    if (s->fin_owed) {
        s->fin_owed = false;
        if (shunt_real.shutdown(s->fd, SHUT_WR) < 0)
            return -errno;
    }
    return 0;
}

int fabric_stream_settle(struct fabric_stream *s, bool wait)
{
    if (s->broken)
        return -EIO;
    serve_peer(s, true);
    look_owner_left(s);
    return clear_tcp(s, !wait);
}

/* The program's bytes by TCP, from byte skip of iov: sent, or -errno. */
static ssize_t tcp_send(struct fabric_stream *s, const struct iovec *iov, int iovcnt, size_t skip, bool nonblock)
{
    int c = clear_tcp(s, nonblock);
    if (c < 0)
        return c;
    struct iovec rest[MAX_IOV];
    struct msghdr mh = { .msg_iov = rest, .msg_iovlen = (size_t)iov_skip(iov, iovcnt, skip, rest) };
    ssize_t n = shunt_real.sendmsg(s->fd, &mh, MSG_NOSIGNAL | (nonblock ? MSG_DONTWAIT : 0));
    if (n < 0)
        return -errno;
    if (!s->moved)
        s->tcp_sent += (uint64_t)n;
    return n;
}

ssize_t fabric_stream_send(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool nonblock)
{
    if (s->broken)
        return -EIO;
    if (s->fin)
        return -EPIPE;
    if (s->tcp_reset)
        return s->tcp_error ? -take_error(s) : -EPIPE;   /* the connection was reset: as the kernel's send */
    /* the peer's header, if it came: an end that only writes (a server
     * that streams) attaches by it too, and can move */
    if (!s->peer_moved && look_header(s) < 0)
        return -EIO;
    serve_peer(s, false);
    look_owner_left(s);
    if (!s->moved || s->back)
        return tcp_send(s, iov, iovcnt, 0, nonblock);
    size_t total = iov_total(iov, iovcnt), done = 0;
    while (done < total) {
        if (s->back) {   /* the peer asked meanwhile: the rest by TCP, after the ring's */
            ssize_t t = tcp_send(s, iov, iovcnt, done, nonblock);
            return t > 0 ? (ssize_t)done + t : done ? (ssize_t)done : t;
        }
        if (fabric_stream_held(s)) {
            /* full by TCP: as the kernel's, the send waits for the peer to
             * read (the caller sleeps on the socket's room) */
            look_socket_end(s);
            if (peer_dead(s))
                return done ? (ssize_t)done : s->tcp_error ? -take_error(s) : -EPIPE;
            if (nonblock)
                return done ? (ssize_t)done : -EAGAIN;
            struct pollfd p = { .fd = s->fd, .events = POLLOUT };
            shunt_real.poll(&p, 1, WAIT_MS);
            continue;
        }
        bool was_empty = false;
        ssize_t r = fabric_ring_write(s->ring, iov, iovcnt, done, &was_empty);
        if (r > 0) {
            done += (size_t)r;
            bool sleeps = false;
            if (was_empty && fabric_ring_peer_sleeps(s->ring, &sleeps) < 0)
                return done ? (ssize_t)done : broken(s);
            if (sleeps)
                bell(s);   /* only a reader that said it sleeps: one spinning needs none */
            serve_peer(s, false);   /* the write looked at the peer's count */
            if (nonblock)
                break;
            continue;
        }
        if (r == -EPIPE) {
            serve_peer(s, false);   /* the peer left: the rest by TCP */
            if (s->back)
                continue;
        }
        if (r != -EAGAIN) {
            if (r != -EPIPE)
                broken(s);
            return done ? (ssize_t)done : r;
        }
        /* full: a peer whose process is gone never makes room, nonblocking
         * or not (a FIN alone may be a half-close: the peer still reads) */
        look_socket_end(s);
        if (s->broken)
            return done ? (ssize_t)done : -EIO;
        if (peer_dead(s))
            return done ? (ssize_t)done : s->tcp_error ? -take_error(s) : -EPIPE;
        if (nonblock)
            return done ? (ssize_t)done : -EAGAIN;
        /* about to sleep: our count must be where the peer decides */
        if (fabric_ring_flush(s->ring) < 0)
            return done ? (ssize_t)done : broken(s);
        if (fabric_ring_writable(s->ring) != 0 || spin_for(s, false))
            continue;
        serve_peer(s, false);   /* (writable looked) */
        if (s->back)
            continue;
        /* the socket tells of the peer's end, unless the peer's bytes come
         * by TCP now: then it may be readable for good */
        wait_news(s, ring_phase(s) && !fabric_ring_peer_went_back(s->ring));
    }
    return (ssize_t)done;
}

int fabric_stream_hello(struct fabric_stream *s, uint32_t tag, uint64_t cookie, const uint8_t *nonce,
                        const void *blob, size_t len)
{
    uint8_t h[HELLO_MAX];
    size_t n = hello_build(h, sizeof h, tag, cookie, nonce, blob, len);
    if (n == 0)
        return -EMSGSIZE;
    /* a fresh connection's first bytes, a few hundred of them: the socket
     * takes them at once; MSG_NOSIGNAL: a client already gone is an error */
    for (size_t done = 0; done < n;) {
        ssize_t w = shunt_real.send(s->fd, h + done, n - done, MSG_NOSIGNAL);
        if (w < 0 && errno != EINTR)
            return -errno;
        if (w > 0)
            done += (size_t)w;
    }
    return 0;
}

/* The client's first bytes: 0 once settled (a hello for this socket taken
 * off and handed over, or none), -EAGAIN while they may still be one (a
 * prefix of it, or nothing yet), -errno. */
static int settle_hello(struct fabric_stream *s)
{
    if (!s->await_hello)
        return 0;
    /* an error waiting on the socket (a refused connect) is the program's
     * to read: a peek would take it (the kernel reports it once) */
    struct pollfd p = { .fd = s->fd, .events = POLLIN };
    if (shunt_real.poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLNVAL))) {
        s->await_hello = false;   /* no hello comes */
        return 0;
    }
    if (!(p.revents & POLLIN))
        return -EAGAIN;
    uint8_t buf[HELLO_MAX];
    ssize_t n = shunt_real.recv(s->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return -EAGAIN;
    if (n == 0 && s->rd_shut)
        return -EAGAIN;   /* our own SHUT_RD's end: a hello may still come */
    if (n <= 0) {   /* the end, or an error: no hello comes; recv will say which */
        s->await_hello = false;
        return 0;
    }
    struct hello h;
    enum hello_seen seen = hello_match(buf, (size_t)n, s->hello_tag, s->hello_cookie, &h);
    if (seen == HELLO_PARTIAL) {
        uint64_t now = clock_now_ns();
        if (!s->hello_partial_since)
            s->hello_partial_since = now;
        if (now - s->hello_partial_since < HELLO_HOLD_NS)
            return -EAGAIN;
        seen = HELLO_NOT;   /* held long enough: the program's bytes after all */
    }
    s->await_hello = false;
    if (seen == HELLO_NOT)
        return 0;
    /* found: take exactly the hello off the socket (the peek saw it whole;
     * h points into buf, so it goes out through another buffer) */
    for (size_t done = 0; done < h.len;) {
        uint8_t sink[512];
        size_t want = h.len - done < sizeof sink ? h.len - done : sizeof sink;
        ssize_t r = shunt_real.recv(s->fd, sink, want, MSG_DONTWAIT);
        if (r <= 0)
            return broken(s);
        done += (size_t)r;
    }
    if (!s->on_hello || s->on_hello(s->ctx, &h) < 0)
        return broken(s);
    return 0;
}

/* A refused peer's TCP ended: if it never said it saw the refusal (its
 * process gone before it looked), what it put into the ring after the
 * TCP bytes it counted is the rest of the stream, read here as if it had
 * been taken (this end's own memory: nothing is put anywhere).  True then. */
static bool refused_end(struct fabric_stream *s)
{
    if (!s->refused || s->peer_moved || fabric_ring_owner_left_seen(s->ring))
        return false;
    if (s->tcp_read != s->refused_tcp) {
        broken(s);   /* more TCP bytes than it counted, and it never said why */
        return true;
    }
    s->peer_tcp = s->refused_tcp;
    s->peer_moved = true;
    return true;
}

/* A client that moved, whose peer has not (no header in this end's ring):
 * the peer may have refused it, or left, before it attached, after this
 * end's look in fabric_stream_move.  Looked at before this end puts more
 * into the ring and before it waits; seen, it says so and goes back as
 * from a peer that left having read nothing. */
static void look_owner_left(struct fabric_stream *s)
{
    if (!s->moved || s->back || s->left || s->broken || look_header(s) < 0 || s->peer_moved)
        return;
    bool gone;
    int g = fabric_ring_peer_owner_left(s->ring, &gone);
    if (!gone)
        return;
    if (g < 0 || fabric_ring_ack_owner_left(s->ring) < 0) {
        broken(s);
        return;
    }
    s->peer_left = true;
    s->peer_refused = true;
    s->resend_pos = s->header_len;
    s->resend_end = fabric_ring_written(s->ring);
    if (s->resend_end < s->resend_pos)
        s->resend_end = s->resend_pos;
    if (s->fin)
        s->fin_owed = true;
    s->back = true;
}

/* The peer's TCP bytes: -EAGAIN when there are none now (or no longer
 * any to expect), else what recv answers. */
/* A refused peer's TCP bytes past the count its header gave: whose they
 * are.  It saw the refusal (its word says so, put before any such byte):
 * TCP's, all of them; it went back without seeing it (the mark in its
 * ring, put before any such byte): the protocol's order, its ring to the
 * mark first; neither: not yet known (-EAGAIN; a byte there then is not
 * this protocol's).  0 once TCP's. */
static int refused_past_count(struct fabric_stream *s)
{
    if (s->refused_tcp_all)
        return 0;
    if (fabric_ring_owner_left_seen(s->ring)) {
        s->refused_tcp_all = true;
        return 0;
    }
    if (fabric_ring_peer_went_back(s->ring)) {
        s->peer_tcp = s->refused_tcp;
        s->peer_moved = true;   /* read as if met: the ring to its mark, then TCP */
        return -EAGAIN;
    }
    char c;
    ssize_t n = s->tcp_eof ? -1 : shunt_real.recv(s->fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    int err = errno;
    if (n > 0 && !fabric_ring_owner_left_seen(s->ring) && !fabric_ring_peer_went_back(s->ring))
        return broken(s);
    if (n == 0) {
        s->tcp_eof = true;   /* its end right after the count: refused_end reads the ring */
    } else if (n < 0 && !s->tcp_eof && err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
        s->tcp_eof = true;
        s->tcp_error = err;
        s->tcp_reset = true;
    }
    return -EAGAIN;
}

static ssize_t recv_tcp(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool peek)
{
    int hr = settle_hello(s);
    if (hr < 0)
        return hr;
    struct iovec cut[MAX_IOV];
    size_t total = iov_total(iov, iovcnt);
    if (s->refused && !s->peer_moved && !s->refused_tcp_all) {
        if (s->tcp_read >= s->refused_tcp) {
            int d = refused_past_count(s);
            if (d < 0)
                return d;
        } else if (total > s->refused_tcp - s->tcp_read) {
            total = (size_t)(s->refused_tcp - s->tcp_read);
        }
    }
    if (s->peer_moved && total > s->peer_tcp - s->tcp_read)
        total = (size_t)(s->peer_tcp - s->tcp_read);
    struct msghdr mh = { .msg_iov = cut, .msg_iovlen = (size_t)iov_cut(iov, iovcnt, total, cut) };
    /* A peek first, the header after, then only the peer's bytes before
     * its move are taken: once it went back, the bytes it sends by TCP
     * come after its ring's, and a read before the header was known may
     * have reached them (the header had landed before the first of them
     * was sent, so a look after the read finds it). */
    ssize_t n = s->tcp_eof ? -1 : shunt_real.recvmsg(s->fd, &mh, MSG_DONTWAIT | MSG_PEEK);
    int err = s->tcp_eof ? EAGAIN : errno;
    if (look_header(s) < 0)
        return -EIO;
    if (n > 0) {
        uint64_t data = (uint64_t)n;
        if (s->peer_moved && data > s->peer_tcp - s->tcp_read)
            data = s->peer_tcp - s->tcp_read;
        if (data == 0)
            return -EAGAIN;
        if (!peek) {
            struct iovec take[MAX_IOV];
            struct msghdr tm = { .msg_iov = take, .msg_iovlen = (size_t)iov_cut(iov, iovcnt, (size_t)data, take) };
            if (shunt_real.recvmsg(s->fd, &tm, MSG_DONTWAIT) != (ssize_t)data)
                return broken(s);   /* the bytes just seen are gone: another reader */
            s->tcp_read += data;
        }
        return (ssize_t)data;
    }
    if (n == 0 && total > 0) {
        s->tcp_eof = true;
    } else if (n < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
        s->tcp_eof = true;
        s->tcp_error = err;
        s->tcp_reset = true;
    }
    return -EAGAIN;
}

/* After the ring's way back: the socket, as plain TCP (a blocking wait
 * still watches the engine, so that asks from the peer are served). */
static ssize_t recv_back(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool peek, bool nonblock)
{
    for (;;) {
        struct iovec cut[MAX_IOV];
        struct msghdr mh = { .msg_iov = cut, .msg_iovlen = (size_t)iov_skip(iov, iovcnt, 0, cut) };
        ssize_t n = shunt_real.recvmsg(s->fd, &mh, MSG_DONTWAIT | (peek ? MSG_PEEK : 0));
        if (n >= 0)
            return n;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        if (nonblock)
            return -EAGAIN;
        serve_peer(s, true);
        look_owner_left(s);
        push_owed(s);
        wait_news(s, true);
    }
}

/* The ring's answer, as fabric_ring_read's, but for its way back, which
 * turns the reader to the socket (-EAGAIN then: look again). */
static ssize_t read_ring(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool peek)
{
    bool was_full = false;
    ssize_t r = fabric_ring_read(s->ring, iov, iovcnt, peek, &was_full);
    if (r > 0 && was_full && !peek)
        bell(s);   /* the peer may be waiting for room */
    if (r == -EXDEV) {
        s->peer_back = true;
        bell(s);   /* read to its mark: the peer may wait for that to send by TCP */
        return -EAGAIN;
    }
    return r >= 0 || r == -EAGAIN ? r : broken(s);
}

/* Pushes what this end owes by TCP (nonblocking): a peer that left may be
 * waiting for it before it sends anything this end would read. */
static void push_owed(struct fabric_stream *s)
{
    if (s->fin_owed || s->resend_pos < s->resend_end)
        (void)clear_tcp(s, true);
}

ssize_t fabric_stream_recv(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool peek, bool nonblock)
{
    if (s->broken)
        return -EIO;
    if (iov_total(iov, iovcnt) == 0)
        return 0;
    push_owed(s);
    for (;;) {
        if (s->broken)
            return -EIO;
        if (s->peer_back)
            return recv_back(s, iov, iovcnt, peek, nonblock);
        if (!ring_phase(s)) {
            ssize_t n = recv_tcp(s, iov, iovcnt, peek);
            if (n != -EAGAIN)
                return n;
            if (!ring_phase(s) && s->tcp_eof && refused_end(s))
                continue;   /* the refused peer's ring holds the rest */
            if (!ring_phase(s)) {
                if (s->tcp_eof)   /* the peer ended on TCP (or died) before it moved */
                    return s->tcp_error ? -take_error(s) : 0;
                if (s->rd_shut)
                    return 0;     /* shut for reading: nothing now is the end */
                if (nonblock)
                    return -EAGAIN;
                serve_peer(s, true);
                look_owner_left(s);
                push_owed(s);
                /* a prefix of a hello held: the socket stays readable, nap */
                wait_news(s, !(s->await_hello && s->hello_partial_since));
                continue;
            }
        }
        ssize_t r = read_ring(s, iov, iovcnt, peek);
        if (r >= 0)
            return r;   /* bytes, or the peer's FIN after all of them */
        if (r != -EAGAIN || s->peer_back)
            continue;   /* broken, or the way back: the loop's first tests answer */
        /* the peer's end shows only on the socket; a loop of nonblocking
         * reads looks at it once in 64 (a system call each otherwise), a
         * read that will sleep every time */
        if (!nonblock || (s->empty_looks++ & 63) == 0) {
            look_socket_end(s);
            serve_peer(s, true);   /* and the peer's count: it may have asked, or left */
            look_owner_left(s);
            push_owed(s);
        }
        if (s->broken)
            return -EIO;
        if (s->tcp_eof) {
            /* the peer's process is gone without a FIN or the way back in
             * the ring: what landed before is delivered, then what TCP said */
            r = read_ring(s, iov, iovcnt, peek);
            if (r >= 0)
                return r;
            if (r != -EAGAIN || s->peer_back)
                continue;
            return s->tcp_error ? -take_error(s) : 0;
        }
        if (nonblock)
            return -EAGAIN;
        serve_peer(s, true);   /* a peer that asks may wait for our way back */
        push_owed(s);
        if (spin_for(s, true))
            continue;
        if (fabric_ring_sleep(s->ring) < 0)
            return broken(s);
        char c;
        struct iovec one = { &c, 1 };
        r = fabric_ring_read(s->ring, &one, 1, true, NULL);   /* bytes, the FIN, the way back: no sleep */
        if (r != -EAGAIN)
            continue;
        wait_news(s, true);
    }
}

static int64_t socket_queue(const struct fabric_stream *s, unsigned long req)
{
    int q = 0;
    return shunt_real.ioctl(s->fd, req, &q) < 0 ? -errno : q;
}

int64_t fabric_stream_readable(struct fabric_stream *s)
{
    if (s->broken)
        return -EIO;
    if (s->peer_back)
        return socket_queue(s, FIONREAD);
    if (!ring_phase(s)) {
        int hr = settle_hello(s);
        if (hr == -EAGAIN)
            return 0;   /* awaiting the hello: all there is, if anything, is (a part of) it */
        if (hr < 0 || look_header(s) < 0)
            return -EIO;
    }
    if (!ring_phase(s)) {
        /* the peer's TCP bytes: the kernel's queue, never past those the
         * peer counted before its move (what follows is after its ring's) */
        int64_t q = socket_queue(s, FIONREAD);
        uint64_t cap = UINT64_MAX;
        if (s->peer_moved)
            cap = s->peer_tcp - s->tcp_read;
        else if (s->refused && !s->refused_tcp_all)
            cap = s->refused_tcp > s->tcp_read ? s->refused_tcp - s->tcp_read : 0;
        return q >= 0 && (uint64_t)q > cap ? (int64_t)cap : q;
    }
    int64_t r = fabric_ring_readable(s->ring);
    return r < 0 ? broken(s) : r;
}

int64_t fabric_stream_unread_by_peer(struct fabric_stream *s)
{
    if (s->broken)
        return -EIO;
    int64_t q = socket_queue(s, SIOCOUTQ);
    if (q < 0 || !s->moved || s->back || s->left || s->peer_left)
        return q;
    uint64_t w = fabric_ring_written(s->ring), c = fabric_ring_peer_consumed(s->ring);
    uint64_t skip = s->header_len > c ? s->header_len - c : 0;   /* the header is not the program's */
    return q + (int64_t)(w > c + skip ? w - c - skip : 0);
}

short fabric_stream_before_sleep(struct fabric_stream *s)
{
    /* a writer waiting for room: our count where the peer decides (only
     * then: over TCP lanes a flush waits for the peer's engine) */
    if (!s->broken && s->moved && !s->back && !s->fin && fabric_ring_writable(s->ring) == 0 &&
        fabric_ring_flush(s->ring) < 0)
        broken(s);
    if (!s->broken && ring_phase(s) && fabric_ring_sleep(s->ring) < 0)
        broken(s);
    return fabric_stream_poll(s);
}

/* The socket's own readiness for events (a poll that does not wait). */
static short socket_ready(const struct fabric_stream *s, short events)
{
    struct pollfd p = { .fd = s->fd, .events = events };
    return shunt_real.poll(&p, 1, 0) > 0 ? p.revents : 0;
}

short fabric_stream_poll(struct fabric_stream *s)
{
    if (s->broken)
        return POLLIN | POLLOUT | POLLERR;
    serve_peer(s, true);
    look_owner_left(s);
    push_owed(s);
    short rev = 0;
    if (s->peer_back) {
        /* after the ring's way back: the socket's */
    } else if (!ring_phase(s) && settle_hello(s) == -EAGAIN) {
        /* nothing yet, or a prefix of a hello held: not the program's */
    } else if (s->broken) {
        return POLLIN | POLLOUT | POLLERR;
    } else if (!ring_phase(s)) {
        int avail = 0;
        short ready = socket_ready(s, POLLIN);
        if (ready && shunt_real.ioctl(s->fd, FIONREAD, &avail) < 0)
            avail = 0;
        if (look_header(s) < 0)
            return POLLIN | POLLOUT | POLLERR;
        if (!s->peer_moved) {
            if (ready)
                rev |= POLLIN;   /* the program's bytes, or the end of them */
        } else if (s->tcp_read < s->peer_tcp && avail > 0) {
            rev |= POLLIN;       /* the last of its TCP bytes */
        }
    }
    if (!(rev & POLLIN) && !s->peer_back && ring_phase(s)) {
        char c;
        struct iovec v = { &c, 1 };
        look_socket_end(s);
        if (s->broken)
            return POLLIN | POLLOUT | POLLERR;
        ssize_t r = read_ring(s, &v, 1, true);
        if (s->broken)
            return POLLIN | POLLOUT | POLLERR;
        if (r >= 0 || (r == -EAGAIN && !s->peer_back && s->tcp_eof))
            rev |= POLLIN;   /* bytes, the FIN, or the peer's end */
    }
    if (s->peer_back && (socket_ready(s, POLLIN) & (POLLIN | POLLHUP | POLLERR)))
        rev |= POLLIN;
    /* the peer's end came (the kernel's RDHUP: its FIN is in, read or not),
     * and with this end's own, both directions shut (HUP) */
    /* (before the ring, the socket's HUP is the kernel's word on both
     * directions: another holder's SHUT_RDWR shows there, not in s->fin) */
    short sock = ring_phase(s) ? 0 : socket_ready(s, POLLRDHUP);
    bool ended = s->tcp_eof || (ring_phase(s) ? fabric_ring_peer_fin(s->ring) : (sock & (POLLRDHUP | POLLHUP)) != 0);
    if (ended)
        rev |= POLLIN | POLLRDHUP | (s->fin || s->tcp_reset || (sock & POLLHUP) ? POLLHUP : 0);
    if (s->tcp_error || (sock & POLLERR))
        rev |= POLLERR;   /* a reset not reported yet (by the stream, or the socket's own), as the kernel's poll shows it */
    if (s->fin) {
        rev |= POLLOUT;   /* shut for writing: a send fails at once (EPIPE), as the kernel says */
    } else {
        if (!s->moved || s->back) {
            if (clear_tcp(s, true) == 0 && (socket_ready(s, POLLOUT) & POLLOUT))
                rev |= POLLOUT;
        } else if (!fabric_stream_held(s) && fabric_ring_writable(s->ring) > 0) {
            rev |= POLLOUT;
        } else {
            look_socket_end(s);   /* full, and the peer gone: a send fails at once, as the kernel's would */
            if (peer_dead(s))
                rev |= POLLOUT | (s->tcp_error ? POLLERR : 0);
        }
    }
    return rev;
}

int fabric_stream_shutdown(struct fabric_stream *s)
{
    if (s->broken)
        return -EIO;
    if (s->fin)
        return 0;
    if (s->back) {   /* the direction is TCP's again: so is its end, once clear */
        s->fin = true;
        s->fin_owed = true;
        int c = clear_tcp(s, true);
        return c == -EAGAIN ? 0 : c;   /* (what is owed goes with the next calls) */
    }
    int r = fabric_stream_move(s);
    if (r < 0)
        return r;
    r = fabric_ring_shutdown(s->ring);
    if (r < 0 && r != -EPIPE)
        return broken(s);
    s->fin = true;
    if (fabric_ring_flush(s->ring) < 0)
        return broken(s);
    bell(s);   /* a reader asleep must come and find the FIN */
    return 0;
}
