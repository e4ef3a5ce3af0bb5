/*
 * negotiate_offer.c: the client's side of the negotiation (negotiate.c's
 * "connect"): the offer its plan calls for (negotiate_plan.c), on a port
 * bound first and, across namespaces, with the socket's cookie; the
 * process mark on the SYN where no offer is made; the offer withdrawn when
 * the connect fails.  What follows the offer is negotiate.c's.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "base/settings.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/fallback.h"
#include "core/conn/negotiate_internal.h"
#include "core/fd/uring_watch.h"
#include "registry/registry.h"
#include "registry/synopt.h"

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

/* The wildcard address of the socket's family, port 0: the kernel picks the
 * port now instead of at connect, so the offer can name it. */
static int bind_any(int fd, int domain)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    if (domain == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_any;
        len = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_ANY);
        len = sizeof *a;
    }
    return shunt_real.bind(fd, (struct sockaddr *)&ss, len) < 0 ? -errno : 0;
}

/* A destination no listener of this host's /dev/shm lists (another host,
 * a container with its own /dev/shm, a program without shunt): the socket
 * is marked as a shunt process's, which `shunt fabric`'s program consumes
 * at connect into a flag on the SYN's option (registry/synopt.h), so that
 * a server under shunt there knows this process runs it
 * (docs/fabric-discovery.md, "Across hosts").  One setsockopt; not when
 * the program set TCP_NOTSENT_LOWAT itself (its value stays). */
bool negotiate_mark(int fd)
{
    int v = SYNOPT_CLIENT_MARK;
    return shunt_real.setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof v) == 0;
}

void negotiate_unmark(int fd)
{
    /* a connect that failed before the program saw it leaves the mark:
     * the kernel's default again, the value a program without shunt reads */
    int zero = 0;
    shunt_real.setsockopt(fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &zero, sizeof zero);
}

/* Only a process that will take the hello off (fabric_conn_await) may
 * say so on its SYN: a server under shunt sends one to such a client. */
static void mark_process(struct tcp_sock *t, int fd)
{
    if (!t->program_lowat && fabric_conn_wanted())
        t->lowat_marked = negotiate_mark(fd);
}

void negotiate_connect_failed(struct tcp_sock *t, int fd)
{
    if (t->lowat_marked) {
        negotiate_unmark(fd);
        t->lowat_marked = false;
    }
}

void negotiate_offer(struct tcp_sock *t, int fd, const struct sockaddr *dst_sa, socklen_t len)
{
    if (t->negotiated)
        return;
    struct offer_plan plan;
    negotiate_offer_planned(t, fd, negotiate_plan(dst_sa, len, &plan), &plan);
}

void negotiate_offer_planned(struct tcp_sock *t, int fd, enum fallback_reason why, const struct offer_plan *plan)
{
    if (t->negotiated)
        return;
    t->negotiated = true;
    if (why != FB_NONE) {
        if (plan->watch) {
            t->dest = plan->dst;
            atomic_store_explicit(&t->watch_pid, shunt_pid, memory_order_relaxed);
        }
        if (plan->mark)
            mark_process(t, fd);
        /* marked: this process takes off a hello that names the socket
         * (the SYN's flag promises so), and rides the fabric by it */
        if (t->lowat_marked && fabric_conn_wanted()) {
            /* one that cannot await (near the fd limit, say) must not say
             * it does: a hello would reach its program (emfile_count read
             * the hello's first byte) */
            if (!fabric_conn_await(t, fd, why))
                negotiate_connect_failed(t, fd);
        } else if (!plan->unrecorded)
            fallback_record(t, fd, why, false);
        return;
    }
    bool cross = plan->cross;
    struct reg_addr dst = plan->dst;
    int r;
    /* this connection would be accelerated: not in a process with a ring
     * shunt has not seen yet */
    if (uring_look(fd)) {
        fallback_record(t, fd, FB_URING, false);
        return;
    }
    uint64_t cookie = 0;
    if (cross) {
        socklen_t cl = sizeof cookie;
        /* the option carries 56 bits of it (a count that never gets past them in a boot) */
        if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &cl) < 0 || cl != sizeof cookie || !cookie ||
            cookie > SYNOPT_COOKIE_MASK) {
            fallback_record(t, fd, FB_NO_COOKIE, true);
            return;
        }
    }
    struct reg_addr self;
    if (neg_local_addr(fd, &self) < 0 || (self.port == 0 && (bind_any(fd, t->base.domain) < 0 || neg_local_addr(fd, &self) < 0))) {
        fallback_record(t, fd, FB_BIND, true);
        return;
    }
    r = channel_create(&t->ch, shunt_settings.ring_size, shunt_settings.ring_start, shunt_settings.shm_limit);
    if (r < 0) {
        shunt_log_sock(LOG_WARN, t, fd, "no channel: %s", strerror(-r));
        fallback_record(t, fd, r == -ENOSPC ? FB_SHM_LIMIT : r == -EPERM ? FB_NOT_OURS : FB_CHANNEL,
                        r != -ENOSPC && r != -EPERM);
        return;
    }
    t->inode = neg_fd_inode(fd);
    t->dest = dst;
    struct reg_conn offer;
    memset(&offer, 0, sizeof offer);
    offer.client_inode = t->inode;
    offer.client = self;
    offer.server = dst;
    offer.client_pid = (int32_t)getpid();
    offer.cookie = cookie;
    snprintf(offer.channel, sizeof offer.channel, "%s", t->ch.name);
    atomic_store(&t->ch.self->holders, 1);
    atomic_store(&t->ch.self->pid, (int)getpid());
    t->host_rec = cross;
    r = reg_conn_post_in(neg_scope_of(t), &offer);
    if (r < 0) {
        channel_unlink(t->ch.name);
        /* unmapped at once: path never left PATH_TCP, so no other thread
         * has looked at this channel */
        channel_detach(&t->ch);
        fallback_record(t, fd, r == -ENOSPC ? FB_REGISTRY_FULL : FB_REGISTRY, true);
        return;
    }
    atomic_store(&t->path, PATH_OFFERED);
    shunt_log_sock(LOG_DEBUG, t, fd, "offered channel %s to port %u%s", t->ch.name, dst.port,
                   cross ? " across namespaces" : "");
}

void negotiate_withdraw(struct tcp_sock *t, int fd)
{
    crit_lock(&t->lock);
    if (atomic_load(&t->path) == PATH_OFFERED) {
        if (reg_conn_end_in(neg_scope_of(t), t->inode))
            channel_unlink(t->ch.name);
        /* the mapping stays until tcp_destroy: see negotiate_observe_slow */
        atomic_store(&t->path, PATH_TCP);
        atomic_store(&t->reason, FB_CONNECT_FAILED);
        shunt_log_sock(LOG_DEBUG, t, fd, "connect failed; offer withdrawn");
    }
    crit_unlock(&t->lock);
}
