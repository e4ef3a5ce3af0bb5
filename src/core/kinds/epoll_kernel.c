/*
 * epoll_kernel.c: the kernel's side of an epoll set: asking it
 * (epoll_pwait2 where the kernel has it, else epoll_pwait in whole
 * milliseconds), and its answer with our tags taken out, each naming a
 * member to look at (made hot), while the program's own events stay.
 */
#include <limits.h>

#include "base/real.h"
#include "core/conn/negotiate.h"
#include "core/kinds/epoll.h"
#include "core/kinds/epoll_shared.h"
#include "core/wait/wait.h"

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

/* Removes our tagged events from what the kernel returned: each names a
 * member that needs a look (made hot); returns how many of the program's
 * events remain, moved to the front. */
int ep_filter_kernel(struct epoll_obj *ep, struct epoll_event *evs, int n, bool *woke)
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
        /* the wake FIFO's EPOLLHUP says nothing about the peer.  The end
         * of an offer's companion: the claim may have landed with it, its
         * doorbell queued ahead of the end, and this event (edge-triggered)
         * is the only one that names the end.  Looked at while still
         * offered in our eyes, the doorbell could be neither taken nor
         * passed, and the end went unseen for good once the claim settled
         * (test_claim_race.py's epoll case).  So the offer is settled
         * first. */
        if (t && t->ch.hdr && tag == TAG_HIGH && (evs[i].events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP))) {
            if (atomic_load_explicit(&t->path, memory_order_acquire) == PATH_OFFERED)
                negotiate_observe(t, e->io_fd);
            doorbell_check_end(t, e->io_fd);
        }
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
int ep_kernel_wait(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask)
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
