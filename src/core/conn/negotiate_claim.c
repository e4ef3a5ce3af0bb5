/*
 * negotiate_claim.c: the server's side of the negotiation (negotiate.c's
 * "accept"): the SYN shunt saved for a listener reached from other
 * namespaces, read and judged; this connection's offer found, by its
 * 4-tuple and proven with sock_diag, or by the SYN's cookie and its
 * addresses, and claimed in the channel's negotiation word; with no offer
 * in reach, the fabric or the reason.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "base/settings.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/fallback.h"
#include "core/conn/negotiate_internal.h"
#include "core/fd/uring_watch.h"
#include "core/wait/wait.h"
#include "registry/registry.h"
#include "registry/sockdiag.h"
#include "registry/synopt.h"

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
    if (neg_peer_addr(fd, &client) < 0 || neg_local_addr(fd, &server) < 0) {
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
    if (neg_peer_addr(fd, &client) < 0 || neg_local_addr(fd, &server) < 0)
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
    t->inode = neg_fd_inode(fd);
    atomic_store(&t->ch.self->holders, 1);
    atomic_store(&t->ch.self->pid, (int)getpid());
    t->host_rec = scope == REG_HOST;
    reg_conn_claimed_in(scope, offer.client_inode, t->inode, (int32_t)getpid());
    neg_companion_nodelay(fd);
    atomic_store(&t->path, PATH_SHM);
    /* One doorbell: a client blocked in the kernel on the TCP path wakes up
     * and sees the claim. */
    doorbell_send(t, fd);
    shunt_log_sock(LOG_INFO, t, fd, "accelerated (server, channel %s, %llu bytes of TCP prefix%s)", offer.channel,
                   (unsigned long long)atomic_load(&t->prefix_left), t->host_rec ? ", across namespaces" : "");
    if (uring_seen())
        uring_request();   /* seen by another thread during the claim: its fail-safe may have passed us */
}
