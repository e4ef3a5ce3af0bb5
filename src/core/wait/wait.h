/*
 * wait.h: waiting for a channel (DESIGN section 5), the interface of
 * core/wait/.  A waiter spins a bounded, adaptive time (spin.c), then asks
 * the peer for a doorbell and sleeps in the kernel on its own TCP socket,
 * the companion (sleep.c).  Doorbells are single bytes on the companion
 * that shunt consumes; the program never sees them (doorbell.c).  A
 * shutdown by another thread wakes sleepers through the local wake
 * (local_wake.c); calls that wait are counted for a close meanwhile
 * (blocked_calls.c).
 */
#ifndef SHUNT_WAIT_H
#define SHUNT_WAIT_H

#include "core/fd/tcp_sock.h"

typedef bool (*ready_fn)(struct tcp_sock *t);

/* What a sleeper waits for, and what a waker made happen. */
enum { WANT_DATA = 1, WANT_SPACE = 2, WANT_ANY = 3 };

/* Waits until ready(t) may have become true.  0: check again; -EAGAIN:
 * the socket's timeout ran out; -EINTR: a signal the program asked to
 * interrupt calls.  Sets t->peer_gone when the companion closes.  blocked
 * (may be NULL): the call's flag, set and counted in t->blocked_calls the
 * first time it sleeps, so that a close meanwhile waits for it.  until:
 * the call's deadline under the socket's timeout, set at its first sleep
 * (start it at 0): however often a call wakes to find nothing, it ends
 * when the kernel's call would have.  sig: the handlers the call has seen
 * (call_sig_start at its start). */
int wait_channel(struct tcp_sock *t, int fd, ready_fn ready, bool for_write, bool *blocked, uint64_t *until,
                 struct call_sig *sig);
/* What wait_channel returns to a writer when neither end can go on: this
 * end's ring to the peer has had no room for a while, the peer's to us is
 * full and unread, and the peer waits for room too (sleep.c).  The caller
 * moves the connection to kernel TCP, whose buffers hold more. */
#define WAIT_BOTH_FULL (-4098)
/* ... or when its ring may grow in place (its reader has not caught up and
 * no unread byte would move: channel_tx_grow_in_place): the caller grows
 * it under its tx lock and writes on. */
#define WAIT_GROW (-4099)
/* ... or when its ring is full and cannot grow, and its reader has read
 * nothing for SHUNT_SEND_STALL_MS while it waited (sleep.c,
 * reader_stalled): the caller moves the connection to kernel TCP. */
#define WAIT_STALLED (-4100)

/* A poll of one accelerated socket, held by this process alone, about to
 * sleep (core/kinds/readiness.c): spins as a blocking call does, then sleeps
 * on the end's futex (sleep.c) for 20 ms or what is left of left (NULL:
 * no bound), asking the peer for what (WANT_*).  1: look again (ready,
 * woken, or the poll's time is up); 0: nothing came in the futex's time,
 * or the socket is not one for it: sleep the usual way; -EINTR: a signal. */
int wait_poll_one(struct tcp_sock *t, int fd, ready_fn ready, int what, const struct timespec *left);

/* Another thread of this process changed what this socket's waiters wait
 * for (shutdown): wakes every thread of ours blocked on it, in the kernel
 * (through the local wake, an eventfd) or on the futex. */
void wait_wake_local(struct tcp_sock *t);

/* The program closes the last fd of t while calls of its threads wait on
 * it: keeps a private copy of the socket (t->own_fd) for them and returns
 * true, and the close of the channel waits for the last of them.  False:
 * nobody waits (or no fd was left for the copy): close now. */
bool wait_defer_close(struct tcp_sock *t, int fd);

/* Before wait_defer_close: waits until every call of another thread of
 * ours that is under way on t (call_marks.h) is either asleep (counted in
 * t->blocked_calls, so the close waits for it) or has returned.  Calls
 * that are awake are short (a spin, which this ends, or a copy). */
void wait_calls_settle(struct tcp_sock *t);
void wait_undefer_close(struct tcp_sock *t);   /* it could not be remembered after all */

/* A call is about to wait outside wait_channel (splice on its pipe): it
 * is counted as wait_channel counts a sleeper, once (*blocked). */
void wait_call_blocks(struct tcp_sock *t, bool *blocked);

/* A call that waited (f->blocked) returns; true if it was the last one
 * and the socket was closed meanwhile: the caller finishes the close. */
bool wait_call_done(struct tcp_sock *t);

/* The local wake's fd (-1 before the first sleep); moves it to another
 * number if it is fd (the program's dup2 onto it): true if it moved. */
int wait_local_fd(void);
bool wait_relocate_local(int fd);

/* The program ran out of fd numbers: the local wake gives its number back
 * if it holds one of the program's and no thread sleeps on it (true if it
 * did); it is made again at the next sleep. */
bool wait_local_yield(void);

/* A sleep found the local wake's fd efd closed (POLLNVAL): forget it. */
void wait_local_lost(int efd);

/* Before a seccomp filter shunt cannot live with: the local wake's sleepers
 * are woken and its eventfd goes (core/process/sandbox.c). */
void wait_local_sandbox(void);

/* Around fork, in the forking thread: no wait section of another thread
 * is under way as the child is made (taken after the rings' locks, let go
 * of in both processes). */
void wait_before_fork(void);
void wait_after_fork(void);

/* In the child after fork: an eventfd of its own, no sleeper registered;
 * and, per socket, the counts of the parent's threads forgotten. */
void wait_after_fork_child(void);
void wait_forget_threads(struct tcp_sock *t);

/* After producing into (WANT_DATA), consuming from (WANT_SPACE) a ring, or
 * closing (WANT_ANY): rings the peer's doorbell if it asked for that. */
void doorbell_wake_peer(struct tcp_sock *t, int fd, int what);

/* A readiness wait (poll, epoll) that is about to sleep in the kernel
 * watching this socket: enter asks the peer for a doorbell; leave takes the
 * request back and drains the doorbells if no other thread is still asleep
 * on them (setting peer_gone on EOF or error).  Always in pairs. */
void doorbell_enter(struct tcp_sock *t, int what);
void doorbell_leave(struct tcp_sock *t, int fd, int what);

/* The same, also registering for the local wake (wait_wake_local): LW_ON,
 * watch *efd (POLLIN) beside the companion; LW_BUSY, the local wake is being
 * emptied: sleep at most a millisecond and look again; LW_NONE, there is
 * none.  And for the wake from other processes holding the end (xwake.c):
 * *xfd to watch too (POLLIN: it reports POLLHUP), or -1.  leave takes both
 * back (the values enter gave). */
enum { LW_NONE, LW_ON, LW_BUSY };
int doorbell_enter_local(struct tcp_sock *t, int what, int *efd, int *xfd);
void doorbell_leave_local(struct tcp_sock *t, int fd, int what, int lw, int xfd);

/* As doorbell_leave, for an fd that may be closed already: nothing drained. */
void doorbell_forget(struct tcp_sock *t, int what);

/* Looks at the companion without consuming anything: EOF or an error mean
 * the peer is gone. */
void doorbell_check_peer(struct tcp_sock *t, int fd);

/* The same, after a wait saw the companion report its end (POLLRDHUP,
 * POLLHUP, POLLERR): doorbells still queued ahead of the end are drained
 * first, so that the end is seen now (an edge-triggered set names it once). */
void doorbell_check_end(struct tcp_sock *t, int fd);

/* For waits that spin over several sockets (epoll): whether spinning can
 * pay on this machine at all, whether this peer is running (not asleep
 * waiting for us), and whether it runs on our CPU (then the spin yields at
 * every look). */
bool wait_may_spin(void);
bool wait_peer_busy(struct tcp_sock *t);    /* not asleep waiting for us */
bool wait_peer_here(struct tcp_sock *t);    /* last ran on our CPU (and notes ours) */
bool wait_peer_known(struct tcp_sock *t);   /* has noted its CPU: it spun once */

void wait_cpu_relax(void);

/* A spin's yield (now: the spin's last look at the clock): whether it kept
 * the CPU, gave it away for a short turn, or for long (another thread ran a
 * slice meanwhile).  A long one while the peer runs on another CPU (its CPU
 * known) is a crowded CPU (wait_crowded_found: no spin for a while, longer
 * if found again soon); any other yield that gave the CPU away, a moment's
 * (wait_crowded_briefly).  wait_crowded: whether no spin may start now.
 * See spin.c. */
enum { YIELD_KEPT, YIELD_SHORT, YIELD_LONG };
int wait_spin_yield(uint64_t now);
/* The same, asking only whether it was a long one: by the clock alone (a
 * yield away for milliseconds gave the CPU to another thread), without
 * wait_spin_yield's two getrusage calls, for a spin that yields at every
 * look (epoll_wait's). */
bool wait_spin_yield_long(uint64_t now);
void wait_crowded_found(void);
void wait_crowded_briefly(void);
bool wait_crowded(uint64_t now);

/* Pauses a wait loop whose kernel waits keep waking for nothing. */
struct backoff {
    unsigned fruitless, us;
};
void backoff_fruitless(struct backoff *b);

/* Sends one doorbell byte, counted in the end's bells word; none once the
 * word is frozen (the connection is moving back to TCP).  True if sent. */
bool doorbell_send(struct tcp_sock *t, int fd);

/* Waits (bounded) until no doorbell of the peer's is on its way: called by
 * an end that closed (SIDE_CLOSED set), before it takes its doorbells out
 * of the socket, whose kernel would answer the close with a reset if one
 * were left there or arrived after. */
void doorbell_await_peer(struct tcp_sock *t);

/* Wakes the peer's blocking call asleep on its end's futex (sleep.c), asked
 * for or not: a downgrade's last doorbell goes with it. */
void doorbell_wake_peer_futex(struct tcp_sock *t);

/* n doorbell bytes were taken off this end's TCP socket. */
void doorbell_ate(struct tcp_sock *t, size_t n);

/* Threads inside a wait on this end (of every holder while it is shared). */
unsigned doorbell_waiters(struct tcp_sock *t);

/* The lock under which sleeps are announced and doorbells drained, among
 * all holders of this end (a dir_lock token, or -EIO). */
int doorbell_lock(struct tcp_sock *t);
void doorbell_unlock(struct tcp_sock *t, int token);

#endif
