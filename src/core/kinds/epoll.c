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
 * cold instead (epoll_added_while_waiting), and a set without members of ours is
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
 * once (a socket's changes, fork, exec) is epoll_sets.c's.  Looking at
 * members (their events, hot and cold, pending ones settling) is
 * epoll_look.c's; asking the kernel's set, and taking our tags out of its
 * answer, epoll_kernel.c's; the wait itself epoll_wait.c's.  This file has
 * the object, and its answers to poll and select.
 */
#include <poll.h>
#include <stdlib.h>

#include "base/signals.h"
#include "core/conn/fallback.h"
#include "core/fd/fdtable.h"
#include "core/fd/passthrough.h"
#include "core/kinds/epoll.h"
#include "core/kinds/epoll_shared.h"

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

/* ---- poll and select ---- */

int epoll_poll_events(struct shunt_sock *s, int fd, short events)
{
    struct epoll_obj *ep = (struct epoll_obj *)s;
    crit_lock(&ep->lock);
    ep->kfd = fd;
    bool r = ep->members && ep_has_ready(ep, fd);
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
    bool r = ep_quiesce(ep);
    crit_unlock(&ep->lock);
    return r;
}
