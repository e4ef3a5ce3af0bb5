/*
 * fabric_conn_calls.c: the calls a connection on the fabric carries
 * (fabric_conn.h's "carried"): recv and send in all their forms, the read
 * that must not meet a hello, shutdown, poll and the sleeps of poll, select
 * and epoll, the counts of the edge journal, FIONREAD and SIOCOUTQ; a call
 * it does not carry leaves first (fabric_conn_leave.c).
 */
#include <errno.h>
#include <limits.h>
#include <linux/sockios.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/real.h"
#include "base/settings.h"
#include "base/signals.h"
#include "core/conn/deferred_close.h"
#include "core/conn/fabric_conn_internal.h"
#include "core/conn/fabric_process.h"
#include "core/fd/passthrough.h"

/* A call the fabric path does not carry: leave first, then the kernel's. */
static bool not_carried_recv(struct io_call *call, int flags)
{
    return (flags & ~(MSG_PEEK | MSG_DONTWAIT | MSG_WAITALL | MSG_NOSIGNAL | MSG_CMSG_CLOEXEC)) ||
           (call->kind == IO_RECVMSG && call->msg->msg_controllen > 0);
}

static ssize_t conn_recv(struct tcp_sock *t, struct fdref *f, struct io_call *call)
{
    int flags = call->kind == IO_READ || call->kind == IO_READV ? 0 : call->flags;
    if (not_carried_recv(call, flags)) {
        fabric_conn_leave(t, f->fd, "a receive with flags or ancillary data");
        if (atomic_load(&t->path) != PATH_FABRIC)
            return pt_recv(f, call);
    }
    struct iobuf b;
    int r = iobuf_from_call(&b, call);
    if (r < 0)
        return r;
    if (call->kind == IO_RECVFROM && call->addrlen)
        *call->addrlen = 0;
    if (call->kind == IO_RECVMSG) {
        call->msg->msg_flags = 0;
        call->msg->msg_controllen = 0;
        call->msg->msg_namelen = 0;
    }
    if (b.total == 0 && (call->kind == IO_READ || call->kind == IO_READV))
        return 0;
    /* recv(2) of nothing waits for bytes (EAGAIN if it may not), then
     * answers 0 leaving them: a peek at one byte stands in for it */
    char one;
    bool zero = b.total == 0;
    bool peek = (flags & MSG_PEEK) || zero, waitall = (flags & MSG_WAITALL) && !peek;
    size_t got = 0;
    if (fconn_pending(t)) {
        bool gone = false;
        ssize_t pr = fconn_pending_recv(t, f, call, flags, &gone);
        if (!gone || (pr > 0 && !waitall))
            return pr;
        got = (size_t)pr;   /* the hello went: a MSG_WAITALL goes on on the fabric */
    }
    if (atomic_load(&t->path) != PATH_FABRIC)
        return got ? iobuf_recv_rest_kernel(f->fd, &b, got, flags) : pt_recv(f, call);
    bool nb = stream_nonblocking(t, f->fd, flags);
    unsigned ran = shunt_sig_ran, norestart = shunt_sig_ran_norestart;
    uint64_t deadline = 0;
    bool timed = false, socket_busy = false, spun = false;
    unsigned quick = 0;   /* looks in a row the socket woke, which found nothing */
    for (;;) {
        struct iovec rest[IOV_MAX];
        int n = zero ? 1 : iobuf_rest(&b, got, rest);
        if (zero)
            rest[0] = (struct iovec){ &one, 1 };
        fconn_follow_close(t, f);
        fabric_process_lock();
        struct fabric_conn *c = fconn_of(t, f->fd);
        ssize_t k = fabric_stream_recv(&c->s, rest, n, peek, true);
        fconn_trace(c, "recv", k);
        short rev = 0;
        int efd = -1;
        if (k == -EAGAIN && !nb && spun) {
            rev = fconn_prepare_sleep(c, &efd);
        }
        bool on = fconn_after_call(c, f->fd);
        bool broke = c->s.broken;
        bool ringless = !c->ring;   /* (awaiting its hello, or never attached: the socket brings all news) */
        fabric_process_unlock();
        if (k == -EIO || broke)
            return got ? (ssize_t)got : fconn_broken(c, f->fd);
        if (!on && k == -EAGAIN) {   /* plain TCP now: the kernel's, for the rest */
            if (got)
                return waitall ? iobuf_recv_rest_kernel(f->fd, &b, got, flags) : (ssize_t)got;
            return pt_recv(f, call);
        }
        if (k > 0 && zero)
            return 0;
        if (k > 0) {
            got += (size_t)k;
            socket_busy = false;
            quick = 0;
            if (!waitall || got == b.total)
                return (ssize_t)got;
            continue;
        }
        if (k == 0 || k != -EAGAIN)
            return got ? (ssize_t)got : k;
        if (nb)
            return got ? (ssize_t)got : -EAGAIN;
        if (!spun) {
            /* once a call, before it says it sleeps (a peer that sees it
             * rings at every write): then the sleep */
            spun = true;
            (void)fconn_spin_for_bytes(c);
            continue;
        }
        if ((rev & POLLIN) || efd == -2) {
            if (++quick < 3)
                continue;         /* look again at once */
            socket_busy = true;   /* readable, but not the program's bytes yet: naps */
        }
        if (!timed) {
            timed = true;
            deadline = fconn_timeout_deadline(f->fd, SO_RCVTIMEO);
        }
        int w = fconn_call_sleep(t, f, POLLIN | POLLRDHUP, efd < 0 ? -1 : efd, socket_busy, efd < 0 && !ringless,
                          deadline, ran, norestart);
        if (w < 0)
            return got ? (ssize_t)got : w;
        if (w == 1 && ++quick >= 3)
            socket_busy = true;
    }
}

static ssize_t conn_send(struct tcp_sock *t, struct fdref *f, struct io_call *call)
{
    int flags = call->kind == IO_WRITE || call->kind == IO_WRITEV ? 0 : call->flags;
    if ((flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE | MSG_EOR)) ||
        (call->kind == IO_SENDMSG && call->msg->msg_controllen > 0)) {
        fabric_conn_leave(t, f->fd, "a send with flags or ancillary data");
        if (atomic_load(&t->path) != PATH_FABRIC)
            return pt_send(f, call);
    }
    struct iobuf b;
    int r = iobuf_from_call(&b, call);
    if (r < 0)
        return r;
    if (b.total == 0)
        return 0;
    if (!fconn_settle_pending(t, f->fd))
        return pt_send(f, call);
    bool nb = stream_nonblocking(t, f->fd, flags);
    unsigned ran = shunt_sig_ran, norestart = shunt_sig_ran_norestart;
    uint64_t deadline = 0;
    bool timed = false;
    size_t done = 0;
    for (;;) {
        struct iovec rest[IOV_MAX];
        int n = iobuf_rest(&b, done, rest);
        fconn_follow_close(t, f);
        fabric_process_lock();
        struct fabric_conn *c = fconn_of(t, f->fd);
        if (!done && !c->server && !c->ring && c->no_attach) {
            /* a client that will never attach (it left awaiting its hello:
             * a fork, a call the fabric does not carry): what it sends is
             * the kernel's to send, as one call (two processes writing
             * records after a fork must not see them split by a send
             * driven in pieces) */
            fabric_process_unlock();
            return pt_send(f, call);
        }
        ssize_t k = fabric_stream_send(&c->s, rest, n, true);
        fconn_trace(c, "send", k);
        short rev = 0;
        int efd = -1;
        bool took = false;
        if (k == -EAGAIN && nb && c->s.moved && !c->s.back) {
            c->s.told_full = true;   /* as after the kernel's EAGAIN: a blocking send waits for the reader */
        } else if (k == -EAGAIN && !nb) {
            took = fabric_stream_send_stalled(&c->s, clock_now_ns(), (uint64_t)shunt_settings.send_stall_ms * 1000000u) &&
                   fabric_stream_take_back(&c->s) == 0;
            if (took)
                shunt_log_sock(LOG_INFO, t, f->fd, "fabric: a blocking send waited SHUNT_SEND_STALL_MS for a reader "
                               "that read nothing: what it had not read, and the rest, by kernel TCP (stalled_reader)");
            else
                rev = fconn_prepare_sleep(c, &efd);
        }
        bool on = fconn_after_call(c, f->fd);
        bool broke = c->s.broken;
        bool on_ring = c->s.moved && !c->s.back && !c->s.tcp_full;   /* (else room comes on the socket) */
        bool ringless = !c->ring;
        fabric_process_unlock();
        if (k == -EIO || broke)
            return done ? (ssize_t)done : fconn_broken(c, f->fd);
        if (k > 0) {
            done += (size_t)k;
            if (nb || done == b.total)
                return (ssize_t)done;
            continue;
        }
        if (!on && k == -EAGAIN) {
            if (done)
                return (ssize_t)done;
            return pt_send(f, call);
        }
        if (k == -EPIPE && !(flags & MSG_NOSIGNAL) && !done)
            raise(SIGPIPE);   /* as the kernel's send would */
        if (k != -EAGAIN)
            return done ? (ssize_t)done : k;
        if (nb)
            return done ? (ssize_t)done : -EAGAIN;
        if ((rev & POLLOUT) || efd == -2 || took)
            continue;
        if (!timed) {
            timed = true;
            deadline = fconn_timeout_deadline(f->fd, SO_SNDTIMEO);
        }
        /* room comes with the reader's doorbell; the socket tells of the
         * peer's end (and, while the bytes still go by TCP, of room) */
        int w = fconn_call_sleep(t, f, (on_ring ? 0 : POLLOUT) | POLLRDHUP, efd < 0 ? -1 : efd, false,
                          efd < 0 && !ringless, deadline, ran, norestart);
        if (w < 0)
            return done ? (ssize_t)done : w;
    }
}

ssize_t fabric_conn_recv(struct tcp_sock *t, struct fdref *f, struct io_call *call)
{
    ssize_t r = conn_recv(t, f, call);
    if (f->blocked)
        deferred_close_call_done(t, f);   /* a close put off for it is finished now */
    return r;
}

ssize_t fabric_conn_send(struct tcp_sock *t, struct fdref *f, struct io_call *call)
{
    ssize_t r = conn_send(t, f, call);
    if (f->blocked)
        deferred_close_call_done(t, f);
    return r;
}

int fabric_conn_before_kernel_read(struct tcp_sock *t, struct fdref *f)
{
    bool nb = stream_nonblocking(t, f->fd, 0);
    unsigned ran = shunt_sig_ran, norestart = shunt_sig_ran_norestart;
    uint64_t deadline = 0;
    bool timed = false;
    for (;;) {
        if (atomic_load(&t->path) != PATH_FABRIC || !t->fab || fconn_pending(t))
            return 0;
        fconn_follow_close(t, f);
        fabric_process_lock();
        struct fabric_conn *c = fconn_of(t, f->fd);
        if (c->s.await_hello)
            (void)fabric_stream_poll(&c->s);   /* the first bytes settled, once they are there */
        bool awaiting = c->s.await_hello;
        bool partial = awaiting && c->s.hello_partial_since;
        fabric_process_unlock();
        if (!awaiting)
            return 0;
        if (nb)
            return -EAGAIN;
        if (!timed) {
            timed = true;
            deadline = fconn_timeout_deadline(f->fd, SO_RCVTIMEO);
        }
        /* a prefix of a hello keeps the socket readable: nap */
        int w = fconn_call_sleep(t, f, POLLIN | POLLRDHUP, -1, partial, true, deadline, ran, norestart);
        if (w < 0)
            return w;
    }
}

/* shutdown(SHUT_RD or SHUT_RDWR) of a client still awaiting its hello: the
 * kernel's shutdown at once, as the program asked (it wakes every sleeper
 * on the socket, in every process, and the socket reports its end), and a
 * hello that comes later is taken off, never attached to: the connection is
 * kernel TCP's.  A leave first waited 200 ms for a hello that a server
 * sends only before its first byte, then wrote the client's FIN instead:
 * the peer saw an EOF nobody sent, and a recv asleep on the socket stayed
 * asleep (shutdown_rd, threads_shutdown_blocked). */
static bool shut_reading_awaiting(struct tcp_sock *t, struct fdref *f, int how, int *r)
{
    fabric_process_lock();
    struct fabric_conn *c = fconn_of(t, f->fd);
    bool awaiting = !c->server && !c->ring && c->s.await_hello;
    if (awaiting) {
        c->no_attach = true;
        c->s.rd_shut = true;
        if (how == SHUT_RDWR) {
            (void)fabric_stream_return(&c->s);   /* never moved: TCP's for good */
            c->s.fin = true;                      /* both ways shut: POLLHUP */
        }
    }
    fabric_process_unlock();
    if (awaiting)
        *r = pt_shutdown(f, how);
    return awaiting;
}

int fabric_conn_shutdown(struct tcp_sock *t, struct fdref *f, int how)
{
    int sr;
    if (how != SHUT_WR && !fconn_pending(t) && shut_reading_awaiting(t, f, how, &sr))
        return sr;
    if (how != SHUT_WR) {
        /* the reading side's shutdown is the kernel's: leave first */
        fabric_conn_leave(t, f->fd, "shutdown of the reading side");
        if (atomic_load(&t->path) != PATH_FABRIC)
            return pt_shutdown(f, how);
    }
    if (!fconn_settle_pending(t, f->fd))
        return pt_shutdown(f, how);
    fabric_process_lock();
    struct fabric_conn *c = fconn_of(t, f->fd);
    int r = fabric_stream_shutdown(&c->s);
    if (r == -ENOTCONN && fabric_stream_return(&c->s) == 0)
        r = fabric_stream_shutdown(&c->s);   /* nothing to move onto yet: this direction is TCP's for good */
    fconn_after_call(c, f->fd);
    fabric_process_unlock();
    if (r == -EIO)
        return fconn_broken(c, f->fd);
    return r;
}

short fabric_conn_poll(struct tcp_sock *t, int fd, short events)
{
    if (fconn_pending(t))
        return fconn_pending_poll(fd, events);
    bool on = atomic_load(&t->path) == PATH_FABRIC;
    short rev = 0;
    if (on) {
        fabric_process_lock();
        struct fabric_conn *c = fconn_of(t, fd);
        rev = fabric_stream_poll(&c->s);
        fconn_trace(c, "poll", rev);
        on = fconn_after_call(c, fd);
        fabric_process_unlock();
    }
    if (!on) {
        struct pollfd p = { .fd = fd, .events = events };
        return shunt_real.poll(&p, 1, 0) > 0 ? p.revents : 0;
    }
    if (rev & POLLERR)
        return (short)((events & (POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM)) | POLLERR | POLLHUP);
    rev |= (rev & POLLIN ? POLLRDNORM : 0) | (rev & POLLOUT ? POLLWRNORM : 0);   /* as the kernel's */
    return (short)(rev & (events | POLLHUP | POLLERR));
}

short fabric_conn_before_sleep(struct tcp_sock *t, int fd, short events, int *efd, short *sock_events)
{
    if (fconn_pending(t)) {   /* the kernel's: sleep on the socket for what is asked */
        *efd = FABRIC_SOCKET_ONLY;
        *sock_events = events;
        return fconn_pending_poll(fd, events);
    }
    if (atomic_load(&t->path) != PATH_FABRIC) {
        *efd = -1;
        *sock_events = events;
        return (short)(events | POLLIN);   /* look again at once: the kernel's answer */
    }
    fabric_process_lock();
    struct fabric_conn *c = fconn_of(t, fd);
    int e;
    short rev = fconn_prepare_sleep(c, &e);
    *sock_events = POLLIN | POLLRDHUP;
    if ((events & POLLOUT) && (!c->s.moved || c->s.back || c->s.tcp_full))
        *sock_events |= POLLOUT;
    bool on = fconn_after_call(c, fd);
    fabric_process_unlock();
    *efd = e >= 0 ? e : -1;
    if (!on || e == -2)
        return (short)(events | POLLIN);   /* look again at once (answered then by the kernel, or again here) */
    return (short)(rev & (events | POLLHUP | POLLERR));
}

void fabric_conn_edge(struct tcp_sock *t, uint64_t *rx, uint64_t *tx, bool *end)
{
    struct fabric_conn *c = t->fab;
    if (fconn_pending(t)) {   /* the kernel's counts, until the hello */
        int queued = 0;
        if (shunt_real.ioctl(c->s.fd, FIONREAD, &queued) < 0)
            queued = 0;
        *rx = fabric_pending_read(&c->pend) + (uint64_t)queued;   /* moves as bytes come */
        *tx = 0;   /* nothing is sent before the hello */
        *end = (fconn_pending_poll(c->s.fd, POLLRDHUP) & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
        return;
    }
    fabric_process_lock();
    *rx = c->s.tcp_read + (c->ring ? fabric_ring_peer_written(c->ring) : 0);
    /* (+1 once the socket's room freed the ring after a move when full by TCP) */
    *tx = c->s.tcp_sent + (c->ring ? fabric_ring_peer_consumed(c->ring) : 0) + !fabric_stream_held(&c->s);
    *end = c->s.tcp_eof || c->s.peer_back;
    fabric_process_unlock();
}

int fabric_conn_queue(struct tcp_sock *t, int fd, unsigned long req, int *v)
{
    if (atomic_load(&t->path) != PATH_FABRIC || !t->fab)
        return -1;
    if (fconn_pending(t))   /* until the hello, every byte either way is the program's */
        return shunt_real.ioctl(fd, req, v) < 0 ? -1 : 0;
    fabric_process_lock();
    struct fabric_conn *c = fconn_of(t, fd);
    int64_t q = req == SIOCOUTQ ? fabric_stream_unread_by_peer(&c->s) : fabric_stream_readable(&c->s);
    bool on = fconn_after_call(c, fd);
    fabric_process_unlock();
    if (q < 0 || !on)
        return -1;
    *v = q > INT_MAX ? INT_MAX : (int)q;
    return 0;
}
