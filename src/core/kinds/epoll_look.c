/*
 * epoll_look.c: looking at the members of an epoll set that are shunt's
 * (epoll.c has the design): their events now (level, edge, one-shot);
 * which turn cold and when, and which hot again; a pending member settling;
 * members whose fds were closed, or whose sockets fell back to kernel TCP,
 * leaving our table; and whether a set has something ready without taking
 * it (poll, select, an outer set).  Asking the kernel is epoll_kernel.c's,
 * the wait epoll_wait.c's.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/real.h"
#include "base/signals.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/fallback.h"
#include "core/conn/negotiate.h"
#include "core/fd/fdtable.h"
#include "core/kinds/epoll_shared.h"
#include "core/kinds/readiness.h"
#include "core/wait/kernel_looks.h"

#define IDLE_LOOKS 4             /* fruitless looks before a hot member turns cold, */
#define IDLE_NS 1000000u         /* ...and as long since it last had something (1 ms) */

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
 * through the duplicate.  Runs only when something was closed (the check is
 * ep_sweep_closed's, inline in epoll_shared.h, on every wait). */
void ep_sweep_closed_now(struct epoll_obj *ep, unsigned closes)
{
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
 * found nothing: epoll_rdhup).  Runs only when a socket left (the check is
 * ep_hand_back_fallen's, inline). */
void ep_hand_back_fallen_now(int epfd, struct epoll_obj *ep, unsigned leaves)
{
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

/* The events of a socket member now, or of an inner epoll set. */
static uint32_t level_events(struct ep_entry *e)
{
    uint32_t want = e->events & (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLRDNORM | EPOLLWRNORM);
    if (e->kind == M_EPOLL) {
        struct epoll_obj *inner = (struct epoll_obj *)e->s;
        crit_lock(&inner->lock);
        bool r = ep_has_ready(inner, e->io_fd);
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

/* What a look at e reports (and, for EPOLLET, remembers as seen).  An edge
 * reports everything ready, as the kernel's does (its answer for an edge is
 * the socket's whole poll mask), not only what changed: mio takes a socket
 * for closed for reading only when EPOLLRDHUP comes with EPOLLIN, and an
 * edge that added EPOLLRDHUP to an EPOLLIN reported before, reported alone,
 * left a tokio echo server waiting for ever for its peer's end
 * (epoll_edge_full_mask). */
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
    return fresh ? got : 0;
}

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
bool ep_has_ready(struct epoll_obj *ep, int epfd)
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
        k = ep_kernel_wait(epfd, tmp, 64, &zero, NULL);
        if (k > 0 && ep_filter_kernel(ep, tmp, k, &woke) > 0)
            return true;   /* the program's, registered where we could not see it */
    } while (k == 64);
    return hot_ready(ep);
}

/* Arms every hot member that can go cold, and (inner sets) makes their
 * hot members cold too; a member found ready meanwhile stays hot.
 * Returns whether something is ready. */
bool ep_quiesce(struct epoll_obj *ep)
{
    bool ready = false;
    ep->resend_nap = false;
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
            ready |= ep_quiesce(inner);
            ep->resend_nap |= inner->resend_nap;
            crit_unlock(&inner->lock);
            continue;
        }
        if (e->kind == M_SOCKET && atomic_load(&tcp_of(e->s)->path) == PATH_FABRIC) {
            ready |= fabric_before_sleep(ep, e);
            continue;
        }
        if (!can_go_cold(e))
            continue;
        /* a re-send of a connection moving back to TCP goes on only in
         * calls, and waits for room, which rings nothing: stays hot */
        struct tcp_sock *t = tcp_of(e->s);
        if (t->ch.hdr && atomic_load(&t->path) == PATH_SHM && channel_resend_pending(&t->ch)) {
            ep->resend_nap = true;
            continue;
        }
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
int ep_collect_hot(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max, bool count_idle)
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
int ep_collect_woken(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max)
{
    uint32_t count = ep->nwoken;
    ep->nwoken = 0;
    return max > 0 ? collect_from(epfd, ep, evs, max, ep->woken, count, false) : 0;
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
