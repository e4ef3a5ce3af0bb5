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
 *
 * Here: what those steps share (negotiate_internal.h), and an offer's life
 * once posted: the client seeing the claim or the refusal
 * (negotiate_observe), settling it before a call that must not wait,
 * sending its prefix; a socket inherited or received, attached to its
 * channel; a connection's records forgotten by its last holder.  The
 * listener is negotiate_listen.c's, the client's offer negotiate_offer.c's,
 * the server's claim negotiate_claim.c's, what is decided before any
 * socket object exists negotiate_plan.c's.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <string.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/real.h"
#include "core/conn/downgrade.h"
#include "core/conn/fallback.h"
#include "core/conn/negotiate_internal.h"
#include "core/conn/sockstat.h"
#include "core/fd/fdtable.h"
#include "core/fd/passthrough.h"
#include "core/fd/uring_watch.h"
#include "registry/registry.h"

uint64_t neg_fd_inode(int fd)
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

int neg_local_addr(int fd, struct reg_addr *out) { return sock_addr(fd, false, out); }
int neg_peer_addr(int fd, struct reg_addr *out) { return sock_addr(fd, true, out); }

/* Doorbells are single bytes that must not wait for Nagle.  The program's
 * own TCP_NODELAY is remembered and answered from tcp_sock. */
void neg_companion_nodelay(int fd)
{
    int one = 1;
    shunt_real.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

enum reg_scope neg_scope_of(const struct tcp_sock *t)
{
    return t->host_rec ? REG_HOST : REG_NS;
}

int negotiate_observe_slow(struct tcp_sock *t, int fd)
{
    int path = atomic_load_explicit(&t->path, memory_order_acquire);
    if (path != PATH_OFFERED) {
        if (path == PATH_SHM && t->ch.hdr && atomic_load_explicit(&t->ch.hdr->down, memory_order_relaxed))
            return downgrade_look(t, fd);
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
            if (reg_conn_end_in(neg_scope_of(t), t->inode))
                channel_unlink(t->ch.name);
            atomic_store(&t->reason, FB_REFUSED);
            path = PATH_TCP;
            fdt_settle_kernel(fd, &t->base);
            shunt_log_sock(LOG_INFO, t, fd, "server refused the offer; kernel TCP");
        } else {
            neg_companion_nodelay(fd);
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

/* Another holder's send marks the word while it is in the kernel: a
 * moment, or as long as a full socket buffer blocks it.  The word is in
 * shared memory, and a SENDING bit that stays (a holder killed in its
 * send, a scribble) would stop the offer's every close, shutdown and send
 * for good.  So after SENDING_WAIT_NS the offer is refused: no claim can
 * follow (the server claims only with the bit clear, and gives up sooner),
 * and the connection is kernel TCP, its bytes as they were.  *since is 0
 * at the first look.  True when it gave up so. */
#define SENDING_WAIT_NS 2000000000ull

static bool sending_stuck(_Atomic uint64_t *neg, uint64_t *since)
{
    uint64_t now = clock_now_ns();
    if (!*since)
        *since = now;
    if (now - *since < SENDING_WAIT_NS)
        return false;
    atomic_fetch_or(neg, NEG_REFUSED);
    return true;
}

/* Sets bit in the negotiation word of an offer not yet settled, waiting
 * out a send (or read) of another holder's first: true if it did, false
 * once the word says claimed or refused.  seq_cst CAS against the
 * server's claim: one of them wins. */
static bool mark_unsettled(struct tcp_sock *t, uint64_t bit)
{
    _Atomic uint64_t *neg = &t->ch.hdr->neg;
    uint64_t since = 0;
    for (;;) {
        uint64_t w = atomic_load(neg);
        if (w & (NEG_CLAIMED | NEG_REFUSED))
            return false;
        if (w & NEG_SENDING) {   /* another call of ours is in the kernel */
            if (!sending_stuck(neg, &since))
                sched_yield();
            continue;   /* refused, if it was stuck: the next look ends it */
        }
        if (atomic_compare_exchange_strong(neg, &w, w | bit))
            return true;
    }
}

int negotiate_settle(struct tcp_sock *t, int fd)
{
    if (atomic_load(&t->path) != PATH_OFFERED)
        return atomic_load(&t->path);
    if (mark_unsettled(t, NEG_REFUSED)) {
        shunt_log_sock(LOG_INFO, t, fd, "offer withdrawn before the server claimed it");
        int path = negotiate_observe(t, fd);
        atomic_store(&t->reason, FB_WITHDRAWN);
        sockstat_publish(t, fd, 0, 0, NULL, 0);
        return path;
    }
    return negotiate_observe(t, fd);
}

int negotiate_tcp_begin(struct tcp_sock *t, int fd)
{
    return mark_unsettled(t, NEG_SENDING) ? PATH_OFFERED : negotiate_observe(t, fd);
}

void negotiate_tcp_end(struct tcp_sock *t, uint64_t sent)
{
    /* Clears NEG_SENDING and adds what went out, in one step: the server
     * cannot claim in between because it waits while NEG_SENDING is set.
     * Our own count bounds what we later believe of the word. */
    atomic_fetch_add(&t->prefix_sent, sent);
    atomic_fetch_add(&t->ch.hdr->neg, sent - NEG_SENDING);
}

int negotiate_prefix_send(struct tcp_sock *t, struct fdref *f, struct io_call *c, ssize_t *result)
{
    int path = negotiate_tcp_begin(t, f->fd);
    if (path == PATH_SHM)
        return 1;
    ssize_t r = pt_send(f, c);
    if (path == PATH_OFFERED)
        negotiate_tcp_end(t, r > 0 ? (uint64_t)r : 0);
    *result = r;
    return 0;
}

void negotiate_attach_inherited(struct tcp_sock *t, int fd, bool passed)
{
    uint64_t inode = neg_fd_inode(fd);
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

void negotiate_forget(struct tcp_sock *t)
{
    if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
        /* A peer that died without closing never ends its side of the
         * record: the last one out removes both, so that nothing of the
         * connection outlives its processes. */
        bool gone = atomic_load(&t->peer_gone);
        enum reg_scope scope = neg_scope_of(t);
        if (gone ? reg_conn_end_all_in(scope, t->inode) : reg_conn_end_in(scope, t->inode))
            channel_unlink(t->ch.name);
    }
}
