/*
 * negotiate.h: out-of-band negotiation of acceleration (DESIGN section 2).
 * Nothing here ever writes a byte into the TCP stream the program sees.
 */
#ifndef SHUNT_NEGOTIATE_H
#define SHUNT_NEGOTIATE_H

#include "core/kinds/tcp_socket.h"
#include "registry/synopt.h"

/* listen(): registers an accelerated listener. */
void negotiate_listen(struct tcp_sock *t, int fd);

/* connect(), before the kernel's connect: offers a channel when a live
 * accelerated listener matches the destination. */
void negotiate_offer(struct tcp_sock *t, int fd, const struct sockaddr *dst, socklen_t len);

/* negotiate_offer in two halves.  The first needs no socket object: what
 * the destination and this process's state say (acceleration off, a
 * sandbox, io_uring, not loopback, the registry, a destination judged
 * short, no listener), FB_NONE when an offer is to be made.  It counts
 * against the destination's short-connection history, so it runs once per
 * connect, and its plan goes to the second half: the socket's reason, the
 * process's mark on the SYN (plan->mark), or the offer. */
struct offer_plan {
    struct reg_addr dst;
    bool cross;         /* not loopback: another namespace's or host's listener */
    bool mark;          /* the socket is to carry the process mark */
    bool unrecorded;    /* no reason to record (an address the kernel will refuse) */
    bool watch;         /* FB_SHORT, and this connection is the rule's sample: counted on kernel TCP */
};
enum fallback_reason negotiate_plan(const struct sockaddr *dst, socklen_t len, struct offer_plan *plan);
void negotiate_offer_planned(struct tcp_sock *t, int fd, enum fallback_reason why, const struct offer_plan *plan);

/* connect() failed for good: withdraws the offer. */
void negotiate_withdraw(struct tcp_sock *t, int fd);

/* accept(), on a listener whose SYNs shunt saves (syn_ours): reads the
 * accepted socket's SYN (always, so the program never finds it) and gives
 * back whether it carried this host's option, or another host's with the
 * flag "the client process runs shunt", into *out. */
bool negotiate_take_syn(const struct tcp_sock *listener, int fd, struct synopt *out);

/* accept(): looks for this connection's offer, verifies and claims it.
 * syn: the option on its SYN (negotiate_take_syn), or NULL. */
void negotiate_claim(struct tcp_sock *t, int fd, const struct tcp_sock *listener, const struct synopt *syn);

/* Why a connection accepted on listener with no SYN option to go by stays
 * on kernel TCP whatever its client did, when that is known without a look
 * at the registry's offers or a system call (acceleration off, a sandbox,
 * no offer posted anywhere); FB_NONE: negotiate_claim must look. */
enum fallback_reason negotiate_unclaimable(const struct tcp_sock *listener);

/* Why an accepted connection had no offer to claim (io_uring, the
 * program's saved SYNs, or none posted). */
enum fallback_reason negotiate_no_offer_reason(const struct tcp_sock *listener);

/* connect() failed at once (not EINPROGRESS): undoes what negotiate_offer
 * did to the socket that the program could see (the process mark). */
void negotiate_connect_failed(struct tcp_sock *t, int fd);

/* The process mark on a socket about to connect (plan->mark), for one
 * with no object (a new socket: the program has not set the option the
 * mark uses); true if set.  negotiate_unmark takes it off again when the
 * connect failed at once. */
bool negotiate_mark(int fd);
void negotiate_unmark(int fd);

/* The program set TCP_SAVE_SYN on this socket: its SYNs are the program's,
 * and a listener stops being offered to other namespaces. */
void negotiate_syn_program(struct tcp_sock *t, int fd);

/* The listener's fd goes on in a program without shunt (an exec): its
 * TCP_SAVE_SYN back to what the program set, and no longer offered to other
 * namespaces. */
void negotiate_listener_leaves(struct tcp_sock *t, int fd);

/* A client that offered: has the server claimed or refused since?  And a
 * channel whose other end left for a program without shunt (downgrade.c)
 * is left here.  Returns the path now. */
int negotiate_observe_slow(struct tcp_sock *t, int fd);

static inline int negotiate_observe(struct tcp_sock *t, int fd)
{
    /* the common case, inline: accelerated and staying so */
    if (__builtin_expect(atomic_load_explicit(&t->path, memory_order_acquire) == PATH_SHM, 1) && t->ch.hdr &&
        !atomic_load_explicit(&t->ch.hdr->down, memory_order_relaxed))
        return PATH_SHM;
    return negotiate_observe_slow(t, fd);
}

/* A client about to do what must not wait for the claim (shutdown, close,
 * a move back to TCP): the offer is settled now, withdrawn if the server
 * has not claimed it yet (or when the word stays marked mid-send past a
 * bounded wait).  Returns the path, never PATH_OFFERED. */
int negotiate_settle(struct tcp_sock *t, int fd);

/* A client's call on the TCP socket while its offer is pending: every
 * byte it sends is prefix the server must count, and every byte it reads
 * is the server's own only while no claim has landed (after one, bytes in
 * the socket are doorbells, and after a move back to TCP or a close that
 * left a copy, doorbells then the program's bytes: a read that took them
 * could not give them back).  So such a call is made between begin and
 * end, with the negotiation word marked, and the server claims only with
 * the mark clear.  begin returns PATH_OFFERED with the mark taken, or the
 * path the offer settled on (nothing taken); end adds the bytes sent (0
 * for a read) to the prefix and clears the mark. */
int negotiate_tcp_begin(struct tcp_sock *t, int fd);
void negotiate_tcp_end(struct tcp_sock *t, uint64_t sent);

/* Client send while the offer is pending: sends over TCP and adds the
 * bytes to the prefix, unless the claim has landed (then returns 1 and
 * sends nothing). */
int negotiate_prefix_send(struct tcp_sock *t, struct fdref *f, struct io_call *c, ssize_t *result);

/* A socket found by probing (exec, SCM_RIGHTS): attaches it to its channel
 * if the registry knows its inode. */
void negotiate_attach_inherited(struct tcp_sock *t, int fd, bool passed);

/* The last holder of this endpoint is gone: forget its registry records. */
void negotiate_forget(struct tcp_sock *t);

/* A listener's last fd in this process is closed (by the kernel already). */
void negotiate_listener_closed(struct tcp_sock *t);

/* This process stops accelerating what it accepts (a seccomp sandbox,
 * io_uring in the process):
 * its registry entry for the listener goes, so that no client offers a
 * channel nobody here will claim. */
void negotiate_unlisten(struct tcp_sock *t);

#endif
