/*
 * epoll.c: the epoll kind of fd.
 *
 * Sockets on the TCP path stay in the kernel's set exactly as the program
 * put them there.  A socket with a channel (offered or accelerated) is
 * registered in the kernel's set for EPOLLIN only, under a tag, so that a
 * doorbell or the peer's death wakes epoll_wait; its real events are
 * computed from the rings, with level, edge and one-shot semantics kept
 * here.  The cost of a wait is one pass over the accelerated members
 * (a later stage makes it follow readiness instead).
 *
 * A TCP socket added before its connect (nginx adds its upstream sockets
 * first) cannot be told apart from one that stays on kernel TCP yet: it is
 * kept as a pending member, registered with the kernel exactly as the
 * program asked, and turned into a member of ours by the first wait that
 * finds it offered or accelerated (or forgotten once it settled on TCP).
 * Without that, its doorbells were never asked for and a reader in
 * epoll_wait slept through data that did not come with a FIN.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "core/epoll.h"
#include "core/fdtable.h"
#include "core/init.h"
#include "core/negotiate.h"
#include "core/passthrough.h"
#include "core/readiness.h"
#include "core/stream.h"
#include "core/wait.h"
#include "interpose/real.h"

#define TAG_HIGH 0x5348554eull   /* "SHUN": marks the kernel events that are ours */

struct ep_entry {
    int fd;
    struct tcp_sock *t;          /* holds a reference */
    uint32_t events;
    epoll_data_t data;
    bool disabled;               /* EPOLLONESHOT fired */
    uint32_t last;               /* EPOLLET: what was ready when last looked at */
    uint64_t last_rx, last_tx;   /* EPOLLET: ring positions then */
    bool last_end;               /* EPOLLET: the peer had finished then */
    bool armed;                  /* asked for a doorbell for this wait */
    bool pending;                /* added before negotiation: still the kernel's (see the top) */
};

struct epoll_obj {
    struct shunt_sock base;
    pthread_mutex_t lock;
    struct ep_entry *v;
    size_t n, cap;
    size_t next;                 /* where the next collect starts: ready members take turns */
    bool kernel_first;           /* and so do the kernel's members and ours */
};

static void epoll_destroy(struct shunt_sock *s)
{
    struct epoll_obj *ep = (struct epoll_obj *)s;
    for (size_t i = 0; i < ep->n; i++)
        sock_put(&ep->v[i].t->base);
    free(ep->v);
    pthread_mutex_destroy(&ep->lock);
    free(ep);
}

const struct sock_ops epoll_ops = {
    .kind = "epoll",
    .recv = pt_recv, .send = pt_send, .recvmmsg = pt_recvmmsg, .sendmmsg = pt_sendmmsg, .sendfile = pt_sendfile,
    .bind = pt_bind, .listen = pt_listen, .accept = pt_accept, .connect = pt_connect, .shutdown = pt_shutdown,
    .getsockopt = pt_getsockopt, .setsockopt = pt_setsockopt, .getsockname = pt_getsockname,
    .getpeername = pt_getpeername, .fcntl = pt_fcntl, .ioctl = pt_ioctl, .release_fd = pt_release_fd,
    .destroy = epoll_destroy,
};

struct shunt_sock *epoll_object_new(void)
{
    struct epoll_obj *ep = calloc(1, sizeof *ep);
    if (!ep)
        return NULL;
    atomic_init(&ep->base.refs, 1);
    ep->base.ops = &epoll_ops;
    pthread_mutex_init(&ep->lock, NULL);
    return &ep->base;
}

/* The epoll object behind epfd, made on first need (an inherited epoll fd
 * arrives without one).  Returns it with a reference, or NULL. */
static struct epoll_obj *epoll_of(int epfd, bool create)
{
    struct fdref f = fdt_get(epfd);
    if (f.sock && f.sock->ops == &epoll_ops)
        return (struct epoll_obj *)f.sock;
    fdt_put(&f);
    if (!create)
        return NULL;
    struct shunt_sock *s = epoll_object_new();
    if (!s)
        return NULL;
    sock_get(s);
    fdt_install(epfd, s);
    return (struct epoll_obj *)s;
}

static struct ep_entry *find(struct epoll_obj *ep, int fd)
{
    for (size_t i = 0; i < ep->n; i++)
        if (ep->v[i].fd == fd)
            return &ep->v[i];
    return NULL;
}

/* The doorbells a wait for this member's events needs. */
static int entry_wants(const struct ep_entry *e)
{
    int w = 0;
    if (e->events & (EPOLLIN | EPOLLRDNORM | EPOLLPRI | EPOLLRDHUP))
        w |= WANT_DATA;
    if (e->events & (EPOLLOUT | EPOLLWRNORM))
        w |= WANT_SPACE;
    return w ? w : WANT_DATA;
}

static void drop(struct epoll_obj *ep, struct ep_entry *e)
{
    if (e->armed)
        doorbell_leave(e->t, e->fd, entry_wants(e));
    sock_put(&e->t->base);
    *e = ep->v[--ep->n];
}

static int kernel_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    return shunt_real.epoll_ctl(epfd, op, fd, ev) < 0 ? -errno : 0;
}

static struct epoll_event tagged(int fd, uint32_t user_events)
{
    struct epoll_event k = { .events = EPOLLIN | EPOLLRDHUP | (user_events & EPOLLEXCLUSIVE) };
    k.data.u64 = TAG_HIGH << 32 | (uint32_t)fd;
    return k;
}

static bool is_listening(int fd)
{
    int v = 0;
    socklen_t len = sizeof v;
    return shunt_real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 && v;
}

int epoll_control(int epfd, int op, int fd, struct epoll_event *ev)
{
    struct fdref f = fdt_get(fd);
    if (op != EPOLL_CTL_DEL)
        tcp_socket_watched(f.sock, fd);
    struct tcp_sock *t = NULL;
    bool pending = false;
    if (f.sock && f.sock->ops == &tcp_ops && atomic_load(&tcp_of(f.sock)->path) != PATH_TCP)
        t = tcp_of(f.sock);
    else if (op == EPOLL_CTL_ADD && f.sock && f.sock->ops == &tcp_ops && !tcp_of(f.sock)->negotiated &&
             shunt_settings.accel && tcp_of(f.sock)->listener_pid == 0 && !is_listening(fd))
        t = tcp_of(f.sock), pending = true;   /* may yet connect through shunt */
    struct epoll_obj *ep = epoll_of(epfd, t != NULL);
    int r;
    if (!ep) {
        r = kernel_ctl(epfd, op, fd, ev);
        fdt_put(&f);
        return r;
    }
    pthread_mutex_lock(&ep->lock);
    struct ep_entry *e = find(ep, fd);
    if (e && t && e->t != t) {   /* a stale entry: that fd number now names another socket */
        drop(ep, e);
        e = NULL;
    }
    if (op == EPOLL_CTL_ADD && t) {
        struct epoll_event k = pending && ev ? *ev : tagged(fd, ev ? ev->events : 0);
        r = ev ? kernel_ctl(epfd, op, fd, &k) : -EFAULT;
        if (r == 0 && ep->n == ep->cap) {
            size_t cap = ep->cap ? ep->cap * 2 : 8;
            struct ep_entry *v = realloc(ep->v, cap * sizeof *v);
            if (!v) {
                kernel_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
                r = -ENOMEM;
            } else {
                ep->v = v;
                ep->cap = cap;
            }
        }
        if (r == 0) {
            sock_get(&t->base);
            ep->v[ep->n++] = (struct ep_entry){ .fd = fd, .t = t, .events = ev->events, .data = ev->data,
                                                .pending = pending };
        }
    } else if (op == EPOLL_CTL_MOD && e) {
        struct epoll_event k = e->pending && ev ? *ev : tagged(fd, 0);
        r = ev ? kernel_ctl(epfd, op, fd, &k) : -EFAULT;
        if (r == 0) {
            e->events = ev->events;
            e->data = ev->data;
            e->disabled = false;
            e->last = 0;
        }
    } else if (op == EPOLL_CTL_DEL && e) {
        r = kernel_ctl(epfd, op, fd, ev);
        if (r == 0)
            drop(ep, e);
    } else {
        r = kernel_ctl(epfd, op, fd, ev);
    }
    pthread_mutex_unlock(&ep->lock);
    sock_put(&ep->base);
    fdt_put(&f);
    return r;
}

/* An entry whose socket fell back to TCP goes back to the kernel as the
 * program registered it. */
static void hand_back(int epfd, struct epoll_obj *ep, struct ep_entry *e)
{
    struct epoll_event k = { .events = e->events, .data = e->data };
    if (!e->disabled)
        kernel_ctl(epfd, EPOLL_CTL_MOD, e->fd, &k);
    drop(ep, e);
}

static uint32_t entry_ready(struct ep_entry *e)
{
    uint32_t want = e->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLRDNORM | EPOLLWRNORM);
    struct fdref f = { .fd = e->fd, .sock = &e->t->base, .ops = e->t->base.ops };
    int rev = readiness_of(&f, (short)want);
    if (rev < 0) {
        /* still negotiating: the kernel knows */
        struct pollfd p = { .fd = e->fd, .events = (short)want };
        if (shunt_real.poll(&p, 1, 0) <= 0)
            return 0;
        rev = p.revents;
    }
    uint32_t got = (uint32_t)rev & (want | EPOLLERR | EPOLLHUP);
    if (!(e->events & EPOLLET))
        return got;
    /* Edge-triggered: an event for each change: data arrived, space was
     * made, the peer finished, or a condition newly became true. */
    struct tcp_sock *t = e->t;
    uint64_t rx = t->ch.hdr ? atomic_load(&t->ch.rx.hdr->head) : 0;
    uint64_t tx = t->ch.hdr ? atomic_load(&t->ch.tx.hdr->tail) : 0;
    bool end = t->ch.hdr && (atomic_load(&t->ch.rx.hdr->fin) || atomic_load(&t->peer_gone) ||
                             (atomic_load(&t->ch.peer->state) & (SIDE_CLOSED | SIDE_RESET)));
    uint32_t fresh = got & ~e->last;
    if (rx != e->last_rx || end != e->last_end)
        fresh |= got & (EPOLLIN | EPOLLRDNORM | EPOLLRDHUP);
    if (tx != e->last_tx)
        fresh |= got & (EPOLLOUT | EPOLLWRNORM);
    e->last = got;
    e->last_rx = rx;
    e->last_tx = tx;
    e->last_end = end;
    return fresh;
}

/* Fills evs from the accelerated members; returns how many. */
static int collect(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max)
{
    /* Members whose socket is gone from this process leave the set, as the
     * kernel's rule has it: when the last fd of the socket is closed. */
    for (size_t i = 0; i < ep->n;) {
        struct ep_entry *e = &ep->v[i];
        if (atomic_load(&e->t->base.fds) <= 0) {
            drop(ep, e);
            continue;
        }
        struct fdref f = fdt_get(e->fd);
        bool same = f.sock == &e->t->base;
        fdt_put(&f);
        int path = same ? negotiate_observe(e->t, e->fd) : PATH_SHM;
        if (e->pending) {
            if (!same || (path == PATH_TCP && e->t->negotiated)) {
                drop(ep, e);   /* settled on TCP: the kernel has it as the program asked */
                continue;
            }
            if (path != PATH_TCP) {
                /* negotiated through shunt: ours from now on; what is
                 * ready now counts as new */
                struct epoll_event k = tagged(e->fd, e->events);
                if (kernel_ctl(epfd, EPOLL_CTL_MOD, e->fd, &k) == 0) {
                    e->pending = false;
                    e->last = 0;
                    e->last_rx = e->last_tx = 0;
                    e->last_end = false;
                }
            }
            i++;
            continue;
        }
        if (same && path == PATH_TCP) {
            hand_back(epfd, ep, e);
            continue;
        }
        i++;
    }
    int n = 0;
    size_t count = ep->n, start = count ? ep->next % count : 0;
    for (size_t k = 0; k < count && n < max; k++) {
        size_t i = (start + k) % count;
        struct ep_entry *e = &ep->v[i];
        if (e->disabled || e->pending)
            continue;
        uint32_t got = entry_ready(e);
        if (got) {
            evs[n].events = got;
            evs[n].data = e->data;
            n++;
            ep->next = i + 1;
            if (e->events & EPOLLONESHOT)
                e->disabled = true;
        }
    }
    return n;
}

/* Removes our tagged events from what the kernel returned, draining the
 * doorbells they stand for; returns how many of the program's remain. */
static int filter_kernel(struct epoll_obj *ep, struct epoll_event *evs, int n)
{
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if ((evs[i].data.u64 >> 32) == TAG_HIGH) {
            int fd = (int)(uint32_t)evs[i].data.u64;
            struct ep_entry *e = find(ep, fd);
            if (e && e->t->ch.hdr && atomic_load(&e->t->path) == PATH_SHM &&
                (evs[i].events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)))
                doorbell_check_peer(e->t, fd);
            continue;
        }
        evs[kept++] = evs[i];
    }
    return kept;
}

static int kernel_wait(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask)
{
    int r = shunt_real.epoll_pwait2(epfd, evs, max, tmo, mask);
    return r < 0 ? -errno : r;
}

int epoll_wait_ready(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask)
{
    if (max <= 0)
        return kernel_wait(epfd, evs, max, tmo, mask);
    struct epoll_obj *ep = epoll_of(epfd, false);
    if (!ep || !ep->n) {
        if (ep)
            sock_put(&ep->base);
        return kernel_wait(epfd, evs, max, tmo, mask);
    }
    static const struct timespec zero = { 0, 0 };
    struct deadline dl;
    deadline_start(&dl, tmo);
    int result;
    for (;;) {
        pthread_mutex_lock(&ep->lock);
        /* Ours and the kernel's members take turns at being first, so that
         * a small maxevents starves neither. */
        bool kernel_first = ep->kernel_first;
        ep->kernel_first = !kernel_first;
        int n = 0;
        if (kernel_first) {
            int k = kernel_wait(epfd, evs, max, &zero, NULL);
            n = k > 0 ? filter_kernel(ep, evs, k) : 0;
        }
        n += collect(epfd, ep, evs + n, max - n);
        if (!kernel_first && n < max) {
            int k = kernel_wait(epfd, evs + n, max - n, &zero, NULL);
            n += k > 0 ? filter_kernel(ep, evs + n, k) : 0;
        }
        bool zero_wait = tmo && tmo->tv_sec == 0 && tmo->tv_nsec == 0;
        if (n > 0 || zero_wait || deadline_passed(&dl)) {
            pthread_mutex_unlock(&ep->lock);
            result = n;
            break;
        }
        for (size_t i = 0; i < ep->n; i++)
            if (!ep->v[i].pending && ep->v[i].t->ch.hdr && atomic_load(&ep->v[i].t->path) == PATH_SHM) {
                doorbell_enter(ep->v[i].t, entry_wants(&ep->v[i]));
                ep->v[i].armed = true;
            }
        n = collect(epfd, ep, evs, max);
        pthread_mutex_unlock(&ep->lock);
        struct timespec left;
        int r = n > 0 ? 0 : kernel_wait(epfd, evs, max, deadline_left(&dl, &left), mask);
        pthread_mutex_lock(&ep->lock);
        for (size_t i = 0; i < ep->n; i++)
            if (ep->v[i].armed) {
                doorbell_leave(ep->v[i].t, ep->v[i].fd, entry_wants(&ep->v[i]));
                ep->v[i].armed = false;
            }
        if (n > 0) {
            pthread_mutex_unlock(&ep->lock);
            result = n;
            break;
        }
        if (r < 0) {
            pthread_mutex_unlock(&ep->lock);
            result = r;
            break;
        }
        int k = filter_kernel(ep, evs, r);
        if (k > 0 && k < max)
            k += collect(epfd, ep, evs + k, max - k);
        pthread_mutex_unlock(&ep->lock);
        if (k > 0) {
            result = k;
            break;
        }
    }
    sock_put(&ep->base);
    return result;
}
