/*
 * fabric_conn_pending.c: a server's connection on the fabric whose hello
 * waits for its first call (fabric_pending.h): until then the socket is
 * the kernel's (the client's bytes read are counted for the stream the
 * hello will start); the hello goes from the process that makes that call
 * if it holds the socket alone, otherwise never, and every holder is on
 * kernel TCP with the reason.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>

#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "base/settings.h"
#include "base/signals.h"
#include "core/conn/fabric_conn_internal.h"
#include "core/conn/fabric_process.h"
#include "core/conn/sockstat.h"

/* A pending server's socket will never have a hello: kernel TCP for every
 * holder, with the reason.  False if another thread decided first. */
static bool no_hello(struct tcp_sock *t, int fd, enum fallback_reason why)
{
    struct fabric_conn *c = t->fab;
    if (!c || !atomic_exchange(&c->pending, false))
        return false;
    fabric_pending_none(&c->pend);
    fabric_pending_drop(&c->pend);
    fallback_record(t, fd, why, false);
    sockstat_publish(t, fd, 0, 0, NULL, 0);
    return true;
}

/* A pending server's hello, before its first byte to the client (not with
 * the lock): sent if this process holds the socket alone, otherwise never
 * (kernel TCP for every holder); the stream it starts has the client's
 * bytes the holders read already.  Whether t is still on the fabric. */
bool fconn_settle_pending(struct tcp_sock *t, int fd)
{
    struct fabric_conn *c = t->fab;
    if (c && atomic_load(&c->pending)) {
        struct pollfd p = { .fd = fd, .events = POLLRDHUP };
        if (shunt_real.poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            /* the client shut down, or closed, before this first call: a
             * hello now might meet a closed socket, whose reset the program
             * would see where the kernel's TCP sends none */
            (void)no_hello(t, fd, FB_WITHDRAWN);
            return atomic_load(&t->path) == PATH_FABRIC;
        }
        if (c->accepted_by != shunt_pid && !shunt_settings.fabric_forked) {
            fabric_process_lock();
            bool own = fabric_process_has_engine();
            fabric_process_unlock();
            if (!own) {
                /* a forking server's child: an engine of its own for this one
                 * connection costs more than a short one gains */
                (void)no_hello(t, fd, FB_FABRIC_FORKED);
                return atomic_load(&t->path) == PATH_FABRIC;
            }
        }
        bool mine = fabric_pending_claim(&c->pend);
        char why[200] = "";
        int r = 0;
        fabric_process_lock();
        bool decided = atomic_exchange(&c->pending, false);
        if (decided) {
            c->s.fd = fd;
            c->s.tcp_read = fabric_pending_read(&c->pend);
            if (mine)
                r = fconn_send_hello(c, fd, why, sizeof why);
            else
                snprintf(why, sizeof why, "another process held the socket too");
            fabric_pending_drop(&c->pend);
        }
        fabric_process_unlock();
        if (decided && r == 0 && mine) {
            shunt_log_sock(LOG_INFO, t, fd, "fabric: hello sent to a shunt client (cookie %llu)",
                           (unsigned long long)c->hello_cookie);
        } else if (decided) {
            shunt_log_sock(LOG_INFO, t, fd, "fabric: no hello: %s", why);
            fallback_record(t, fd, !mine ? FB_FABRIC_SHARED : fconn_at_fd_limit(fd) ? FB_FABRIC_NO_FD : fconn_unbuilt_reason(),
                            false);
            sockstat_publish(t, fd, 0, 0, NULL, 0);
        }
    }
    return atomic_load(&t->path) == PATH_FABRIC;
}

bool fconn_pending(const struct tcp_sock *t)
{
    return t->fab && atomic_load(&t->fab->pending);
}

/* A pending server's readiness: the kernel's (no byte of the protocol
 * goes either way before the hello). */
short fconn_pending_poll(int fd, short events)
{
    struct pollfd p = { .fd = fd, .events = events };
    return shunt_real.poll(&p, 1, 0) > 0 ? p.revents : 0;
}

/* A pending server's receive: the client's bytes before the hello are all
 * the program's, the kernel's to give, counted for the stream the hello
 * will start (fabric_pending.h); driven without blocking under the lock,
 * so that a hello sent meanwhile by another thread counts them all.
 * *gone: the hello went meanwhile (after the bytes returned, if any): the
 * caller goes the fabric's way. */
ssize_t fconn_pending_recv(struct tcp_sock *t, struct fdref *f, struct io_call *call, int flags, bool *gone)
{
    struct fabric_conn *c = t->fab;
    struct iobuf b;
    int e = iobuf_from_call(&b, call);
    if (e < 0)
        return e;
    bool peek = flags & MSG_PEEK, waitall = (flags & MSG_WAITALL) && !peek;
    bool nb = stream_nonblocking(t, f->fd, flags);
    unsigned ran = shunt_sig_ran, norestart = shunt_sig_ran_norestart;
    uint64_t deadline = 0;
    bool timed = false;
    size_t got = 0;
    *gone = false;
    for (;;) {
        struct iovec rest[IOV_MAX];
        struct msghdr mh = { .msg_iov = rest, .msg_iovlen = (size_t)iobuf_rest(&b, got, rest) };
        fconn_follow_close(t, f);
        fabric_process_lock();
        if (!atomic_load(&c->pending)) {
            fabric_process_unlock();
            *gone = true;
            return (ssize_t)got;
        }
        ssize_t k = shunt_real.recvmsg(f->fd, &mh, (peek ? MSG_PEEK : 0) | MSG_DONTWAIT);
        int err = errno;
        if (k > 0 && !peek)
            fabric_pending_count_read(&c->pend, (uint64_t)k);
        fabric_process_unlock();
        if (k > 0) {
            got += (size_t)k;
            if (!waitall || got == b.total)
                return (ssize_t)got;
            continue;
        }
        if (k == 0)
            return (ssize_t)got;
        if (err != EAGAIN && err != EWOULDBLOCK)
            return got ? (ssize_t)got : -err;
        if (nb)
            return got ? (ssize_t)got : -EAGAIN;
        if (!timed) {
            timed = true;
            deadline = fconn_timeout_deadline(f->fd, SO_RCVTIMEO);
        }
        int w = fconn_call_sleep(t, f, POLLIN | POLLRDHUP, -1, false, false, deadline, ran, norestart);   /* the socket alone */
        if (w < 0)
            return got ? (ssize_t)got : w;
    }
}

/* A pending server's socket before a call the fabric does not carry:
 * kernel TCP for every holder.  Whether it was pending. */
bool fconn_pending_to_tcp(struct tcp_sock *t, int fd, const char *why)
{
    if (!no_hello(t, fd, FB_FABRIC_LEFT))
        return false;
    shunt_log_sock(LOG_INFO, t, fd, "fabric: no hello, before %s", why);
    return true;
}

/* This process holds a pending server's socket no more. */
void fconn_pending_dropped(struct fabric_conn *c)
{
    if (c && atomic_exchange(&c->pending, false))
        fabric_pending_drop(&c->pend);
}
