/*
 * negotiate.c: how two shunt processes agree to move a TCP connection onto
 * a channel, through the registry and never through the byte stream.
 *
 *   listen   registers the listener (namespace, address, port, inode)
 *   connect  if a live accelerated listener matches: bind to learn the local
 *            port, create the channel, post an offer, then the kernel connect
 *   accept   find the offer for this 4-tuple, check with sock_diag that the
 *            client socket of this very connection has the offer's inode and
 *            our user, and claim it atomically in the channel's
 *            negotiation word
 * Until the claim the client sends over TCP and counts the bytes (the
 * prefix); the claim freezes the count and the server delivers that many
 * TCP bytes before it reads the ring.  A server that never claims leaves
 * the connection on TCP, byte for byte what it would have been.
 *
 * Across network namespaces (when `shunt fabric enable` puts the client
 * socket's cookie on every non-loopback SYN, registry/synopt.h) the same,
 * in the host's registry: a listener lists the addresses it is reached at
 * and saves SYNs; a client connecting to one posts its offer with its
 * cookie; accept reads the SYN's cookie, finds the offer by it and checks
 * that the offer's addresses are this connection's (the cookie is the
 * proof sock_diag gives inside a namespace: another namespace's socket is
 * out of its reach).
 */
#include <netinet/in.h>
#include <ifaddrs.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "base/settings.h"
#include "core/conn/downgrade.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/fallback.h"
#include "core/conn/negotiate.h"
#include "core/conn/short_conns.h"
#include "core/conn/sockstat.h"
#include "core/fd/fdtable.h"
#include "core/fd/passthrough.h"
#include "core/fd/uring_watch.h"
#include "core/wait/wait.h"
#include "registry/registry.h"
#include "registry/sockdiag.h"
#include "registry/synopt.h"

#ifndef TCP_SAVE_SYN
#define TCP_SAVE_SYN 27
#endif
#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

static uint64_t fd_inode(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* This socket's own address (peer false) or its peer's, normalised. */
static int sock_addr(int fd, bool peer, struct reg_addr *out)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int r = peer ? shunt_real.getpeername(fd, (struct sockaddr *)&ss, &len)
                 : shunt_real.getsockname(fd, (struct sockaddr *)&ss, &len);
    if (r < 0)
        return -errno;
    return reg_addr_from_sockaddr(out, (struct sockaddr *)&ss, len);
}

static int local_addr(int fd, struct reg_addr *out) { return sock_addr(fd, false, out); }
static int peer_addr(int fd, struct reg_addr *out) { return sock_addr(fd, true, out); }

/* Doorbells are single bytes that must not wait for Nagle.  The program's
 * own TCP_NODELAY is remembered and answered from tcp_sock. */
static void companion_nodelay(int fd)
{
    int one = 1;
    shunt_real.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static enum reg_scope scope_of(const struct tcp_sock *t)
{
    return t->host_rec ? REG_HOST : REG_NS;
}

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
    if (local_addr(fd, &bound) < 0 || reg_open() < 0) {
        shunt_log_sock(LOG_INFO, t, fd, "listener not registered: no registry");
        return;
    }
    int v6only = 0;
    if (t->base.domain == AF_INET6) {
        socklen_t len = sizeof v6only;
        shunt_real.getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &len);
    }
    t->inode = fd_inode(fd);
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
    if (local_addr(fd, &self) < 0 || (self.port == 0 && (bind_any(fd, t->base.domain) < 0 || local_addr(fd, &self) < 0))) {
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
    t->inode = fd_inode(fd);
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
    r = reg_conn_post_in(scope_of(t), &offer);
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
        if (reg_conn_end_in(scope_of(t), t->inode))
            channel_unlink(t->ch.name);
        /* the mapping stays until tcp_destroy: see negotiate_observe_slow */
        atomic_store(&t->path, PATH_TCP);
        atomic_store(&t->reason, FB_CONNECT_FAILED);
        shunt_log_sock(LOG_DEBUG, t, fd, "connect failed; offer withdrawn");
    }
    crit_unlock(&t->lock);
}

/* How long the server waits for a client's in-flight TCP send to finish
 * before it gives up and leaves the connection on TCP.  A send that blocks
 * on a full socket buffer never finishes while we wait (nobody reads until
 * accept returns), so the wait is bounded; but the bound is time, not a
 * count of yields: a client thread preempted between its flag and its send
 * on a loaded machine stays away for a tick or more (4 ms at HZ=250), and
 * 2000 yields (about 1 ms) gave up on it (Node.js' connections under CI).
 * The first looks yield, then the wait sleeps 20 us at a time. */
#define CLAIM_WAIT_NS (20u * 1000u * 1000u)
#define CLAIM_YIELDS 64

/* The boot tag SYNs of this host carry (0 if it cannot be read: then no
 * SYN is taken for ours). */
static uint32_t our_boot_tag(void)
{
    static _Atomic uint64_t cached;   /* tag | 1 << 32 once read */
    uint64_t c = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!(c >> 32)) {
        uint32_t tag = 0;
        if (synopt_boot_tag(&tag) < 0)
            return 0;
        c = (1ull << 32) | tag;
        atomic_store_explicit(&cached, c, memory_order_relaxed);
    }
    return (uint32_t)c;
}

bool negotiate_take_syn(const struct tcp_sock *listener, int fd, struct synopt *out)
{
    if (!listener->syn_ours)
        return false;
    int saved = errno;
    /* Read always, once: the kernel hands a saved SYN out once and keeps it
     * until then, so a program that asks TCP_SAVED_SYN finds none, as
     * without shunt; and the accepted socket inherited the listener's
     * TCP_SAVE_SYN, which the program did not set. */
    int got = synopt_read(fd, out);
    int zero = 0;
    shunt_real.setsockopt(fd, IPPROTO_TCP, TCP_SAVE_SYN, &zero, sizeof zero);
    errno = saved;
    uint32_t tag = our_boot_tag();
    /* this host's option, or another host's whose client process runs shunt */
    return got == 1 && out->cookie != 0 &&
           ((tag != 0 && out->boot_tag == tag) || (out->flags & SYNOPT_FLAG_PROCESS));
}

static void claim_offer(struct tcp_sock *t, int fd, const struct reg_conn *offer, enum reg_scope scope);

/* No offer in reach, and why.  A client process that runs shunt (its SYN
 * says so) out of the rings' reach: the fabric, where this process may use
 * it (core/conn/fabric_conn.h); its reason otherwise. */
static void no_offer(struct tcp_sock *t, int fd, const struct synopt *syn, enum fallback_reason why)
{
    if (why == FB_REMOTE_SHUNT && fabric_conn_wanted()) {
        if (fabric_conn_accept(t, fd, syn->boot_tag, syn->cookie) == 0)
            return;
        why = FB_FABRIC;
    }
    fallback_record(t, fd, why, false);
}

/* Across namespaces: the offer posted with the cookie the SYN carried, if
 * its addresses are this connection's.  None, and the SYN says the client
 * process runs shunt: it does, but beside another /dev/shm (a container's
 * own) or on another host, which the rings do not reach. */
static void claim_cross(struct tcp_sock *t, int fd, const struct synopt *syn)
{
    uint64_t cookie = syn->cookie;
    enum fallback_reason none = syn->flags & SYNOPT_FLAG_PROCESS ? FB_REMOTE_SHUNT : FB_NO_OFFER;
    if (!reg_host_offers_maybe()) {
        no_offer(t, fd, syn, uring_seen() ? FB_URING : none);
        return;
    }
    struct reg_conn offer;
    int found = reg_host_find_cookie(cookie, &offer);
    if (found < 0) {
        no_offer(t, fd, syn, uring_seen() ? FB_URING : found == -ENOENT ? none
                             : found == -EPERM ? FB_NOT_OURS : FB_REGISTRY);
        return;
    }
    struct reg_addr client, server;
    if (peer_addr(fd, &client) < 0 || local_addr(fd, &server) < 0) {
        fallback_record(t, fd, FB_CROSS_VERIFY, false);
        return;
    }
    /* The cookie pairs; the addresses must agree too (a forged option
     * names some socket of ours, not this connection).  The client's
     * address may be the wildcard it bound to learn its port. */
    if (!reg_addr_eq(&offer.server, &server) || offer.client.port != client.port ||
        !(reg_in6_eq(&offer.client.addr, &client.addr) || reg_in6_unspecified(&offer.client.addr))) {
        shunt_log_sock(LOG_WARN, t, fd, "offer of cookie %llu (pid %d) is for port %u to port %u, this connection "
                       "is from port %u to port %u", (unsigned long long)cookie, (int)offer.client_pid,
                       offer.client.port, offer.server.port, client.port, server.port);
        fallback_record(t, fd, FB_CROSS_VERIFY, true);
        return;
    }
    shunt_log_sock(LOG_DEBUG, t, fd, "offer from pid %d across namespaces (cookie %llu, client sock %llu, channel %s)",
                   (int)offer.client_pid, (unsigned long long)cookie, (unsigned long long)offer.client_inode,
                   offer.channel);
    claim_offer(t, fd, &offer, REG_HOST);
}

void negotiate_claim(struct tcp_sock *t, int fd, const struct tcp_sock *listener, const struct synopt *syn)
{
    t->negotiated = true;
    if (!shunt_settings.accel) {
        fallback_record(t, fd, FB_DISABLED, false);
        return;
    }
    if (shunt_sandbox_refuses()) {
        fallback_record(t, fd, FB_SANDBOX, false);
        return;
    }
    /* A SYN with this host's option came from a non-loopback active open:
     * its offer, if any, is in the host's registry. */
    if (syn && syn->boot_tag == our_boot_tag()) {
        claim_cross(t, fd, syn);
        return;
    }
    if (syn) {   /* another host's, whose client process runs shunt (negotiate_take_syn) */
        no_offer(t, fd, syn, uring_seen() ? FB_URING : FB_REMOTE_SHUNT);
        return;
    }
    /* No offer posted at all (the common case for a client without shunt
     * or one that chose TCP): nothing to look up, without a system call. */
    if (!reg_conn_offers_maybe()) {
        fallback_record(t, fd, negotiate_no_offer_reason(listener), false);
        return;
    }
    struct reg_addr client, server;
    if (peer_addr(fd, &client) < 0 || local_addr(fd, &server) < 0)
        return;
    struct reg_conn offer;
    int found = reg_conn_find_offer(&client, &server, &offer);
    if (found < 0) {
        /* no offer, or no registry to look in (another user's file at its name) */
        fallback_record(t, fd, uring_seen() ? FB_URING : found == -ENOENT ? negotiate_no_offer_reason(listener)
                                   : found == -EPERM ? FB_NOT_OURS : FB_REGISTRY, false);
        return;
    }
    shunt_log_sock(LOG_DEBUG, t, fd, "offer from pid %d for port %u (client sock %llu, channel %s)",
                   (int)offer.client_pid, client.port, (unsigned long long)offer.client_inode, offer.channel);
    uint64_t inode = 0;
    uid_t uid = (uid_t)-1;
    int r = sockdiag_lookup(&client, &server, &inode, &uid);
    if (r < 0 || inode != offer.client_inode) {
        shunt_log_sock(LOG_WARN, t, fd, "offer for port %u names inode %llu, the kernel says %llu (%s)",
                       client.port, (unsigned long long)offer.client_inode, (unsigned long long)inode,
                       r < 0 ? strerror(-r) : "mismatch");
        fallback_record(t, fd, FB_VERIFY, true);
        return;
    }
    shunt_log_sock(LOG_DEBUG, t, fd, "offer verified with sock_diag (uid %u)", (unsigned)uid);
    if (uid != geteuid()) {
        fallback_record(t, fd, FB_OTHER_USER, false);
        return;
    }
    claim_offer(t, fd, &offer, REG_NS);
}

/* Maps the offer's channel and claims it; the record is in scope's registry. */
static void claim_offer(struct tcp_sock *t, int fd, const struct reg_conn *offer_in, enum reg_scope scope)
{
    struct reg_conn offer = *offer_in;
    int r;
    r = channel_attach(&t->ch, offer.channel, 1);
    if (r < 0) {
        shunt_log_sock(LOG_WARN, t, fd, "cannot map channel %s: %s", offer.channel, strerror(-r));
        fallback_record(t, fd, FB_ATTACH, true);
        return;
    }
    _Atomic uint64_t *neg = &t->ch.hdr->neg;
    if (uring_look(fd)) {
        /* refused rather than left unclaimed: the client learns at its
         * next call that it is on TCP for good */
        atomic_fetch_or(neg, NEG_REFUSED);
        channel_detach(&t->ch);
        fallback_record(t, fd, FB_URING, false);
        return;
    }
    bool claimed = false;
    uint64_t give_up = clock_now_ns() + CLAIM_WAIT_NS;
    for (int i = 0; !claimed; i++) {
        uint64_t w = atomic_load(neg);
        if (w & (NEG_CLAIMED | NEG_REFUSED))
            break;
        if (w & NEG_SENDING) {
            if (clock_now_ns() > give_up)
                break;
            if (i < CLAIM_YIELDS) {
                sched_yield();
            } else {
                struct timespec pause = { 0, 20000 };
                nanosleep(&pause, NULL);
            }
            continue;
        }
        /* seq_cst CAS pairs with the client's CAS that sets NEG_SENDING:
         * exactly one of them wins, so the prefix we read is final, and it
         * is read this once: later the word is only a copy for other
         * holders (a scribbled one had the reader take doorbells as data). */
        claimed = atomic_compare_exchange_strong(neg, &w, w | NEG_CLAIMED);
        if (claimed)
            atomic_store(&t->prefix_left, w & NEG_PREFIX_MASK);
    }
    if (claimed)
        channel_own_indexes(&t->ch, true);   /* rings nobody used yet, ours alone from now */
    if (!claimed) {
        atomic_fetch_or(neg, NEG_REFUSED);
        /* unmapped at once: the socket is not in the fd table yet
         * (tcp_accept installs it after us), so no other thread can
         * reach this mapping */
        channel_detach(&t->ch);
        fallback_record(t, fd, FB_CLAIM, true);
        return;
    }
    t->inode = fd_inode(fd);
    atomic_store(&t->ch.self->holders, 1);
    atomic_store(&t->ch.self->pid, (int)getpid());
    t->host_rec = scope == REG_HOST;
    reg_conn_claimed_in(scope, offer.client_inode, t->inode, (int32_t)getpid());
    companion_nodelay(fd);
    atomic_store(&t->path, PATH_SHM);
    /* One doorbell: a client blocked in the kernel on the TCP path wakes up
     * and sees the claim. */
    doorbell_send(t, fd);
    shunt_log_sock(LOG_INFO, t, fd, "accelerated (server, channel %s, %llu bytes of TCP prefix%s)", offer.channel,
                   (unsigned long long)atomic_load(&t->prefix_left), t->host_rec ? ", across namespaces" : "");
    if (uring_seen())
        uring_request();   /* seen by another thread during the claim: its fail-safe may have passed us */
}

int negotiate_observe_slow(struct tcp_sock *t, int fd)
{
    int path = atomic_load_explicit(&t->path, memory_order_acquire);
    if (path != PATH_OFFERED) {
        if (path == PATH_SHM && t->ch.hdr && atomic_load_explicit(&t->ch.hdr->down, memory_order_relaxed))
            return downgrade_observe(t, fd);
        return path;
    }
    uint64_t w = atomic_load(&t->ch.hdr->neg);
    if (!(w & (NEG_CLAIMED | NEG_REFUSED)))
        return PATH_OFFERED;
    crit_lock(&t->lock);
    path = atomic_load(&t->path);
    if (path == PATH_OFFERED) {
        if (w & NEG_REFUSED) {
            /* The name goes, the mapping stays until the object is
             * destroyed (tcp_destroy, when no call holds it): other
             * threads of ours that saw PATH_OFFERED before this store may
             * still read or write the negotiation word (a poll's look, a
             * prefix send finishing its count), and an unmapped segment
             * made them fault, or write into whatever segment the kernel
             * mapped at that address next (issue 16, threads_offer_shutdown).
             * Taking t->lock in every reader instead would put a lock on
             * each call of a pending client for a case that ends once. */
            if (reg_conn_end_in(scope_of(t), t->inode))
                channel_unlink(t->ch.name);
            atomic_store(&t->reason, FB_REFUSED);
            path = PATH_TCP;
            fdt_settle_kernel(fd, &t->base);
            shunt_log_sock(LOG_INFO, t, fd, "server refused the offer; kernel TCP");
        } else {
            companion_nodelay(fd);
            path = PATH_SHM;
            shunt_log_sock(LOG_INFO, t, fd, "accelerated (client, channel %s%s)", t->ch.name,
                           t->host_rec ? ", across namespaces" : "");
            if (uring_seen())
                uring_request();   /* offered before io_uring was seen: the fail-safe moves it back */
        }
        atomic_store_explicit(&t->path, path, memory_order_release);
        sockstat_publish(t, fd, 0, 0, NULL, 0);
    }
    crit_unlock(&t->lock);
    return path;
}

int negotiate_settle(struct tcp_sock *t, int fd)
{
    if (atomic_load(&t->path) != PATH_OFFERED)
        return atomic_load(&t->path);
    _Atomic uint64_t *neg = &t->ch.hdr->neg;
    for (;;) {
        uint64_t w = atomic_load(neg);
        if (w & (NEG_CLAIMED | NEG_REFUSED))
            break;
        if (w & NEG_SENDING) {
            sched_yield();
            continue;
        }
        /* seq_cst CAS against the server's claim: one of them wins */
        if (atomic_compare_exchange_strong(neg, &w, w | NEG_REFUSED)) {
            shunt_log_sock(LOG_INFO, t, fd, "offer withdrawn before the server claimed it");
            int path = negotiate_observe(t, fd);
            atomic_store(&t->reason, FB_WITHDRAWN);
            sockstat_publish(t, fd, 0, 0, NULL, 0);
            return path;
        }
    }
    return negotiate_observe(t, fd);
}

int negotiate_prefix_send(struct tcp_sock *t, struct fdref *f, struct io_call *c, ssize_t *result)
{
    _Atomic uint64_t *neg = &t->ch.hdr->neg;
    for (;;) {
        uint64_t w = atomic_load(neg);
        if (w & (NEG_CLAIMED | NEG_REFUSED)) {
            if (negotiate_observe(t, f->fd) == PATH_SHM)
                return 1;
            *result = pt_send(f, c);
            return 0;
        }
        if (w & NEG_SENDING) {   /* another thread of ours is mid-send */
            sched_yield();
            continue;
        }
        if (atomic_compare_exchange_strong(neg, &w, w | NEG_SENDING))
            break;
    }
    ssize_t r = pt_send(f, c);
    /* Clears NEG_SENDING and adds what went out, in one step: the server
     * cannot claim in between because it waits while NEG_SENDING is set.
     * Our own count bounds what we later believe of the word. */
    uint64_t sent = r > 0 ? (uint64_t)r : 0;
    atomic_fetch_add(&t->prefix_sent, sent);
    atomic_fetch_add(neg, sent - NEG_SENDING);
    *result = r;
    return 0;
}

void negotiate_attach_inherited(struct tcp_sock *t, int fd, bool passed)
{
    uint64_t inode = fd_inode(fd);
    if (!inode || reg_open() < 0)
        return;
    struct reg_conn rec;
    int side;
    if (reg_conn_find_inode(inode, &rec, &side) == 0)
        t->host_rec = false;
    else if (reg_conn_find_inode_in(REG_HOST, inode, &rec, &side) == 0)
        t->host_rec = true;   /* a connection between namespaces */
    else
        return;
    t->inode = inode;
    t->negotiated = true;
    int r = channel_attach(&t->ch, rec.channel, side);
    if (r < 0) {
        /* The connection's bytes are in a ring this process cannot reach:
         * saying so beats handing the program doorbells as data. */
        shunt_log_sock(LOG_ERROR, t, fd, "inherited accelerated connection, channel %s unreachable: %s", rec.channel,
                       strerror(-r));
        atomic_store(&t->broken, true);
        atomic_store(&t->path, PATH_SHM);
        return;
    }
    (void)passed;   /* whoever passed the fd on (sender, parent, old image) took our hold */
    /* Another process held (or holds) this end: its locks are engaged, and
     * the prefix count is read once, here, as a claim would have. */
    atomic_store(&t->end_shared, true);
    uint64_t w = atomic_load(&t->ch.hdr->neg);
    atomic_store(&t->prefix_left, side == 1 ? w & NEG_PREFIX_MASK : 0);
    atomic_store(&t->prefix_sent, UINT64_MAX);   /* unknown: the segment's count is believed */
    bool claimed = side == 1 || (w & NEG_CLAIMED);
    atomic_store(&t->path, claimed ? PATH_SHM : PATH_OFFERED);
    shunt_log_sock(LOG_INFO, t, fd, "attached inherited connection (channel %s, side %d)", rec.channel, side);
    if (uring_seen())
        uring_request();   /* it reached a process with a ring: the fail-safe moves it back */
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

void negotiate_forget(struct tcp_sock *t)
{
    if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
        /* A peer that died without closing never ends its side of the
         * record: the last one out removes both, so that nothing of the
         * connection outlives its processes. */
        bool gone = atomic_load(&t->peer_gone);
        enum reg_scope scope = scope_of(t);
        if (gone ? reg_conn_end_all_in(scope, t->inode) : reg_conn_end_in(scope, t->inode))
            channel_unlink(t->ch.name);
    }
}
