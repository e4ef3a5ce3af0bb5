/*
 * epoll_sets.c: every epoll set of this process at once: the list of them,
 * the members that are one socket (a local shutdown pokes them, a socket
 * about to be shared watches its end's wake FIFO), fork, exec and exit, and
 * a seccomp sandbox (every set the kernel's alone again).
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/signals.h"
#include "core/conn/stream.h"
#include "core/kinds/epoll.h"
#include "core/fd/fdtable.h"
#include "core/kinds/epoll_shared.h"
#include "core/wait/xwake.h"

static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct epoll_obj *all;

void epoll_sets_link(struct epoll_obj *ep)
{
    pthread_mutex_lock(&all_lock);
    ep->next = all;
    if (all)
        all->prev = ep;
    all = ep;
    pthread_mutex_unlock(&all_lock);
}

void epoll_sets_unlink(struct epoll_obj *ep)
{
    pthread_mutex_lock(&all_lock);
    if (ep->prev)
        ep->prev->next = ep->next;
    else
        all = ep->next;
    if (ep->next)
        ep->next->prev = ep->prev;
    pthread_mutex_unlock(&all_lock);
}

/*
 * A local shutdown (another thread of this process) changed what a member
 * reports, and the kernel's shutdown would wake every wait on the socket.
 * A cold member waits for a doorbell that will not come (the peer did
 * nothing), so its kernel registration is made ready for a moment:
 * EPOLLOUT added to it (the companion is always writable) queues its tag
 * and wakes whoever sleeps on this set, on a set that holds this one, or in
 * poll on it.  The tag's report puts the registration back (ep_filter_kernel).
 * A hot member needs nothing: a wait looks at it anyway.
 */
static int reregister(struct epoll_obj *ep, struct ep_entry *e, uint32_t extra)
{
    struct epoll_event k = tagged(e->fd, e->events, M_SOCKET);
    k.events |= extra;
    if (!(e->events & EPOLLEXCLUSIVE))
        return kernel_ctl(ep->kfd, EPOLL_CTL_MOD, e->fd, &k);
    /* EPOLL_CTL_MOD is refused for EPOLLEXCLUSIVE: the kernel looks at a
     * member it adds, and queues it if it is ready */
    kernel_ctl(ep->kfd, EPOLL_CTL_DEL, e->fd, NULL);
    return kernel_ctl(ep->kfd, EPOLL_CTL_ADD, e->fd, &k);
}


void epoll_sets_poke(struct epoll_obj *ep, struct ep_entry *e)
{
    /* the set's fd and the member's key must still be what they were: the
     * program may have closed them, and the numbers name other files now */
    if (!e->armed || e->poked || e->pending || !epoll_set_fd_names(ep->kfd, &ep->base) || !epoll_set_fd_names(e->fd, e->s))
        return;
    if (reregister(ep, e, EPOLLOUT) == 0)
        e->poked = true;
}


void epoll_sets_unpoke(struct epoll_obj *ep, struct ep_entry *e)
{
    e->poked = false;
    if (epoll_set_fd_names(ep->kfd, &ep->base) && epoll_set_fd_names(e->fd, e->s))
        reregister(ep, e, 0);
}


/* Takes a reference to ep unless it is already being destroyed. */
static bool set_get(struct epoll_obj *ep)
{
    int r = atomic_load(&ep->base.refs);
    while (r > 0 && !atomic_compare_exchange_weak(&ep->base.refs, &r, r + 1))
        ;
    return r > 0;
}


/* The sets of this process, each with a reference (sets_put drops them):
 * ep->lock is never taken under all_lock (destroying a nested set takes
 * all_lock under its outer set's lock).  *sets is stack, or allocated. */
static size_t sets_get(struct epoll_obj ***sets, struct epoll_obj **stack, size_t cap)
{
    size_t n = 0;
    *sets = stack;
    pthread_mutex_lock(&all_lock);
    for (struct epoll_obj *ep = all; ep; ep = ep->next) {
        if (n == cap) {
            struct epoll_obj **more = malloc(2 * cap * sizeof *more);
            if (!more)
                break;
            memcpy(more, *sets, n * sizeof *more);
            if (*sets != stack)
                free(*sets);
            *sets = more;
            cap *= 2;
        }
        if (set_get(ep))
            (*sets)[n++] = ep;
    }
    pthread_mutex_unlock(&all_lock);
    return n;
}


static void sets_put(struct epoll_obj **sets, struct epoll_obj **stack, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sock_put(&sets[i]->base);
    if (sets != stack)
        free(sets);
}


/* Calls fn on every member of this process's sets that is t: by fd first,
 * then (a duplicate was registered) by looking at every member, only as
 * long as some are still unfound. */
static void each_entry_of(struct tcp_sock *t, int fd, void (*fn)(struct epoll_obj *, struct ep_entry *))
{
    unsigned entries = atomic_load(&t->epoll_entries);
    if (entries == 0)
        return;
    struct epoll_obj *stack[16], **sets;
    size_t n = sets_get(&sets, stack, 16);
    unsigned found = 0;
    for (int pass = 0; pass < 2 && found < entries; pass++) {
        for (size_t i = 0; i < n && found < entries; i++) {
            struct epoll_obj *ep = sets[i];
            crit_lock(&ep->lock);
            for (uint32_t j = 0; j < ep->nv; j++) {
                struct ep_entry *e = pass == 0 ? epoll_set_slot_for_fd(ep, fd) : &ep->v[j];
                if (e && e->s == &t->base && e->kind == M_SOCKET && (pass == 0 || e->fd != fd)) {
                    found++;
                    fn(ep, e);
                }
                if (pass == 0)
                    break;
            }
            crit_unlock(&ep->lock);
        }
    }
    sets_put(sets, stack, n);
}


void epoll_socket_changed(struct tcp_sock *t, int fd)
{
    each_entry_of(t, fd, epoll_sets_poke);
}


void epoll_init(void)
{
    stream_set_shutdown_hook(epoll_socket_changed);
}


void epoll_socket_shared(struct tcp_sock *t, int fd)
{
    each_entry_of(t, fd, epoll_set_watch_xwake);
}


/* Before fork: every set gets its journal, which parent and child will
 * share; and the child will hold every end, so every cold member watches
 * its end's wake FIFO from now on (before the child can shut one down),
 * and so does every member turning cold until the fork is done. */
void epoll_before_fork(void)
{
    atomic_fetch_add(&epoll_forking, 1);
    struct epoll_obj *stack[16], **sets;
    size_t n = sets_get(&sets, stack, 16);
    for (size_t i = 0; i < n; i++) {
        struct epoll_obj *ep = sets[i];
        crit_lock(&ep->lock);
        epoll_set_journal_create(ep);
        for (uint32_t j = 0; ep->cold > 0 && j < ep->nv; j++)
            if (ep->v[j].s && ep->v[j].armed)
                epoll_set_watch_xwake(ep, &ep->v[j]);
        crit_unlock(&ep->lock);
    }
    sets_put(sets, stack, n);
}


void epoll_after_fork_parent(void)
{
    atomic_fetch_sub(&epoll_forking, 1);
}


/* The child of fork has copies of our sets; the doorbell requests counted
 * in the segments are the parent's, so the child starts with every member
 * hot and asks for its own. */
void epoll_after_fork_child(void)
{
    pthread_mutex_init(&all_lock, NULL);
    atomic_store(&epoll_forking, 0);
    for (struct epoll_obj *ep = all; ep; ep = ep->next) {
        pthread_mutex_init(&ep->lock, NULL);
        atomic_store(&ep->waiting, 0);   /* the parent's waiting threads are not here */
        for (uint32_t i = 0; i < ep->nv; i++) {
            struct ep_entry *e = &ep->v[i];
            if (e->s && e->armed) {
                e->armed = 0;
                e->xkeep = -1;   /* closed below: the parent's */
                ep->cold--;
                epoll_set_hot_add(ep, e);
            }
        }
    }
    xwake_after_fork_child();
}


/* An fd of this process for the set ep (the one the program used last, or
 * any other), or -1: nobody can wait on it any more. */
struct set_fd {
    struct epoll_obj *ep;
    int fd;
};

static void find_set_fd(int fd, void *ctx)
{
    struct set_fd *sf = ctx;
    if (sf->fd < 0 && epoll_set_fd_names(fd, &sf->ep->base))
        sf->fd = fd;
}

/* The kernel's registration of a member of ours becomes the program's own
 * (its events and data), and the member leaves our table.  A one-shot
 * member that fired is registered with EPOLLONESHOT alone: like the
 * kernel's disabled registration it reports nothing until the program
 * re-arms it, but an error or a hang-up (which the kernel always watches). */
static void give_back(struct epoll_obj *ep, int epfd, struct ep_entry *e)
{
    struct tcp_sock *t = epoll_set_sock_of(e);
    /* a socket still on a channel is not this process's (another process
     * sharing the set added it: its tag stays for that one) */
    bool ours = !t || atomic_load(&t->path) == PATH_TCP;
    if (!e->pending && ours) {
        struct epoll_event k = { .events = e->off ? EPOLLONESHOT : e->events, .data = e->data };
        int r;
        if (e->events & EPOLLEXCLUSIVE) {   /* EPOLL_CTL_MOD is refused for it */
            kernel_ctl(epfd, EPOLL_CTL_DEL, e->fd, NULL);
            r = kernel_ctl(epfd, EPOLL_CTL_ADD, e->fd, &k);
        } else {
            r = kernel_ctl(epfd, EPOLL_CTL_MOD, e->fd, &k);
        }
        if (r)
            shunt_log(LOG_WARN, "epoll fd %d: member %d could not get the program's registration back: %s", epfd,
                      e->fd, strerror(-r));
    }
    epoll_set_release_slot(ep, e, epoll_set_fd_names(e->io_fd, e->s));
    ep->kernel_members++;
}

void epoll_sandbox(void)
{
    struct epoll_obj *stack[16], **sets;
    size_t n = sets_get(&sets, stack, 16);
    for (size_t i = 0; i < n; i++) {
        struct epoll_obj *ep = sets[i];
        struct set_fd sf = { ep, epoll_set_fd_names(ep->kfd, &ep->base) ? ep->kfd : -1 };
        if (sf.fd < 0)
            fdt_for_each_object(0, ~0U, find_set_fd, &sf);
        crit_lock(&ep->lock);
        epoll_set_journal_apply(ep);
        for (uint32_t j = 0; j < ep->nv; j++) {
            struct ep_entry *e = &ep->v[j];
            if (!e->s)
                continue;
            if (sf.fd >= 0)
                give_back(ep, sf.fd, e);
            else
                epoll_set_release_slot(ep, e, false);
        }
        crit_unlock(&ep->lock);
    }
    sets_put(sets, stack, n);
}

/* Before exec and at exit: take back every doorbell request, so that the
 * other holders of those connections can drain their doorbells. */
void epoll_release_all(void)
{
    pthread_mutex_lock(&all_lock);
    for (struct epoll_obj *ep = all; ep; ep = ep->next) {
        crit_lock(&ep->lock);
        for (uint32_t i = 0; i < ep->nv; i++)
            if (ep->v[i].s && ep->v[i].armed)
                epoll_set_make_hot(ep, &ep->v[i]);
        crit_unlock(&ep->lock);
    }
    pthread_mutex_unlock(&all_lock);
}
