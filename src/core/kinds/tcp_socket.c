/*
 * tcp_socket.c: the TCP socket kind: its operations, which hand each call
 * to the kernel (PATH_TCP), to the negotiation (PATH_OFFERED) or to the
 * channel (PATH_SHM), and its lifetime across close, fork and exec.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>

#include "core/fd/call_marks.h"
#include "core/conn/deferred_close.h"
#include "core/conn/downgrade.h"
#include "core/kinds/epoll.h"
#include "core/fd/fdtable.h"
#include "base/self.h"
#include "base/log.h"
#include "core/conn/negotiate.h"
#include "core/fd/passthrough.h"
#include "core/conn/sockstat.h"
#include "core/conn/splice.h"
#include "core/conn/stream.h"
#include "core/kinds/tcp_socket.h"
#include "core/wait/wait.h"
#include "base/real.h"
#include "registry/procstat.h"

static const char *const reason_names[] = {
    [FB_NONE] = "none",
    [FB_DISABLED] = "disabled (SHUNT_ACCEL=0)",
    [FB_NOT_NEGOTIATED] = "not negotiated",
    [FB_NO_LISTENER] = "no accelerated listener",
    [FB_NOT_LOOPBACK] = "destination not on loopback",
    [FB_REGISTRY] = "registry unavailable",
    [FB_REGISTRY_FULL] = "registry full",
    [FB_BIND] = "could not bind",
    [FB_CHANNEL] = "no shared memory for a channel",
    [FB_NO_OFFER] = "client does not run shunt",
    [FB_VERIFY] = "offer does not match the connection",
    [FB_OTHER_USER] = "peer runs as another user",
    [FB_CLAIM] = "claim did not settle",
    [FB_REFUSED] = "server refused",
    [FB_ATTACH] = "channel could not be mapped",
    [FB_CONNECT_FAILED] = "connect failed",
    [FB_INHERITED] = "inherited connection unknown to shunt",
    [FB_WITHDRAWN] = "client shut down before the claim",
    [FB_DOWNGRADED] = "moved back: an end went to a program without shunt",
    [FB_SHM_LIMIT] = "shm-limit: shared memory bound reached",
    [FB_STDIO] = "moved back: stdio shunt cannot carry on this socket",
};

/* The same, as short keys for `shunt stat --json` and scripts. */
static const char *const reason_keys[] = {
    [FB_NONE] = "none",
    [FB_DISABLED] = "disabled",
    [FB_NOT_NEGOTIATED] = "not_negotiated",
    [FB_NO_LISTENER] = "no_listener",
    [FB_NOT_LOOPBACK] = "not_loopback",
    [FB_REGISTRY] = "registry",
    [FB_REGISTRY_FULL] = "registry_full",
    [FB_BIND] = "bind",
    [FB_CHANNEL] = "channel",
    [FB_NO_OFFER] = "no_offer",
    [FB_VERIFY] = "verify",
    [FB_OTHER_USER] = "other_user",
    [FB_CLAIM] = "claim",
    [FB_REFUSED] = "refused",
    [FB_ATTACH] = "attach",
    [FB_CONNECT_FAILED] = "connect_failed",
    [FB_INHERITED] = "inherited",
    [FB_WITHDRAWN] = "withdrawn",
    [FB_DOWNGRADED] = "downgraded",
    [FB_SHM_LIMIT] = "shm_limit",
    [FB_STDIO] = "stdio",
};
_Static_assert(sizeof reason_keys / sizeof reason_keys[0] == sizeof reason_names / sizeof reason_names[0],
               "every fallback reason has a key");

const char *fallback_reason_key(enum fallback_reason r)
{
    return (unsigned)r < sizeof reason_keys / sizeof reason_keys[0] && reason_keys[r] ? reason_keys[r] : "unknown";
}

const char *fallback_reason_name(enum fallback_reason r)
{
    return (unsigned)r < sizeof reason_names / sizeof reason_names[0] && reason_names[r] ? reason_names[r] : "?";
}

void tcp_fallback(struct tcp_sock *t, int fd, enum fallback_reason why, bool should_have)
{
    atomic_store(&t->reason, why);
    atomic_store(&t->path, PATH_TCP);
    if (should_have && shunt_settings.strict) {
        t->strict_failed = true;
        char line[160];
        int n = snprintf(line, sizeof line, "shunt: SHUNT_STRICT: fd %d was not accelerated: %s\n", fd,
                         fallback_reason_name(why));
        shunt_real.write(2, line, (size_t)n);
        return;
    }
    shunt_log_sock(should_have ? LOG_WARN : LOG_INFO, t, fd, "kernel TCP: %s", fallback_reason_name(why));
}

bool tcp_socket_wanted(int domain, int type, int protocol)
{
    return (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
           (protocol == 0 || protocol == IPPROTO_TCP);
}

struct shunt_sock *tcp_socket_new(int fd, int domain, int nonblock)
{
    struct tcp_sock *t = calloc(1, sizeof *t);
    if (!t) {
        shunt_log(LOG_WARN, "fd %d: no memory for socket state; it passes through", fd);
        return NULL;
    }
    atomic_init(&t->base.refs, 1);
    t->base.ops = &tcp_ops;
    t->base.domain = domain;
    atomic_init(&t->path, PATH_TCP);
    atomic_init(&t->reason, FB_NOT_NEGOTIATED);
    atomic_init(&t->nonblock, nonblock);
    atomic_init(&t->own_fd, -1);
    pthread_mutex_init(&t->lock, NULL);
    pthread_mutex_init(&t->rx_lock, NULL);
    pthread_mutex_init(&t->tx_lock, NULL);
    return &t->base;
}

struct shunt_sock *tcp_socket_probe(int fd, uint64_t inode, bool passed)
{
    int domain = 0, type = 0, protocol = 0;
    socklen_t len = sizeof domain;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0)
        return NULL;
    len = sizeof type;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
        return NULL;
    len = sizeof protocol;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) < 0)
        return NULL;
    if (!tcp_socket_wanted(domain, type, protocol))
        return NULL;
    struct shunt_sock *s = tcp_socket_new(fd, domain, -1);
    if (!s)
        return NULL;
    tcp_of(s)->inode = inode;   /* what tcp_socket_share knows it by */
    int listening = 0;
    len = sizeof listening;
    shunt_real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
    if (listening)
        negotiate_listen(tcp_of(s), fd);   /* an inherited listener: this process listens too */
    else
        negotiate_attach_inherited(tcp_of(s), fd, passed);
    sockstat_inherited(tcp_of(s), fd);
    return s;
}

struct known_socket {
    uint64_t inode;
    struct shunt_sock *found;
    int fd;
};

static void find_inode(int fd, void *ctx)
{
    struct known_socket *k = ctx;
    struct fdref f = fdt_get(fd);
    if (!k->found && f.sock && f.sock->ops == &tcp_ops) {
        struct tcp_sock *t = tcp_of(f.sock);
        if (t->inode == k->inode && !t->released) {
            sock_get(f.sock);
            k->found = f.sock;
            k->fd = fd;
        }
    }
    fdt_put(&f);
}

struct shunt_sock *tcp_socket_share(int fd, uint64_t inode, bool passed)
{
    struct known_socket k = { inode, NULL, -1 };
    if (!inode)
        return NULL;
    fdt_for_each_object(0, ~0U, find_inode, &k);
    if (!k.found)
        return NULL;
    struct tcp_sock *t = tcp_of(k.found);
    if (passed && atomic_load(&t->path) != PATH_TCP && t->ch.hdr)
        atomic_fetch_sub(&t->ch.self->holders, 1u);   /* ours stands: never the last */
    sockstat_dup(k.fd, fd);
    return k.found;
}

void tcp_socket_watched(struct shunt_sock *s, int fd)
{
    if (!s || s->ops != &tcp_ops)
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
    return negotiate_observe(t, fd) == PATH_SHM && !atomic_load(&t->broken);
}

/* A receive on a client whose offer is pending.  The server can only send
 * after it accepted, and it settles the offer inside accept, so the first
 * byte to arrive tells: once the claim has landed, whatever came by TCP from
 * the server is a doorbell and the call continues on the channel; otherwise
 * it is data and the call is the kernel's.  Waiting for that byte with
 * MSG_PEEK keeps MSG_WAITALL from holding the kernel past the claim. */
static ssize_t tcp_recv(struct fdref *f, struct io_call *c);

static ssize_t offered_recv(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    int flags = (c->kind == IO_READ || c->kind == IO_READV) ? 0 : c->flags;
    int fl = shunt_real.fcntl(f->fd, F_GETFL);
    if (!(flags & MSG_DONTWAIT) && fl >= 0 && !(fl & O_NONBLOCK)) {
        char b;
        ssize_t r = shunt_real.recv(f->fd, &b, 1, MSG_PEEK);
        if (r < 0 && negotiate_observe(t, f->fd) != PATH_SHM)
            return -errno;
    }
    if (negotiate_observe(t, f->fd) == PATH_SHM)
        return channel_recv(t, f, c);
    ssize_t r = pt_recv(f, c);
    if (r > 0 && negotiate_observe(t, f->fd) == PATH_SHM) {
        doorbell_ate(t, (size_t)r);   /* those were doorbells */
        return tcp_recv(f, c);
    }
    return r;
}

static ssize_t tcp_recv(struct fdref *f, struct io_call *c)
{
    struct tcp_sock *t = tcp_of(f->sock);
    switch (negotiate_observe(t, f->fd)) {
    case PATH_SHM: return channel_recv(t, f, c);
    case PATH_OFFERED: return offered_recv(t, f, c);
    default: return pt_recv(f, c);
    }
}

static ssize_t tcp_send(struct fdref *f, struct io_call *c)
{
    struct tcp_sock *t = tcp_of(f->sock);
    ssize_t r;
    switch (negotiate_observe(t, f->fd)) {
    case PATH_SHM: return channel_send(t, f, c);
    case PATH_OFFERED:
        if (negotiate_prefix_send(t, f, c, &r))
            return channel_send(t, f, c);
        return r;
    default: return pt_send(f, c);
    }
}

static int tcp_recvmmsg(struct fdref *f, struct mmsghdr *vec, unsigned int n, int flags, struct timespec *tmo)
{
    struct tcp_sock *t = tcp_of(f->sock);
    if (negotiate_observe(t, f->fd) != PATH_SHM)
        return pt_recvmmsg(f, vec, n, flags, tmo);
    unsigned int i;
    for (i = 0; i < n; i++) {
        struct io_call c = { .kind = IO_RECVMSG, .msg = &vec[i].msg_hdr, .flags = flags & ~MSG_WAITFORONE };
        ssize_t r = channel_recv(t, f, &c);
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
    if (negotiate_observe(t, f->fd) != PATH_SHM)
        return pt_sendmmsg(f, vec, n, flags);
    unsigned int i;
    for (i = 0; i < n; i++) {
        struct io_call c = { .kind = IO_SENDMSG, .msg = &vec[i].msg_hdr, .flags = flags };
        ssize_t r = channel_send(t, f, &c);
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
    if (negotiate_observe(t, out->fd) != PATH_SHM || !t->ch.hdr)
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

static int tcp_connect(struct fdref *f, const struct sockaddr *a, socklen_t len)
{
    struct tcp_sock *t = tcp_of(f->sock);
    bool first = !t->negotiated;
    if (first)
        negotiate_offer(t, f->fd, a, len);
    if (t->strict_failed)
        return -EPROTO;
    int r = pt_connect(f, a, len);
    if (first && r < 0 && r != -EINPROGRESS && r != -EINTR)
        negotiate_withdraw(t, f->fd);
    else if (first && atomic_load(&t->path) == PATH_TCP)
        fdt_settle_kernel(f->fd, f->sock);   /* no listener under shunt: kernel TCP for good */
    if (first && (r == 0 || r == -EINPROGRESS || r == -EINTR))
        sockstat_publish(t, f->fd, PST_KIND_CONN, PST_ROLE_CLIENT, a, len);
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
    struct shunt_sock *s = tcp_socket_new(fd, f->sock->domain, (flags & SOCK_NONBLOCK) != 0);
    if (s && listener->listener_pid == shunt_pid) {
        negotiate_claim(tcp_of(s), fd);
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
    /* A FIN on the TCP path would end the doorbells a later claim needs. */
    int path = negotiate_settle(t, f->fd);
    if (path == PATH_SHM && t->ch.hdr && !atomic_load(&t->ch.hdr->down))
        return stream_shutdown(t, f->fd, how);
    if (path == PATH_SHM && t->ch.hdr)
        downgrade_observe(t, f->fd);   /* the other end left: our unread bytes go before a FIN */
    return pt_shutdown(f, how);
}

static int tcp_getsockopt(struct fdref *f, int level, int name, void *val, socklen_t *len)
{
    struct tcp_sock *t = tcp_of(f->sock);
    int path = negotiate_observe(t, f->fd);
    if (path == PATH_TCP || !val || !len || *len < (socklen_t)sizeof(int))
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
    if (level == IPPROTO_TCP && name == TCP_NODELAY && val && len >= (socklen_t)sizeof(int)) {
        int v;
        memcpy(&v, val, sizeof v);
        if (atomic_load(&t->path) != PATH_TCP) {
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
    if (negotiate_observe(t, f->fd) == PATH_SHM && t->ch.hdr && arg && (req == FIONREAD || req == SIOCOUTQ)) {
        int v = (int)(req == FIONREAD ? stream_readable(t) : stream_unread_by_peer(t));
        memcpy(arg, &v, sizeof v);
        return 0;
    }
    return pt_ioctl(f, req, arg);
}

/* Let go of the channel, and when no process holds this end any more,
 * close it as TCP would. */
void tcp_release_channel(struct fdref *f)
{
    struct tcp_sock *t = tcp_of(f->sock);
    /* the other end left for a program without shunt: our unread bytes go
     * to it over TCP before this end closes */
    if (atomic_load(&t->path) == PATH_SHM && t->ch.hdr && atomic_load(&t->ch.hdr->down))
        downgrade_observe(t, f->fd);
    crit_lock(&t->lock);
    if (t->released) {
        crit_unlock(&t->lock);
        return;
    }
    t->released = true;
    int path = atomic_load(&t->path);
    if (path != PATH_TCP && t->ch.hdr) {
        if (atomic_fetch_sub(&t->ch.self->holders, 1) == 1) {
            if (path == PATH_SHM && !atomic_load(&t->ch.hdr->down)) {
                stream_close(t, f->fd);
                downgrade_close_copy(t, f->fd);
                /* the last holder of this end: nobody else waits on the
                 * companion, so its doorbells can go; what follows them
                 * tells whether the peer's processes are gone */
                char buf[256];
                ssize_t r;
                while ((r = shunt_real.recv(f->fd, buf, sizeof buf, MSG_DONTWAIT)) > 0)
                    doorbell_ate(t, (size_t)r);
                if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                    atomic_store(&t->peer_gone, true);
            }
            negotiate_forget(t);
        }
    }
    crit_unlock(&t->lock);
}

/* The last fd of this process closes.  Calls of other threads that wait on
 * the socket keep it open until the last of them returns, as the kernel's
 * file outlives the fd (deferred_close.c); otherwise the channel closes now. */
static void tcp_release_fd(struct fdref *f)
{
    if (!deferred_close_hold(tcp_of(f->sock), f->fd))
        tcp_release_channel(f);
}

static void tcp_destroy(struct shunt_sock *s)
{
    struct tcp_sock *t = tcp_of(s);
    negotiate_listener_closed(t);
    if (t->ch.hdr)
        channel_detach(&t->ch);
    pthread_mutex_destroy(&t->lock);
    pthread_mutex_destroy(&t->rx_lock);
    pthread_mutex_destroy(&t->tx_lock);
    free(t);
}

/*
 * Holders: how many processes hold each end of a channel.  Who counts:
 *   fork          the parent counts the child in before it exists;
 *   vfork, posix_spawn
 *                 the parent counts in the new program, for every channel
 *                 with an fd that survives exec (not close-on-exec);
 *   exec          the old image hands its holds to the new one, except for
 *                 channels all of whose fds close at exec;
 *   SCM_RIGHTS    the sender counts the receiver in before sending.
 * A process that finds an inherited fd (after exec, or received) attaches
 * without counting: its hold was taken for it.  A hold whose process never
 * attaches only delays the FIN marker; its TCP socket's FIN, when the
 * process is gone, still ends the connection for the peer.
 *
 * Each pass visits every fd of this process; an object is adjusted once,
 * told apart by an epoch number.
 */
static unsigned epoch;

enum holders_which { ALL_CHANNELS, SURVIVING_EXEC, CLOSED_BY_EXEC };

struct holders_ctx {
    int delta;
    unsigned mark;
    enum holders_which which;
    bool survivors_pass;    /* first pass: which channels have an fd that survives exec */
    bool quiesce;           /* fork: hold each channel's local locks across it */
};

static struct tcp_sock *channel_of(struct fdref *f)
{
    if (!f->sock || f->sock->ops != &tcp_ops)
        return NULL;
    struct tcp_sock *t = tcp_of(f->sock);
    return atomic_load(&t->path) != PATH_TCP && t->ch.hdr ? t : NULL;
}

static void adjust_holders(int fd, void *ctx)
{
    struct holders_ctx *h = ctx;
    struct fdref f = fdt_get(fd);
    struct tcp_sock *t = channel_of(&f);
    if (t && h->survivors_pass) {
        int fl = shunt_real.fcntl(fd, F_GETFD);
        if (t->exec_epoch != h->mark) {
            t->exec_epoch = h->mark;
            t->survives_exec = false;
        }
        if (fl >= 0 && !(fl & FD_CLOEXEC))
            t->survives_exec = true;
    } else if (t && t->fork_epoch != h->mark) {
        bool survives = t->exec_epoch == h->mark && t->survives_exec;
        if (h->which == ALL_CHANNELS || survives == (h->which == SURVIVING_EXEC)) {
            t->fork_epoch = h->mark;
            if (h->quiesce) {
                /* no copy of this process's may be half done as fork
                 * snapshots it: from now on both processes lock for real */
                crit_lock(&t->rx_lock);
                crit_lock(&t->tx_lock);
            }
            atomic_fetch_add(&t->ch.self->holders, (unsigned)h->delta);
            if (h->delta > 0 && h->which == SURVIVING_EXEC)
                epoll_socket_shared(t, fd);   /* the new program may shut it down */
        }
    }
    fdt_put(&f);
}

static void adjust_all(int delta, enum holders_which which)
{
    struct holders_ctx h = { delta, ++epoch, which, false, false };
    if (which != ALL_CHANNELS) {
        h.survivors_pass = true;
        fdt_for_each_object(0, ~0U, adjust_holders, &h);
        h.survivors_pass = false;
    }
    fdt_for_each_object(0, ~0U, adjust_holders, &h);
}

/* At exit the kernel closes every fd; shunt lets go of the channels first,
 * as close would, so that nothing of them outlives the last holder. */
static void release_at_exit(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->ops == &tcp_ops)
        tcp_release_fd(&f);
    fdt_put(&f);
}

void tcp_sockets_at_exit(void)
{
    fdt_for_each_object(0, ~0U, release_at_exit, NULL);
    deferred_close_at_exit();   /* exit ends the calls that still wait: their sockets close now */
}

void tcp_sockets_in_flight(const int *fds, size_t n, int delta)
{
    for (size_t i = 0; i < n; i++) {
        struct fdref f = fdt_get(fds[i]);
        if (f.sock && f.sock->ops == &tcp_ops) {
            struct tcp_sock *t = tcp_of(f.sock);
            if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
                atomic_fetch_add(&t->ch.self->holders, (unsigned)delta);
                if (delta > 0)
                    epoll_socket_shared(t, fds[i]);   /* the receiver may shut it down */
            }
        }
        fdt_put(&f);
    }
}

void tcp_sockets_before_fork(void)
{
    struct holders_ctx h = { 1, ++epoch, ALL_CHANNELS, false, true };
    fdt_for_each_object(0, ~0U, adjust_holders, &h);
}

static void unlock_after_fork(int fd, void *ctx)
{
    unsigned mark = *(unsigned *)ctx;
    struct fdref f = fdt_get(fd);
    struct tcp_sock *t = channel_of(&f);
    if (t && t->fork_epoch == mark && !t->fork_unlocked) {
        t->fork_unlocked = true;
        crit_unlock(&t->tx_lock);
        crit_unlock(&t->rx_lock);
    }
    fdt_put(&f);
}

static void clear_unlocked(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    struct tcp_sock *t = channel_of(&f);
    if (t)
        t->fork_unlocked = false;
    fdt_put(&f);
}

/* In both processes after fork (and in the parent when it failed). */
void tcp_sockets_after_fork(void)
{
    unsigned mark = epoch;
    fdt_for_each_object(0, ~0U, unlock_after_fork, &mark);
    fdt_for_each_object(0, ~0U, clear_unlocked, NULL);
}

void tcp_sockets_fork_failed(void) { adjust_all(-1, ALL_CHANNELS); }

static void forget_threads(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->ops == &tcp_ops)
        wait_forget_threads(tcp_of(f.sock));
    fdt_put(&f);
}

/* In the child after fork: only the forking thread came along.  The
 * parent's waiting threads are not here, and the sockets the parent closed
 * while they waited were never the program's in the child. */
void tcp_sockets_after_fork_child(void)
{
    wait_after_fork_child();
    call_marks_after_fork_child();
    fdt_for_each_object(0, ~0U, forget_threads, NULL);
    deferred_close_after_fork_child();
}

/* The new program holds what survives exec: counted in by the parent. */
void tcp_sockets_before_spawn(void) { adjust_all(1, SURVIVING_EXEC); }
void tcp_sockets_spawn_failed(void) { adjust_all(-1, SURVIVING_EXEC); }

/* This image lets go of the channels whose every fd closes at exec (a vfork
 * child has nothing to let go of: its parent counted the new program). */
void tcp_sockets_before_exec(void)
{
    if (!shunt_in_vfork_child) {
        epoll_release_all();
        adjust_all(-1, CLOSED_BY_EXEC);
    }
}

void tcp_sockets_exec_failed(void)
{
    if (!shunt_in_vfork_child)
        adjust_all(1, CLOSED_BY_EXEC);
}

const struct sock_ops tcp_ops = {
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
    .release_fd = tcp_release_fd,
    .destroy = tcp_destroy,
};
