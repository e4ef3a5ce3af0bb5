/*
 * fabric_stream_recv.c: a fabric stream's receiving side (fabric_stream.h):
 * recv, from the peer's TCP bytes up to the count its header gave, then
 * its ring, then the socket again once the ring was read to its way back;
 * a refused peer's bytes; and the socket's end, which tells of the peer's.
 */
#include <errno.h>
#include <sys/socket.h>

#include "base/real.h"
#include "core/conn/fabric_stream_internal.h"
#include "transport/fabric_ring.h"

/* Notes the socket's end once the peer's TCP bytes are all read.  A byte
 * or the end there belongs to the peer's way back if its ring says so
 * (looked at after the socket: the mark lands before the peer sends a byte
 * or its FIN by TCP); otherwise a byte is not this protocol's. */
void fstream_look_socket_end(struct fabric_stream *s)
{
    if (!fstream_ring_phase(s) || s->tcp_eof || s->broken)
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

/* The peer's TCP bytes: -EAGAIN when there are none now (or no longer
 * any to expect), else what recv answers. */
static ssize_t recv_tcp(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool peek)
{
    int hr = fstream_settle_hello(s);
    if (hr < 0)
        return hr;
    struct iovec cut[MAX_IOV];
    size_t total = fstream_iov_total(iov, iovcnt);
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
    struct msghdr mh = { .msg_iov = cut, .msg_iovlen = (size_t)fstream_iov_cut(iov, iovcnt, total, cut) };
    /* A peek first, the header after, then only the peer's bytes before
     * its move are taken: once it went back, the bytes it sends by TCP
     * come after its ring's, and a read before the header was known may
     * have reached them (the header had landed before the first of them
     * was sent, so a look after the read finds it). */
    ssize_t n = s->tcp_eof ? -1 : shunt_real.recvmsg(s->fd, &mh, MSG_DONTWAIT | MSG_PEEK);
    int err = s->tcp_eof ? EAGAIN : errno;
    if (fstream_look_header(s) < 0)
        return -EIO;
    if (n > 0) {
        uint64_t data = (uint64_t)n;
        if (s->peer_moved && data > s->peer_tcp - s->tcp_read)
            data = s->peer_tcp - s->tcp_read;
        if (data == 0)
            return -EAGAIN;
        if (!peek) {
            struct iovec take[MAX_IOV];
            struct msghdr tm = { .msg_iov = take, .msg_iovlen = (size_t)fstream_iov_cut(iov, iovcnt, (size_t)data, take) };
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
        if (fstream_drop_skip(s, 0) == -EAGAIN) {
            if (nonblock)
                return -EAGAIN;
            fstream_wait_news(s, true);
            continue;
        }
        if (s->tcp_error)
            return -fstream_take_error(s);   /* (met while dropping: the kernel told it once) */
        struct iovec cut[MAX_IOV];
        struct msghdr mh = { .msg_iov = cut, .msg_iovlen = (size_t)fstream_iov_skip(iov, iovcnt, 0, cut) };
        ssize_t n = shunt_real.recvmsg(s->fd, &mh, MSG_DONTWAIT | (peek ? MSG_PEEK : 0));
        if (n >= 0)
            return n;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        if (nonblock)
            return -EAGAIN;
        fstream_serve_peer(s, true);
        fstream_look_owner_left(s);
        fstream_push_owed(s);
        fstream_wait_news(s, true);
    }
}

/* The ring's answer, as fabric_ring_read's, but for its way back, which
 * turns the reader to the socket (-EAGAIN then: look again). */
ssize_t fstream_read_ring(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool peek)
{
    bool was_full = false;
    ssize_t r = fabric_ring_read(s->ring, iov, iovcnt, peek, &was_full);
    if (r > 0 && was_full && !peek)
        fstream_bell(s);   /* the peer may be waiting for room */
    if (r == -EXDEV) {
        uint64_t skip;
        if (fabric_ring_peer_took_back(s->ring, &skip) < 0)
            return broken(s);   /* (-EAGAIN cannot be: the ring answers -EXDEV once final) */
        s->tcp_skip = skip;
        s->peer_back = true;
        fstream_bell(s);   /* read to its mark: the peer may wait for that to send by TCP */
        return -EAGAIN;
    }
    return r >= 0 || r == -EAGAIN ? r : broken(s);
}

ssize_t fabric_stream_recv(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool peek, bool nonblock)
{
    if (s->broken)
        return -EIO;
    if (fstream_iov_total(iov, iovcnt) == 0)
        return 0;
    fstream_push_owed(s);
    for (;;) {
        if (s->broken)
            return -EIO;
        if (s->peer_back)
            return recv_back(s, iov, iovcnt, peek, nonblock);
        if (!fstream_ring_phase(s)) {
            ssize_t n = recv_tcp(s, iov, iovcnt, peek);
            if (n != -EAGAIN)
                return n;
            if (!fstream_ring_phase(s) && s->tcp_eof && refused_end(s))
                continue;   /* the refused peer's ring holds the rest */
            if (!fstream_ring_phase(s)) {
                if (s->tcp_eof)   /* the peer ended on TCP (or died) before it moved */
                    return s->tcp_error ? -fstream_take_error(s) : 0;
                if (s->rd_shut)
                    return 0;     /* shut for reading: nothing now is the end */
                if (nonblock)
                    return -EAGAIN;
                fstream_serve_peer(s, true);
                fstream_look_owner_left(s);
                fstream_push_owed(s);
                /* a prefix of a hello held: the socket stays readable, nap */
                fstream_wait_news(s, !(s->await_hello && s->hello_partial_since));
                continue;
            }
        }
        ssize_t r = fstream_read_ring(s, iov, iovcnt, peek);
        if (r >= 0)
            return r;   /* bytes, or the peer's FIN after all of them */
        if (r != -EAGAIN || s->peer_back)
            continue;   /* broken, or the way back: the loop's first tests answer */
        /* the peer's end shows only on the socket; a loop of nonblocking
         * reads looks at it once in 64 (a system call each otherwise), a
         * read that will sleep every time */
        if (!nonblock || (s->empty_looks++ & 63) == 0) {
            fstream_look_socket_end(s);
            fstream_serve_peer(s, true);   /* and the peer's count: it may have asked, or left */
            fstream_look_owner_left(s);
            fstream_push_owed(s);
        }
        if (s->broken)
            return -EIO;
        if (s->tcp_eof) {
            /* the peer's process is gone without a FIN or the way back in
             * the ring: what landed before is delivered, then what TCP said */
            r = fstream_read_ring(s, iov, iovcnt, peek);
            if (r >= 0)
                return r;
            if (r != -EAGAIN || s->peer_back)
                continue;
            return s->tcp_error ? -fstream_take_error(s) : 0;
        }
        if (nonblock)
            return -EAGAIN;
        fstream_serve_peer(s, true);   /* a peer that asks may wait for our way back */
        fstream_push_owed(s);
        if (fstream_spin_for(s, true))
            continue;
        if (fabric_ring_sleep(s->ring) < 0)
            return broken(s);
        char c;
        struct iovec one = { &c, 1 };
        r = fabric_ring_read(s->ring, &one, 1, true, NULL);   /* bytes, the FIN, the way back: no sleep */
        if (r != -EAGAIN)
            continue;
        fstream_wait_news(s, true);
    }
}
