/*
 * epoll.c: the epoll kind of fd, with a cost that follows readiness.
 *
 * Sockets on the TCP path stay in the kernel's set exactly as the program
 * put them there ("kernel members").  A socket with a channel is registered
 * in the kernel's set under a tag, edge-triggered on its companion, so that
 * a doorbell or the peer's death wakes epoll_wait; its real events come
 * from the rings, with level, edge and one-shot semantics kept here.
 *
 * Each such member is either
 *   hot   looked at on every wait (it was active lately), no doorbell asked;
 *   cold  a doorbell asked for (its peer rings at its next progress), so
 *         the kernel's set tells when it needs a look again;
 *   off   EPOLLONESHOT fired: neither, until EPOLL_CTL_MOD.
 * A hot member that shows nothing for a few looks, and every hot member
 * when the wait is about to sleep, turns cold.  A wait therefore costs
 * O(hot members + kernel events), whatever the number of idle members.
 * When the set has kernel members or cold ones, every wait also asks the
 * kernel without blocking, so its answer is complete, as the kernel's is
 * (a zero-timeout wait, within the bound of kernel_looks.c).
 * A member added or changed while a wait may be asleep on the set starts
 * cold instead (added_while_waiting), and a set without members of ours is
 * the kernel's, its answer still cleared of our tags (epoll_wait_ready).
 *
 * A TCP socket added before its connect (nginx adds its upstream sockets
 * first) cannot be told apart yet from one that will stay on kernel TCP: it
 * is a pending member, registered with the kernel exactly as the program
 * asked, and becomes one of ours at the first look that finds it offered or
 * accelerated (or leaves our table once it settled on TCP).
 *
 * An epoll fd inside another (or watched by poll/select) is a member whose
 * readiness is "the inner set has something"; before the outer one sleeps,
 * the inner's hot members turn cold so that their doorbells make the inner
 * fd readable in the kernel.
 *
 * The table of members (slots, fd index, hot list, doorbell requests) and
 * the journal that keeps it in step across fork are epoll_set.c's;
 * epoll_ctl is epoll_ctl.c's; what concerns every set of the process at
 * once (a socket's changes, fork, exec) is epoll_sets.c's.  This file has
 * the object, looking at members, and waiting.
 */
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/real.h"
#include "base/self.h"
#include "base/settings.h"
#include "base/signals.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/fallback.h"
#include "core/conn/negotiate.h"
#include "core/conn/stream.h"
#include "core/fd/fdtable.h"
#include "core/fd/passthrough.h"
#include "core/kinds/epoll.h"
#include "core/kinds/epoll_set.h"
#include "core/kinds/epoll_shared.h"
#include "core/kinds/readiness.h"
#include "core/wait/kernel_looks.h"
#include "core/wait/turns.h"
#include "core/wait/wait.h"
#include "core/wait/xwake.h"

#define IDLE_LOOKS 4             /* fruitless looks before a hot member turns cold, */
#define IDLE_NS 1000000u         /* ...and as long since it last had something (1 ms) */
/* Zero-timeout waits turn no member cold while the set has at most this many
 * hot ones: cold is how a wait that sleeps is woken, and a loop of waits that
 * never sleep would only pay the kernel for it (a cold member is seen through
 * the kernel alone); beyond it, looking at every idle member on every call
 * would cost more than the kernel's question. */
#define ZERO_WAIT_HOT 64

/* ---- the object ---- */

static void epoll_destroy(struct shunt_sock *s)
{
    struct epoll_obj *ep = (struct epoll_obj *)s;
    epoll_sets_unlink(ep);
    epoll_set_free(ep);
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
    ep->base.kind = SOCK_EPOLL;
    ep->base.ops = &epoll_ops;
    pthread_mutex_init(&ep->lock, NULL);
    ep->closes_seen = atomic_load(&fdt_closes);
    ep->leaves_seen = atomic_load(&fallback_leaves);
    epoll_sets_link(ep);
    return &ep->base;
}

struct epoll_obj *epoll_of(int epfd, bool create)
{
    struct fdref f = fdt_get(epfd);
    if (f.sock && f.sock->kind == SOCK_EPOLL)
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

/* Only a settled channel can be left to its doorbells: while negotiating,
 * or while a client's TCP prefix is queued, the kernel sees the data. */
static bool can_go_cold(struct ep_entry *e)
{
    struct fdref f = { .fd = e->io_fd, .sock = e->s, .ops = e->s->ops };
    return e->kind == M_SOCKET && atomic_load(&tcp_of(e->s)->path) != PATH_FABRIC && readiness_of(&f, 0) >= 0;
}

/* A member on the fabric: never cold (its doorbells are the engine's and
 * the process's, not a channel's); before a sleep its stream says it
 * sleeps, and the process's wake fd is in the kernel's set (once, under
 * TAG_FABRIC, edge-triggered), so that a doorbell ends the sleep.
 * Whether it is ready (or must be looked at again at once). */
static bool fabric_before_sleep(struct epoll_obj *ep, struct ep_entry *e)
{
    struct tcp_sock *t = tcp_of(e->s);
    int efd = -1;
    short sock_events = 0;
    short want = (short)(e->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI));
    if (fabric_conn_before_sleep(t, e->io_fd, want, &efd, &sock_events))
        return true;
    if (efd == FABRIC_SOCKET_ONLY)
        return false;   /* its socket, in the kernel's set, wakes the sleep */
    if (efd < 0)
        return true;   /* the engine had events pending: look again */
    if (ep->fabric_wake != efd + 1) {
        struct epoll_event k = { .events = EPOLLIN | EPOLLET, .data.u64 = TAG_FABRIC << 32 };
        int r = kernel_ctl(ep->kfd, EPOLL_CTL_ADD, efd, &k);
        if (r < 0 && r != -EEXIST)
            return true;   /* no way to be woken: do not sleep on it */
        ep->fabric_wake = efd + 1;
        atomic_store(&ep->tagged, true);
    }
    return false;
}

/* ---- looking at members ---- */

/* An entry whose socket fell back to TCP goes back to the kernel as the
 * program registered it. */
static void hand_back(int epfd, struct epoll_obj *ep, struct ep_entry *e)
{
    struct epoll_event k = { .events = e->events, .data = e->data };
    if (!e->off)
        kernel_ctl(epfd, EPOLL_CTL_MOD, e->fd, &k);
    epoll_set_release_slot(ep, e, true);
    ep->kernel_members++;
}

static void find_fd(int fd, void *ctx)
{
    struct ep_entry *e = ctx;
    if (e->io_fd < 0 && epoll_set_fd_names(fd, e->s))
        e->io_fd = fd;
}

/* After fds were closed in this process: members whose socket has no fd
 * left leave the set, as the kernel's rule has it (the last duplicate
 * closed); a member whose own fd was closed but has a duplicate is used
 * through the duplicate.  Runs only when something was closed. */
static void sweep_closed(struct epoll_obj *ep)
{
    unsigned closes = atomic_load(&fdt_closes);
    if (closes == ep->closes_seen)
        return;
    ep->closes_seen = closes;
    for (uint32_t i = 0; i < ep->nv; i++) {
        struct ep_entry *e = &ep->v[i];
        if (!e->s)
            continue;
        if (atomic_load(&e->s->fds) <= 0) {
            epoll_set_release_slot(ep, e, false);
            continue;
        }
        if (!epoll_set_fd_names(e->io_fd, e->s)) {
            epoll_set_disarm(ep, e, false);
            e->io_fd = -1;
            fdt_for_each_object(0, ~0U, find_fd, e);
            if (e->io_fd < 0)
                epoll_set_release_slot(ep, e, false);
            else
                epoll_set_hot_add(ep, e);
        }
    }
}

/* Members whose sockets went to kernel TCP since the last look go back to
 * the kernel before it is asked, so that the call that asks reports them
 * (a zero-timeout wait just after a fabric end's shutdown made it leave
 * found nothing: epoll_rdhup).  Runs only when a socket left. */
static void hand_back_fallen(int epfd, struct epoll_obj *ep)
{
    unsigned leaves = atomic_load(&fallback_leaves);
    if (leaves == ep->leaves_seen)
        return;
    ep->leaves_seen = leaves;
    bool any = false;
    for (uint32_t i = 0; i < ep->nv; i++) {
        struct ep_entry *e = &ep->v[i];
        if (!e->s || e->kind != M_SOCKET || e->pending || e->hot_pos == EPOLL_SET_NO_SLOT)
            continue;
        struct tcp_sock *t = epoll_set_sock_of(e);
        if (t && atomic_load(&t->path) != PATH_SHM && negotiate_observe(t, e->io_fd) == PATH_TCP) {
            hand_back(epfd, ep, e);
            any = true;
        }
    }
    if (any)
        ep->zero_looks = (struct kernel_looks){ 0 };   /* the kernel has them: this call asks it */
}

static bool has_ready(struct epoll_obj *ep, int epfd);

/* The events of a socket member now, or of an inner epoll set. */
static uint32_t level_events(struct ep_entry *e)
{
    uint32_t want = e->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLRDNORM | EPOLLWRNORM);
    if (e->kind == M_EPOLL) {
        struct epoll_obj *inner = (struct epoll_obj *)e->s;
        crit_lock(&inner->lock);
        bool r = has_ready(inner, e->io_fd);
        crit_unlock(&inner->lock);
        return r ? (want & (EPOLLIN | EPOLLRDNORM)) : 0;
    }
    struct fdref f = { .fd = e->io_fd, .sock = e->s, .ops = e->s->ops };
    int rev = readiness_of(&f, (short)want);
    if (rev < 0) {
        /* still negotiating: the kernel knows */
        struct pollfd p = { .fd = e->io_fd, .events = (short)want };
        if (shunt_real.poll(&p, 1, 0) <= 0)
            return 0;
        rev = readiness_settled(&f, (short)want, p.revents);
    }
    return (uint32_t)rev & (want | EPOLLERR | EPOLLHUP);
}

struct edge_state {
    uint64_t rx, tx;
    bool end;
};

static struct edge_state edge_now(struct ep_entry *e)
{
    struct tcp_sock *t = epoll_set_sock_of(e);
    struct edge_state s = { 0, 0, false };
    if (t && atomic_load(&t->path) == PATH_FABRIC) {
        fabric_conn_edge(t, &s.rx, &s.tx, &s.end);
        return s;
    }
    if (t && t->ch.hdr) {
        s.rx = atomic_load(&t->ch.rx.hdr->head);
        s.tx = atomic_load(&t->ch.tx.hdr->tail);
        s.end = atomic_load(&t->ch.rx.hdr->fin) || atomic_load(&t->peer_gone) ||
                (atomic_load(&t->ch.peer->state) & (SIDE_CLOSED | SIDE_RESET));
    }
    return s;
}

/* Edge-triggered: an event for each change: data arrived, space was made,
 * the peer finished, or a condition newly became true. */
static uint32_t fresh_events(struct ep_entry *e, uint32_t got, struct edge_state now)
{
    uint32_t fresh = got & ~e->last;
    if (now.rx != e->last_rx || now.end != e->last_end)
        fresh |= got & (EPOLLIN | EPOLLRDNORM | EPOLLRDHUP);
    if (now.tx != e->last_tx)
        fresh |= got & (EPOLLOUT | EPOLLWRNORM);
    return fresh;
}

/* What a look at e reports (and, for EPOLLET, remembers as seen). */
static uint32_t entry_events(struct ep_entry *e)
{
    uint32_t got = level_events(e);
    if (!(e->events & EPOLLET))
        return got;
    struct edge_state now = edge_now(e);
    uint32_t fresh = fresh_events(e, got, now);
    e->last = got;
    e->last_rx = now.rx;
    e->last_tx = now.tx;
    e->last_end = now.end;
    return fresh;
}

static int filter_kernel(struct epoll_obj *ep, struct epoll_event *evs, int n, bool *woke);
static int kernel_wait(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask);

static bool hot_ready(struct epoll_obj *ep)
{
    for (uint32_t i = 0; i < ep->nhot; i++) {
        struct ep_entry *e = &ep->v[ep->hot[i]];
        uint32_t got = level_events(e);
        if (got && (!(e->events & EPOLLET) || fresh_events(e, got, edge_now(e))))
            return true;
    }
    return false;
}

/* Would a wait report something now?  Looks without consuming (poll on an
 * epoll fd, or an outer set).  The kernel's answer for the set counts our
 * tagged registrations too: when every registration is ours, their events
 * are taken in (lossless: nothing of the program's is among them), so that a
 * doorbell whose data the program has read meanwhile does not keep the set
 * readable.  Caller holds ep->lock. */
static bool has_ready(struct epoll_obj *ep, int epfd)
{
    static const struct timespec zero = { 0, 0 };
    if (hot_ready(ep))
        return true;
    struct pollfd p = { .fd = epfd, .events = POLLIN };
    if (shunt_real.poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
        return false;
    if (ep->kernel_members)
        return true;   /* the program's own events are in there: the kernel's word stands */
    struct epoll_event tmp[64];
    int k;
    do {
        bool woke = false;
        k = kernel_wait(epfd, tmp, 64, &zero, NULL);
        if (k > 0 && filter_kernel(ep, tmp, k, &woke) > 0)
            return true;   /* the program's, registered where we could not see it */
    } while (k == 64);
    return hot_ready(ep);
}

/* Arms every hot member that can go cold, and (inner sets) makes their
 * hot members cold too; a member found ready meanwhile stays hot.
 * Returns whether something is ready. */
static bool quiesce(struct epoll_obj *ep)
{
    bool ready = false;
    /* epoll_set_make_cold and epoll_set_make_hot reorder hot[]: walk a copy of it */
    uint32_t count = ep->nhot, stack[64];
    if (count == 0)
        return false;
    uint32_t *order = count <= 64 ? stack : malloc(count * sizeof *order);
    if (!order)
        return true;   /* no memory to arm them: do not sleep on them */
    memcpy(order, ep->hot, count * sizeof *order);
    for (uint32_t k = 0; k < count; k++) {
        struct ep_entry *e = &ep->v[order[k]];
        if (e->kind == M_EPOLL) {
            struct epoll_obj *inner = (struct epoll_obj *)e->s;
            crit_lock(&inner->lock);
            inner->kfd = e->io_fd;   /* its cold members' wake FIFOs go into it */
            ready |= quiesce(inner);
            crit_unlock(&inner->lock);
            continue;
        }
        if (e->kind == M_SOCKET && atomic_load(&tcp_of(e->s)->path) == PATH_FABRIC) {
            ready |= fabric_before_sleep(ep, e);
            continue;
        }
        if (!can_go_cold(e))
            continue;
        epoll_set_make_cold(ep, e);
        uint32_t got = level_events(e);
        if (got && (!(e->events & EPOLLET) || fresh_events(e, got, edge_now(e)))) {
            epoll_set_make_hot(ep, e);
            ready = true;
        }
    }
    if (order != stack)
        free(order);
    return ready;
}

/* A pending member: still waiting for its connect (false: the kernel
 * answers for it), settled on kernel TCP (it leaves our table; false), or
 * negotiated through shunt: registered under our tag from now on, and what
 * is ready now counts as new (true). */
static bool pending_settled(int epfd, struct epoll_obj *ep, struct ep_entry *e)
{
    struct tcp_sock *t = epoll_set_sock_of(e);
    int path = negotiate_observe(t, e->io_fd);
    if (path == PATH_TCP) {
        if (t->negotiated)
            epoll_set_release_slot(ep, e, true);   /* the kernel has it as the program asked */
        return false;
    }
    struct epoll_event k = tagged(e->fd, e->events, M_SOCKET);
    atomic_store(&ep->tagged, true);
    if (kernel_ctl(epfd, EPOLL_CTL_MOD, e->fd, &k) != 0)
        return false;
    e->pending = false;
    ep->pending--;
    if (ep->kernel_members)
        ep->kernel_members--;
    e->last = 0;
    e->last_rx = e->last_tx = 0;
    e->last_end = false;
    return true;
}

/* Looks at the members in order[] (slots; those no longer hot are passed
 * over); fills evs; members that keep showing nothing turn cold. */
static int collect_from(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max, const uint32_t *order,
                        uint32_t count, bool count_idle)
{
    int n = 0;
    uint64_t now = clock_now_ns();
    for (uint32_t k = 0; k < count && n < max; k++) {
        struct ep_entry *e = &ep->v[order[k]];
        if (!e->s || e->hot_pos == EPOLL_SET_NO_SLOT)
            continue;
        struct tcp_sock *t = epoll_set_sock_of(e);
        if (e->pending && !pending_settled(epfd, ep, e))
            continue;
        if (t && atomic_load(&t->path) != PATH_SHM && negotiate_observe(t, e->io_fd) == PATH_TCP) {
            hand_back(epfd, ep, e);
            continue;
        }
        uint32_t got = entry_events(e);
        if (got) {
            evs[n].events = got;
            evs[n].data = e->data;
            n++;
            e->idle = 0;
            e->active_ns = now;
            ep->rotate = e->hot_pos + 1;
            if (e->events & EPOLLONESHOT) {
                epoll_set_hot_remove(ep, e);
                e->off = true;
            }
        } else if (count_idle && ++e->idle >= IDLE_LOOKS && now - e->active_ns > IDLE_NS && can_go_cold(e)) {
            epoll_set_make_cold(ep, e);
            if ((got = entry_events(e))) {   /* it moved while we armed */
                epoll_set_make_hot(ep, e);
                evs[n].events = got;
                evs[n].data = e->data;
                n++;
            }
        }
    }
    return n;
}

/* Looks at the hot members, starting where the last look left off. */
static int collect_hot(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max, bool count_idle)
{
    uint32_t count = ep->nhot;
    if (count == 0 || max <= 0)
        return 0;
    uint32_t start = ep->rotate % count;
    /* Members leave hot[] as we go (swapped with the last): walk a copy of
     * the order by slot, which stays valid. */
    uint32_t stack[64];
    uint32_t *order = count <= 64 ? stack : malloc(count * sizeof *order);
    if (!order)
        return 0;
    for (uint32_t k = 0; k < count; k++)
        order[k] = ep->hot[(start + k) % count];
    int n = collect_from(epfd, ep, evs, max, order, count, count_idle);
    if (order != stack)
        free(order);
    return n;
}

/* Looks at the members the kernel just named, and only at them: the
 * others were looked at already in this call (never report one twice). */
static int collect_woken(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max)
{
    uint32_t count = ep->nwoken;
    ep->nwoken = 0;
    return max > 0 ? collect_from(epfd, ep, evs, max, ep->woken, count, false) : 0;
}

/* An event the kernel gave for a pending member (it carries the program's
 * data): true if that socket has meanwhile become ours, so the event stands
 * for nothing (the claim's doorbell, say) and the rings answer instead. */
static bool pending_event(struct epoll_obj *ep, const struct epoll_event *ev, bool *woke)
{
    for (uint32_t i = 0; i < ep->nhot; i++) {
        struct ep_entry *e = &ep->v[ep->hot[i]];
        if (!e->pending || e->data.u64 != ev->data.u64)
            continue;
        struct tcp_sock *t = epoll_set_sock_of(e);
        if (!t->negotiated || negotiate_observe(t, e->io_fd) == PATH_TCP)
            return false;
        if (ep->nwoken < ep->capwoken)
            ep->woken[ep->nwoken++] = (uint32_t)(e - ep->v);
        *woke = true;
        return true;
    }
    return false;
}

/*
 * A socket added or changed (EPOLL_CTL_MOD) while a wait may sleep in the
 * kernel on the set: a thread of ours, a process sharing the set, or a
 * wait on a set or poll watching it.  The kernel's ADD and MOD wake such a
 * wait if the fd is ready, and its later readiness would; a hot member asks
 * for no doorbell.  So the member turns cold at once (a doorbell asked
 * for), then is looked at: if ready already, it is poked.  A member still
 * negotiating needs nothing: the kernel sees its traffic.  Caller holds
 * ep->lock.
 */
void epoll_added_while_waiting(struct epoll_obj *ep, struct ep_entry *e)
{
    if (!e || e->kind != M_SOCKET || e->pending || e->off || !can_go_cold(e))
        return;
    if (!atomic_load(&ep->waiting) && !atomic_load(&ep->watched) && !ep->journal)
        return;
    epoll_set_make_cold(ep, e);
    if (level_events(e))
        epoll_sets_poke(ep, e);
}

/* Removes our tagged events from what the kernel returned: each names a
 * member that needs a look (made hot); returns how many of the program's
 * events remain, moved to the front. */
static int filter_kernel(struct epoll_obj *ep, struct epoll_event *evs, int n, bool *woke)
{
    int kept = 0;
    ep->nwoken = 0;
    for (int i = 0; i < n; i++) {
        uint64_t tag = evs[i].data.u64 >> 32;
        if (tag == TAG_FABRIC) {
            *woke = true;   /* a fabric doorbell: the hot members are looked at */
            continue;
        }
        if (tag != TAG_HIGH && tag != TAG_XWAKE) {
            if (!ep->pending || !pending_event(ep, &evs[i], woke))
                evs[kept++] = evs[i];
            /* the program's, registered where we could not see it (the raw
             * system call, io_uring, a process sharing the set): asked from
             * now on, with ours */
            if (!ep->kernel_members)
                ep->kernel_members = 1;
            continue;
        }
        struct ep_entry *e = epoll_set_slot_for_fd(ep, (int)(uint32_t)evs[i].data.u64);
        if (!e)
            continue;
        struct tcp_sock *t = epoll_set_sock_of(e);
        if (e->poked)
            epoll_sets_unpoke(ep, e);
        /* the wake FIFO's EPOLLHUP says nothing about the peer */
        if (t && t->ch.hdr && tag == TAG_HIGH && (evs[i].events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)))
            doorbell_check_end(t, e->io_fd);
        if (e->armed || e->hot_pos == EPOLL_SET_NO_SLOT) {
            epoll_set_make_hot(ep, e);
            if (e->hot_pos != EPOLL_SET_NO_SLOT && ep->nwoken < ep->capwoken)
                ep->woken[ep->nwoken++] = (uint32_t)(e - ep->v);
            *woke = true;
        }
    }
    return kept;
}

/* epoll_pwait2 came with Linux 5.11 (and valgrind does not know it yet).
 * Asked once, with arguments no kernel accepts: only a missing call says
 * ENOSYS. */
bool epoll_kernel_has_pwait2(void)
{
    static atomic_int known;   /* 0: not asked yet, 1: there, -1: missing */
    int k = atomic_load_explicit(&known, memory_order_relaxed);
    if (k == 0) {
        int saved = errno;
        k = shunt_real.epoll_pwait2(-1, NULL, 0, NULL, NULL) < 0 && errno == ENOSYS ? -1 : 1;
        errno = saved;
        atomic_store_explicit(&known, k, memory_order_relaxed);
    }
    return k > 0;
}

/* Without epoll_pwait2 a timeout is given in whole milliseconds, rounded
 * up, so that a wait never ends before its deadline. */
static int kernel_wait(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask)
{
    int r;
    if (epoll_kernel_has_pwait2()) {
        r = shunt_real.epoll_pwait2(epfd, evs, max, tmo, mask);
    } else {
        long long ms = tmo ? (long long)tmo->tv_sec * 1000 + (tmo->tv_nsec + 999999) / 1000000 : -1;
        r = shunt_real.epoll_pwait(epfd, evs, max, ms > INT_MAX ? INT_MAX : (int)ms, mask);
    }
    return r < 0 ? -errno : r;
}

static bool needs_kernel(const struct epoll_obj *ep)
{
    return ep->kernel_members || ep->cold || ep->nested;
}

/* Looks between two questions to the kernel by a set that has, as far as
 * we know, nothing else there: the program may have registered fds where
 * we could not see it, whose events must still arrive. */
#define KERNEL_EVERY 64

/* One look without sleeping: the hot members and, when the set has a
 * kernel part, the kernel's answer too, ours and the kernel's taking turns
 * at being first.  A call that finds none of ours ready and may wait skips
 * the kernel here: the wait that follows asks it anyway; a zero-timeout
 * call asks it only as often as the set's bound allows (kernel_looks.c).
 * Returns a count or -errno. */
static int gather(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max, bool zero_wait)
{
    static const struct timespec zero = { 0, 0 };
    epoll_set_journal_apply(ep);
    sweep_closed(ep);
    hand_back_fallen(epfd, ep);
    bool kernel_first = ep->kernel_first;
    ep->kernel_first = !kernel_first;
    bool kernel = needs_kernel(ep);
    /* Within the set's bound the program's own kernel members wait
     * (kernel_looks.c); members of ours that are cold or nested sets are
     * seen only through the kernel, and are never left for later. */
    if (kernel && zero_wait && !ep->cold && !ep->nested && kernel_look_skip(&ep->zero_looks))
        kernel = false;
    else if (!kernel)
        kernel = ++ep->looks % KERNEL_EVERY == 0;
    struct look_stamp asked = kernel ? kernel_look_stamp() : (struct look_stamp){ 0, 0 };
    int n = 0;
    bool woke = false;
    if (kernel_first && kernel && (ep->nhot > 0 || zero_wait)) {
        int k = kernel_wait(epfd, evs, max, &zero, NULL);
        if (k < 0)
            return k;
        kernel_look_asked(&ep->zero_looks, asked, k > 0);
        n = filter_kernel(ep, evs, k, &woke);
        kernel_first = true;
    } else {
        kernel_first = false;
    }
    n += collect_hot(epfd, ep, evs + n, max - n, !zero_wait || ep->nhot > ZERO_WAIT_HOT);
    if (!kernel_first && n < max && kernel && (n > 0 || zero_wait)) {
        int k = kernel_wait(epfd, evs + n, max - n, &zero, NULL);
        kernel_look_asked(&ep->zero_looks, asked, k != 0);
        if (k > 0)
            n += filter_kernel(ep, evs + n, k, &woke);
        if (woke && n < max)
            n += collect_woken(epfd, ep, evs + n, max - n);
    }
    return n;
}

/*
 * Spinning pays only while a peer is running and about to produce: not on
 * one CPU, not when every hot member's peer sleeps waiting for us, and not
 * after it kept failing (then only now and then).  The kernel's part is
 * looked at every few microseconds meanwhile.
 */
#define SPIN_GIVE_UP 8
#define SPIN_RETRY 32
#define KERNEL_LOOK_NS 4000u

/* here: a busy peer last ran on our CPU, so the spin yields at every look
 * (see core/wait/spin.c) */
static bool worth_spinning(struct epoll_obj *ep, bool *here)
{
    if (!wait_may_spin() || ep->nhot == 0)
        return false;
    if (ep->spin_fails >= SPIN_GIVE_UP) {
        if (++ep->spin_fails < SPIN_GIVE_UP + SPIN_RETRY)
            return false;
        ep->spin_fails = SPIN_GIVE_UP - 1;
    }
    bool busy = false;
    *here = false;
    for (uint32_t i = 0; i < ep->nhot; i++) {
        struct tcp_sock *t = epoll_set_sock_of(&ep->v[ep->hot[i]]);
        if (t && t->ch.hdr && atomic_load(&t->path) == PATH_SHM && wait_peer_busy(t)) {
            busy = true;
            if (wait_peer_here(t)) {
                *here = true;
                break;
            }
        }
    }
    return busy;
}

static int spin_phase(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max, const struct deadline *dl)
{
    bool here;
    if (!worth_spinning(ep, &here))
        return 0;
    uint64_t start = clock_now_ns(), end = start + (uint64_t)shunt_settings.spin_us * 1000u;
    uint64_t next_kernel = start + KERNEL_LOOK_NS;
    static const struct timespec zero = { 0, 0 };
    for (unsigned i = 1;; i++) {
        int n = collect_hot(epfd, ep, evs, max, false);
        if (n > 0) {
            ep->spin_fails = 0;
            return n;
        }
        if (ep->nhot == 0)
            break;
        wait_cpu_relax();
        if ((i & 15) == 0 || here) {
            uint64_t now = clock_now_ns();
            if (now > end || deadline_passed(dl))
                break;
            if (now > next_kernel && needs_kernel(ep)) {
                bool woke = false;
                int k = kernel_wait(epfd, evs, max, &zero, NULL);
                if (k > 0 && (n = filter_kernel(ep, evs, k, &woke)) > 0)
                    return n;
                next_kernel = now + KERNEL_LOOK_NS;
            }
            turn_spin_yield(now);
        }
    }
    ep->spin_fails++;
    return 0;
}

/* Whether the kernel's answer may hold registrations of ours: only in a set
 * that had one, or is shared with another process (which may add one). */
static bool kernel_tags(struct epoll_obj *ep, const struct epoll_event *evs, int n)
{
    if (!atomic_load(&ep->tagged) && !ep->journal)
        return false;
    for (int i = 0; i < n; i++) {
        uint64_t tag = evs[i].data.u64 >> 32;
        if (tag == TAG_HIGH || tag == TAG_XWAKE || tag == TAG_FABRIC)
            return true;
    }
    return false;
}

/* What the r events of a kernel wait give the program: our tags taken out,
 * the members they name looked at with the other hot ones. */
static int after_sleep(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int r, int max)
{
    crit_lock(&ep->lock);
    bool woke = false;
    /* fds closed while it slept: their members are gone before the kernel's
     * tags and the hot members (a fabric member stays hot through a sleep)
     * are looked at */
    sweep_closed(ep);
    int k = filter_kernel(ep, evs, r, &woke);
    if (k < max)
        k += collect_hot(epfd, ep, evs + k, max - k, true);
    crit_unlock(&ep->lock);
    return k;
}

int epoll_wait_ready(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask)
{
    if (max <= 0)
        return kernel_wait(epfd, evs, max, tmo, mask);
    struct epoll_obj *ep = epoll_of(epfd, false);
    if (!ep)
        return kernel_wait(epfd, evs, max, tmo, mask);
    if (!timeout_valid(tmo)) {
        sock_put(&ep->base);
        return -EINVAL;
    }
    struct deadline dl;
    deadline_start(&dl, tmo);
    bool zero_wait = tmo && tmo->tv_sec == 0 && tmo->tv_nsec == 0;
    unsigned handlers_ran = shunt_sig_ran;
    int result;
    /* Counted before the members are looked at: a thread adding one
     * either is seen here or sees this wait (added_while_waiting). */
    if (!zero_wait)
        atomic_fetch_add(&ep->waiting, 1);
    if (!ep->members) {
        /* Nothing of ours: the kernel answers, unless a registration of
         * ours turns up in its answer after all: another thread added the
         * set's first member while this one slept, a process sharing the
         * set added one, or a member that left is still registered (its
         * socket fell back while one-shot had fired, its file lives on
         * elsewhere).  Then the tags are taken out, the members they name
         * looked at, and the wait goes on if nothing is left. */
        result = kernel_wait(epfd, evs, max, tmo, mask);
        if (result <= 0 || !kernel_tags(ep, evs, result))
            goto out;
        result = after_sleep(epfd, ep, evs, result, max);
        if (result > 0 || zero_wait || deadline_passed(&dl))
            goto out;
    }
    if (!zero_wait)
        turn_take();   /* a zero timeout never takes turns (as readiness.c) */
    for (;;) {
        crit_lock(&ep->lock);
        ep->kfd = epfd;
        int n = gather(epfd, ep, evs, max, zero_wait);
        if (n == 0 && !zero_wait)
            n = spin_phase(epfd, ep, evs, max, &dl);
        if (n != 0 || zero_wait || deadline_passed(&dl)) {
            crit_unlock(&ep->lock);
            result = n;
            break;
        }
        /* About to sleep: every hot member asks for a doorbell, then one
         * more look (a member that moved meanwhile stays hot). */
        bool ready = quiesce(ep);
        crit_unlock(&ep->lock);
        if (ready)
            continue;
        if (shunt_sig_ran != handlers_ran) {
            /* a handler ran while we looked (deferred to the end of a
             * critical section, or during the spin): the kernel's wait
             * would have ended with EINTR, which epoll never restarts */
            result = -EINTR;
            break;
        }
        struct timespec left;
        const struct timespec *sleep_for = deadline_left(&dl, &left);
        static const struct timespec fabric_cap = { 0, 100000000 };   /* every fabric wait is bounded */
        if (ep->fabric_wake && (!sleep_for || sleep_for->tv_sec > 0 || sleep_for->tv_nsec > fabric_cap.tv_nsec))
            sleep_for = &fabric_cap;
        int r = kernel_wait(epfd, evs, max, sleep_for, mask);
        turn_gave_way(clock_now_ns());
        if (r < 0) {
            result = r;
            break;
        }
        int k = after_sleep(epfd, ep, evs, r, max);
        if (k > 0) {
            result = k;
            break;
        }
        /* Woken for nothing: a doorbell that came after its data had been
         * read, or one meant for another holder.  Our registrations are
         * edge-triggered, so this cannot repeat without a new doorbell:
         * just wait again. */
    }
out:
    if (!zero_wait)
        atomic_fetch_sub(&ep->waiting, 1);
    sock_put(&ep->base);
    return result;
}

/* ---- poll, select and fork/exec ---- */

int epoll_poll_events(struct shunt_sock *s, int fd, short events)
{
    struct epoll_obj *ep = (struct epoll_obj *)s;
    crit_lock(&ep->lock);
    ep->kfd = fd;
    bool r = ep->members && has_ready(ep, fd);
    crit_unlock(&ep->lock);
    return r ? (events & (POLLIN | POLLRDNORM)) : 0;
}

bool epoll_has_members(struct shunt_sock *s)
{
    struct epoll_obj *ep = (struct epoll_obj *)s;
    atomic_store(&ep->watched, true);   /* asked by poll or select: may be slept on */
    crit_lock(&ep->lock);
    bool r = ep->members > 0;
    crit_unlock(&ep->lock);
    return r;
}

bool epoll_before_sleep(struct shunt_sock *s)
{
    struct epoll_obj *ep = (struct epoll_obj *)s;
    crit_lock(&ep->lock);
    bool r = quiesce(ep);
    crit_unlock(&ep->lock);
    return r;
}
