/*
 * epoll_shared.h: what the files of the epoll kind share among themselves,
 * and nobody else includes: epoll.c (the object, poll and select),
 * epoll_look.c (looking at members), epoll_kernel.c (asking the kernel's
 * set), epoll_wait.c (waiting), epoll_ctl.c (adding, changing and removing
 * members) and epoll_sets.c (every set of the process: a socket's changes,
 * fork, exec).  The table of one set's members is epoll_set.h's.
 */
#ifndef SHUNT_CORE_KINDS_EPOLL_SHARED_H
#define SHUNT_CORE_KINDS_EPOLL_SHARED_H

#include <errno.h>

#include "base/real.h"
#include "core/conn/fallback.h"
#include "core/fd/fdtable.h"
#include "core/kinds/epoll_set.h"

/* ---- epoll_ctl ---- */

static inline int kernel_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    return shunt_real.epoll_ctl(epfd, op, fd, ev) < 0 ? -errno : 0;
}

/* The kernel's registration of a member of ours: edge-triggered, so that a
 * doorbell another holder has not drained yet cannot wake us again and
 * again.  The program's EPOLLEXCLUSIVE goes along (the kernel then checks
 * its rules); an inner epoll set is watched level-triggered. */
static inline struct epoll_event tagged(int fd, uint32_t user_events, enum member_kind kind)
{
    struct epoll_event k;
    if (kind == M_EPOLL)
        k.events = EPOLLIN;
    else if (user_events & EPOLLEXCLUSIVE)
        k.events = EPOLLIN | EPOLLET | EPOLLEXCLUSIVE;
    else
        k.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    k.data.u64 = TAG_HIGH << 32 | (uint32_t)fd;
    return k;
}

/* epoll.c: the epoll object behind epfd, made on first need (an inherited
 * epoll fd arrives without one), with a reference, or NULL. */
struct epoll_obj *epoll_of(int epfd, bool create);

/* epoll_look.c: looking at members (caller holds ep->lock).  Members whose
 * fds were all closed, or whose sockets fell back to kernel TCP, leave our
 * table (each only when something was closed, or a socket left); whether a
 * wait would report something now, without taking it; every hot member
 * cold before a sleep (whether something is ready); the hot members looked
 * at, or only those the kernel just named (ep_filter_kernel): counts of evs. */
void ep_sweep_closed_now(struct epoll_obj *ep, unsigned closes);
void ep_hand_back_fallen_now(int epfd, struct epoll_obj *ep, unsigned leaves);
bool ep_has_ready(struct epoll_obj *ep, int epfd);
bool ep_quiesce(struct epoll_obj *ep);
int ep_collect_hot(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max, bool count_idle);
int ep_collect_woken(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max);

/* The checks on every wait, inline as they were before the split: the
 * sweeps above run only when an fd closed or a socket left. */
static inline void ep_sweep_closed(struct epoll_obj *ep)
{
    unsigned closes = atomic_load(&fdt_closes);
    if (closes != ep->closes_seen)
        ep_sweep_closed_now(ep, closes);
}

static inline void ep_hand_back_fallen(int epfd, struct epoll_obj *ep)
{
    unsigned leaves = atomic_load(&fallback_leaves);
    if (leaves != ep->leaves_seen)
        ep_hand_back_fallen_now(epfd, ep, leaves);
}

/* epoll_kernel.c: the kernel's set asked (a count or -errno), and our tags
 * taken out of its answer (how many of the program's events remain). */
int ep_kernel_wait(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask);
int ep_filter_kernel(struct epoll_obj *ep, struct epoll_event *evs, int n, bool *woke);

/* epoll_sets.c: the list of this process's sets (made and destroyed). */
void epoll_sets_link(struct epoll_obj *ep);
void epoll_sets_unlink(struct epoll_obj *ep);

/* epoll_look.c: a member added or changed while a wait may be asleep on the
 * set turns cold at once, and is poked if ready (caller holds ep->lock). */
void epoll_added_while_waiting(struct epoll_obj *ep, struct ep_entry *e);

/* epoll_sets.c: makes a cold member's kernel registration ready for a
 * moment, so that a wait asleep on the set looks again (ep->lock held). */
void epoll_sets_poke(struct epoll_obj *ep, struct ep_entry *e);

/* epoll_sets.c: a member poked by a local shutdown gets its usual kernel
 * registration back once the tag was reported (ep_filter_kernel). */
void epoll_sets_unpoke(struct epoll_obj *ep, struct ep_entry *e);

#endif
