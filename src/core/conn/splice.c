/*
 * splice.c: splice(2) and sendfile(2) with an accelerated socket at one
 * end.
 *
 * Owns: moving bytes between another fd (file, pipe) and a channel's ring
 * with one copy: read(2)/pread(2) straight into the ring's free space, and
 * write(2) straight out of its readable bytes.  The kernel cannot move its
 * pages into a ring it does not know, so that one copy is the least there
 * is; nothing goes through the kernel's TCP stack.  Only what the ring can
 * take is read from the source, so nothing is lost when it fills up.
 *
 * Semantics kept from the kernel: an offset pointer is used and advanced
 * instead of the file position; a socket's own O_NONBLOCK decides whether
 * the socket side waits, SPLICE_F_NONBLOCK whether the pipe side does;
 * partial transfers return what moved; an offset on a pipe is ESPIPE, on
 * the socket EINVAL; splice needs a pipe at one end (EINVAL otherwise).
 */
#include <poll.h>
#include <sys/stat.h>

#include "core/conn/downgrade.h"
#include "core/conn/fabric_conn.h"
#include "base/self.h"
#include "base/log.h"
#include "core/conn/negotiate.h"
#include "core/conn/splice.h"
#include "core/conn/stream.h"
#include "core/wait/wait.h"
#include "core/conn/zcopy.h"
#include "base/real.h"

#define SPLICE_CHUNK 65536

static struct tcp_sock *accelerated(struct fdref *f)
{
    if (!f->sock || f->sock->kind != SOCK_TCP)
        return NULL;
    struct tcp_sock *t = tcp_of(f->sock);
    return negotiate_observe(t, f->fd) == PATH_SHM && t->ch.hdr ? t : NULL;
}

static bool is_pipe(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode);
}

static bool fd_nonblocking(int fd)
{
    int fl = shunt_real.fcntl(fd, F_GETFL);
    return fl >= 0 && (fl & O_NONBLOCK);
}

/* A pipe source with nothing in it: wait (or not) before any lock is
 * taken, so a blocked read never holds the ring.  0 when there is data or
 * an end of file to read, -EAGAIN, -EINTR. */
static int pipe_wait(int fd, bool wait)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int n = shunt_real.poll(&p, 1, wait ? -1 : 0);
    if (n < 0)
        return -errno;
    return n == 0 ? -EAGAIN : 0;
}

/* File or pipe -> ring.  source_pipe: stop at the first short read (what
 * the pipe held), wait for the pipe only if pipe_wait_ok. */
/* The connection is moving back to kernel TCP under us (downgrade.c): one
 * piece goes through a buffer and the calls that know how to finish the
 * move.  Bytes a short send leaves behind go back to a seekable source. */
static ssize_t bounce_to_socket(struct tcp_sock *t, struct fdref *out, int in_fd, off64_t *off, size_t count)
{
    char buf[SPLICE_CHUNK];
    size_t want = count < sizeof buf ? count : sizeof buf;
    ssize_t n = off ? shunt_real.pread64(in_fd, buf, want, *off) : shunt_real.read(in_fd, buf, want);
    if (n <= 0)
        return n < 0 ? -errno : 0;
    struct io_call c = { .kind = IO_SEND, .buf = buf, .len = (size_t)n, .flags = MSG_NOSIGNAL };
    ssize_t w = channel_send(t, out, &c);
    if (off && w > 0)
        *off += w;
    else if (!off && w < n)
        lseek(in_fd, -(off_t)(n - (w > 0 ? w : 0)), SEEK_CUR);
    return w;
}

static ssize_t put_all(int fd, const char *buf, size_t len);

static ssize_t bounce_from_socket(struct tcp_sock *t, struct fdref *in, int out_fd, size_t len)
{
    char buf[SPLICE_CHUNK];
    struct io_call c = { .kind = IO_RECV, .buf = buf, .len = len < sizeof buf ? len : sizeof buf };
    ssize_t n = channel_recv(t, in, &c);
    return n > 0 ? put_all(out_fd, buf, (size_t)n) : n;
}

static bool going_back(struct tcp_sock *t)
{
    return atomic_load_explicit(&t->ch.hdr->down, memory_order_acquire) != 0;
}

static ssize_t fd_to_ring(struct tcp_sock *t, struct fdref *out, int in_fd, off64_t *off, size_t count,
                          bool source_pipe, bool pipe_wait_ok)
{
    bool sock_nb = fd_nonblocking(out->fd);
    size_t done = 0;
    while (done < count) {
        /* a zero-byte send answers EPIPE (and SIGPIPE), resets, shutdown */
        struct io_call chk = { .kind = IO_SEND, .len = 0 };
        ssize_t e = stream_send(t, out, &chk);
        if (e == STREAM_DOWNGRADED)
            return done ? (ssize_t)done : bounce_to_socket(t, out, in_fd, off, count);
        if (e < 0)
            return done ? (ssize_t)done : e;
        if (source_pipe) {
            bool wait = pipe_wait_ok && done == 0;
            if (wait)   /* a close meanwhile leaves the connection to this call, as a sleep does */
                wait_call_blocks(t, &out->blocked);
            int pw = pipe_wait(in_fd, wait);
            out->fd = tcp_call_fd(t, out->fd);
            if (pw < 0)
                return done ? (ssize_t)done : pw;
        }
        int lk = dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
        if (lk < 0)
            return done ? (ssize_t)done : -ECONNRESET;
        if (going_back(t)) {   /* checked under the lock: the re-send takes it too */
            dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, lk);
            return done ? (ssize_t)done : bounce_to_socket(t, out, in_fd, off, count);
        }
        struct iovec sp[2];
        int cnt = 0;
        ssize_t n = 0;
        if (!zc_tx_busy(t) && !(tcp_sock_own_state(t) & SIDE_SHUT_WR)) {
            channel_tx_grow(&t->ch, count - done, shunt_settings.shm_limit);
            n = ring_space(&t->ch.tx, sp, count - done, &cnt);
        }
        if (n > 0) {
            ssize_t r = off ? preadv64(in_fd, sp, cnt, *off) : shunt_real.readv(in_fd, sp, cnt);
            int err = errno;
            if (r > 0 && ring_commit(&t->ch.tx, (size_t)r) < 0) {
                /* head was scribbled under us: those bytes are not sent */
                dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, lk);
                return done ? (ssize_t)done : stream_corrupt(t, out->fd);
            }
            if (r > 0) {
                counter_add(&t->ch.self->bytes_out, (uint64_t)r);
                counter_add(&t->ch.self->sends, 1);
            }
            dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, lk);
            if (r < 0)
                return done ? (ssize_t)done : -err;
            if (r == 0)
                break;   /* end of file, or a pipe without writers */
            doorbell_wake_peer(t, out->fd, WANT_DATA);
            done += (size_t)r;
            if (off)
                *off += r;
            if (r < n && source_pipe)
                break;   /* splice moves what the pipe held */
            continue;
        }
        dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, lk);
        if (n < 0)
            return done ? (ssize_t)done : -ECONNRESET;
        t->ch.tx_was_full = true;
        doorbell_wake_peer(t, out->fd, WANT_DATA);
        if (sock_nb) {
            atomic_store_explicit(&t->ch.tx_told_full, true, memory_order_relaxed);
            return done ? (ssize_t)done : -EAGAIN;
        }
        int w = stream_wait_writable(t, out);
        if (w == STREAM_DOWNGRADED)
            return done ? (ssize_t)done : bounce_to_socket(t, out, in_fd, off, count);
        if (w < 0)
            return done ? (ssize_t)done : w;
    }
    return (ssize_t)done;
}

/* The end of a call that waited: a close meanwhile is finished now. */
static ssize_t call_done(struct tcp_sock *t, struct fdref *f, ssize_t r)
{
    if (f->blocked)
        deferred_close_call_done(t, f);
    return r;
}

ssize_t splice_sendfile(struct tcp_sock *t, struct fdref *out, int in_fd, off64_t *off, size_t count)
{
    ssize_t r = call_done(t, out, fd_to_ring(t, out, in_fd, off, count, is_pipe(in_fd), true));
    shunt_log(LOG_DEBUG, "fd %d: sendfile from fd %d into the ring: %zd", out->fd, in_fd, r);
    return r;
}

/* Writes all of buf to fd: the bytes already left the ring. */
static ssize_t put_all(int fd, const char *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = shunt_real.write(fd, buf + done, n - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return done ? (ssize_t)done : -errno;
        }
        done += (size_t)w;
    }
    return (ssize_t)done;
}

/* Ring -> pipe.  The bytes a server still reads by TCP before the ring, and
 * single-copy sends, go through a buffer here (they are not in the ring);
 * everything else is written straight out of the ring. */
static ssize_t ring_to_pipe(struct tcp_sock *t, struct fdref *in, int out_fd, size_t len, unsigned int flags)
{
    if (len == 0)
        return 0;
    for (;;) {
        if (stream_prefix_left(t) > 0 || zc_pending(t) || going_back(t))
            return bounce_from_socket(t, in, out_fd, len);
        bool pipe_nb = fd_nonblocking(out_fd);
        if (!pipe_nb && (flags & SPLICE_F_NONBLOCK)) {
            struct pollfd p = { .fd = out_fd, .events = POLLOUT };
            if (shunt_real.poll(&p, 1, 0) == 0)
                return -EAGAIN;
        } else if (!pipe_nb) {
            /* the write below may wait for room in the pipe: a close
             * meanwhile leaves the connection to this call, as a sleep does */
            wait_call_blocks(t, &in->blocked);
        }
        int lk = dir_lock(t, &t->rx_lock, &t->ch.self->rx_lock);
        if (lk < 0)
            return -ECONNRESET;
        if (going_back(t)) {
            dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, lk);
            return bounce_from_socket(t, in, out_fd, len);
        }
        struct iovec sp[2];
        int cnt = 0;
        ssize_t n = ring_filled(&t->ch.rx, sp, len, &cnt);
        ssize_t w = 0;
        int err = 0;
        if (n > 0) {
            w = shunt_real.writev(out_fd, sp, cnt);
            err = errno;
            if (w > 0 && ring_consume(&t->ch.rx, (size_t)w) < 0)
                stream_corrupt(t, in->fd);   /* tail was scribbled under us: no more from this ring */
            else if (w > 0) {
                counter_add(&t->ch.self->bytes_in, (uint64_t)w);
                counter_add(&t->ch.self->recvs, 1);
            }
        }
        dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, lk);
        if (n > 0) {
            if (w > 0)
                doorbell_wake_peer(t, in->fd, WANT_SPACE);
            return w >= 0 ? w : -err;
        }
        /* Empty (or broken): a recv's own wait (counted for a close
         * meanwhile, and going on by TCP if the connection moves back),
         * which says EOF, EAGAIN or the error exactly as a recv would; the
         * loop then looks again (a move back goes to bounce_from_socket). */
        char b;
        struct io_call c = { .kind = IO_RECV, .buf = &b, .len = 1, .flags = MSG_PEEK };
        ssize_t r = channel_recv_more(t, in, &c);   /* the call goes on with the ring */
        if (r <= 0)
            return r;
    }
}

/* A socket on the fabric at either end: the fabric carries no splice, so
 * the connection leaves it first and the kernel's splice follows (before,
 * the kernel's splice wrote by TCP beside the ring, or read a socket the
 * peer's bytes no longer came through); a read from a client still
 * awaiting its hello takes the hello off first (threads_close_busy's
 * splice read the hello as the program's bytes). */
static bool fabric_splice(struct fdref *in, off64_t *off_in, struct fdref *out, off64_t *off_out, size_t len,
                          unsigned int flags, ssize_t *result)
{
    struct tcp_sock *src = fabric_conn_on(in), *dst = fabric_conn_on(out);
    if (!src && !dst)
        return false;
    if (dst)
        fabric_conn_leave_no_wait(dst, out->fd, "splice");
    if (src) {
        fabric_conn_leave_no_wait(src, in->fd, "splice");
        int r = fabric_conn_before_kernel_read(src, in);
        if (r < 0) {
            *result = call_done(src, in, r);
            return true;
        }
    }
    /* the kernel's call counts as waiting on an end still on the path (a
     * client awaiting its hello): another thread's close is put off at once */
    if (src && atomic_load(&src->path) == PATH_FABRIC)
        wait_call_blocks(src, &in->blocked);
    if (dst && atomic_load(&dst->path) == PATH_FABRIC)
        wait_call_blocks(dst, &out->blocked);
    ssize_t r = shunt_real.splice(in->fd, off_in, out->fd, off_out, len, flags);
    *result = r < 0 ? -errno : r;
    if (src)
        (void)call_done(src, in, 0);
    if (dst)
        (void)call_done(dst, out, 0);
    return true;
}

static bool offered(struct fdref *f)
{
    return f->sock && f->sock->kind == SOCK_TCP && negotiate_observe(tcp_of(f->sock), f->fd) == PATH_OFFERED;
}

/* A socket end whose offer is pending: the kernel's splice, with the
 * negotiation word marked (negotiate_tcp_begin), so that bytes it sends
 * are counted in the prefix the server reads first and bytes it takes are
 * never doorbells.  false if there is none, or its offer settled (then
 * the connection is the channel's or the kernel's, as any other). */
static bool offered_splice(struct fdref *in, off64_t *off_in, struct fdref *out, off64_t *off_out, size_t len,
                           unsigned int flags, ssize_t *result)
{
    struct fdref *f = offered(in) ? in : offered(out) ? out : NULL;
    if (!f)
        return false;
    struct tcp_sock *t = tcp_of(f->sock);
    if (negotiate_tcp_begin(t, f->fd) != PATH_OFFERED)
        return false;
    ssize_t r = shunt_real.splice(in->fd, off_in, out->fd, off_out, len, flags);
    *result = r < 0 ? -errno : r;
    negotiate_tcp_end(t, f == out && r > 0 ? (uint64_t)r : 0);
    return true;
}

bool splice_accelerated(struct fdref *in, off64_t *off_in, struct fdref *out, off64_t *off_out, size_t len,
                        unsigned int flags, ssize_t *result)
{
    if (fabric_splice(in, off_in, out, off_out, len, flags, result))
        return true;
    if (offered_splice(in, off_in, out, off_out, len, flags, result))
        return true;
    struct tcp_sock *src = accelerated(in), *dst = accelerated(out);
    if (!src && !dst)
        return false;
    if (src && dst) {
        *result = -EINVAL;   /* the kernel too wants a pipe at one end */
        return true;
    }
    /* The kernel's order of checks: an offset on the pipe is ESPIPE, one
     * on the socket EINVAL (a socket has no pread). */
    if (src) {
        if (!is_pipe(out->fd))
            *result = -EINVAL;
        else if (off_out)
            *result = -ESPIPE;
        else if (off_in)
            *result = -EINVAL;
        else
            *result = call_done(src, in, ring_to_pipe(src, in, out->fd, len, flags));
        return true;
    }
    if (!is_pipe(in->fd))
        *result = -EINVAL;
    else if (off_in)
        *result = -ESPIPE;
    else if (off_out)
        *result = -EINVAL;
    else
        *result = call_done(dst, out, fd_to_ring(dst, out, in->fd, NULL, len, true, !(flags & SPLICE_F_NONBLOCK)));
    return true;
}
