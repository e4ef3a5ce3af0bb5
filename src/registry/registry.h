/*
 * registry.h: the host-local rendezvous of shunt processes.
 *
 * One shared-memory file per user and network namespace
 * (/dev/shm/shunt-<uid>-<netns inode>-r<layout version>.reg, mode 0600), created by whichever
 * process needs it first: no daemon.  Fixed-size tables, so it never grows;
 * entries of processes that died are reclaimed when space runs short, when
 * a lookup meets them, and by a sweep at each process's first open.  Changes go under a process-shared robust mutex, so a
 * process dying inside one does not stall the others.
 *
 * Addresses are kept as IPv6 (IPv4 as v4-mapped) so that IPv4, IPv6 and
 * dual-stack listeners compare in one way.
 */
#ifndef SHUNT_REGISTRY_H
#define SHUNT_REGISTRY_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "transport/channel.h"

struct reg_addr {
    struct in6_addr addr;   /* v4 as ::ffff:a.b.c.d */
    uint16_t port;          /* host order */
};

/* Normalises a sockaddr_in or sockaddr_in6; -EAFNOSUPPORT for others. */
int reg_addr_from_sockaddr(struct reg_addr *out, const struct sockaddr *sa, socklen_t len);
bool reg_addr_is_loopback(const struct reg_addr *a);
bool reg_in6_eq(const struct in6_addr *a, const struct in6_addr *b);
/* :: or ::ffff:0.0.0.0 */
bool reg_in6_unspecified(const struct in6_addr *a);
bool reg_addr_eq(const struct reg_addr *a, const struct reg_addr *b);

/* A connection record: an offer until the server claims it, then the
 * record through which either end (after exec, or in a process that
 * received the fd) finds the channel by its socket's inode. */
struct reg_conn {
    uint64_t client_inode;
    uint64_t server_inode;          /* 0 until claimed */
    struct reg_addr client;         /* the client's local address as the server will see it */
    struct reg_addr server;         /* where the client connected */
    char channel[CHANNEL_NAME_MAX];
    int32_t client_pid;
    int32_t server_pid;
    uint64_t cookie;                /* host registry: the client socket's SO_COOKIE (0 in a namespace's) */
};

/* Opens (creating if needed) this user's registry for this process's
 * network namespace.  0 or a negative errno.  Safe to call repeatedly. */
int reg_open(void);

/* Listeners: -ENOSPC when full of live entries. */
int reg_listener_add(uint64_t inode, const struct reg_addr *bound, bool v6only);
/* Only this process's own entries: a child closing the listening socket it
 * inherited leaves the parent's. */
void reg_listener_remove(uint64_t inode);
/* Is there a live accelerated listener that would take a connection to dst?
 * (exact address, or a wildcard bind of the same family rules as the kernel)
 * 1 or 0; a negative errno if the registry cannot be asked now (its lock
 * held past the bound, or its word garbage: the connection falls back,
 * reason registry). */
int reg_listener_match(const struct reg_addr *dst);

/* Offers: the client posts before connect; -ENOSPC when full. */
int reg_conn_post(const struct reg_conn *c);
/* Finds the offer for a connection the server accepted (by both addresses;
 * an offer posted with a wildcard client address matches any with its port,
 * and the newest of several wins); copies it to out.  0, or -ENOENT. */
int reg_conn_find_offer(const struct reg_addr *client, const struct reg_addr *server, struct reg_conn *out);
/* False when no offer is posted anywhere in the registry: an accept may
 * skip reg_conn_find_offer (and learning its addresses) without the lock.
 * A hint from shared memory: a wrong false costs that connection its
 * acceleration, never a byte. */
bool reg_conn_offers_maybe(void);
/* Marks the offer of client_inode as claimed by server_inode: 0, -EALREADY
 * if it was claimed already, or -ENOENT. */
int reg_conn_claimed(uint64_t client_inode, uint64_t server_inode, int32_t server_pid);
/* Finds the record of either end by its socket inode; *side is 0 (client) or 1. */
int reg_conn_find_inode(uint64_t inode, struct reg_conn *out, int *side);
/* The end with this inode has gone; the record goes when both have.  Returns
 * true when this call removed the record (the caller then unlinks the channel). */
bool reg_conn_end(uint64_t inode);
/* The same, when the other end's processes are known to be gone (its TCP
 * socket reported EOF or a reset): the record goes now, with both ends. */
bool reg_conn_end_all(uint64_t inode);

/* ---- verdicts on destinations: connections too short for a channel ------
 *
 * What core/conn/short_conns.c remembers of a destination, in one shape for
 * its process-local table and for the one every process of the namespace
 * shares here, so that a program started again and again for one
 * connection each (a script's redis-cli, curl, psql -c) is judged across
 * its runs.  Every word is a hint that any process of the user may have
 * written: it decides whether a connection is offered, never a byte. */
struct reg_verdict {
    _Atomic uint64_t key;       /* hash of the program and the destination, never 0; 0: free */
    _Atomic uint64_t listener;  /* shared: the inode of the listener it was judged against */
    atomic_uint streak;         /* short connections in a row */
    atomic_uint skip;           /* connections left to put on TCP before the next sample */
    atomic_uint sampled;        /* when the last sample went (seconds of CLOCK_MONOTONIC_COARSE) */
    uint32_t pad;
};
#define REG_VERDICTS 1024u

/* The namespace registry's table of REG_VERDICTS (after reg_open), or NULL. */
struct reg_verdict *reg_verdicts(void);

/* The inode of a listener this registry lists as taking dst, read without
 * the lock (a hint), or 0 for none. */
uint64_t reg_listener_hint(const struct reg_addr *dst);

/* ---- the host's registry: rendezvous across network namespaces ----------
 *
 * One more file per user, of the same format, under namespace id 0
 * (REG_HOST_NETNS: no namespace's inode is 0), /dev/shm/shunt-<uid>-0-r<V>.reg.
 * A listener reachable from other namespaces lists there the addresses it
 * takes connections at; a client connecting to one of them posts its offer
 * there with its socket's cookie, which the server finds by the cookie on
 * the connection's SYN (docs/architecture.md, "Between namespaces and
 * hosts").  Never swept as a namespace nobody is in (sweep.c skips id 0). */
#define REG_HOST_NETNS 0u
enum reg_scope { REG_NS, REG_HOST };

/* Maps the host's registry, creating it only if create.  0, -ENOENT (none:
 * not looked for again for a second unless create), or a negative errno. */
int reg_open_host(bool create);
/* Replaces this process's entries for the listener inode with one per
 * address in addrs (at most REG_HOST_ADDRS); creates the file if need be.
 * 0 or a negative errno. */
#define REG_HOST_ADDRS 16
int reg_host_listener_add(uint64_t inode, const struct reg_addr *addrs, unsigned n);
void reg_host_listener_remove(uint64_t inode);
/* Is there a live listener of this user in any namespace that listed dst?
 * 0 at once, without the lock, when the host's registry has none at all.
 * 1, 0, or a negative errno. */
int reg_host_listener_match(const struct reg_addr *dst);
/* False when no offer is posted in the host's registry (or there is none). */
bool reg_host_offers_maybe(void);
/* The offer posted with this client cookie (the newest if several): 0, or -ENOENT. */
int reg_host_find_cookie(uint64_t cookie, struct reg_conn *out);

/* The record operations above, in the registry of scope (the namespace's
 * or the host's); the names without _in are the namespace's. */
int reg_conn_post_in(enum reg_scope scope, const struct reg_conn *c);
int reg_conn_claimed_in(enum reg_scope scope, uint64_t client_inode, uint64_t server_inode, int32_t server_pid);
int reg_conn_find_inode_in(enum reg_scope scope, uint64_t inode, struct reg_conn *out, int *side);
bool reg_conn_end_in(enum reg_scope scope, uint64_t inode);
bool reg_conn_end_all_in(enum reg_scope scope, uint64_t inode);

/* The inode of the network namespace of this process (0 if unknown). */
uint64_t reg_netns(void);

#endif
