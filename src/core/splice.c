/*
 * splice.c: splice(2) into and out of an accelerated socket.  The kernel
 * cannot move pages into a ring it does not know, so the bytes go through
 * a buffer here: no more is taken from the source than the destination can
 * take at once, so nothing is lost when the destination fills up.
 */
#include "core/downgrade.h"
#include "core/negotiate.h"
#include "core/splice.h"
#include "core/stream.h"
#include "interpose/real.h"

#define SPLICE_CHUNK 65536

static struct tcp_sock *accelerated(struct fdref *f)
{
    if (!f->sock || f->sock->ops != &tcp_ops)
        return NULL;
    struct tcp_sock *t = tcp_of(f->sock);
    return negotiate_observe(t, f->fd) == PATH_SHM && t->ch.hdr ? t : NULL;
}

/* Writes all of buf to fd (at *off if given): the bytes already left the ring. */
static ssize_t put_all(int fd, off64_t *off, const char *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = off ? shunt_real.pwrite64(fd, buf + done, n - done, *off) : shunt_real.write(fd, buf + done, n - done);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return done ? (ssize_t)done : -errno;
        }
        if (off)
            *off += w;
        done += (size_t)w;
    }
    return (ssize_t)done;
}

bool splice_accelerated(struct fdref *in, off64_t *off_in, struct fdref *out, off64_t *off_out, size_t len,
                        unsigned int flags, ssize_t *result)
{
    struct tcp_sock *src = accelerated(in), *dst = accelerated(out);
    if (!src && !dst)
        return false;
    char buf[SPLICE_CHUNK];
    size_t want = len < sizeof buf ? len : sizeof buf;
    int dontwait = (flags & SPLICE_F_NONBLOCK) ? MSG_DONTWAIT : 0;
    if (src) {
        if (off_in) {
            *result = -ESPIPE;
            return true;
        }
        struct io_call c = { .kind = IO_RECV, .buf = buf, .len = want, .flags = dontwait };
        ssize_t n = channel_recv(src, in, &c);
        *result = n > 0 ? put_all(out->fd, off_out, buf, (size_t)n) : n;
        return true;
    }
    if (off_out) {
        *result = -ESPIPE;
        return true;
    }
    int64_t room = ring_writable(&dst->ch.tx);
    if (room > 0 && (size_t)room < want && dontwait)
        want = (size_t)room;
    ssize_t n = off_in ? shunt_real.pread64(in->fd, buf, want, *off_in) : shunt_real.read(in->fd, buf, want);
    if (n <= 0) {
        *result = n < 0 ? -errno : 0;
        return true;
    }
    struct io_call c = { .kind = IO_SEND, .buf = buf, .len = (size_t)n, .flags = MSG_NOSIGNAL };
    ssize_t w = channel_send(dst, out, &c);
    if (w > 0 && off_in)
        *off_in += w;
    *result = w;
    return true;
}
