/*
 * fabric_stream.c: a connection's bytes over the fabric ring, after the
 * bytes each end sent by TCP before it moved (the protocol is in
 * fabric_stream.h; why it looks as it does in docs/architecture.md, "Built:
 * the fabric stream"): the stream, its hand-over (the server's hello, the
 * client's first bytes settled, the move and the peer's header), how a
 * blocking call waits, and the way back to TCP (return, ask, leave, what
 * an end that went back owes by TCP).  Sending is fabric_stream_send.c's,
 * receiving fabric_stream_recv.c's, readiness and the counts
 * fabric_stream_poll.c's; what they share, fabric_stream_internal.h.
 *
 * The TCP stream carries the program's bytes and nothing else: an end's
 * bytes before its move, counted in the header it puts first in its ring.
 * Doorbells are the engine's active messages, so a reader never has to
 * tell a doorbell from a byte, and an end that moves back to TCP later has
 * nothing to take out of the stream.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/real.h"
#include "core/conn/fabric_stream_internal.h"
#include "registry/hello.h"
#include "transport/fabric_engine.h"
#include "transport/fabric_ring.h"

void fabric_stream_init(struct fabric_stream *s, int fd, struct fabric_ring *ring, struct fabric_engine *engine)
{
    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->ring = ring;
    s->engine = engine;
}

/* The socket's error, reported once (the kernel clears it as it reports
 * it: the next recv answers 0, a send EPIPE). */
int fstream_take_error(struct fabric_stream *s)
{
    int e = s->tcp_error;
    s->tcp_error = 0;
    return e;
}

/* The peer's process is gone: its TCP end came with a reset, or came and
 * the caller says the process is no more (a FIN alone may be a
 * half-close). */
bool fstream_peer_dead(struct fabric_stream *s)
{
    return s->tcp_eof && (s->tcp_reset || (s->peer_gone && s->peer_gone(s->ctx)));
}

/* broken(s)'s, fabric_stream_internal.h */
int fstream_broken_at(struct fabric_stream *s, const char *file, int line)
{
    if (!s->broken) {
        s->broken_file = file;
        s->broken_line = line;
    }
    s->broken = true;
    return -EIO;
}

/* A doorbell: the engine's active message, which wakes the peer's wait on
 * its worker's fd; never a byte in the TCP stream, which carries only the
 * program's bytes.  A doorbell that cannot go is a hint lost: every wait
 * is bounded, and the ring is the truth. */
void fstream_bell(struct fabric_stream *s)
{
    if (s->ring && fabric_ring_bell(s->ring) == 0)
        s->bells_sent++;
    if (s->on_bell)
        s->on_bell(s->ctx);
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
int fstream_settle_hello(struct fabric_stream *s)
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
    s->tcp_full = s->tcp_sent > 0 && !(fstream_socket_ready(s, POLLOUT) & POLLOUT);
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
    fstream_bell(s);
    return 0;
}

/* The peer's header, if it has landed: read once, checked. */
int fstream_look_header(struct fabric_stream *s)
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
        fstream_bell(s);   /* attached just now: the space read before went back, the peer may wait for it */
    return 0;
}

/* Sleeps until the socket or the engine has news (a doorbell wakes the
 * engine's fd), or WAIT_MS.  A socket that may still hold the program's
 * bytes says nothing about the ring (it would be readable at once,
 * forever): then the engine alone, and a short sleep. */
void fstream_wait_news(struct fabric_stream *s, bool socket_news)
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
bool fstream_spin_for(struct fabric_stream *s, bool read)
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
    fstream_bell(s);   /* a reader asleep must come and find the mark */
    return 0;
}

/* After this end's leave landed: if the peer took back meanwhile, where
 * its TCP bytes start is in its final word, which it puts in the same call
 * (waited for, bounded); what this end had read past it is dropped from
 * the socket now, since the socket's next reader may be a program without
 * shunt (bounded too: the peer sends those bytes first, at once).  0, or
 * -EIO (broken: the caller resets the connection rather than hand on
 * bytes twice). */
#define TAKE_WAIT_NS (5ull * 1000 * 1000 * 1000)
static int leave_took_back(struct fabric_stream *s)
{
    uint64_t until = clock_now_ns() + TAKE_WAIT_NS, skip;
    int t;
    while ((t = fabric_ring_peer_took_back(s->ring, &skip)) == -EAGAIN && clock_now_ns() < until) {
        struct pollfd p = { .fd = s->fd, .events = 0 };
        shunt_real.poll(&p, 1, 1);
    }
    if (t < 0)
        return broken(s);
    if (t == 1 && !s->peer_back)
        s->tcp_skip = skip;   /* (once met at the ring's end, it was set then) */
    return fstream_drop_skip(s, until) == -EAGAIN ? broken(s) : 0;
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
    while (s->await_hello && fstream_settle_hello(s) == -EAGAIN) {
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
        if (fstream_look_header(s) < 0 || !s->peer_moved)
            return broken(s);
        r = fabric_ring_leave(s->ring);
    }
    if (r < 0 && r != -EPIPE)
        return broken(s);
    if (r == 0 && leave_took_back(s) < 0)
        return -EIO;
    /* the sending side: a mark for a peer that still reads its ring */
    if (fabric_stream_return(s) < 0)
        return -EIO;
    fstream_bell(s);   /* a peer asleep must come and send again what this end leaves */
    s->left = true;
    s->peer_back = true;   /* (below) */
    return 0;
}

/* A look this long after the last starts a new count: another send's wait
 * (a blocking send's sleeps here are WAIT_MS at most). */
#define STALL_GAP_NS (3ull * WAIT_MS * 1000 * 1000)

bool fabric_stream_send_stalled(struct fabric_stream *s, uint64_t now, uint64_t stall_ns)
{
    if (!stall_ns || s->told_full || !s->moved || s->fin || s->took_back || s->peer_left || s->broken ||
        (!s->back && fabric_ring_writable(s->ring) != 0) ||
        (s->back && fstream_clear_tcp(s, true) != -EAGAIN)) {
        s->stall_seen = 0;
        return false;
    }
    uint64_t consumed = fabric_ring_peer_consumed(s->ring);
    if (consumed != s->stall_consumed || !s->stall_seen || now - s->stall_seen > STALL_GAP_NS) {
        s->stall_consumed = consumed;
        s->stall_since = now;
    }
    s->stall_seen = now;
    return now - s->stall_since >= stall_ns;
}

int fabric_stream_take_back(struct fabric_stream *s)
{
    if (s->broken)
        return -EIO;
    if (!s->moved || s->fin || s->took_back || s->peer_left || s->left)
        return -EPIPE;
    uint64_t from;
    int r = fabric_ring_take_back(s->ring, s->header_len, &from);
    if (r == -EPIPE) {
        fstream_serve_peer(s, false);   /* it left: served as a leave */
        return r;
    }
    if (r < 0)
        return broken(s);
    s->back = true;
    s->took_back = true;
    s->stall_seen = 0;
    s->resend_pos = from > s->header_len ? from : s->header_len;   /* the header is not the program's */
    s->resend_end = fabric_ring_written(s->ring);
    if (s->resend_end < s->resend_pos)
        s->resend_end = s->resend_pos;
    fstream_bell(s);   /* a reader asleep must come and find the way back */
    return 0;
}

int fstream_drop_skip(struct fabric_stream *s, uint64_t until)
{
    while (s->tcp_skip) {
        uint8_t sink[16384];
        size_t want = s->tcp_skip < sizeof sink ? (size_t)s->tcp_skip : sizeof sink;
        ssize_t n = shunt_real.recv(s->fd, sink, want, MSG_DONTWAIT);
        if (n > 0) {
            s->tcp_skip -= (uint64_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (clock_now_ns() >= until)
                return -EAGAIN;
            struct pollfd p = { .fd = s->fd, .events = POLLIN };
            shunt_real.poll(&p, 1, WAIT_MS);   /* the peer sends them first, at once */
            continue;
        }
        /* the end (the writer's process gone before it sent them again):
         * nothing more comes, and the socket says so again; an error is
         * the kernel's once, so kept for the program's next call */
        if (n < 0) {
            s->tcp_eof = true;
            s->tcp_error = errno;
            s->tcp_reset = true;
        }
        s->tcp_skip = 0;
    }
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
    fstream_bell(s);   /* a peer asleep must come and see it */
    return 0;
}

/* Goes back if the peer asked, by its count as last looked at (fresh when
 * `look` asks for a look first).  If it left: no mark (nobody reads the
 * ring), and what it had not read is owed by TCP, first. */
void fstream_serve_peer(struct fabric_stream *s, bool look)
{
    if (!s->moved || s->broken || s->peer_left || s->took_back)
        return;   /* (after a take-back, a leave is no news: fabric_ring_take_back) */
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
int fstream_clear_tcp(struct fabric_stream *s, bool nonblock)
{
    while (s->moved && s->back) {
        fstream_serve_peer(s, true);
        if (s->broken)
            return -EIO;
        if (s->peer_left || s->took_back) {
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
        fstream_wait_news(s, false);   /* the peer's read, or its leave, comes with a doorbell */
    }
    if (s->fin_owed) {
        s->fin_owed = false;
        if (shunt_real.shutdown(s->fd, SHUT_WR) < 0)
            return -errno;
    }
    return 0;
}

/* Pushes what this end owes by TCP (nonblocking): a peer that left may be
 * waiting for it before it sends anything this end would read. */
void fstream_push_owed(struct fabric_stream *s)
{
    if (s->fin_owed || s->resend_pos < s->resend_end)
        (void)fstream_clear_tcp(s, true);
}

int fabric_stream_settle(struct fabric_stream *s, bool wait)
{
    if (s->broken)
        return -EIO;
    fstream_serve_peer(s, true);
    fstream_look_owner_left(s);
    /* bytes the peer sent again that this end had read: left unread they
     * would make a close's FIN a reset */
    (void)fstream_drop_skip(s, wait ? UINT64_MAX : 0);
    int r = fstream_clear_tcp(s, !wait);
    return r == 0 && s->tcp_skip ? -EAGAIN : r;
}

/* A client that moved, whose peer has not (no header in this end's ring):
 * the peer may have refused it, or left, before it attached, after this
 * end's look in fabric_stream_move.  Looked at before this end puts more
 * into the ring and before it waits; seen, it says so and goes back as
 * from a peer that left having read nothing. */
void fstream_look_owner_left(struct fabric_stream *s)
{
    if (!s->moved || s->back || s->left || s->broken || fstream_look_header(s) < 0 || s->peer_moved)
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
