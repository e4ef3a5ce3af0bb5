/*
 * tcp_socket.c: the TCP socket kind: its operations, which hand each call
 * to the kernel (PATH_TCP), to the negotiation (PATH_OFFERED) or to the
 * channel (PATH_SHM).  Taking up sockets the fd table has not seen is
 * tcp_probe.c's; who holds a channel across fork and exec,
 * core/process/holders.c's.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>

#include "base/real.h"
#include "base/self.h"
#include "core/conn/deferred_close.h"
#include "core/conn/downgrade.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/fallback.h"
#include "core/conn/negotiate.h"
#include "core/conn/release.h"
#include "core/conn/sockstat.h"
#include "core/conn/splice.h"
#include "core/conn/stream.h"
#include "core/fd/fdtable.h"
#include "core/fd/passthrough.h"
#include "core/fd/uring_watch.h"
#include "core/kinds/tcp_sock_cache.h"
#include "core/kinds/tcp_socket.h"
#include "core/wait/wait.h"
#include "registry/procstat.h"

#ifndef TCP_SAVE_SYN
#define TCP_SAVE_SYN 27
#endif

static const struct sock_ops tcp_ops;

bool tcp_socket_wanted(int domain, int type, int protocol)
{
    return (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
           (protocol == 0 || protocol == IPPROTO_TCP);
}

/* fd, just made KERNEL_SOCK: its log line and its record for `shunt stat`
 * (note: the reason is news, not what the object already logged). */
static void kept_without_object(int fd, unsigned role, enum fallback_reason why, bool note,
                                const struct sockaddr *dst, socklen_t dstlen)
{
    if (note)
        fallback_note(fd, why);
    sockstat_publish_kernel(fd, role, why, dst, dstlen);
}

uintptr_t tcp_socket_lazy(int domain, int type)
{
    return FDT_LAZY | (domain == AF_INET6 ? FDT_LAZY_V6 : 0) | ((type & SOCK_NONBLOCK) ? FDT_LAZY_NONBLOCK : 0);
}

bool tcp_connect_lazy(int fd, uintptr_t lazy, const struct sockaddr *a, socklen_t len, int *r)
{
    struct offer_plan plan;
    enum fallback_reason why = negotiate_plan(a, len, &plan);
    if (why != FB_NONE && !plan.unrecorded && !(plan.mark && fabric_conn_wanted()) && !plan.watch) {
        /* no process mark here: it goes only with the fabric (below),
         * whose hello the socket's object takes off */
        *r = (int)sysret(shunt_real.connect(fd, a, len));
        /* kernel TCP for good before it had an object: it gets none (a
         * connect that failed at once leaves the socket new, as it was) */
        bool started = *r == 0 || *r == -EINPROGRESS || *r == -EINTR;
        if (started && fdt_lazy_to_kernel(fd, lazy))
            kept_without_object(fd, PST_ROLE_CLIENT, why, true, a, len);
        return true;
    }
    /* an offer, or the short-connection rule's sample (kernel TCP, its
     * calls counted): the object's way, with this plan (the destination's
     * history is counted once, here) */
    struct fdref f = fdt_get(fd);
    if (!f.sock || f.sock->kind != SOCK_TCP) {
        fdt_put(&f);
        return false;   /* no object could be made: the kernel's connect */
    }
    negotiate_offer_planned(tcp_of(f.sock), fd, why, &plan);
    *r = tcp_connect_negotiated(&f, a, len);
    fdt_put(&f);
    return true;
}

struct shunt_sock *tcp_socket_new(int fd, int domain, int nonblock)
{
    struct tcp_sock *t = tcp_sock_cache_get();
    if (!t) {
        shunt_log(LOG_WARN, "fd %d: no memory for socket state; it passes through", fd);
        return NULL;
    }
    atomic_init(&t->base.refs, 1);
    t->base.kind = SOCK_TCP;
    t->base.ops = &tcp_ops;
    t->base.domain = domain;
    atomic_init(&t->path, PATH_TCP);
    atomic_init(&t->reason, FB_NOT_NEGOTIATED);
    atomic_init(&t->nonblock, nonblock);
    atomic_init(&t->own_fd, -1);
    /* the initializer, not pthread_mutex_init: the same default mutex
     * for a store each, on every socket a program makes */
    static const pthread_mutex_t unlocked = PTHREAD_MUTEX_INITIALIZER;
    t->lock = unlocked;
    t->rx_lock = unlocked;
    t->tx_lock = unlocked;
    t->wait_turn = unlocked;
    return &t->base;
}

void tcp_socket_watched(struct shunt_sock *s, int fd)
{
    if (!s || s->kind != SOCK_TCP)
        return;
    struct tcp_sock *t = tcp_of(s);
    pid_t owner = t->listener_pid;
    if (owner != 0 && owner != shunt_pid) {   /* a listener our parent registered */
        negotiate_listen(t, fd);
        if (t->listener_pid == shunt_pid)
            sockstat_publish(t, fd, 0, 0, NULL, 0);
    }
}

int tcp_socket_accelerated(struct shunt_sock *s, int fd)
{
    struct tcp_sock *t = tcp_of(s);
    int path = negotiate_observe(t, fd);
    if (path == PATH_FABRIC)
        return fabric_conn_accelerated(t);
    return path == PATH_SHM && !atomic_load(&t->broken);
}

/* A receive on a client whose offer is pending.  The server can only send
 * after it accepted, and it settles the offer inside accept, so the first
 * byte to arrive tells: once the claim has landed, what came by TCP from
 * the server is doorbells (then, after a move back to TCP or a close that
 * left a copy, the program's bytes) and the call continues on the channel,
 * which sorts them out; otherwise it is data and the call is the kernel's,
 * made with the negotiation word marked so that no claim lands during it
 * (negotiate_tcp_begin: before, a claim between the look and the read had
 * the read take doorbells and the bytes behind them, all counted as
 * doorbells, and the program lost those bytes).  A blocking call first
 * waits for a byte with MSG_PEEK, unmarked: MSG_WAITALL or an empty socket
 * does not hold the mark, nor the kernel past the claim. */
static ssize_t tcp_recv(struct fdref *f, struct io_call *c);

/* The call as the kernel's, without waiting (read and readv as recv and
 * recvmsg, which take MSG_DONTWAIT). */
static ssize_t recv_now(struct fdref *f, const struct io_call *c)
{
    struct io_call d = *c;
    struct msghdr m;
    if (c->kind == IO_READ) {
        d.kind = IO_RECV;
        d.flags = 0;
    } else if (c->kind == IO_READV) {
        memset(&m, 0, sizeof m);
        m.msg_iov = (struct iovec *)c->iov;
        m.msg_iovlen = (size_t)c->iovcnt;
        d.kind = IO_RECVMSG;
        d.msg = &m;
        d.flags = 0;
    }
    d.flags |= MSG_DONTWAIT;
    return pt_recv(f, &d);
}

static ssize_t offered_recv(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    int flags = (c->kind == IO_READ || c->kind == IO_READV) ? 0 : c->flags;
    int fl = shunt_real.fcntl(f->fd, F_GETFL);
    bool blocking = !(flags & MSG_DONTWAIT) && fl >= 0 && !(fl & O_NONBLOCK);
    for (;;) {
        if (blocking) {
            char b;
            ssize_t r = shunt_real.recv(f->fd, &b, 1, MSG_PEEK);
            if (r < 0 && negotiate_observe(t, f->fd) != PATH_SHM)
                return -errno;
        }
        if (negotiate_tcp_begin(t, f->fd) != PATH_OFFERED)
            return tcp_recv(f, c);
        /* The mark is held for no wait: a blocking call takes what the
         * peek found (another thread may have taken it first: then it
         * waits again, unmarked), so that a close or a claim meanwhile
         * does not wait on it.  MSG_WAITALL waits in the kernel as asked:
         * a claim then gives up (after 20 ms) and the connection is the
         * kernel's. */
        ssize_t r = blocking && !(flags & MSG_WAITALL) ? recv_now(f, c) : pt_recv(f, c);
        negotiate_tcp_end(t, 0);
        if (!(blocking && r == -EAGAIN))
            return r;
    }
}

/* The short-connection rule's sample, on kernel TCP (negotiate_offer.c). */
static bool watching(struct tcp_sock *t)
{
    return atomic_load_explicit(&t->watch_pid, memory_order_relaxed) != 0;
}

/* A data call of the short-connection rule's sample, counted as a
 * channel's end counts its calls (short_conns_record): one that moved
 * bytes, not a peek.  In the process that connected only (a forked
 * child's copy of the object is not judged). */
static ssize_t watched(struct tcp_sock *t, ssize_t r, _Atomic uint64_t *calls, const struct io_call *c)
{
    bool peek = (c->kind == IO_RECV || c->kind == IO_RECVFROM || c->kind == IO_RECVMSG) && (c->flags & MSG_PEEK);
    if (r > 0 && !peek && atomic_load_explicit(&t->watch_pid, memory_order_relaxed) == shunt_pid) {
        atomic_fetch_add_explicit(calls, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&t->watch_bytes, (uint64_t)r, memory_order_relaxed);
    }
    return r;
}

static ssize_t tcp_recv(struct fdref *f, struct io_call *c)
{
    struct tcp_sock *t = tcp_of(f->sock);
    switch (negotiate_observe(t, f->fd)) {
    case PATH_SHM: return channel_recv(t, f, c);
    case PATH_OFFERED: return offered_recv(t, f, c);
    case PATH_FABRIC: return fabric_conn_recv(t, f, c);
    default:
        /* a downgrade that met a corrupt segment: what is queued in the
         * socket may not be the stream (doorbells, copies): never read it */
        if (atomic_load(&t->broken) && t->negotiated)
            return stream_broken_recv(t, f->fd);
        if (watching(t))
            return watched(t, pt_recv(f, c), &t->watch_recvs, c);
        return pt_recv(f, c);
    }
}

static ssize_t tcp_send(struct fdref *f, struct io_call *c)
{
    struct tcp_sock *t = tcp_of(f->sock);
    ssize_t r;
    switch (negotiate_observe(t, f->fd)) {
    case PATH_SHM: return channel_send(t, f, c);
    case PATH_FABRIC: return fabric_conn_send(t, f, c);
    case PATH_OFFERED:
        if (negotiate_prefix_send(t, f, c, &r))
            return channel_send(t, f, c);
        return r;
    default:
        if (atomic_load(&t->broken) && t->negotiated)
            return stream_broken_send(t, f->fd, c);
        if (watching(t))
            return watched(t, pt_send(f, c), &t->watch_sends, c);
        return pt_send(f, c);
    }
}

/* A call the fabric path does not carry: the connection leaves it first. */
static void off_the_fabric(struct tcp_sock *t, int fd, const char *call)
{
    if (atomic_load(&t->path) == PATH_FABRIC)
        fabric_conn_leave(t, fd, call);
}

/* recvmmsg and sendmmsg on a channel or the fabric: one message at a
 * time through the path's own receive or send (a stream has no message
 * boundaries to keep). */
static int tcp_recvmmsg(struct fdref *f, struct mmsghdr *vec, unsigned int n, int flags, struct timespec *tmo)
{
    struct tcp_sock *t = tcp_of(f->sock);
    int path = negotiate_observe(t, f->fd);
    if (path == PATH_TCP)
        return pt_recvmmsg(f, vec, n, flags, tmo);
    /* a pending offer's messages go one by one through its receive, which
     * knows doorbells from the server's bytes (offered_recv) */
    unsigned int i;
    for (i = 0; i < n; i++) {
        struct io_call c = { .kind = IO_RECVMSG, .msg = &vec[i].msg_hdr, .flags = flags & ~MSG_WAITFORONE };
        f->wait_until = 0;   /* each message's wait has the socket's whole timeout, as in the kernel */
        ssize_t r = path == PATH_FABRIC ? fabric_conn_recv(t, f, &c)
                    : path == PATH_SHM  ? channel_recv(t, f, &c)
                                        : tcp_recv(f, &c);
        if (r < 0)
            return i ? (int)i : (int)r;
        vec[i].msg_len = (unsigned int)r;
        if (r == 0) {
            i++;
            break;
        }
        if (flags & MSG_WAITFORONE)
            flags |= MSG_DONTWAIT;
    }
    return (int)i;
}

static int tcp_sendmmsg(struct fdref *f, struct mmsghdr *vec, unsigned int n, int flags)
{
    struct tcp_sock *t = tcp_of(f->sock);
    int path = negotiate_observe(t, f->fd);
    if (path == PATH_TCP)
        return pt_sendmmsg(f, vec, n, flags);
    /* a pending offer's messages go one by one through its send, which
     * counts them in the TCP prefix (the kernel's sendmmsg would not) */
    unsigned int i;
    for (i = 0; i < n; i++) {
        struct io_call c = { .kind = IO_SENDMSG, .msg = &vec[i].msg_hdr, .flags = flags };
        f->wait_until = 0;
        ssize_t r = path == PATH_FABRIC ? fabric_conn_send(t, f, &c)
                    : path == PATH_SHM  ? channel_send(t, f, &c)
                                        : tcp_send(f, &c);
        if (r < 0)
            return i ? (int)i : (int)r;
        vec[i].msg_len = (unsigned int)r;
    }
    return (int)i;
}

/* sendfile onto a channel: straight from the file into the ring (splice.c). */
static ssize_t tcp_sendfile(struct fdref *out, int in_fd, off64_t *off, size_t count)
{
    struct tcp_sock *t = tcp_of(out->sock);
    if (atomic_load(&t->path) == PATH_FABRIC) {
        fabric_conn_leave_no_wait(t, out->fd, "sendfile");   /* the kernel only writes to it */
        if (atomic_load(&t->path) == PATH_FABRIC) {
            /* a client awaiting its hello stays on the path: the kernel's
             * call counts as waiting, so that another thread's close is put
             * off at once rather than waiting for it to sleep */
            wait_call_blocks(t, &out->blocked);
            ssize_t r = pt_sendfile(out, in_fd, off, count);
            deferred_close_call_done(t, out);
            return r;
        }
    }
    int path = negotiate_observe(t, out->fd);
    if (path == PATH_OFFERED && (path = negotiate_tcp_begin(t, out->fd)) == PATH_OFFERED) {
        /* the kernel's, counted in the TCP prefix the server reads first */
        ssize_t r = pt_sendfile(out, in_fd, off, count);
        negotiate_tcp_end(t, r > 0 ? (uint64_t)r : 0);
        return r;
    }
    if (path != PATH_SHM || !t->ch.hdr)
        return pt_sendfile(out, in_fd, off, count);
    return splice_sendfile(t, out, in_fd, off, count);
}

static int tcp_listen(struct fdref *f, int backlog)
{
    int r = pt_listen(f, backlog);
    if (r == 0) {
        negotiate_listen(tcp_of(f->sock), f->fd);
        sockstat_publish(tcp_of(f->sock), f->fd, PST_KIND_LISTENER, PST_ROLE_UNKNOWN, NULL, 0);
    }
    return r;
}

/* A socket settled on kernel TCP that the fd table may keep without its
 * object (fdt_drop_settled): one fd, never a channel, in no epoll set of
 * ours, nothing of the program's that shunt answers for instead of the
 * kernel (the mark on TCP_NOTSENT_LOWAT, a strict failure). */
static bool disposable(struct tcp_sock *t)
{
    return atomic_load(&t->base.fds) == 1 && !t->ch.hdr && atomic_load(&t->epoll_entries) == 0 &&
           !t->lowat_marked && !t->strict_failed && t->listener_pid == 0 && !watching(t);
}

static int tcp_connect(struct fdref *f, const struct sockaddr *a, socklen_t len)
{
    struct tcp_sock *t = tcp_of(f->sock);
    if (t->negotiated)   /* a connect again (EALREADY, EISCONN ...): the kernel's answer */
        return t->strict_failed ? -EPROTO : pt_connect(f, a, len);
    negotiate_offer(t, f->fd, a, len);
    return tcp_connect_negotiated(f, a, len);
}

int tcp_connect_negotiated(struct fdref *f, const struct sockaddr *a, socklen_t len)
{
    struct tcp_sock *t = tcp_of(f->sock);
    if (t->strict_failed)
        return -EPROTO;
    int r = pt_connect(f, a, len);
    bool started = r == 0 || r == -EINPROGRESS || r == -EINTR;
    if (!started) {
        negotiate_connect_failed(t, f->fd);
        if (atomic_load(&t->path) == PATH_FABRIC) {
            /* no SYN went: the socket is as new, and its next connect
             * negotiates (and marks) again */
            fabric_conn_forget(t);
            t->negotiated = false;
            return r;
        }
        negotiate_withdraw(t, f->fd);
        return r;
    }
    if (atomic_load(&t->path) != PATH_TCP) {
        sockstat_publish(t, f->fd, PST_KIND_CONN, PST_ROLE_CLIENT, a, len);
        return r;
    }
    if (watching(t)) {
        /* the short-connection rule's sample: its calls come through the
         * object, which counts them */
        sockstat_publish(t, f->fd, PST_KIND_CONN, PST_ROLE_CLIENT, a, len);
        return r;
    }
    fdt_settle_kernel(f->fd, f->sock);   /* no listener under shunt: kernel TCP for good */
    if (disposable(t)) {
        /* its close then costs no object's release */
        kept_without_object(f->fd, PST_ROLE_CLIENT, (enum fallback_reason)atomic_load(&t->reason), false, a, len);
        fdt_drop_settled(f->fd, f->sock);
    } else {
        sockstat_publish(t, f->fd, PST_KIND_CONN, PST_ROLE_CLIENT, a, len);
    }
    return r;
}

static int tcp_accept(struct fdref *f, struct sockaddr *a, socklen_t *len, int flags)
{
    struct tcp_sock *listener = tcp_of(f->sock);
    /* A process that accepts on a listener it did not create (a pre-forked
     * worker, an exec'd server) registers as a listener of its own. */
    if (listener->listener_pid != shunt_pid) {
        negotiate_listen(listener, f->fd);
        if (listener->listener_pid == shunt_pid)
            sockstat_publish(listener, f->fd, 0, 0, NULL, 0);
    }
    int fd = (int)sysret(shunt_real.accept4(f->fd, a, len, flags));
    if (fd < 0)
        return fd;
    struct synopt syn;
    bool has_syn = negotiate_take_syn(listener, fd, &syn);
    /* a listener withdrawn for io_uring may still have offers posted before:
     * the claim refuses them (and records why); with SHUNT_ACCEL=0 it only
     * records why (disabled, not "not negotiated") */
    bool claims = listener->listener_pid == shunt_pid || uring_seen() || !shunt_settings.accel;
    if (!has_syn) {
        enum fallback_reason why = claims ? negotiate_unclaimable(listener) : FB_NOT_NEGOTIATED;
        if (why != FB_NONE) {
            /* kernel TCP for good before it has an object: it gets none */
            fdt_install_kernel_sock(fd);
            kept_without_object(fd, PST_ROLE_SERVER, why, claims, NULL, 0);
            return fd;
        }
    }
    struct shunt_sock *s = tcp_socket_new(fd, f->sock->domain, (flags & SOCK_NONBLOCK) != 0);
    if (s && listener->syn_program) {
        /* the program's TCP_SAVE_SYN, which the socket inherited */
        tcp_of(s)->syn_program = true;
        tcp_of(s)->program_save_syn = listener->program_save_syn;
    }
    if (s && claims) {
        negotiate_claim(tcp_of(s), fd, listener, has_syn ? &syn : NULL);
        if (tcp_of(s)->strict_failed) {
            sock_put(s);
            shunt_real.close(fd);
            return -ECONNABORTED;
        }
    }
    fdt_install(fd, s);
    if (s && atomic_load(&tcp_of(s)->path) == PATH_TCP)
        fdt_settle_kernel(fd, s);   /* the client does not run shunt, or fell back */
    if (s)
        sockstat_publish(tcp_of(s), fd, PST_KIND_CONN, PST_ROLE_SERVER, NULL, 0);
    return fd;
}

static int tcp_shutdown(struct fdref *f, int how)
{
    struct tcp_sock *t = tcp_of(f->sock);
    if (atomic_load(&t->path) == PATH_FABRIC)
        return fabric_conn_shutdown(t, f, how);
    /* A FIN on the TCP path would end the doorbells a later claim needs. */
    int path = negotiate_settle(t, f->fd);
    if (path == PATH_SHM && t->ch.hdr && !atomic_load(&t->ch.hdr->down)) {
        int r = stream_shutdown(t, f->fd, how);
        if (r != STREAM_DOWNGRADED)
            return r;
    }
    if (path == PATH_SHM && t->ch.hdr)
        return downgrade_shutdown(t, f, how);   /* the other end left: our unread bytes go before a FIN */
    return pt_shutdown(f, how);
}

static int tcp_getsockopt(struct fdref *f, int level, int name, void *val, socklen_t *len)
{
    struct tcp_sock *t = tcp_of(f->sock);
    if (level == IPPROTO_TCP && name == TCP_SAVE_SYN && t->syn_ours && val && len) {
        /* shunt's, not the program's: the program's own value, the kernel's way
         * (at most an int's bytes; a negative length is EINVAL) */
        if ((int)*len < 0)
            return -EINVAL;
        socklen_t n = *len < (socklen_t)sizeof(int) ? *len : (socklen_t)sizeof(int);
        memcpy(val, &t->program_save_syn, n);
        *len = n;
        return 0;
    }
    int path = negotiate_observe(t, f->fd);
    if (path == PATH_TCP || path == PATH_FABRIC || !val || !len || *len < (socklen_t)sizeof(int))
        return pt_getsockopt(f, level, name, val, len);
    int v;
    if (level == IPPROTO_TCP && name == TCP_NODELAY) {
        v = t->program_nodelay;
    } else if (path == PATH_SHM && t->ch.hdr && level == IPPROTO_TCP && name == TCP_CORK) {
        v = (int)atomic_load(&t->ch.self->corked);
    } else if (path == PATH_SHM && level == SOL_SOCKET && name == SO_ERROR && t->ch.hdr &&
               (atomic_load(&t->ch.peer->state) & SIDE_RESET) && !atomic_exchange(&t->reset_reported, true)) {
        v = ECONNRESET;
    } else {
        return pt_getsockopt(f, level, name, val, len);
    }
    memcpy(val, &v, sizeof v);
    *len = sizeof v;
    return 0;
}

static int tcp_setsockopt(struct fdref *f, int level, int name, const void *val, socklen_t len)
{
    struct tcp_sock *t = tcp_of(f->sock);
    if (level == IPPROTO_TCP && name == TCP_SAVE_SYN && val && len >= (socklen_t)sizeof(int)) {
        int v;
        memcpy(&v, val, sizeof v);
        if (t->syn_ours && v == 0) {
            t->program_save_syn = 0;   /* shunt's stays set: its SYNs are still shunt's */
            return 0;
        }
        int r = pt_setsockopt(f, level, name, val, len);
        if (r == 0) {
            t->program_save_syn = v;
            if (v != 0)
                negotiate_syn_program(t, f->fd);   /* the program reads its SYNs: shunt no longer does */
        }
        return r;
    }
    if (level == IPPROTO_TCP && name == TCP_NOTSENT_LOWAT) {
        int r = pt_setsockopt(f, level, name, val, len);
        if (r == 0) {
            t->program_lowat = true;   /* the program's value: never marked over */
            t->lowat_marked = false;
        }
        return r;
    }
    if (level == IPPROTO_TCP && name == TCP_NODELAY && val && len >= (socklen_t)sizeof(int)) {
        int v;
        memcpy(&v, val, sizeof v);
        int path = atomic_load(&t->path);
        if (path == PATH_OFFERED || path == PATH_SHM) {
            t->program_nodelay = v != 0;   /* the companion keeps NODELAY for doorbells */
            return 0;
        }
        int r = pt_setsockopt(f, level, name, val, len);
        if (r == 0)
            t->program_nodelay = v != 0;
        return r;
    }
    if (level == IPPROTO_TCP && name == TCP_CORK && val && len >= (socklen_t)sizeof(int) &&
        negotiate_observe(t, f->fd) == PATH_SHM && t->ch.hdr) {
        /* The companion never corks: it carries the doorbells.  The cork is
         * the end's, in the segment, shared by every holder (stream.c). */
        int v;
        memcpy(&v, val, sizeof v);
        atomic_store(&t->ch.self->corked, v != 0);
        if (!v)
            stream_flush_held(t, f->fd);
        return 0;
    }
    int r = pt_setsockopt(f, level, name, val, len);
    if (r == 0 && level == SOL_SOCKET && name == SO_SNDTIMEO && val && len >= (socklen_t)sizeof(struct timeval))
        memcpy(&t->sndtimeo, val, sizeof t->sndtimeo);
    if (r == 0 && level == SOL_SOCKET && name == SO_RCVTIMEO)
        t->rcvtimeo_known = false;   /* asked again (the kernel rounds it) at the next sleep */
    return r;
}

/* O_NONBLOCK belongs to the open file, which other fds and processes share:
 * what we see set here is a hint, checked with the kernel before it matters. */
static int tcp_fcntl(struct fdref *f, int cmd, void *arg)
{
    int r = pt_fcntl(f, cmd, arg);
    if (r == 0 && cmd == F_SETFL)
        atomic_store(&tcp_of(f->sock)->nonblock, ((long)(intptr_t)arg & O_NONBLOCK) != 0);
    return r;
}

static int tcp_ioctl(struct fdref *f, unsigned long req, void *arg)
{
    struct tcp_sock *t = tcp_of(f->sock);
    if (req == FIONBIO) {
        int r = pt_ioctl(f, req, arg);
        if (r == 0 && arg)
            atomic_store(&t->nonblock, *(int *)arg != 0);
        return r;
    }
    int q;
    if (arg && (req == FIONREAD || req == SIOCOUTQ) && fabric_conn_queue(t, f->fd, req, &q) == 0) {
        memcpy(arg, &q, sizeof q);   /* the fabric carries these: no leave */
        return 0;
    }
    off_the_fabric(t, f->fd, "an ioctl");
    if (req == FIONREAD && negotiate_observe(t, f->fd) == PATH_OFFERED &&
        negotiate_tcp_begin(t, f->fd) == PATH_OFFERED) {
        /* the server's own bytes, doorbells never: no claim lands meanwhile */
        int r = pt_ioctl(f, req, arg);
        negotiate_tcp_end(t, 0);
        return r;
    }
    if (negotiate_observe(t, f->fd) == PATH_SHM && t->ch.hdr && arg && (req == FIONREAD || req == SIOCOUTQ)) {
        int v = (int)(req == FIONREAD ? stream_readable(t) : stream_unread_by_peer(t));
        memcpy(arg, &v, sizeof v);
        return 0;
    }
    return pt_ioctl(f, req, arg);
}

static void tcp_destroy(struct shunt_sock *s)
{
    struct tcp_sock *t = tcp_of(s);
    negotiate_listener_closed(t);
    fabric_conn_destroy(t);
    /* The one unmap of a channel other threads may have seen (an offer
     * refused or withdrawn keeps its mapping, negotiate.c): the last
     * reference is gone, so no call is inside it. */
    if (t->ch.hdr)
        channel_detach(&t->ch);
#if defined(__SANITIZE_THREAD__)
    /* glibc's destroy of a default mutex does nothing; ThreadSanitizer's
     * ends what it knows of the lock before the memory is reused */
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->rx_lock);
    pthread_mutex_destroy(&t->tx_lock);
    pthread_mutex_destroy(&t->wait_turn);
#endif
    tcp_sock_cache_put(t);
}

static const struct sock_ops tcp_ops = {
    .kind = "tcp",
    .recv = tcp_recv,
    .send = tcp_send,
    .recvmmsg = tcp_recvmmsg,
    .sendmmsg = tcp_sendmmsg,
    .sendfile = tcp_sendfile,
    .bind = pt_bind,
    .listen = tcp_listen,
    .accept = tcp_accept,
    .connect = tcp_connect,
    .shutdown = tcp_shutdown,
    .getsockopt = tcp_getsockopt,
    .setsockopt = tcp_setsockopt,
    .getsockname = pt_getsockname,
    .getpeername = pt_getpeername,
    .fcntl = tcp_fcntl,
    .ioctl = tcp_ioctl,
    .release_fd = release_last_fd,
    .destroy = tcp_destroy,
};

