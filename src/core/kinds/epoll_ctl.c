/*
 * epoll_ctl.c: epoll_ctl on a set that may hold sockets of ours: which
 * fds become members (accelerated or negotiating sockets, sockets that may
 * yet connect through shunt, inner sets), the kernel's rules for the
 * program's events, and what stays the kernel's alone (epoll.c has the
 * design).
 */
#include "base/self.h"
#include "base/signals.h"
#include "core/conn/fabric_conn.h"
#include "core/fd/fdtable.h"
#include "core/kinds/epoll.h"
#include "core/kinds/epoll_shared.h"
#include "core/kinds/tcp_socket.h"

/* What the kernel accepts together with EPOLLEXCLUSIVE (epoll_ctl(2)). */
#define EXCLUSIVE_OK (EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE)

/* The rules the kernel would apply to the program's own events, which our
 * tagged registration does not carry. */
static int check_events(int op, const struct epoll_event *ev, enum member_kind kind)
{
    if (!ev)
        return -EFAULT;
    if ((ev->events & EPOLLEXCLUSIVE) && (op == EPOLL_CTL_MOD || (ev->events & ~EXCLUSIVE_OK) || kind == M_EPOLL))
        return -EINVAL;
    return 0;
}


static int member_add(struct epoll_obj *ep, int epfd, int fd, struct shunt_sock *s, enum member_kind kind,
                      struct epoll_event *ev)
{
    int r = check_events(EPOLL_CTL_ADD, ev, kind);
    if (r)
        return r;
    struct epoll_event k = tagged(fd, ev->events, kind);
    atomic_store(&ep->tagged, true);   /* before the kernel can name it to a waiter */
    if ((r = kernel_ctl(epfd, EPOLL_CTL_ADD, fd, &k)))
        return r;
    struct ep_entry *e = epoll_set_new_slot(ep, fd);
    if (!e) {
        kernel_ctl(epfd, EPOLL_CTL_DEL, fd, NULL);
        return -ENOMEM;
    }
    epoll_set_hold(e, s, kind);
    if (kind == M_EPOLL) {
        ep->nested++;
        atomic_store(&((struct epoll_obj *)s)->watched, true);
    }
    epoll_set_member_reset(e, ev);
    epoll_set_hot_add(ep, e);
    return 0;
}


/* A socket on kernel TCP for now that may yet connect through shunt. */
static bool might_connect(struct tcp_sock *t, int fd)
{
    if (t->negotiated || !shunt_settings.accel || t->listener_pid != 0 || shunt_sandbox_refuses())
        return false;
    int v = 0;
    socklen_t len = sizeof v;
    return !(shunt_real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &len) == 0 && v);
}


/*
 * An fd that is and stays the kernel's (fdt_kernel_only: not a socket of
 * ours, or a connection settled on kernel TCP) in a set with no members of
 * ours: the kernel's call, and the count of the program's registrations.
 * No set lock, no slot to look at (a set without members has none), which
 * is what a load generator pays six times a request (wrk: 380 instructions
 * each the other way).  Its waits go to the kernel while members is 0
 * (epoll_wait_ready); a member added later resets the zero-timeout bound
 * under the lock, and the count is an upper bound either way.
 * True if done (*r: the result).
 */
static bool kernel_member_ctl(int epfd, int op, int fd, struct epoll_event *ev, int *r)
{
    if (fd == epfd || !fdt_kernel_only(fd))
        return false;
    struct epoll_obj *ep = epoll_of(epfd, false);
    if (!ep) {
        *r = kernel_ctl(epfd, op, fd, ev);
        return true;
    }
    bool done = atomic_load(&ep->members) == 0;
    if (done) {
        *r = kernel_ctl(epfd, op, fd, ev);
        if (*r == 0 && op == EPOLL_CTL_ADD) {
            atomic_fetch_add(&ep->kernel_members, 1);
        } else if (*r == 0 && op == EPOLL_CTL_DEL) {
            uint32_t k = atomic_load(&ep->kernel_members);
            while (k && !atomic_compare_exchange_weak(&ep->kernel_members, &k, k - 1))
                ;
        }
    }
    sock_put(&ep->base);
    return done;
}

int epoll_control(int epfd, int op, int fd, struct epoll_event *ev)
{
    int kr;
    if (kernel_member_ctl(epfd, op, fd, ev, &kr))
        return kr;
    struct fdref f = fdt_get(fd);
    if (op != EPOLL_CTL_DEL)
        tcp_socket_watched(f.sock, fd);
    struct shunt_sock *s = NULL;
    enum member_kind kind = M_SOCKET;
    bool pending = false;
    if (f.sock && f.sock->kind == SOCK_TCP && tcp_path_member(atomic_load(&tcp_of(f.sock)->path))) {
        s = f.sock;
    } else if (op == EPOLL_CTL_ADD && f.sock && f.sock->kind == SOCK_TCP && might_connect(tcp_of(f.sock), fd)) {
        s = f.sock;
        pending = true;
    } else if (f.sock && f.sock->kind == SOCK_EPOLL && fd != epfd) {
        s = f.sock;
        kind = M_EPOLL;
    }
    struct epoll_obj *ep = epoll_of(epfd, s != NULL);
    int r;
    if (!ep) {
        r = kernel_ctl(epfd, op, fd, ev);
        fdt_put(&f);
        return r;
    }
    crit_lock(&ep->lock);
    ep->kfd = epfd;
    ep->zero_looks = (struct kernel_looks){ 0 };   /* the next zero-timeout wait asks the kernel */
    struct ep_entry *e = epoll_set_slot_for_fd(ep, fd);
    if (e && e->s != s && (s || atomic_load(&e->s->fds) <= 0)) {
        /* a stale entry: that fd number was closed and now names another
         * file (one slot per number here, where the kernel keys by number
         * and file: a member living on through a dup gives way) */
        epoll_set_release_slot(ep, e, false);
        e = NULL;
    } else if (e && e->kind == M_SOCKET && !e->pending && atomic_load(&tcp_of(e->s)->path) == PATH_TCP) {
        /* our member fell back to kernel TCP since the last wait: the
         * kernel has it from now on, and this call changes it there */
        epoll_set_release_slot(ep, e, true);
        ep->kernel_members++;
        e = NULL;
    } else if (e && e->s != s) {
        e = NULL;   /* its fd was closed, a dup keeps it: the kernel answers for the number */
    }
    epoll_set_journal_apply(ep);
    if (op == EPOLL_CTL_ADD && pending) {
        r = ev ? kernel_ctl(epfd, op, fd, ev) : -EFAULT;
        struct ep_entry *p = r ? NULL : epoll_set_new_slot(ep, fd);
        if (p) {
            epoll_set_hold(p, s, M_SOCKET);
            p->pending = true;
            ep->pending++;
            epoll_set_member_reset(p, ev);
            epoll_set_hot_add(ep, p);
        }
        if (!r)
            ep->kernel_members++;   /* the kernel reports it as the program asked, for now */
    } else if (op == EPOLL_CTL_ADD && s) {
        r = member_add(ep, epfd, fd, s, kind, ev);
        if (!r && kind == M_SOCKET) {
            epoll_set_journal_append(ep, op, fd, ev, tcp_of(s)->inode);
            epoll_added_while_waiting(ep, epoll_set_slot_for_fd(ep, fd));
        }
    } else if (op == EPOLL_CTL_MOD && e) {
        r = check_events(op, ev, e->kind);
        struct epoll_event k = tagged(fd, ev ? ev->events & EPOLLEXCLUSIVE : 0, e->kind);
        if (!r)
            r = kernel_ctl(epfd, op, fd, e->pending ? ev : &k);
        if (!r) {
            e->poked = false;   /* the registration is the usual one again */
            epoll_set_member_reset(e, ev);
            epoll_set_make_hot(ep, e);
            if (e->kind == M_SOCKET) {
                epoll_set_journal_append(ep, op, fd, ev, tcp_of(e->s)->inode);
                epoll_added_while_waiting(ep, e);
            }
        }
    } else if (op == EPOLL_CTL_DEL && e) {
        r = kernel_ctl(epfd, op, fd, ev);
        if (!r) {
            e->poked = false;
            if (e->pending && ep->kernel_members)
                ep->kernel_members--;
            else if (e->kind == M_SOCKET)
                epoll_set_journal_append(ep, op, fd, NULL, tcp_of(e->s)->inode);
            epoll_set_release_slot(ep, e, true);
        }
    } else {
        r = kernel_ctl(epfd, op, fd, ev);
        if (!r && op == EPOLL_CTL_ADD)
            ep->kernel_members++;
        else if (!r && op == EPOLL_CTL_DEL && ep->kernel_members)
            ep->kernel_members--;
    }
    crit_unlock(&ep->lock);
    sock_put(&ep->base);
    fdt_put(&f);
    return r;
}
