/*
 * fabric_stream_send.c: a fabric stream's sending side (fabric_stream.h):
 * send, into the ring once this end moved, by TCP before it and once it
 * went back; a writer held while its TCP bytes fill the socket
 * (fabric_stream_held); and shutdown(SHUT_WR), a FIN in the ring or TCP's.
 */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include "base/real.h"
#include "core/conn/fabric_stream_internal.h"
#include "transport/fabric_ring.h"

bool fabric_stream_held(struct fabric_stream *s)
{
    if (s->tcp_full && (fstream_socket_ready(s, POLLOUT) & (POLLOUT | POLLERR | POLLHUP)))
        s->tcp_full = false;   /* the peer read enough of them: the ring's room counts */
    return s->tcp_full;
}

/* The program's bytes by TCP, from byte skip of iov: sent, or -errno. */
static ssize_t tcp_send(struct fabric_stream *s, const struct iovec *iov, int iovcnt, size_t skip, bool nonblock)
{
    int c = fstream_clear_tcp(s, nonblock);
    if (c < 0)
        return c;
    struct iovec rest[MAX_IOV];
    struct msghdr mh = { .msg_iov = rest, .msg_iovlen = (size_t)fstream_iov_skip(iov, iovcnt, skip, rest) };
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
        return s->tcp_error ? -fstream_take_error(s) : -EPIPE;   /* the connection was reset: as the kernel's send */
    /* the peer's header, if it came: an end that only writes (a server
     * that streams) attaches by it too, and can move */
    if (!s->peer_moved && fstream_look_header(s) < 0)
        return -EIO;
    fstream_serve_peer(s, false);
    fstream_look_owner_left(s);
    if (!s->moved || s->back)
        return tcp_send(s, iov, iovcnt, 0, nonblock);
    size_t total = fstream_iov_total(iov, iovcnt), done = 0;
    while (done < total) {
        if (s->back) {   /* the peer asked meanwhile: the rest by TCP, after the ring's */
            ssize_t t = tcp_send(s, iov, iovcnt, done, nonblock);
            return t > 0 ? (ssize_t)done + t : done ? (ssize_t)done : t;
        }
        if (fabric_stream_held(s)) {
            /* full by TCP: as the kernel's, the send waits for the peer to
             * read (the caller sleeps on the socket's room) */
            fstream_look_socket_end(s);
            if (fstream_peer_dead(s))
                return done ? (ssize_t)done : s->tcp_error ? -fstream_take_error(s) : -EPIPE;
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
                fstream_bell(s);   /* only a reader that said it sleeps: one spinning needs none */
            fstream_serve_peer(s, false);   /* the write looked at the peer's count */
            if (nonblock)
                break;
            continue;
        }
        if (r == -EPIPE) {
            fstream_serve_peer(s, false);   /* the peer left: the rest by TCP */
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
        fstream_look_socket_end(s);
        if (s->broken)
            return done ? (ssize_t)done : -EIO;
        if (fstream_peer_dead(s))
            return done ? (ssize_t)done : s->tcp_error ? -fstream_take_error(s) : -EPIPE;
        if (nonblock)
            return done ? (ssize_t)done : -EAGAIN;
        /* about to sleep: our count must be where the peer decides */
        if (fabric_ring_flush(s->ring) < 0)
            return done ? (ssize_t)done : broken(s);
        if (fabric_ring_writable(s->ring) != 0 || fstream_spin_for(s, false))
            continue;
        fstream_serve_peer(s, false);   /* (writable looked) */
        if (s->back)
            continue;
        /* the socket tells of the peer's end, unless the peer's bytes come
         * by TCP now: then it may be readable for good */
        fstream_wait_news(s, fstream_ring_phase(s) && !fabric_ring_peer_went_back(s->ring));
    }
    return (ssize_t)done;
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
        int c = fstream_clear_tcp(s, true);
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
    fstream_bell(s);   /* a reader asleep must come and find the FIN */
    return 0;
}
