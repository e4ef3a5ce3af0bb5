/*
 * fabric_stream_poll.c: a fabric stream's readiness (fabric_stream.h):
 * what poll would say now, and the look of a caller about to sleep on the
 * socket itself; the counts of FIONREAD and SIOCOUTQ.  None of it blocks.
 */
#include <errno.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>

#include "base/real.h"
#include "core/conn/fabric_stream_internal.h"
#include "transport/fabric_ring.h"

static int64_t socket_queue(const struct fabric_stream *s, unsigned long req)
{
    int q = 0;
    return shunt_real.ioctl(s->fd, req, &q) < 0 ? -errno : q;
}

int64_t fabric_stream_readable(struct fabric_stream *s)
{
    if (s->broken)
        return -EIO;
    if (s->peer_back) {
        if (fstream_drop_skip(s, 0) == -EAGAIN)
            return 0;   /* only bytes this end had read already */
        return socket_queue(s, FIONREAD);
    }
    if (!fstream_ring_phase(s)) {
        int hr = fstream_settle_hello(s);
        if (hr == -EAGAIN)
            return 0;   /* awaiting the hello: all there is, if anything, is (a part of) it */
        if (hr < 0 || fstream_look_header(s) < 0)
            return -EIO;
    }
    if (!fstream_ring_phase(s)) {
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
    if (q >= 0 && (s->took_back || s->peer_left))
        return q + (int64_t)(s->resend_end - s->resend_pos);   /* (owed by TCP, not sent yet) */
    if (q < 0 || !s->moved || s->back || s->left)
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
    if (!s->broken && fstream_ring_phase(s) && fabric_ring_sleep(s->ring) < 0)
        broken(s);
    return fabric_stream_poll(s);
}

/* The socket's own readiness for events (a poll that does not wait). */
short fstream_socket_ready(const struct fabric_stream *s, short events)
{
    struct pollfd p = { .fd = s->fd, .events = events };
    return shunt_real.poll(&p, 1, 0) > 0 ? p.revents : 0;
}

short fabric_stream_poll(struct fabric_stream *s)
{
    if (s->broken)
        return POLLIN | POLLOUT | POLLERR;
    fstream_serve_peer(s, true);
    fstream_look_owner_left(s);
    fstream_push_owed(s);
    short rev = 0;
    if (s->peer_back) {
        /* after the ring's way back: the socket's */
    } else if (!fstream_ring_phase(s) && fstream_settle_hello(s) == -EAGAIN) {
        /* nothing yet, or a prefix of a hello held: not the program's */
    } else if (s->broken) {
        return POLLIN | POLLOUT | POLLERR;
    } else if (!fstream_ring_phase(s)) {
        int avail = 0;
        short ready = fstream_socket_ready(s, POLLIN);
        if (ready && shunt_real.ioctl(s->fd, FIONREAD, &avail) < 0)
            avail = 0;
        if (fstream_look_header(s) < 0)
            return POLLIN | POLLOUT | POLLERR;
        if (!s->peer_moved) {
            if (ready)
                rev |= POLLIN;   /* the program's bytes, or the end of them */
        } else if (s->tcp_read < s->peer_tcp && avail > 0) {
            rev |= POLLIN;       /* the last of its TCP bytes */
        }
    }
    if (!(rev & POLLIN) && !s->peer_back && fstream_ring_phase(s)) {
        char c;
        struct iovec v = { &c, 1 };
        fstream_look_socket_end(s);
        if (s->broken)
            return POLLIN | POLLOUT | POLLERR;
        ssize_t r = fstream_read_ring(s, &v, 1, true);
        if (s->broken)
            return POLLIN | POLLOUT | POLLERR;
        if (r >= 0 || (r == -EAGAIN && !s->peer_back && s->tcp_eof))
            rev |= POLLIN;   /* bytes, the FIN, or the peer's end */
    }
    if (s->peer_back) {
        /* bytes sent again that this end had read are not news */
        short in = fstream_drop_skip(s, 0) == -EAGAIN ? POLLHUP | POLLERR : POLLIN | POLLHUP | POLLERR;
        if (fstream_socket_ready(s, POLLIN) & in)
            rev |= POLLIN;
    }
    /* the peer's end came (the kernel's RDHUP: its FIN is in, read or not),
     * and with this end's own, both directions shut (HUP) */
    /* (before the ring, the socket's HUP is the kernel's word on both
     * directions: another holder's SHUT_RDWR shows there, not in s->fin) */
    short sock = fstream_ring_phase(s) ? 0 : fstream_socket_ready(s, POLLRDHUP);
    bool ended = s->tcp_eof || (fstream_ring_phase(s) ? fabric_ring_peer_fin(s->ring) : (sock & (POLLRDHUP | POLLHUP)) != 0);
    if (ended)
        rev |= POLLIN | POLLRDHUP | (s->fin || s->tcp_reset || (sock & POLLHUP) ? POLLHUP : 0);
    if (s->tcp_error || (sock & POLLERR))
        rev |= POLLERR;   /* a reset not reported yet (by the stream, or the socket's own), as the kernel's poll shows it */
    if (s->fin) {
        rev |= POLLOUT;   /* shut for writing: a send fails at once (EPIPE), as the kernel says */
    } else {
        if (!s->moved || s->back) {
            if (fstream_clear_tcp(s, true) == 0 && (fstream_socket_ready(s, POLLOUT) & POLLOUT))
                rev |= POLLOUT;
        } else if (!fabric_stream_held(s) && fabric_ring_writable(s->ring) > 0) {
            rev |= POLLOUT;
        } else {
            fstream_look_socket_end(s);   /* full, and the peer gone: a send fails at once, as the kernel's would */
            if (fstream_peer_dead(s))
                rev |= POLLOUT | (s->tcp_error ? POLLERR : 0);
        }
    }
    return rev;
}
