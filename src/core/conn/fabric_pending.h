/*
 * fabric_pending.h: which process of a family sends a server's hello
 * (issue 19, a fork-per-connection server's children on the fabric).
 *
 * A server's hello goes just before its first byte to the client (a
 * send, a shutdown), from whichever process sends it, with that process's
 * own engine: a forking server's parent accepts, forks and closes its copy
 * without a call, and its child meets the client.  Until then the socket
 * is kernel TCP's (the client moves only after a hello), and what the
 * holders read of the client's bytes is counted here: the stream that
 * starts at the hello must know how many it already had.  Two holders of the socket must never both
 * send a hello, and none may send one after another wrote the program's
 * bytes, so the decision is taken once for the socket, in a slot of a page
 * the family shares (an anonymous MAP_SHARED mapping: fork hands it down,
 * exec drops it), under a compare-and-swap:
 *
 *   claim    the caller is the only live holder and no fork is under way:
 *            it sends the hello; otherwise it waits, bounded, for the
 *            others to close their copies (a parent closes just after its
 *            fork), and then the socket is kernel TCP for every holder;
 *   none     a holder that cannot follow (exec, a spawn, SCM_RIGHTS, a call
 *            the fabric does not carry, a sandbox): kernel TCP for all.
 *
 * Only processes of one family map the page, each running this library
 * (an exec drops it), so it is not a peer's memory; still every word is
 * read once and checked against the socket's key.
 */
#ifndef SHUNT_CORE_CONN_FABRIC_PENDING_H
#define SHUNT_CORE_CONN_FABRIC_PENDING_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* A socket's slot, as each holder's memory keeps it. */
struct fabric_pending {
    uint32_t slot;
    uint64_t key;   /* the accepted socket's cookie (0: no slot) */
};

/* At accept: a slot for the socket (key: its SO_COOKIE), this process its
 * one holder.  False if none is free (the caller sends its hello now). */
bool fabric_pending_open(struct fabric_pending *p, uint64_t key);

/* At the first call: true if this process sends the hello (it holds the
 * socket alone: other holders' copies closed or their processes gone,
 * waited for at most FABRIC_PENDING_WAIT_NS), false if the socket is
 * kernel TCP for every holder.  Waits without any lock of shunt's. */
bool fabric_pending_claim(const struct fabric_pending *p);
#define FABRIC_PENDING_WAIT_NS (100ull * 1000 * 1000)

/* Bytes of the client's read by a holder before the hello (added), and
 * their total (for the stream the hello starts). */
void fabric_pending_count_read(const struct fabric_pending *p, uint64_t n);
uint64_t fabric_pending_read(const struct fabric_pending *p);

/* No hello will ever go for the socket (kernel TCP for every holder). */
void fabric_pending_none(const struct fabric_pending *p);

/* This process holds the socket no more (its last fd closed). */
void fabric_pending_drop(const struct fabric_pending *p);

/* Around a fork: before it, the slot says a fork is under way (no claim
 * until it is done); after it, in the parent (pid the child's, or < 0 if
 * the fork failed) and in the child (pid 0), the child is a holder. */
void fabric_pending_before_fork(const struct fabric_pending *p);
void fabric_pending_after_fork(const struct fabric_pending *p, pid_t pid);

#endif
