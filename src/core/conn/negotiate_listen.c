/*
 * negotiate_listen.c: the listener's side of the negotiation (negotiate.c's
 * "listen"): registered in its namespace's registry and, where other
 * namespaces reach it, in the host's with its addresses and its SYNs saved
 * for shunt; given back when the program saves its SYNs itself or goes on
 * without shunt after an exec; unlisted when this process stops
 * accelerating what it accepts, or when its last fd is closed and no other
 * process listens on the socket.
 */
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "base/settings.h"
#include "core/conn/fallback.h"
#include "core/conn/negotiate_internal.h"
#include "core/fd/uring_watch.h"
#include "registry/registry.h"
#include "registry/sockdiag.h"
#include "registry/synopt.h"

/* Where a listener bound to bound is reached from other namespaces: bound
 * itself, or for a wildcard the namespace's addresses now (of the families
 * the bind takes; not loopback, not IPv6 link-local, which needs a scope). */
static unsigned reachable_at(const struct reg_addr *bound, bool v6only, struct reg_addr *out)
{
    if (!reg_in6_unspecified(&bound->addr)) {
        out[0] = *bound;
        return 1;
    }
    bool v4 = IN6_IS_ADDR_V4MAPPED(&bound->addr) || !v6only;
    bool v6 = !IN6_IS_ADDR_V4MAPPED(&bound->addr);
    struct ifaddrs *list;
    if (getifaddrs(&list) < 0)
        return 0;
    unsigned n = 0;
    for (struct ifaddrs *i = list; i && n < REG_HOST_ADDRS; i = i->ifa_next) {
        if (!i->ifa_addr || (i->ifa_addr->sa_family == AF_INET ? !v4 : i->ifa_addr->sa_family == AF_INET6 ? !v6 : true))
            continue;
        struct reg_addr a;
        socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
        if (reg_addr_from_sockaddr(&a, i->ifa_addr, len) < 0 || reg_addr_is_loopback(&a) ||
            IN6_IS_ADDR_LINKLOCAL(&a.addr) || reg_in6_unspecified(&a.addr))
            continue;
        a.port = bound->port;
        bool dup = false;
        for (unsigned k = 0; k < n && !dup; k++)
            dup = reg_addr_eq(&out[k], &a);
        if (!dup)
            out[n++] = a;
    }
    freeifaddrs(list);
    return n;
}

/* A listener reached from other namespaces: listed in the host's registry,
 * its SYNs saved for shunt, unless the program saves them itself. */
static void cross_listen(struct tcp_sock *t, int fd, const struct reg_addr *bound, bool v6only)
{
    if (reg_addr_is_loopback(bound) || !synopt_fabric_on())
        return;
    if (t->syn_program) {
        shunt_log_sock(LOG_INFO, t, fd, "listener on port %u not offered to other namespaces: %s", bound->port,
                       fallback_reason_name(FB_SAVED_SYN));
        return;
    }
    struct reg_addr addrs[REG_HOST_ADDRS];
    unsigned n = reachable_at(bound, v6only, addrs);
    if (n == 0)
        return;
    bool set_now = false;
    if (!t->syn_ours) {
        int one = 1;
        if (shunt_real.setsockopt(fd, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one) < 0) {
            shunt_log_sock(LOG_WARN, t, fd, "listener on port %u not offered to other namespaces: TCP_SAVE_SYN: %s",
                           bound->port, strerror(errno));
            return;
        }
        t->program_save_syn = 0;
        t->syn_ours = set_now = true;
    }
    int r = reg_host_listener_add(t->inode, addrs, n);
    if (r < 0) {
        if (set_now) {
            int zero = 0;
            shunt_real.setsockopt(fd, IPPROTO_TCP, TCP_SAVE_SYN, &zero, sizeof zero);
            t->syn_ours = false;
        }
        shunt_log_sock(LOG_WARN, t, fd, "listener on port %u not offered to other namespaces: %s", bound->port,
                       strerror(-r));
        return;
    }
    t->cross_listener = true;
    shunt_log_sock(LOG_INFO, t, fd, "listener on port %u offered to other namespaces (%u addresses)", bound->port, n);
}

void negotiate_listen(struct tcp_sock *t, int fd)
{
    if (!shunt_settings.accel || t->listener_pid == shunt_pid || shunt_sandbox_refuses())
        return;
    if (uring_look(fd)) {
        /* clients would offer channels this process must refuse */
        shunt_log_sock(LOG_DEBUG, t, fd, "listener not registered: io_uring in this process");
        return;
    }
    struct reg_addr bound;
    if (neg_local_addr(fd, &bound) < 0 || reg_open() < 0) {
        shunt_log_sock(LOG_INFO, t, fd, "listener not registered: no registry");
        return;
    }
    int v6only = 0;
    if (t->base.domain == AF_INET6) {
        socklen_t len = sizeof v6only;
        shunt_real.getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &len);
    }
    t->inode = neg_fd_inode(fd);
    int r = reg_listener_add(t->inode, &bound, v6only != 0);
    if (r < 0) {
        shunt_log_sock(LOG_WARN, t, fd, "listener on port %u not registered: %s", bound.port, strerror(-r));
        return;
    }
    t->listener_pid = shunt_pid;
    t->listener_netns = sockdiag_netns_cookie(fd);
    t->listener_shared = false;
    _Static_assert(sizeof bound <= sizeof t->bound, "tcp_sock.bound holds a reg_addr");
    memcpy(t->bound, &bound, sizeof bound);
    shunt_log_sock(LOG_INFO, t, fd, "accelerated listener on port %u", bound.port);
    cross_listen(t, fd, &bound, v6only != 0);
}

void negotiate_syn_program(struct tcp_sock *t, int fd)
{
    t->syn_program = true;
    t->syn_ours = false;
    if (t->cross_listener) {
        t->cross_listener = false;
        reg_host_listener_remove(t->inode);
        shunt_log_sock(LOG_INFO, t, fd, "listener no longer offered to other namespaces: %s",
                       fallback_reason_name(FB_SAVED_SYN));
    }
}

void negotiate_listener_leaves(struct tcp_sock *t, int fd)
{
    if (t->syn_ours) {
        int v = t->program_save_syn;
        if (shunt_real.setsockopt(fd, IPPROTO_TCP, TCP_SAVE_SYN, &v, sizeof v) == 0)
            t->syn_ours = false;
    }
    if (t->cross_listener) {
        t->cross_listener = false;
        reg_host_listener_remove(t->inode);
        shunt_log_sock(LOG_INFO, t, fd, "listener no longer offered to other namespaces: exec of a program without shunt");
    }
}

/* After the kernel closed our last fd of a listener: our registry entry
 * goes, unless another process (a pre-forked worker that has not yet made
 * its own entry) still listens on the same socket.  sock_diag sees only the
 * asking thread's namespace: for a listener of another namespace (a process
 * whose sockets live in two) it cannot say, and the entry stays if a child
 * or a receiver may hold the socket, as when sock_diag finds it listening
 * (without this, a pre-forked server's listener in another namespace was
 * unlisted at the parent's close, and its connections were kernel TCP with
 * no_listener until the child's first accept: crossns's poll_before_claim). */
void negotiate_listener_closed(struct tcp_sock *t)
{
    if (t->listener_pid != shunt_pid)
        return;
    t->listener_pid = 0;
    struct reg_addr bound, none;
    memcpy(&bound, t->bound, sizeof bound);
    memset(&none, 0, sizeof none);
    if (IN6_IS_ADDR_V4MAPPED(&bound.addr))
        none.addr.s6_addr[10] = none.addr.s6_addr[11] = 0xff;   /* no peer, same family */
    uint64_t inode = 0;
    uid_t uid;
    int r = sockdiag_lookup_in(t->listener_netns, &bound, &none, &inode, &uid);
    if ((r == 0 && inode == t->inode) || (r == -EXDEV && t->listener_shared))
        return;
    reg_listener_remove(t->inode);
    if (t->cross_listener)
        reg_host_listener_remove(t->inode);
}

void negotiate_unlisten(struct tcp_sock *t)
{
    if (t->listener_pid != shunt_pid)
        return;
    t->listener_pid = 0;
    reg_listener_remove(t->inode);
    if (t->cross_listener) {
        t->cross_listener = false;
        reg_host_listener_remove(t->inode);
    }
}
